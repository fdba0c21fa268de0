"""nki.language: tensor creation, data types, memory regions, iterators, and the convenience
operations (load/store/matmul/exp/sum/softmax/...) that lower to one or more ``nki.isa``
instructions while the kernel is traced."""

from __future__ import annotations

import abc
import builtins
import contextlib
import math as _math

from . import _dtypes as _dt
from . import _tracer
from ._dtypes import (  # noqa: F401  (public names)
    DType,
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from ._tensor import (  # noqa: F401
    DynSlice,
    IndexExpr,
    Mask,
    MemoryRegion,
    NkiTensor,
    VirtualRegister,
    mgrid,
    new_tensor,
)
from ._tensor import ParDim
from ._tensor import arange as _arange


class _Fp32(DType):
    """``nl.fp32``: float32 as a dtype, and the real API's FP32 constants: ``nl.fp32.min`` is the
    most negative finite fp32 value (bit pattern 0xff7fffff), the fill of running maxima."""

    __slots__ = ()
    min = -3.4028234663852886e38


fp32 = _Fp32("float32")

sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
hbm = MemoryRegion.hbm
private_hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm


class _NKIObjectType(abc.ABCMeta):
    """Lets a ``@dataclass`` subclass take its plain (un-annotated) class attributes as keywords
    too, and omit fields that have no default (they are None), as the real NKIObject does: the
    dataclass constructor gets its own fields, the plain fields are set afterwards. (An ABCMeta,
    so NKIObject still mixes with ``abc.ABC``.)"""

    def __call__(cls, *args, **kwargs):
        import dataclasses

        dc = getattr(cls, "__dataclass_fields__", None)
        if dc is None:
            return super().__call__(*args, **kwargs)
        plain = {k: kwargs.pop(k) for k in list(kwargs) if k not in dc and k in cls._nki_fields()}
        # A required dataclass field the caller omitted is None, as the real NKIObject allows.
        params = [f for f in dataclasses.fields(cls) if f.init]
        for f in params[len(args) :]:
            no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if no_default and f.name not in kwargs and not f.kw_only:
                kwargs[f.name] = None
        obj = super().__call__(*args, **kwargs)
        for k, v in plain.items():
            setattr(obj, k, v)
        return obj


class NKIObject(metaclass=_NKIObjectType):
    """Base class of user classes whose instances may be passed to and used in kernels
    (configuration objects). Fields are the class's annotated and plain class attributes; the
    default constructor takes them as keywords (or the annotated ones positionally, in order),
    and an omitted field keeps its class default. ``@dataclass`` subclasses keep their own
    constructor. Instances passed to a kernel specialize it by their field values."""

    def __init__(self, *args, **kwargs):
        fields = type(self)._nki_fields()
        annotated = [f for f, ann in fields.items() if ann]
        if len(args) > len(annotated):
            raise TypeError(
                f"{type(self).__name__}() takes at most {len(annotated)} positional arguments "
                f"({', '.join(annotated)}), got {len(args)}"
            )
        for name, v in zip(annotated, args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}() got multiple values for '{name}'")
            kwargs[name] = v
        for name, v in kwargs.items():
            if name not in fields:
                raise TypeError(
                    f"{type(self).__name__}() got an unexpected keyword argument '{name}' "
                    f"(fields: {', '.join(fields) or 'none'})"
                )
            setattr(self, name, v)

    @classmethod
    def _nki_fields(cls) -> dict:
        """{name: annotated?} over the class hierarchy (base classes first)."""
        out: dict = {}
        for klass in reversed(cls.__mro__[:-1]):
            if klass is NKIObject:
                continue
            for name in klass.__dict__.get("__annotations__", {}):
                if not name.startswith("_"):
                    out[name] = True
            for name, v in klass.__dict__.items():
                if name.startswith("_") or name in out:
                    continue
                if callable(v) or isinstance(v, (staticmethod, classmethod, property)):
                    continue
                out[name] = False
        return out

    def _nki_state(self) -> dict:
        """The values that identify this object (the kernel specialization key)."""
        state = {name: getattr(self, name) for name in type(self)._nki_fields() if hasattr(self, name)}
        state.update({k: v for k, v in vars(self).items() if not k.startswith("_")} if hasattr(self, "__dict__") else {})
        return state


def par_dim(size: int) -> ParDim:
    """Marks the partition dimension in the shape of an on-chip tensor (the old block-dimension
    API): ``nl.ndarray((4, nl.par_dim(128), 512), dtype, buffer=nl.sbuf)`` is four [128, 512]
    tiles, indexed ``t[i]``, not one 512-partition tensor."""
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"nl.par_dim: size must be a positive int, got {size!r}")
    return ParDim(size)


class _NeuronCores(int):
    """``nl.nc(n)``: a launch-grid dimension that spreads its instances over n NeuronCores."""

    def __repr__(self) -> str:
        return f"nl.nc({int(self)})"


def nc(n: int) -> _NeuronCores:
    """The physical NeuronCores of a logical core, as a launch-grid factor (old SPMD API)."""
    return _NeuronCores(int(n))


def spmd_dim(*sizes) -> int:
    """One launch-grid dimension made of several factors (old SPMD API):
    ``kernel[nl.spmd_dim(n, nl.nc(2)), m]`` launches 2*n instances along dim 0; instance i runs
    on NeuronCore i % 2 (as the real compiler distributes them)."""
    out = 1
    for s in sizes:
        out *= int(s)
    return out


def static_cast(x, dtype):
    """Converts a host array (numpy or torch) to an NKI dtype, rounding to nearest even (for
    preparing kernel inputs, e.g. bf16 from fp32); inside a kernel, a tile copy to `dtype`."""
    if _is_t(x):
        return copy(x, dtype=dtype)
    d = _dt.to_dtype(dtype)
    torch = __import__("sys").modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.to(_dt.torch_dtype(d))
    import numpy as np

    return np.asarray(x).astype(_dt.numpy_dtype(d))


def finfo(dtype):
    """Machine limits of a floating-point NKI dtype (``nl.finfo(nl.bfloat16).min``), as numpy's."""
    import ml_dtypes

    return ml_dtypes.finfo(_dt.numpy_dtype(_dt.to_dtype(dtype)))


def iinfo(dtype):
    """Machine limits of an integer NKI dtype (``nl.iinfo(nl.int32).max``), as numpy's."""
    import ml_dtypes

    return ml_dtypes.iinfo(_dt.numpy_dtype(_dt.to_dtype(dtype)))


tensor = NkiTensor  # type annotations: ``x: nl.tensor``
Tensor = NkiTensor
dtype = DType


def is_hbm(buffer) -> bool:
    return buffer in (hbm, private_hbm, shared_hbm)


def is_on_chip(buffer) -> bool:
    return buffer in (sbuf, psum)


def is_psum(buffer) -> bool:
    return buffer == psum


def is_sbuf(buffer) -> bool:
    return buffer == sbuf


# ---------------------------------------------------------------------------------------------
# Tile size constants (depend on the target NeuronCore)


class _Const(int):
    """An int that can also be called (``nl.tile_size.psum_num_banks()``)."""

    def __call__(self, *args, **kwargs):
        return int(self)


class _TileSize:
    pmax = _Const(128)
    psum_fmax = _Const(512)
    psum_bank_fmax = _Const(512)
    psum_bank_fmax_bytes = _Const(2048)
    gemm_stationary_fmax = _Const(128)
    gemm_moving_fmax = _Const(512)
    bn_stats_fmax = _Const(512)
    psum_min_align = _Const(4)
    sbuf_min_align = _Const(4)

    def _target(self) -> dict:
        tr = _tracer.active()
        if tr is not None:
            return tr.target
        from ._core import target

        return target()

    @property
    def psum_num_banks(self) -> _Const:
        return _Const(self._target()["psum_banks"])

    @property
    def sbuf_fmax_bytes(self) -> _Const:
        return _Const(self._target()["sbuf_bytes_per_partition"])

    @property
    def sbuf_size_bytes(self) -> _Const:
        t = self._target()
        return _Const(t["sbuf_bytes_per_partition"] * t["partitions"])

    total_available_sbuf_size = sbuf_size_bytes

    def sbuf_fmax(self, dtype=None) -> int:
        """Elements of `dtype` (default float32) that fit in one SBUF partition."""
        return self._target()["sbuf_bytes_per_partition"] // _dt.to_dtype(dtype or float32).itemsize


tile_size = _TileSize()


# ---------------------------------------------------------------------------------------------
# Creation


def ndarray(shape, dtype, buffer=sbuf, name="", address=None) -> NkiTensor:
    """An uninitialized tensor (reading it before writing it is reported by the checks)."""
    return new_tensor(shape, dtype, buffer, name, address)


def empty_like(x: NkiTensor, dtype=None, buffer=None, name="") -> NkiTensor:
    return ndarray(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def full(shape, fill_value, dtype, buffer=sbuf, name="", lazy_initialization=False, **kwargs) -> NkiTensor:
    """A new tensor filled with `fill_value` (the old API's `lazy_initialization`, a scheduling
    hint, is accepted: the fill is emitted here either way)."""
    with _tracer.api("nki.language.full"):
        t = ndarray(shape, dtype, buffer, name)
        _fill(t, fill_value)
        return t


def zeros(shape, dtype, buffer=sbuf, name="", **kwargs) -> NkiTensor:
    with _tracer.api("nki.language.zeros"):
        return full(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=sbuf, name="", **kwargs) -> NkiTensor:
    with _tracer.api("nki.language.ones"):
        return full(shape, 1, dtype, buffer, name)


def zeros_like(x: NkiTensor, dtype=None, buffer=None, name="") -> NkiTensor:
    return zeros(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def _fill(t: NkiTensor, value) -> None:
    from . import isa as nisa

    if t.on_chip:
        nisa.memset(dst=t, value=value)
        return
    # HBM: memset one SBUF row and broadcast it over the tensor with a DMA.
    flat = t.reshape((t.size,)) if t.is_contiguous() else None
    if flat is None:
        raise ValueError(
            "filling a non-contiguous HBM view is not supported; fill an SBUF tile and nl.store it"
        )
    width = t.shape[-1] if t.ndim else 1
    while width * t.dtype.itemsize > 64 * 1024:
        width //= 2 if width % 2 == 0 else width
    rows = t.size // width
    row = ndarray((1, width), t.dtype, sbuf)
    nisa.memset(dst=row, value=value)
    src = NkiTensor(row._b, (rows, width), row.dtype, 0, (0, 1))
    dst = NkiTensor(t._b, (rows, width), t.dtype, t.offset, (width, 1))
    nisa.dma_copy(dst=dst, src=src)


def shared_constant(constant, dtype=None, name="") -> NkiTensor:
    """A read-only HBM tensor holding `constant` (a numpy array, anything numpy converts, or the
    path of a ``.npy`` file), converted to `dtype` (default: the array's dtype). The values are
    part of the traced kernel (and its cache key); every launch binds the same bytes. A file is
    read when the kernel is traced: a trace cached for the same arguments keeps the values it
    read (the public library writes each constant to a new file)."""
    import os

    import numpy as np

    tr = _tracer.current()
    if isinstance(constant, (str, os.PathLike)):
        path = os.fspath(constant)
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ValueError(f"nl.shared_constant: cannot read the .npy file {path!r}: {e}") from None
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"nl.shared_constant: {path!r} holds several arrays (an .npz archive); pass one array")
    else:
        arr = np.asarray(constant)
    d = _dt.to_dtype(dtype) if dtype is not None else _dt.to_dtype(arr.dtype)
    arr = np.ascontiguousarray(arr.astype(_dt.numpy_dtype(d)))
    t = new_tensor(arr.shape or (1,), d, hbm, name or "shared_constant", is_input=True)
    t._b.slot_info.update(kind="const", data=arr.reshape(arr.shape or (1,)))
    tr.hbm_consts = getattr(tr, "hbm_consts", 0) + 1
    return t


def device_print(print_prefix, tensor: NkiTensor) -> None:
    """Prints `tensor` when the kernel runs (every execution, every program of a grid), as
    ``<print_prefix> <values>``: the values are copied to an HBM print buffer at this point of
    the program and printed after the launch finishes. Inside a runtime loop the last
    iteration's values are printed."""
    from . import isa as nisa

    if not _is_t(tensor):
        raise TypeError(f"nl.device_print: expected a tensor, got {tensor!r}")
    with _tracer.api("nki.language.device_print"):
        buf = new_tensor(tensor.shape or (1,), tensor.dtype, private_hbm, f"device_print_{print_prefix}")
        buf._b.slot_info["print"] = str(print_prefix)
        src = tensor if tensor.buffer != psum else _as_sbuf(tensor)
        nisa.dma_copy(dst=buf if buf.shape == src.shape else buf.reshape(src.shape), src=src)


def _unmodeled(name: str, what: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"nki.language.{name} ({what}) is not modeled by neuron-emu yet; see the compatibility table in docs/nki.md"
        )

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Not modeled by neuron-emu yet ({what}): calling it raises NotImplementedError."
    return fn


_RNG_INT_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")


def rand(shape, dtype=float32, buffer=sbuf, name="", **kwargs) -> NkiTensor:
    """A new tensor of uniform random values in [0, 1) drawn from the Vector Engine's generators
    (the ones nl.random_seed seeds): ``u = (r >> 8) * 2^-24`` of each 32-bit draw ``r``, rounded to
    `dtype` (a narrow float type can round up to 1.0). On NeuronCore-v4 it is ``nisa.rand2(dst,
    0.0, 1.0)``; before, ``nisa.rng`` on the Vector Engine and the conversion (the same values).
    An integer `dtype` gets the random bits themselves (``nisa.rng``)."""
    from . import isa as nisa

    d = _dt.to_dtype(dtype)
    with _tracer.api("nki.language.rand"):
        out = ndarray(_tile_shape(shape), d, buffer, name)
        tile = out if out.on_chip else ndarray(out.shape, d, sbuf)
        if d in _RNG_INT_DTYPES:
            nisa.rng(dst=tile, engine=nisa.engine.vector)
        elif not _dt.is_float(d) or d.endswith("_x4"):
            raise TypeError(f"nki.language.rand: dtype {d} (a float type for values in [0, 1), or an integer type)")
        elif _tracer.current().target["nc_version"] >= 4:
            nisa.rand2(dst=tile, min=0.0, max=1.0)
        else:
            bits = ndarray(tile.shape, uint32, sbuf if tile.buffer == sbuf else psum)
            nisa.rng(dst=bits, engine=nisa.engine.vector)
            nisa.tensor_scalar(dst=bits, data=bits, op0=nisa_ops.right_shift, operand0=8)
            nisa.tensor_scalar(dst=tile, data=bits, op0=nisa_ops.multiply, operand0=2.0**-24)
        if tile is not out:
            nisa.dma_copy(dst=out, src=tile)
        return out


def random_seed(seed, mask=None, **kwargs) -> None:
    """Seeds the generators nl.rand and nl.dropout draw from (the Vector Engine's, every lane) with
    a 32-bit value: `seed` is a [1, 1] int32/uint32/float32 tile in SBUF or PSUM
    (``nisa.set_rng_seed``). The same seed gives the same numbers."""
    from . import isa as nisa

    if _apply_mask(mask) is None:  # masked off at compile time
        return
    if not _is_t(seed):
        raise TypeError(
            "nki.language.random_seed requires a [1, 1] tensor in SBUF or PSUM, not a scalar: "
            "nl.random_seed(nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf))"
        )
    with _tracer.api("nki.language.random_seed"):
        _need_onchip(seed, "random_seed", "seed")
        nisa.set_rng_seed(src_seeds=seed)


def dropout(x, rate, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Zeroes each element of `x` with probability `rate` (a scalar or a [partition, 1] tile of
    per-partition rates) with the Vector Engine's generators (``nisa.dropout``); kept elements are
    unchanged (scale by 1 / (1 - rate) yourself, as inverted dropout does)."""
    from . import isa as nisa

    with _tracer.api("nki.language.dropout"):
        _need_onchip(x, "dropout", "x")
        out_dt = _dt.to_dtype(dtype) if dtype is not None else x.dtype
        dst = ndarray(_tile_shape(x.shape), out_dt, sbuf)
        dst_v = dst if dst.shape == x.shape else dst.reshape(x.shape)
        r = _apply_mask(mask, dst_v, x)
        if r is None:
            return dst
        dst_v, xs = r
        if _dt.to_dtype(out_dt) == _dt.to_dtype(x.dtype):
            nisa.dropout(dst=dst_v, data=xs, prob=rate)
        else:
            tmp = ndarray(dst_v.shape, x.dtype, sbuf)
            nisa.dropout(dst=tmp, data=xs, prob=rate)
            nisa.tensor_copy(dst=dst_v, src=tmp)
        return dst


def shared_identity_matrix(n: int, dtype=uint8, dst: NkiTensor | None = None) -> NkiTensor:
    """An n x n identity matrix in SBUF (built with memset + affine_select on GpSimd)."""
    from . import isa as nisa

    with _tracer.api("nki.language.shared_identity_matrix"):
        out = dst if dst is not None else ndarray((n, n), dtype, sbuf)
        nisa.memset(dst=out, value=1)
        # value = p - f: keep 1 on the diagonal (== 0), 0 elsewhere.
        nisa.affine_select(
            dst=out,
            pattern=[[-1, n]],
            channel_multiplier=1,
            on_true_tile=out,
            on_false_value=0.0,
            cmp_op=equal,
        )
        return out


# ---------------------------------------------------------------------------------------------
# Iterators and runtime loops


def _unrolled(api: str, start, stop, step):
    r = builtins.range(start, stop, step) if stop is not None else builtins.range(start)
    if _tracer.active() is None:
        return r
    return _tracer.UnrolledRange(r, api, _tracer.caller_location())


def affine_range(start, stop=None, step=1, precise_schedule=None, directives=None, **hints):
    """Loop iterations without loop-carried dependence; unrolled at trace time. Scheduling
    hints of the real compiler (``precise_schedule=``, ``directives=``) do not change results
    and are accepted."""
    return _unrolled("affine_range", start, stop, step)


def sequential_range(start, stop=None, step=1, precise_schedule=None, directives=None, **hints):
    """Loop with loop-carried dependence; unrolled at trace time (scheduling hints accepted)."""
    return _unrolled("sequential_range", start, stop, step)


def static_range(start, stop=None, step=1, **hints):
    """Fully unrolled loop."""
    return _unrolled("static_range", start, stop, step)


def _reg_operand(x):
    if isinstance(x, VirtualRegister):
        return x.id, 0
    if isinstance(x, int):
        return -1, x
    raise TypeError(f"loop bounds are ints or VirtualRegisters, got {x!r}")


def fori_loop(lower, upper, body_fun, step=1) -> None:
    """A loop that runs on the device: ``for i in range(lower, upper, step): body_fun(i)``. The
    body is traced once; ``i`` is a VirtualRegister (use it as a dynamic offset)."""
    if not isinstance(step, int) or step <= 0:
        raise ValueError(f"fori_loop: step must be a positive compile-time int, got {step!r}")
    tr = _tracer.current()
    r = tr.program.add_register()
    lo_r, lo_i = _reg_operand(lower)
    hi_r, hi_i = _reg_operand(upper)
    _tracer.emit(
        "LoopBegin",
        "sync",
        {},
        {"iterator": r, "lower_reg": lo_r, "lower": lo_i, "upper_reg": hi_r, "upper": hi_i, "step": step},
    )
    tr.loop_depth += 1
    try:
        body_fun(VirtualRegister(r))
    finally:
        tr.loop_depth -= 1
    _tracer.emit("LoopEnd", "sync")


def while_loop(init, body_fun) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` on the device; the body returns the next
    condition register."""
    if not isinstance(init, VirtualRegister):
        raise TypeError("while_loop: init must be a VirtualRegister")
    tr = _tracer.current()
    cond = tr.program.add_register()
    _tracer.emit("RegMove", "sync", {}, {"dst": cond, "src": init.id, "imm": 0})
    _tracer.emit("WhileBegin", "sync", {}, {"condition": cond})
    tr.loop_depth += 1
    try:
        nxt = body_fun(VirtualRegister(cond))
    finally:
        tr.loop_depth -= 1
    if not isinstance(nxt, VirtualRegister):
        raise TypeError("while_loop: body_fun must return the next condition register (a VirtualRegister)")
    _tracer.emit("WhileEnd", "sync", {}, {"next_condition": nxt.id})


def dynamic_range(start, stop=None, step=1):
    """Deprecated runtime loop (use fori_loop): ``for i in nl.dynamic_range(n): ...``."""
    if stop is None:
        start, stop = 0, start
    if not isinstance(step, int) or step <= 0:
        raise ValueError("dynamic_range: step must be a positive int")
    tr = _tracer.current()
    r = tr.program.add_register()
    lo_r, lo_i = _reg_operand(start)
    hi_r, hi_i = _reg_operand(stop)
    _tracer.emit(
        "LoopBegin",
        "sync",
        {},
        {"iterator": r, "lower_reg": lo_r, "lower": lo_i, "upper_reg": hi_r, "upper": hi_i, "step": step},
    )
    tr.loop_depth += 1
    try:
        yield VirtualRegister(r)
    finally:
        tr.loop_depth -= 1
    _tracer.emit("LoopEnd", "sync")


def ds(start, size) -> DynSlice:
    """A slice of `size` elements starting at `start` (an int or a VirtualRegister)."""
    return DynSlice(start, size)


def arange(*args) -> IndexExpr:
    """Old-style index grid: ``ix = nl.arange(128)[:, None]``."""
    return _arange(*args)


def program_id(axis=0) -> int:
    tr = _tracer.current()
    if not tr.grid:
        if axis != 0:
            raise IndexError(f"program_id({axis}): the kernel was launched without a grid")
        return 0
    if not 0 <= axis < len(tr.grid):
        raise IndexError(f"program_id({axis}): the launch grid {tr.grid} has {len(tr.grid)} axes")
    return tr.pid[axis]


def num_programs(axes=0) -> int:
    tr = _tracer.current()
    grid = tr.grid or (1,)
    if isinstance(axes, (tuple, list)):
        return _math.prod(grid[a] for a in axes)
    if not 0 <= axes < len(grid):
        raise IndexError(f"num_programs({axes}): the launch grid {grid} has {len(grid)} axes")
    return grid[axes]


def program_ndim() -> int:
    return len(_tracer.current().grid)


def no_reorder():
    """Keeps instructions in program order. The emulator's schedule already issues every
    engine in program order, so this is a no-op context."""
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# Helpers


def _is_t(x) -> bool:
    return isinstance(x, NkiTensor)


def _need_onchip(x: NkiTensor, api: str, role: str) -> None:
    if not x.on_chip:
        raise TypeError(
            f"nki.language.{api}: {role} '{x.name}' is in {x.buffer.value}; engines compute on SBUF/PSUM tiles "
            "(load it first with nl.load / nisa.dma_copy)"
        )


def _tile_shape(shape) -> tuple:
    shape = tuple(shape)
    if len(shape) == 0:
        return (1, 1)
    if len(shape) == 1:
        return (shape[0], 1)
    return shape


def _apply_mask(mask, *tensors):
    """Restricts the tensors (whose dims are the index-grid axes) to the masked ranges; returns
    None when the mask leaves nothing."""
    if mask is None:
        return tensors
    if isinstance(mask, builtins.bool):
        return tensors if mask else None
    if not isinstance(mask, Mask):
        raise TypeError(f"mask must be an index-grid predicate such as (ix < n), got {mask!r}")
    ranges = mask.axis_ranges()
    if any(hi < lo for lo, hi in ranges.values()):
        return None
    out = []
    for t in tensors:
        if t is None or not _is_t(t):
            out.append(t)
            continue
        for expr, size, d in t._bounds or ():
            lo, hi = expr.range(ranges)
            if lo < 0 or hi >= size:
                raise IndexError(
                    f"index expression covers {lo}..{hi} on dimension {d} of size {size} of '{t.name}' "
                    "even with the mask applied"
                )
        shape, off = list(t.shape), t.offset
        for axis, (lo, hi) in ranges.items():
            if axis >= t.ndim:
                raise IndexError(f"mask refers to grid axis {axis} but the operand has {t.ndim} dimensions")
            if hi < lo:
                return None
            off += lo * t.strides[axis]
            shape[axis] = hi - lo + 1
        if t._vec is not None:  # an indirect view: the mask on its entries selects index entries
            out.append(t._masked_indirect(shape, off, ranges.get(0, (0, t.shape[0] - 1))[0]))
            continue
        out.append(t._view(shape, t.strides, offset=off))
    return tuple(out)


def _as_sbuf(x: NkiTensor) -> NkiTensor:
    """x itself when in SBUF, else a copy of it in SBUF."""
    from . import isa as nisa

    if x.buffer == sbuf:
        return x
    t = ndarray(_tile_shape(x.shape), x.dtype, sbuf)
    if x.on_chip:
        nisa.tensor_copy(dst=t, src=x)
    else:
        nisa.dma_copy(dst=t, src=x)
    return t


def _broadcast_shape(a: tuple, b: tuple, api: str) -> tuple:
    if len(a) != len(b):
        raise ValueError(f"nki.language.{api}: operands of shapes {a} and {b} have different ranks")
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"nki.language.{api}: shapes {a} and {b} are not broadcastable")
        out.append(builtins.max(x, y))
    if a[0] != b[0]:
        raise ValueError(
            f"nki.language.{api}: operands have {a[0]} and {b[0]} partitions; broadcast the partition dimension "
            "explicitly with nl.broadcast_to (engines do not broadcast across partitions)"
        )
    return tuple(out)


def _broadcast_partitions(x: NkiTensor, y: NkiTensor) -> tuple:
    """nl.add(a[128, 512], b[1, 512]): the engines do not broadcast across partitions, so the
    one-partition operand is first copied to every partition by a DMA (partition-broadcast
    source), as the compiler lowers it."""
    if x.ndim != y.ndim or x.shape[0] == y.shape[0] or 1 not in (x.shape[0], y.shape[0]):
        return x, y
    from . import isa as nisa

    one, other = (x, y) if x.shape[0] == 1 else (y, x)
    src = _as_sbuf(one) if one.buffer == psum else one
    wide = ndarray(_tile_shape((other.shape[0],) + one.shape[1:]), one.dtype, sbuf)
    wide_v = wide if wide.shape == (other.shape[0],) + one.shape[1:] else wide.reshape((other.shape[0],) + one.shape[1:])
    nisa.dma_copy(dst=wide_v, src=src._view((other.shape[0],) + src.shape[1:], (0,) + src.strides[1:]))
    return (wide_v, y) if one is x else (x, wide_v)


def _expand(x: NkiTensor, shape: tuple) -> NkiTensor:
    steps = [0 if (n == 1 and m != 1) else s for n, m, s in zip(x.shape, shape, x.strides)]
    return x._view(shape, steps)


def _vector_view(x: NkiTensor) -> NkiTensor:
    """An [P, 1] view of a tensor whose free dims are all 1."""
    return x._view((x.shape[0], 1), (x.strides[0], 1))


def _is_vector(x: NkiTensor) -> bool:
    return x.ndim >= 1 and _math.prod(x.shape[1:]) == 1


_COMPARE = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
_LOGICAL = {"logical_and", "logical_or", "logical_xor"}


def _py_binary(name, x, y):
    import operator

    f = {
        "add": operator.add,
        "subtract": operator.sub,
        "multiply": operator.mul,
        "divide": operator.truediv,
        "maximum": builtins.max,
        "minimum": builtins.min,
        "power": operator.pow,
        "mod": operator.mod,
        "fmod": _math.fmod,
        "equal": operator.eq,
        "not_equal": operator.ne,
        "less": operator.lt,
        "less_equal": operator.le,
        "greater": operator.gt,
        "greater_equal": operator.ge,
        "bitwise_and": operator.and_,
        "bitwise_or": operator.or_,
        "bitwise_xor": operator.xor,
        "left_shift": operator.lshift,
        "right_shift": operator.rshift,
        "logical_and": lambda a, b: builtins.bool(a) and builtins.bool(b),
        "logical_or": lambda a, b: builtins.bool(a) or builtins.bool(b),
        "logical_xor": lambda a, b: builtins.bool(a) != builtins.bool(b),
        "abs_max": lambda a, b: builtins.max(builtins.abs(a), builtins.abs(b)),
        "abs_min": lambda a, b: builtins.min(builtins.abs(a), builtins.abs(b)),
    }[name]
    return f(x, y)


def _binary(name: str, x, y, dtype=None, mask=None, _dst=None) -> NkiTensor:
    from . import isa as nisa

    if not _is_t(x) and not _is_t(y):
        return _py_binary(name, x, y)
    with _tracer.api(f"nki.language.{name}"):
        for v, role in ((x, "x"), (y, "y")):
            if _is_t(v):
                _need_onchip(v, name, role)
        if _is_t(x) and _is_t(y):
            x, y = _broadcast_partitions(x, y)
            shape = _broadcast_shape(x.shape, y.shape, name)
            res_dt = _dt.promote(x.dtype, y.dtype)
        else:
            t = x if _is_t(x) else y
            shape = t.shape
            res_dt = t.dtype
            s = y if _is_t(x) else x
            if isinstance(s, float) and not _dt.is_float(res_dt):
                res_dt = float32
        if name in _COMPARE or name in _LOGICAL:
            res_dt = bool_
        out_dt = _dt.to_dtype(dtype) if dtype is not None else res_dt
        dst = _dst if _dst is not None else ndarray(_tile_shape(shape), out_dt, sbuf)
        dst_v = dst if dst.shape == shape else dst.reshape(shape)
        r = _apply_mask(mask, dst_v, x, y)
        if r is None:
            return dst
        dst_v, x, y = r
        op = getattr(nisa_ops, name)
        if _is_t(x) and _is_t(y):
            if name != "power" and _is_vector(y) and not _is_vector(x):
                nisa.tensor_scalar(dst=dst_v, data=x, op0=op, operand0=_vector_view(y))
            elif name != "power" and _is_vector(x) and not _is_vector(y):
                nisa.tensor_scalar(dst=dst_v, data=y, op0=op, operand0=_vector_view(x), reverse0=True)
            else:
                xs, ys = _expand(x, dst_v.shape), _expand(y, dst_v.shape)
                if xs.buffer == psum and ys.buffer == psum:
                    ys = _as_sbuf(ys)
                if name == "power":
                    xs, ys = _as_sbuf(xs), _as_sbuf(ys)
                    if dst_v.buffer != sbuf:
                        tmp = ndarray(dst_v.shape, dst_v.dtype, sbuf)
                        nisa.tensor_tensor(dst=tmp, data1=xs, data2=ys, op=op)
                        nisa.tensor_copy(dst=dst_v, src=tmp)
                        return dst
                nisa.tensor_tensor(dst=dst_v, data1=xs, data2=ys, op=op)
        elif _is_t(x):
            nisa.tensor_scalar(dst=dst_v, data=x, op0=op, operand0=y)
        else:
            nisa.tensor_scalar(dst=dst_v, data=y, op0=op, operand0=x, reverse0=True)
        return dst


def _unary(name: str, x, dtype=None, mask=None, _dst=None) -> NkiTensor:
    from . import isa as nisa

    if not _is_t(x):
        import math

        f = {
            "exp": math.exp,
            "log": math.log,
            "sqrt": math.sqrt,
            "rsqrt": lambda v: 1 / math.sqrt(v),
            "tanh": math.tanh,
            "abs": builtins.abs,
            "negative": lambda v: -v,
            "square": lambda v: v * v,
            "reciprocal": lambda v: 1 / v,
            "sin": math.sin,
            "cos": math.cos,
            "tan": math.tan,
            "arctan": math.atan,
            "ceil": math.ceil,
            "floor": math.floor,
            "trunc": math.trunc,
            "erf": math.erf,
            "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
            "relu": lambda v: builtins.max(v, 0),
            "copy": lambda v: v,
        }.get(name)
        if f is None:
            raise TypeError(f"nki.language.{name} needs a tile")
        return f(x)
    with _tracer.api(f"nki.language.{name}"):
        _need_onchip(x, name, "x")
        out_dt = _dt.to_dtype(dtype) if dtype is not None else x.dtype
        dst = _dst if _dst is not None else ndarray(_tile_shape(x.shape), out_dt, sbuf)
        dst_v = dst if dst.shape == x.shape else dst.reshape(x.shape)
        r = _apply_mask(mask, dst_v, x)
        if r is None:
            return dst
        dst_v, x = r
        if name == "copy":
            nisa.tensor_copy(dst=dst_v, src=x)
        elif name == "invert":
            nisa.tensor_scalar(dst=dst_v, data=x, op0=nisa_ops.bitwise_xor, operand0=-1)
        elif name == "logical_not":
            nisa.tensor_scalar(dst=dst_v, data=x, op0=nisa_ops.equal, operand0=0)
        else:
            nisa.activation(dst=dst_v, op=getattr(nisa_ops, name), data=x)
        return dst


def _reduce(name: str, alu: str, x: NkiTensor, axis, dtype=None, keepdims=False, mask=None) -> NkiTensor:
    from . import isa as nisa

    with _tracer.api(f"nki.language.{name}"):
        _need_onchip(x, name, "x")
        r = _apply_mask(mask, x)
        if r is None:
            raise ValueError(f"nki.language.{name}: the mask selects no elements")
        (x,) = r
        axes = _norm_axes(axis, x.ndim)
        out_shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)
        res_dt = _dt.to_dtype(dtype) if dtype is not None else x.dtype
        if alu in ("logical_and",):
            res_dt = bool_
        dst = ndarray(_tile_shape(out_shape), res_dt, sbuf)
        trailing = tuple(builtins.range(x.ndim - len(axes), x.ndim))
        if axes and 0 not in axes and axes != trailing:
            # The Vector Engine reduces the innermost free axes: view the data (and a keepdims
            # result) with the reduced axes moved last; views are free access patterns.
            kept = [d for d in builtins.range(1, x.ndim) if d not in axes]
            perm = [0] + kept + list(axes)
            dv = dst.reshape(out_shape) if dst.shape != out_shape else dst
            if keepdims:
                dv = dv.permute(perm)
            nisa.tensor_reduce(
                dst=dv, op=getattr(nisa_ops, alu), data=x.permute(perm), axis=trailing, keepdims=keepdims
            )
            return dst
        nisa.tensor_reduce(dst=dst, op=getattr(nisa_ops, alu), data=x, axis=axes, keepdims=keepdims)
        return dst


def _norm_axes(axis, ndim) -> tuple:
    if axis is None:
        axes = tuple(builtins.range(1, ndim))
    elif isinstance(axis, int):
        axes = (axis,)
    else:
        axes = tuple(axis)
    return tuple(sorted(a + ndim if a < 0 else a for a in axes))


# ---------------------------------------------------------------------------------------------
# Memory operations


def load(src: NkiTensor, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Copies `src` (HBM) into a new SBUF tile (1-D tensors become [n, 1] tiles)."""
    from . import isa as nisa

    with _tracer.api("nki.language.load"):
        if not _is_t(src):
            raise TypeError(f"nki.language.load: expected a tensor, got {src!r}")
        out_dt = _dt.to_dtype(dtype) if dtype is not None else src.dtype
        dst = ndarray(_tile_shape(src.shape), out_dt, sbuf)
        dst_v = dst if dst.shape == src.shape else dst.reshape(src.shape) if src.ndim else dst
        r = _apply_mask(mask, dst_v, src)
        if r is None:
            return dst
        dst_v, src = r
        if src.on_chip:
            nisa.tensor_copy(dst=dst_v, src=src)
        else:
            nisa.dma_copy(dst=dst_v, src=src)
        return dst


def store(dst: NkiTensor, value, mask=None, **kwargs) -> None:
    """Copies the tile `value` into `dst` (usually HBM)."""
    from . import isa as nisa

    with _tracer.api("nki.language.store"):
        if not _is_t(dst):
            raise TypeError(f"nki.language.store: dst must be a tensor, got {dst!r}")
        if not _is_t(value):
            tile = ndarray(_tile_shape(dst.shape), dst.dtype, sbuf)
            nisa.memset(dst=tile, value=value)
            value = tile
        if (
            value.shape != dst.shape
            and value.size == dst.size
            and value.ndim == dst.ndim + 1
            and value.shape[-1] == 1
            and not value.on_chip
        ):
            value = value.squeeze_dim(-1)
        if mask is None and value._mask is not None and value.shape == dst.shape:
            mask = value._mask  # a masked old-style result: store what was written
        r = _apply_mask(mask, dst, value)
        if r is None:
            return
        dst, value = r
        if value.buffer == psum:
            value = _as_sbuf(value)
        if dst.on_chip:
            nisa.tensor_copy(dst=dst, src=value)
        else:
            nisa.dma_copy(dst=dst, src=value)


def load_transpose2d(src: NkiTensor, dtype=None) -> NkiTensor:
    """Loads a 2-D HBM tensor transposed into SBUF with a DMA transpose."""
    from . import isa as nisa

    with _tracer.api("nki.language.load_transpose2d"):
        if src.ndim != 2:
            raise ValueError(f"nki.language.load_transpose2d: expected a 2-D tensor, got shape {src.shape}")
        dst = ndarray((src.shape[1], src.shape[0]), _dt.to_dtype(dtype) if dtype else src.dtype, sbuf)
        nisa.dma_transpose(dst=dst, src=src)
        return dst


class _LoopReduce:
    """``nl.loop_reduce(x, op, loop_indices)``: assigned to ``dst``, it is ``dst = x`` on the first
    iteration of the reduction loops and ``dst = op(dst, x)`` on the others."""

    __slots__ = ("x", "op", "first")

    def __init__(self, x, op, first):
        self.x, self.op, self.first = x, op, first


def loop_reduce(x, op, loop_indices, dtype=None, mask=None):
    """Reduces ``x`` with ``op`` across the iterations of the unrolled loops ``loop_indices``
    (old API); assign the result to the tile that accumulates it."""
    idx = loop_indices if isinstance(loop_indices, (list, tuple)) else [loop_indices]
    if not idx or not builtins.all(isinstance(i, _tracer.LoopIndex) for i in idx):
        raise TypeError(
            "loop_reduce: loop_indices are iterators of enclosing nl.affine_range/sequential_range "
            f"loops, got {loop_indices!r}"
        )
    src = copy(x, dtype=dtype, mask=mask) if dtype is not None and dtype != x.dtype else x
    return _LoopReduce(src, op, builtins.all(i.first for i in idx))


def _engines_can_start(t: NkiTensor) -> bool:
    """Whether a compute engine can access the partitions of on-chip view `t` (the engines'
    start-partition rule, nki::isa::engines_can_start)."""
    if t._nblock or t._reg is not None or t._vec is not None or not t.shape:
        return True
    per_part = _math.prod(t._b.shape[1:]) if len(t._b.shape) > 1 else 1
    if per_part <= 0 or t._steps[0] != per_part:
        return True  # not a plain partition walk: leave it to the instruction's own checks
    return _tracer.core().engines_can_start(t._offset // per_part, t.shape[0])


def _assign(dst: NkiTensor, value) -> None:
    """``dst[...] = value`` inside a kernel."""
    from . import isa as nisa

    if isinstance(value, _LoopReduce):
        if value.first:
            _assign(dst, value.x)
        else:
            x = value.x if value.x.on_chip else load(value.x)
            nisa.tensor_tensor(dst=dst, data1=dst, data2=x, op=value.op)
        return

    if not _is_t(value):
        if not dst.on_chip:
            raise TypeError("assigning a scalar to an HBM tensor: fill an SBUF tile and nl.store it")
        if dst.buffer == sbuf and not _engines_can_start(dst):
            # `idx[i, j] = v` on partition i: the engines cannot start there, a DMA can. Fill a
            # tile at partition 0 and move it (SBUF -> SBUF), as the compiler lowers it.
            tmp = ndarray(_tile_shape(dst.shape), dst.dtype, sbuf)
            tmp_v = tmp if tmp.shape == dst.shape else tmp.reshape(dst.shape)
            nisa.memset(dst=tmp_v, value=value)
            nisa.dma_copy(dst=dst, src=tmp_v)
            return
        nisa.memset(dst=dst, value=value)
        return
    if value is dst or (value._mask is None and value._same_access(dst)):  # t[0] += x; t[0] = t[0]
        return
    if value._mask is False:  # an old-style result masked off at compile time: nothing assigned
        return
    if value._mask is not None and value.shape == dst.shape:  # a masked old-style result
        r = _apply_mask(value._mask, dst, value)
        if r is None:
            return
        dst, value = r
    if dst.on_chip:
        v = value if value.shape == dst.shape or value.size != dst.size else value.reshape(dst.shape)
        if v.on_chip and dst.buffer == sbuf and v.buffer == sbuf and not (_engines_can_start(dst) and _engines_can_start(v)):
            nisa.dma_copy(dst=dst, src=v)  # a partition range the engines cannot start at
        elif v.on_chip:
            nisa.tensor_copy(dst=dst, src=v)
        else:
            nisa.dma_copy(dst=dst, src=v)
    else:
        store(dst, value)


# ---------------------------------------------------------------------------------------------
# Tensor Engine operations


def gather_flattened(data: NkiTensor, indices: NkiTensor, axis=0, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """result[p, j] = data[p, indices[p, j]] within each partition, data's free dims flattened
    (nisa.nc_n_gather on GpSimd); the result has the shape [P, *indices free dims] and data's
    dtype (or ``dtype``, converted on the Vector Engine). Integer indices of another dtype than
    uint32 are converted first; an index outside the partition's data is an error."""
    from . import isa as nisa

    with _tracer.api("nki.language.gather_flattened"):
        _need_onchip(data, "gather_flattened", "data")
        _need_onchip(indices, "gather_flattened", "indices")
        if axis != 0:
            raise NotImplementedError(
                f"nki.language.gather_flattened: axis={axis!r}; neuron-emu models the documented gather "
                "over the flattened free dimensions of each partition (axis=0) only"
            )
        if mask is not None:
            raise NotImplementedError("nki.language.gather_flattened: mask= is not modeled by neuron-emu")
        if _dt.is_float(indices.dtype):
            raise TypeError(
                f"nki.language.gather_flattened: indices '{indices.name}' are {indices.dtype}; they must be integers"
            )
        d = _as_sbuf(data)
        i = indices
        if i.dtype != uint32:
            i = ndarray(_tile_shape(indices.shape), uint32, sbuf)
            nisa.tensor_copy(dst=i, src=indices)
        else:
            i = _as_sbuf(i)
        g = nisa.nc_n_gather(data=d, indices=i)
        out_dt = _dt.to_dtype(dtype) if dtype is not None else data.dtype
        if out_dt == data.dtype:
            return g
        res = ndarray(g.shape, out_dt, sbuf)
        nisa.tensor_copy(dst=res, src=g)
        return res


def transpose(x: NkiTensor, dtype=None, mask=None) -> NkiTensor:
    """2-D transpose on the Tensor Engine; the result is a PSUM tile."""
    from . import isa as nisa

    with _tracer.api("nki.language.transpose"):
        _need_onchip(x, "transpose", "x")
        x2 = x if x.ndim == 2 else x.reshape((x.shape[0], x.size // x.shape[0]))
        x2 = _as_sbuf(x2)
        tr = _tracer.current()
        keep16 = x.dtype in (bfloat16, float16) and tr.target["nc_version"] >= 3
        out_dt = _dt.to_dtype(dtype) if dtype is not None else (x.dtype if keep16 else float32)
        if out_dt != x.dtype and out_dt != float32:
            out = ndarray((x2.shape[1], x2.shape[0]), float32, psum)
            nisa.nc_transpose(dst=out, data=x2)
            res = ndarray(out.shape, out_dt, sbuf)
            nisa.tensor_copy(dst=res, src=out)
            return res
        out = ndarray((x2.shape[1], x2.shape[0]), out_dt, psum)
        nisa.nc_transpose(dst=out, data=x2, engine=nisa_engine.tensor)
        return out


def matmul(x: NkiTensor, y: NkiTensor, transpose_x=False, mask=None) -> NkiTensor:
    """x @ y on the Tensor Engine (x^T @ y with transpose_x=True); the result is a float32 PSUM
    tile. Limits: contraction <= 128, x free <= 128, y free <= 512."""
    from . import isa as nisa

    with _tracer.api("nki.language.matmul"):
        _need_onchip(x, "matmul", "x")
        _need_onchip(y, "matmul", "y")
        if transpose_x:
            xt = _as_sbuf(x)
        else:
            xt_psum = transpose(x)
            xt = ndarray(xt_psum.shape, x.dtype, sbuf)
            nisa.tensor_copy(dst=xt, src=xt_psum)
        ys = _as_sbuf(y)
        m = xt.size // xt.shape[0]
        n = ys.size // ys.shape[0]
        out = ndarray((m, n), float32, psum)
        nisa.nc_matmul(dst=out, stationary=xt, moving=ys, accumulate=False)
        return out


def broadcast_to(x: NkiTensor, shape, dtype=None) -> NkiTensor:
    """Broadcasts size-1 dimensions (numpy rules, same rank). Free dimensions broadcast as a
    zero-stride view; a single partition is replicated across partitions with a DMA."""
    from . import isa as nisa

    shape = tuple(shape)
    if not _is_t(x):
        return full(shape, x, dtype or float32)
    with _tracer.api("nki.language.broadcast_to"):
        if len(shape) != x.ndim:
            raise ValueError(f"nki.language.broadcast_to: {x.shape} -> {shape} must keep the rank")
        for a, b in zip(x.shape, shape):
            if a != b and a != 1:
                raise ValueError(f"nki.language.broadcast_to: cannot broadcast {x.shape} to {shape}")
        steps = [0 if (a == 1 and b != 1) else s for a, b, s in zip(x.shape, shape, x.strides)]
        if x.shape[0] == shape[0] or not x.on_chip:
            v = x._view(shape, steps)
            if dtype is None or _dt.to_dtype(dtype) == x.dtype:
                return v
            return copy(v, dtype=dtype)
        src = _as_sbuf(x)
        steps = [0 if (a == 1 and b != 1) else s for a, b, s in zip(src.shape, shape, src.strides)]
        out = ndarray(shape, _dt.to_dtype(dtype) if dtype else x.dtype, sbuf)
        nisa.dma_copy(dst=out, src=src._view(shape, steps))
        return out


def expand_dims(x: NkiTensor, axis) -> NkiTensor:
    return x.expand_dim(axis)


def where(condition, x, y, dtype=None, mask=None) -> NkiTensor:
    """Elementwise ``condition ? x : y``."""
    from . import isa as nisa

    with _tracer.api("nki.language.where"):
        _need_onchip(condition, "where", "condition")
        shape = condition.shape
        ref = x if _is_t(x) else (y if _is_t(y) else None)
        out_dt = _dt.to_dtype(dtype) if dtype else (ref.dtype if ref is not None else float32)
        out = ndarray(_tile_shape(shape), out_dt, sbuf)
        out_v = out if out.shape == shape else out.reshape(shape)
        if _is_t(y):
            nisa.tensor_copy(dst=out_v, src=_expand(y, shape))
        else:
            nisa.memset(dst=out_v, value=y)
        src = _expand(x, shape) if _is_t(x) else x
        nisa.tensor_copy_predicated(dst=out_v, src=src, predicate=condition)
        return out


# ---------------------------------------------------------------------------------------------
# Composite operations


def softmax(x: NkiTensor, axis=-1, dtype=None, mask=None) -> NkiTensor:
    """exp(x - max) / sum(exp(x - max)) along the trailing free axes `axis`."""
    from . import isa as nisa

    with _tracer.api("nki.language.softmax"):
        _need_onchip(x, "softmax", "x")
        axes = _norm_axes(axis, x.ndim)
        out_dt = _dt.to_dtype(dtype) if dtype else x.dtype
        out = ndarray(_tile_shape(x.shape), out_dt, sbuf)
        P = x.shape[0]
        if x.ndim == 2 and axes == (1,):
            mx = ndarray((P, 1), float32, sbuf)
            nisa.tensor_reduce(dst=mx, op=nisa_ops.maximum, data=x, axis=(1,), negate=True)
            e = ndarray(x.shape, float32, sbuf)
            s = ndarray((P, 1), float32, sbuf)
            nisa.activation(
                dst=e,
                op=nisa_ops.exp,
                data=x,
                bias=mx,
                reduce_op=nisa_ops.add,
                reduce_res=s,
                reduce_cmd=nisa_reduce_cmd.reset_reduce,
            )
            rs = ndarray((P, 1), float32, sbuf)
            nisa.reciprocal(dst=rs, data=s)
            nisa.tensor_scalar(dst=out, data=e, op0=nisa_ops.multiply, operand0=rs)
            return out
        keep = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
        mx = ndarray(keep, float32, sbuf)
        nisa.tensor_reduce(dst=mx, op=nisa_ops.maximum, data=x, axis=axes, keepdims=True)
        e = ndarray(x.shape, float32, sbuf)
        nisa.tensor_tensor(dst=e, data1=x, data2=_expand(mx, x.shape), op=nisa_ops.subtract)
        nisa.activation(dst=e, op=nisa_ops.exp, data=e)
        s = ndarray(keep, float32, sbuf)
        nisa.tensor_reduce(dst=s, op=nisa_ops.add, data=e, axis=axes, keepdims=True)
        nisa.reciprocal(dst=s, data=s)
        nisa.tensor_tensor(
            dst=out.reshape(x.shape) if out.shape != x.shape else out,
            data1=e,
            data2=_expand(s, x.shape),
            op=nisa_ops.multiply,
        )
        return out


def rms_norm(x: NkiTensor, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None, mask=None) -> NkiTensor:
    """x / sqrt(sum(x^2, axis) / n + epsilon) * w, with the statistics in fp32."""
    from . import isa as nisa

    with _tracer.api("nki.language.rms_norm"):
        _need_onchip(x, "rms_norm", "x")
        axes = _norm_axes(axis, x.ndim)
        if x.ndim != 2 or axes != (1,):
            raise ValueError("nki.language.rms_norm supports 2-D tiles normalised along axis 1")
        P = x.shape[0]
        out_dt = _dt.to_dtype(dtype) if dtype else x.dtype
        sq = ndarray(x.shape, float32, sbuf)
        ss = ndarray((P, 1), float32, sbuf)
        nisa.activation(
            dst=sq,
            op=nisa_ops.square,
            data=x,
            reduce_op=nisa_ops.add,
            reduce_res=ss,
            reduce_cmd=nisa_reduce_cmd.reset_reduce,
        )
        rs = ndarray((P, 1), float32, sbuf)
        nisa.tensor_scalar(
            dst=rs,
            data=ss,
            op0=nisa_ops.multiply,
            operand0=1.0 / n,
            op1=nisa_ops.add,
            operand1=float(epsilon),
        )
        nisa.activation(dst=rs, op=nisa_ops.rsqrt, data=rs)
        out = ndarray(x.shape, out_dt, sbuf)
        if w is None:
            nisa.tensor_scalar(dst=out, data=x, op0=nisa_ops.multiply, operand0=rs)
            return out
        normed = ndarray(x.shape, float32, sbuf)
        nisa.tensor_scalar(dst=normed, data=x, op0=nisa_ops.multiply, operand0=rs)
        if _is_t(w):
            wv = w
            if w.ndim == 1:
                wv = w.reshape((1, w.shape[0])) if not w.on_chip else w
            if wv.shape[0] != P:
                wv = broadcast_to(wv if wv.on_chip else load(wv), (P, x.shape[1]))
            multiply(normed, wv, _dst=out)
        else:
            nisa.tensor_scalar(dst=out, data=normed, op0=nisa_ops.multiply, operand0=float(w))
        return out


# ---------------------------------------------------------------------------------------------
# Elementwise operations (each is also usable as the `op=` of nki.isa instructions)


def _make_binary(name: str):
    def fn(x, y, dtype=None, mask=None, _dst=None):
        return _binary(name, x, y, dtype=dtype, mask=mask, _dst=_dst)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} of two tiles or a tile and a scalar (numpy broadcasting on free dims)."
    fn._nki_alu = name  # type: ignore[attr-defined]
    return fn


def _make_unary(name: str):
    def fn(x, dtype=None, mask=None, _dst=None):
        return _unary(name, x, dtype=dtype, mask=mask, _dst=_dst)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {name} (Scalar Engine activation unless noted)."
    fn._nki_act = name  # type: ignore[attr-defined]
    return fn


add = _make_binary("add")
subtract = _make_binary("subtract")
multiply = _make_binary("multiply")
divide = _make_binary("divide")
maximum = _make_binary("maximum")
minimum = _make_binary("minimum")
abs_max = _make_binary("abs_max")
abs_min = _make_binary("abs_min")
power = _make_binary("power")
fmod = _make_binary("fmod")
mod = _make_binary("mod")
equal = _make_binary("equal")
not_equal = _make_binary("not_equal")
less = _make_binary("less")
less_equal = _make_binary("less_equal")
greater = _make_binary("greater")
greater_equal = _make_binary("greater_equal")
bitwise_and = _make_binary("bitwise_and")
bitwise_or = _make_binary("bitwise_or")
bitwise_xor = _make_binary("bitwise_xor")
left_shift = _make_binary("left_shift")
right_shift = _make_binary("right_shift")
logical_and = _make_binary("logical_and")
logical_or = _make_binary("logical_or")
logical_xor = _make_binary("logical_xor")

exp = _make_unary("exp")
log = _make_unary("log")
sqrt = _make_unary("sqrt")
rsqrt = _make_unary("rsqrt")
tanh = _make_unary("tanh")
sigmoid = _make_unary("sigmoid")
relu = _make_unary("relu")
gelu = _make_unary("gelu")
gelu_apprx_tanh = _make_unary("gelu_apprx_tanh")
gelu_apprx_sigmoid = _make_unary("gelu_apprx_sigmoid")
gelu_dx = _make_unary("gelu_dx")
gelu_apprx_sigmoid_dx = _make_unary("gelu_apprx_sigmoid_dx")
silu = _make_unary("silu")
silu_dx = _make_unary("silu_dx")
softplus = _make_unary("softplus")
mish = _make_unary("mish")
erf = _make_unary("erf")
erf_dx = _make_unary("erf_dx")
reciprocal = _make_unary("reciprocal")
sin = _make_unary("sin")
cos = _make_unary("cos")
tan = _make_unary("tan")
arctan = _make_unary("arctan")
ceil = _make_unary("ceil")
floor = _make_unary("floor")
trunc = _make_unary("trunc")
sign = _make_unary("sign")
negative = _make_unary("negative")
square = _make_unary("square")
abs = _make_unary("abs")
copy = _make_unary("copy")
invert = _make_unary("invert")
logical_not = _make_unary("logical_not")
bitwise_not = invert

# The ISA's unary ALU operators are these functions too: nisa.tensor_scalar(op0=nl.abs, ...).
for _f in (abs, square, relu, rsqrt, reciprocal):
    _f._nki_alu = _f.__name__  # type: ignore[attr-defined]
del _f


def _make_reduce(name: str, alu: str):
    def fn(x, axis, dtype=None, keepdims=False, mask=None):
        return _reduce(name, alu, x, axis, dtype=dtype, keepdims=keepdims, mask=mask)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"{name} over the trailing free axes `axis` (never the partition axis 0)."
    fn._nki_alu = alu  # type: ignore[attr-defined]
    return fn


sum = _make_reduce("sum", "add")
max = _make_reduce("max", "maximum")
min = _make_reduce("min", "minimum")
prod = _make_reduce("prod", "multiply")


def all(x, axis, dtype=None, mask=None):
    return _reduce("all", "logical_and", x, axis, dtype=dtype, mask=mask)


all._nki_alu = "logical_and"  # type: ignore[attr-defined]


def mean(x, axis, dtype=None, keepdims=False, mask=None) -> NkiTensor:
    from . import isa as nisa

    with _tracer.api("nki.language.mean"):
        axes = _norm_axes(axis, x.ndim)
        n = _math.prod(x.shape[a] for a in axes)
        s = _reduce("mean", "add", x, axes, dtype=float32, keepdims=keepdims, mask=mask)
        out = ndarray(s.shape, _dt.to_dtype(dtype) if dtype else x.dtype, sbuf)
        nisa.tensor_scalar(dst=out, data=s, op0=nisa_ops.multiply, operand0=1.0 / n)
        return out


def var(x, axis, dtype=None, keepdims=False, mask=None) -> NkiTensor:
    """Population variance over `axis` (two-pass, fp32)."""
    from . import isa as nisa

    with _tracer.api("nki.language.var"):
        axes = _norm_axes(axis, x.ndim)
        n = _math.prod(x.shape[a] for a in axes)
        m = mean(x, axes, dtype=float32, keepdims=True)
        d = ndarray(x.shape, float32, sbuf)
        nisa.tensor_tensor(dst=d, data1=x, data2=_expand(m, x.shape), op=nisa_ops.subtract)
        nisa.tensor_tensor(dst=d, data1=d, data2=d, op=nisa_ops.multiply)
        s = _reduce("var", "add", d, axes, dtype=float32, keepdims=keepdims)
        out = ndarray(s.shape, _dt.to_dtype(dtype) if dtype else x.dtype, sbuf)
        nisa.tensor_scalar(dst=out, data=s, op0=nisa_ops.multiply, operand0=1.0 / n)
        return out


class _Ops:
    """Operator objects passed as `op=` to nki.isa (the nl functions themselves)."""

    def __getattr__(self, name):
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(name) from None


nisa_ops = _Ops()


class _IsaAttr:
    def __init__(self, attr):
        self.attr = attr

    def __getattr__(self, name):
        from . import isa

        return getattr(getattr(isa, self.attr), name)


nisa_engine = _IsaAttr("engine")
nisa_reduce_cmd = _IsaAttr("reduce_cmd")

range = builtins.range
bool = bool_  # noqa: A001  (nl.bool is the NKI boolean dtype; code in this module uses builtins.bool)

__all__ = [n for n in dir() if not n.startswith("_") and n not in ("builtins", "contextlib", "annotations", "bool")]
