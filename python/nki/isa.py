"""nki.isa: one call is one NeuronCore instruction. Every instruction takes its destination
first (``dst=``); the older style that omits ``dst`` and returns a new tile is accepted too.
The hardware rules of each instruction are checked by the C++ model when it is emitted (see
csrc/nki/program.cpp); a violation raises NkiValidationError at the kernel line."""

from __future__ import annotations

import enum
import functools
import inspect
import math

from . import _dtypes as _dt
from . import _tracer
from . import language as nl
from ._errors import NkiValidationError
from ._tensor import IndexExpr, Mask, NkiTensor, VirtualRegister
from ._tracer import emit


class engine(enum.Enum):
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(enum.IntEnum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


class matmul_perf_mode(enum.IntEnum):
    none = 0
    double_row = 1


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(enum.Enum):
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


_DmaEngine = dma_engine  # sendrecv's parameter of the same name hides the class


class NkiInstruction:
    """Handle of an emitted instruction (scheduling hints only: the emulator's schedule already
    honours every data dependency)."""

    def __init__(self, index: int):
        self.index = index

    def depends_on(self, *others) -> NkiInstruction:
        return self


def get_nc_version() -> nc_version:
    tr = _tracer.active()
    if tr is not None:
        return nc_version(tr.target["nc_version"])
    from ._core import target

    return nc_version(target()["nc_version"])


def get_nc_sub_version() -> int:
    return 0


# ---------------------------------------------------------------------------------------------
# Operand helpers

_NP_NAMES = {
    "true_divide": "divide",
    "amax": "maximum",
    "amin": "minimum",
    "max": "maximum",
    "min": "minimum",
    "fmax": "maximum",
    "fmin": "minimum",
    "sum": "add",
    "prod": "multiply",
    "absolute": "abs",
    "arctan": "arctan",
    "negative": "negative",
    "logical_not": "logical_not",
}


def _alu(op, what="op") -> int:
    if op is None:
        return -1
    name = getattr(op, "_nki_alu", None)
    if name is None:
        name = getattr(op, "__name__", op if isinstance(op, str) else None)
        name = _NP_NAMES.get(name, name)
    code = _tracer.alu_code(name) if isinstance(name, str) else None
    if code is None:
        raise ValueError(
            f"{what}={op!r} is not an ALU operator (nl.add, nl.subtract, nl.multiply, nl.maximum, ...)"
        )
    return code


def _act(op) -> int:
    name = getattr(op, "_nki_act", None)
    if name is None:
        name = getattr(op, "__name__", op if isinstance(op, str) else None)
        name = _NP_NAMES.get(name, name)
        if name == "identity":
            name = "copy"
    code = _tracer.act_code(name) if isinstance(name, str) else None
    if code is None:
        raise ValueError(f"op={op!r} is not an activation function (nl.exp, nl.tanh, nl.gelu, nl.copy, ...)")
    return code


def _engine(e, default: str) -> str:
    if e is None or e == engine.unknown:
        return default
    if isinstance(e, engine):
        return e.value
    raise ValueError(f"engine={e!r}")


def _dst(dst, shape, dtype, buffer=None) -> tuple:
    """(dst tensor, True if allocated here)."""
    if dst is not None:
        if not isinstance(dst, NkiTensor):
            raise TypeError(f"dst must be a tensor, got {dst!r}")
        return dst, False
    return nl.ndarray(nl._tile_shape(shape), dtype, buffer or nl.sbuf), True


def _result(dst, allocated):
    if allocated:
        return dst
    return NkiInstruction(_tracer.current().program.size() - 1)


def _scalar_or_vec(x):
    """(tensor or None, immediate)."""
    if isinstance(x, NkiTensor):
        return (x if x.ndim == 2 else x._view((x.shape[0], 1), (x.strides[0], 1))), 0.0
    if x is None:
        return None, 0.0
    if isinstance(x, (bool, int, float)):
        return None, float(x)
    if type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0:  # np.int32(4), np.float32(0.5)
        return None, float(x)
    raise TypeError(f"expected a scalar or a [partition, 1] tile, got {x!r}")


def _psum_accumulate(dst: NkiTensor) -> bool:
    """accumulate=None: the first nc_matmul into a PSUM location overwrites, later ones add.

    Locations are the bytes of `dst`'s tensor the access pattern touches, not its bounding
    interval: the columns of one PSUM tile written by separate matmuls ((P, 1) views with the
    partition stride) are distinct locations, each starting its own accumulation group."""
    import numpy as np

    tr = _tracer.current()
    b = dst._b
    written = tr.psum_written.get(b.id)
    if written is None:
        nbytes = math.prod(b.shape) * b.dtype.itemsize
        written = tr.psum_written[b.id] = np.zeros(nbytes, dtype=bool)
    isz = dst.dtype.itemsize
    idx = np.full((1,) * dst.ndim, dst.offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(dst.shape, dst.strides)):
        shape = [1] * dst.ndim
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    first = (idx.reshape(-1, 1) * isz + np.arange(isz, dtype=np.int64)).reshape(-1)
    first = first[(first >= 0) & (first < written.size)]
    hit = bool(written[first].any())
    written[first] = True
    return hit


def _old_style(*old_params, tensors=()):
    """Accepts the older calling convention of an instruction as well: no ``dst``, positional
    operands in the old order (``tensor_copy(x)``, ``tensor_tensor(a, b, op)``,
    ``activation(nl.exp, x)``), a new tile returned; and the old ``mask=`` (a compile-time bool,
    or an index-grid predicate restricting the operands that have the output's shape).
    `tensors` names the operand parameters that must be tensors in the new convention."""

    def deco(fn):
        sig = inspect.signature(fn)

        def is_old(args, kwargs) -> bool:
            if not args or "dst" in kwargs:
                return False
            if not isinstance(args[0], NkiTensor):
                return True
            try:
                bound = sig.bind_partial(*args, **kwargs).arguments
            except TypeError:
                return True
            return any(not isinstance(bound.get(t), NkiTensor) for t in tensors)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            mask = kwargs.pop("mask", None)
            if is_old(args, kwargs):
                if len(args) > len(old_params):
                    raise TypeError(f"nki.isa.{fn.__name__}: too many positional arguments for the old-style call")
                for name, v in zip(old_params, args):
                    if name in kwargs:
                        raise TypeError(f"nki.isa.{fn.__name__}: got multiple values for '{name}'")
                    kwargs[name] = v
                args = ()
            if mask is None:
                return fn(*args, **kwargs)
            kw = sig.bind_partial(*args, **kwargs).arguments
            return _masked(fn, dict(kw), mask, tensors)

        wrapper._nki_old_params = old_params  # type: ignore[attr-defined]
        return wrapper

    return deco


def _masked(fn, kw: dict, mask, tensors):
    if isinstance(mask, bool):
        if mask:
            return fn(**kw)
        with _tracer.suppressed():  # masked off at compile time: the tile is allocated, not written
            ret = fn(**kw)
        if isinstance(ret, NkiTensor):
            ret._mask = False  # assigning it writes nothing either
        return ret
    if not isinstance(mask, Mask):
        raise TypeError(f"nki.isa.{fn.__name__}: mask must be a bool or an index-grid predicate, got {mask!r}")
    ret = None
    if kw.get("dst") is None:
        with _tracer.suppressed():  # allocation only: learn the output tile
            ret = fn(**kw)
        kw["dst"] = ret
    dst = kw["dst"]
    names = ["dst"] + [t for t in tensors if isinstance(kw.get(t), NkiTensor) and kw[t].shape == dst.shape]
    r = nl._apply_mask(mask, *[kw[n] for n in names])
    if r is None:
        if ret is None:
            return NkiInstruction(_tracer.current().program.size() - 1)
        ret._mask = False
        return ret
    kw.update(zip(names, r))
    res = fn(**kw)
    if ret is not None:
        ret._mask = mask
        return ret
    return res


# ---------------------------------------------------------------------------------------------
# Data movement


def dma_copy(
    dst: NkiTensor = None,
    src: NkiTensor = None,
    priority=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    engine=engine.unknown,
    name=None,
    **kwargs,
):
    """Copies src to dst with the DMA engines (HBM<->SBUF, HBM->HBM, SBUF->SBUF; not PSUM).
    Differing dtypes are converted through fp32."""
    if src is None:
        raise TypeError("dma_copy: src is required")
    mask = kwargs.pop("mask", None)
    if mask is not None:  # the older releases' mask= (a bool or an index-grid predicate)
        kw = dict(dst=dst, src=src, oob_mode=oob_mode, dge_mode=dge_mode, **kwargs)
        return _masked(dma_copy, kw, mask, ("src",))
    rmw = kwargs.pop("dst_rmw_op", None)
    if rmw is not None:  # the older releases' read-modify-write store: dst = dst + src
        if dst is None:
            raise TypeError("dma_copy: dst_rmw_op= needs dst=")
        if _alu(rmw, "dst_rmw_op") != _tracer.alu_code("add"):
            raise NkiValidationError(
                f"nki.isa.dma_copy: dst_rmw_op={rmw!r} [rule: the DMA engines read-modify-write with add only]"
            )
        return dma_compute(dst=dst, srcs=[dst, src], reduce_op=nl.add, oob_mode=oob_mode)
    if getattr(src, "_vec", None) is not None or getattr(dst, "_vec", None) is not None:
        if dst is None:
            raise TypeError("dma_copy: an indirect (vector_offset) copy needs dst=")
        _dma_indirect(dst, src, oob_mode)
        return _result(dst, False)
    dst, alloc = _dst(dst, src.shape, kwargs.get("dtype") or src.dtype)
    emit(
        "DmaCopy",
        "dma",
        {"dst": dst, "src": src},
        {"oob_mode": int(oob_mode), "dge_mode": int(dge_mode), "is_transpose": False},
    )
    return _result(dst, alloc)


class _DirectAp:
    """An indirect view's access pattern with its first dimension's step zeroed: the executor adds
    ``index[i] * scale`` elements for entry i instead."""

    def __init__(self, t: NkiTensor):
        self._t = NkiTensor(t._b, t.shape, t.dtype, t.offset, (0,) + tuple(t.strides[1:]))

    def _ap(self):
        return self._t._ap()


def _dma_indirect(dst: NkiTensor, src: NkiTensor, oob_mode) -> None:
    if src._vec is not None and dst._vec is not None:
        raise NotImplementedError("dma_copy: only one of src and dst can be indirect (ap(vector_offset=))")
    scatter = dst._vec is not None
    ind = dst if scatter else src
    index, scale = ind._vec
    operands = {"dst": _DirectAp(dst) if scatter else dst, "src": src if scatter else _DirectAp(src), "index": index}
    attrs = {"indirect": int(scatter), "scale": scale, "oob_mode": int(oob_mode), "dim": 0}
    emit("DmaIndirect", "dma", operands, attrs)


_DMA_COMPUTE_SRCS = 4  # sources one DmaCompute instruction takes (isa.def)


def dma_compute(
    dst: NkiTensor = None,
    srcs=None,
    reduce_op=None,
    scales=None,
    unique_indices=True,
    oob_mode=oob_mode.error,
    name=None,
    **kwargs,
):
    """dst = srcs[0] + srcs[1] + ... computed by the DMA engines: every source cast to fp32, summed
    in order in fp32, the sum cast to dst's dtype; element counts match (shapes may differ).
    With an indirect (``ap(vector_offset=)``) operand it is a read-modify-write: a scatter-add
    ``dst(HBM)[idx] += src`` (dst indirect, one source the same view) or a gather-add
    ``dst += src(HBM)[idx]`` (one source indirect, the other dst)."""
    api = "nki.isa.dma_compute"
    if dst is None or srcs is None:
        raise TypeError("dma_compute: dst and srcs are required")
    if isinstance(srcs, NkiTensor):
        srcs = [srcs]
    srcs = list(srcs)
    if not 1 <= len(srcs) <= 16 or not all(isinstance(t, NkiTensor) for t in srcs):
        raise ValueError(f"{api}: srcs must be a list of 1 to 16 tensors, got {len(srcs)} item(s)")
    if reduce_op is None or _alu(reduce_op, "reduce_op") != _tracer.alu_code("add"):
        raise NkiValidationError(
            f"{api}: reduce_op={reduce_op!r} [rule: the DMA engines reduce with nl.add only]"
        )
    if scales is not None:
        scales = list(scales)
        if len(scales) != len(srcs):
            raise ValueError(f"{api}: {len(scales)} scales for {len(srcs)} sources")
        if any(float(x) != 1.0 for x in scales):
            raise NkiValidationError(
                f"{api}: scales={scales} [rule: dma_compute scales must all be 1.0 on this hardware]"
            )
    indirect = [t for t in [dst] + srcs if t._vec is not None]
    if indirect:
        _dma_compute_indirect(api, dst, srcs, unique_indices, oob_mode)
        return _result(dst, False)
    if len(srcs) <= _DMA_COMPUTE_SRCS:
        _emit_dma_compute(dst, srcs)
        return _result(dst, False)
    # Longer lists: partial sums in a kernel-private fp32 tensor (each source cast to fp32 and
    # added in order, exactly as one pass would).
    acc = nl.ndarray(dst.shape, nl.float32, buffer=nl.hbm, name="dma_compute_acc")
    rest = srcs
    first = True
    while rest:
        take = _DMA_COMPUTE_SRCS - (0 if first else 1)
        chunk, rest = rest[:take], rest[take:]
        _emit_dma_compute(dst if not rest else acc, ([] if first else [acc]) + chunk)
        first = False
    return _result(dst, False)


def _emit_dma_compute(dst: NkiTensor, srcs: list) -> None:
    emit("DmaCompute", "dma", {"dst": dst, **{f"src{i}": t for i, t in enumerate(srcs)}})


def _dma_compute_indirect(api: str, dst: NkiTensor, srcs: list, unique_indices, oob_mode) -> None:
    if len(srcs) != 2:
        raise NotImplementedError(
            f"{api}: a read-modify-write through an indirect operand (ap(vector_offset=)) takes exactly "
            f"2 sources, got {len(srcs)}"
        )
    if not unique_indices:
        raise NotImplementedError(f"{api}: unique_indices=False (repeated indices) is not supported by the hardware yet")
    if dst._vec is not None:  # scatter-add: dst(HBM)[idx] += src
        same = [i for i, t in enumerate(srcs) if t._same_access(dst)]
        if not same:
            raise NkiValidationError(
                f"{api}: dst is indirect but no source is the same view of '{dst.name}' "
                "[rule: a scatter-add reads and writes dst: one source is dst itself]"
            )
        data = srcs[1 - same[0]]
        if data._vec is not None:
            raise NotImplementedError(f"{api}: only one of the tensors can be indirect")
        emit(
            "DmaComputeIndirect",
            "dma",
            {"dst": _DirectAp(dst), "src": data, "index": dst._vec[0]},
            {"indirect": 1, "scale": dst._vec[1], "oob_mode": int(oob_mode)},
        )
        return
    ind = [i for i, t in enumerate(srcs) if t._vec is not None]
    if len(ind) != 1:
        raise NotImplementedError(f"{api}: only one of the tensors can be indirect")
    other = srcs[1 - ind[0]]
    if not other._same_access(dst):
        raise NkiValidationError(
            f"{api}: a gather-add reads an indirect source and dst itself; the other source "
            f"'{other.name}' is not dst [rule: dst = dst + src(HBM)[indices]]"
        )
    src = srcs[ind[0]]
    emit(
        "DmaComputeIndirect",
        "dma",
        {"dst": dst, "src": _DirectAp(src), "index": src._vec[0]},
        {"indirect": 0, "scale": src._vec[1], "oob_mode": int(oob_mode)},
    )


@_old_style("src", tensors=("src",))
def dma_transpose(
    dst: NkiTensor = None,
    src: NkiTensor = None,
    axes=None,
    priority=None,
    dge_mode=dge_mode.unknown,
    oob_mode=oob_mode.error,
    name=None,
    **kwargs,
):
    """A DMA that permutes dimensions while copying (2-D: swap; 3-D: [2,1,0]; 4-D: [3,1,2,0])."""
    if src.dtype.itemsize not in (2, 4):
        raise NkiValidationError(
            f"nki.isa.dma_transpose: dtype {src.dtype} [rule: DMA transpose moves 2- or 4-byte elements]"
        )
    if axes is None:
        axes = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(src.ndim)
        if axes is None:
            raise ValueError(f"dma_transpose: give axes for a {src.ndim}-D source")
    if getattr(src, "_vec", None) is not None:
        return _dma_transpose_indirect(dst, src, tuple(axes), oob_mode)
    if src.on_chip:
        # An SBUF source (the docs' SB->SB example): our DMA model walks on-chip partitions in
        # order only, so the tile goes through a kernel-private HBM copy first (the same bits;
        # costed as two DMAs).
        scratch = nl.ndarray(src.shape, src.dtype, buffer=nl.private_hbm)
        dma_copy(dst=scratch, src=src)
        src = scratch
    view = src._view([src.shape[a] for a in axes], [src.strides[a] for a in axes])
    dst, alloc = _dst(dst, view.shape, src.dtype)
    emit(
        "DmaCopy",
        "dma",
        {"dst": dst, "src": view},
        {"oob_mode": int(oob_mode), "dge_mode": int(dge_mode), "is_transpose": True},
    )
    return _result(dst, alloc)


def _dma_transpose_indirect(dst: NkiTensor, src: NkiTensor, axes: tuple, oob_mode):
    """dma_transpose of a gathered src (ap(vector_offset=)): entry i of src's first dimension
    comes from index[i] * scale elements from its base and lands where the transpose moves
    that dimension (position axes.index(0) of dst)."""
    if dst is None:
        raise TypeError("dma_transpose: an indirect (vector_offset) source needs dst=")
    if getattr(dst, "_vec", None) is not None:
        raise NotImplementedError("dma_transpose: an indirect (vector_offset) dst is not supported")
    if sorted(axes) != list(range(src.ndim)):
        raise ValueError(f"dma_transpose: axes {axes} is not a permutation of {src.ndim} dimensions")
    index, scale = src._vec
    direct = _DirectAp(src)._t
    view = NkiTensor(
        direct._b, [src.shape[a] for a in axes], src.dtype, direct.offset, [direct.strides[a] for a in axes]
    )
    attrs = {"indirect": 0, "scale": scale, "oob_mode": int(oob_mode), "dim": axes.index(0)}
    emit("DmaIndirect", "dma", {"dst": dst, "src": view, "index": index}, attrs)
    return _result(dst, False)


@_old_style("src", tensors=("src",))
def tensor_copy(
    dst: NkiTensor = None, src: NkiTensor = None, engine=engine.unknown, name=None, dtype=None, **kwargs
):
    """Copies an on-chip tile (bit-exact when dtypes match, else through fp32)."""
    dst, alloc = _dst(dst, src.shape, dtype or src.dtype)
    emit("TensorCopy", _engine(engine, "vector"), {"dst": dst, "src": src})
    return _result(dst, alloc)


def memset(
    dst: NkiTensor = None, value=0, engine=engine.unknown, name=None, dtype=None, shape=None, **kwargs
):
    """Fills dst with a constant."""
    if isinstance(dst, (tuple, list)):  # old style memset(shape, value, dtype)
        shape, dst = dst, None
    if dst is None:
        dst = nl.ndarray(shape, dtype, nl.sbuf)
        alloc = True
    else:
        alloc = False
    emit("Memset", _engine(engine, "vector"), {"dst": dst}, {"value": float(value)})
    return _result(dst, alloc)


def tensor_copy_predicated(dst: NkiTensor, src, predicate: NkiTensor, reverse_pred=False, name=None):
    """dst = predicate ? src : dst, elementwise (src may be a scalar)."""
    s, imm = (src, 0.0) if isinstance(src, NkiTensor) else (None, float(src))
    emit(
        "CopyPredicated",
        "vector",
        {"dst": dst, "src": s, "predicate": predicate},
        {"reverse_pred": reverse_pred, "src_imm": imm},
    )
    return NkiInstruction(_tracer.current().program.size() - 1)


# ---------------------------------------------------------------------------------------------
# Tensor Engine


# perf_mode spelled as a string: the real enum's values, and the older releases' name of the
# NeuronCore-v3 double-row FP8 mode.
_PERF_MODES = {"none": matmul_perf_mode.none, "double_row": matmul_perf_mode.double_row,
               "double_row_gen3": matmul_perf_mode.double_row}


def _perf_mode(m) -> matmul_perf_mode:
    if isinstance(m, str):
        if m not in _PERF_MODES:
            raise ValueError(f"nc_matmul: perf_mode={m!r}; one of {sorted(_PERF_MODES)} or nisa.matmul_perf_mode")
        return _PERF_MODES[m]
    return matmul_perf_mode(int(m))


@_old_style("stationary", "moving", tensors=("stationary", "moving"))
def nc_matmul(
    dst: NkiTensor = None,
    stationary: NkiTensor = None,
    moving: NkiTensor = None,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    accumulate=None,
    tile_position=(),
    tile_size=(),
    perf_mode=matmul_perf_mode.none,
    name=None,
    **kwargs,
):
    """dst (PSUM, fp32) = stationary.T @ moving, contracting over the partition dimension.
    accumulate=None overwrites on the first write to a PSUM region and adds afterwards."""
    if stationary is None or moving is None:
        raise TypeError("nc_matmul: stationary and moving are required")
    if dst is None:
        # The older returning call: a PSUM operand (an old-style nc_transpose's result) is
        # copied to SBUF on the Vector Engine first, as the older compiler legalized it; the
        # newer call (dst=) requires SBUF operands (checked).
        stationary = nl._as_sbuf(stationary) if stationary.buffer == nl.psum else stationary
        moving = nl._as_sbuf(moving) if moving.buffer == nl.psum else moving
    double = _perf_mode(perf_mode) == matmul_perf_mode.double_row
    m = (stationary.size // stationary.shape[0]) // (2 if double else 1)
    n = (moving.size // moving.shape[0]) // (2 if double else 1)
    out_dt = (
        stationary.dtype if (is_transpose and stationary.dtype in (nl.bfloat16, nl.float16)) else nl.float32
    )
    dst, alloc = _dst(dst, (m, n), out_dt, nl.psum)
    dst_v = dst if dst.ndim == 2 else dst.reshape((dst.shape[0], dst.size // dst.shape[0]))
    if accumulate is None:
        acc = _psum_accumulate(dst_v) if dst.buffer == nl.psum else False
    else:
        acc = bool(accumulate)
        _psum_accumulate(dst_v) if dst.buffer == nl.psum else None
    emit(
        "Matmul",
        "tensor",
        {"dst": dst_v, "stationary": stationary, "moving": moving},
        {"accumulate": acc, "is_transpose": is_transpose, "perf_mode": int(double)},
    )
    if alloc:  # an old-style result tile: `psum[...] += nc_matmul(...)` may accumulate it in place
        tr = _tracer.current()
        tr.fresh_matmul = (
            dst._b,
            tr.program.size() - 1,
            dict(stationary=stationary, moving=moving, is_transpose=is_transpose, perf_mode=perf_mode),
        )
    return _result(dst, alloc)


def _accumulate_fresh_matmul(dst: NkiTensor, tile: NkiTensor) -> bool:
    """``dst += tile`` where dst is in PSUM and tile is the result of the nc_matmul just traced
    (``res_psum[...] += nisa.nc_matmul(a, b)``): the matmul accumulates into dst itself, as the
    real compiler lowers it (the first write of a never-written PSUM tile overwrites, later ones
    add), instead of a matmul into a new tile plus an add. Returns False when it does not apply."""
    tr = _tracer.active()
    fresh = getattr(tr, "fresh_matmul", None) if tr is not None else None
    if fresh is None or fresh[0] is not tile._b or fresh[1] != tr.program.size() - 1:
        return False
    if dst.buffer != nl.psum or dst.dtype != nl.float32 or tile._offset != 0 or tile.dtype != nl.float32:
        return False
    if dst.shape[0] != tile.shape[0] or dst.size != tile.size or getattr(tr, "suppress", False):
        return False
    tr.fresh_matmul = None
    tr.program.pop_last()
    tr.emitted -= 1
    nc_matmul(dst=dst, accumulate=tr.program.buffer_written(dst._b.id), **fresh[2])
    return True


@_old_style("data", tensors=("data",))
def nc_transpose(dst: NkiTensor = None, data: NkiTensor = None, engine=engine.unknown, name=None, **kwargs):
    """Swaps the partition and free dimensions: Tensor Engine (up to 128x128, SBUF -> PSUM) or
    Vector Engine (up to 32x32)."""
    f = data.size // data.shape[0]
    d2 = data if data.ndim == 2 else data.reshape((data.shape[0], f))
    if engine in (None, globals()["engine"].unknown):
        small = data.shape[0] <= 32 and f <= 32
        eng = "vector" if (small and (dst is None or dst.buffer == nl.sbuf)) else "tensor"
    else:
        eng = _engine(engine, "tensor")
    out_dt = data.dtype if eng == "vector" or data.dtype in (nl.bfloat16, nl.float16) else nl.float32
    dst, alloc = _dst(
        dst, (f, data.shape[0]), kwargs.get("dtype") or out_dt, nl.psum if eng == "tensor" else nl.sbuf
    )
    emit("Transpose", eng, {"dst": dst, "data": d2})
    return _result(dst, alloc)


# ---------------------------------------------------------------------------------------------
# Vector / Scalar / GpSimd Engine


@_old_style("data1", "data2", "op", tensors=("data1", "data2"))
def tensor_tensor(
    dst: NkiTensor = None,
    data1: NkiTensor = None,
    data2: NkiTensor = None,
    op=None,
    engine=engine.unknown,
    name=None,
    dtype=None,
    **kwargs,
):
    """dst = data1 op data2, elementwise (fp32 math; bitvec operators on integer bits)."""
    code = _alu(op)
    out_dt = dtype or _dt.promote(data1.dtype, data2.dtype)
    dst, alloc = _dst(dst, data1.shape, out_dt)
    default = "vector"
    if (
        code == _tracer.alu_code("power")
        or all(_dt.to_dtype(t.dtype) in (nl.int32, nl.uint32) for t in (dst, data1, data2))
        and not any(t.buffer == nl.psum for t in (dst, data1, data2))
    ):
        default = "gpsimd"
    emit("TensorTensor", _engine(engine, default), {"dst": dst, "data1": data1, "data2": data2}, {"op": code})
    return _result(dst, alloc)


@_old_style("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1", tensors=("data",))
def tensor_scalar(
    dst: NkiTensor = None,
    data: NkiTensor = None,
    op0=None,
    operand0=None,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    name=None,
    dtype=None,
    **kwargs,
):
    """dst = (data op0 operand0) op1 operand1; operands are scalars or [partition, 1] vectors
    broadcast along the free dimension."""
    v0, i0 = _scalar_or_vec(operand0)
    v1, i1 = _scalar_or_vec(operand1)
    dst, alloc = _dst(dst, data.shape, dtype or data.dtype)
    emit(
        "TensorScalar",
        _engine(engine, "vector"),
        {"dst": dst, "data": data, "operand0": v0, "operand1": v1},
        {
            "op0": _alu(op0, "op0"),
            "op1": _alu(op1, "op1"),
            "reverse0": reverse0,
            "reverse1": reverse1,
            "imm0": i0,
            "imm1": i1,
        },
    )
    return _result(dst, alloc)


@_old_style(tensors=("data", "operand1"))
def scalar_tensor_tensor(
    dst: NkiTensor = None,
    data: NkiTensor = None,
    op0=None,
    operand0=None,
    op1=None,
    operand1: NkiTensor = None,
    reverse0=False,
    reverse1=False,
    name=None,
    dtype=None,
    **kwargs,
):
    """dst = (data op0 operand0) op1 operand1 with operand1 a tile."""
    v0, i0 = _scalar_or_vec(operand0)
    dst, alloc = _dst(dst, data.shape, dtype or data.dtype)
    emit(
        "ScalarTensorTensor",
        "vector",
        {"dst": dst, "data": data, "operand0": v0, "operand1": operand1},
        {
            "op0": _alu(op0, "op0"),
            "op1": _alu(op1, "op1"),
            "reverse0": reverse0,
            "reverse1": reverse1,
            "imm0": i0,
        },
    )
    return _result(dst, alloc)


def _axis_mask(axis, ndim) -> int:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    m = 0
    for a in axes:
        a = a + ndim if a < 0 else a
        m |= 1 << a
    return m


@_old_style("op", "data", "axis", tensors=("data",))
def tensor_reduce(
    dst: NkiTensor = None,
    op=None,
    data: NkiTensor = None,
    axis=None,
    negate=False,
    keepdims=False,
    name=None,
    dtype=None,
    **kwargs,
):
    """Reduces the trailing free axes `axis` of data (never the partition axis)."""
    if axis is None:
        raise TypeError("tensor_reduce: axis is required")
    mask = _axis_mask(axis, data.ndim)
    if dst is None:
        kept = tuple(
            1 if (mask >> d) & 1 else n for d, n in enumerate(data.shape) if keepdims or not (mask >> d) & 1
        )
        dst, alloc = _dst(None, kept, dtype or data.dtype)
    else:
        alloc = False
    emit(
        "TensorReduce",
        "vector",
        {"dst": dst, "data": data},
        {"op": _alu(op), "axis_mask": mask, "negate": negate},
    )
    return _result(dst, alloc)


@_old_style("op", "data", tensors=("data",))
def tensor_partition_reduce(
    dst: NkiTensor = None, op=None, data: NkiTensor = None, name=None, dtype=None, **kwargs
):
    """Reduces across partitions (GpSimd Engine): dst[0, :] = op over p of data[p, :]."""
    dst, alloc = _dst(dst, (1,) + tuple(data.shape[1:]), dtype or data.dtype)
    emit("PartitionReduce", "gpsimd", {"dst": dst, "data": data}, {"op": _alu(op)})
    return _result(dst, alloc)


@_old_style("op", "data", tensors=("data",))
def activation(
    dst: NkiTensor = None,
    op=None,
    data: NkiTensor = None,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res: NkiTensor = None,
    reduce_cmd=reduce_cmd.idle,
    engine=engine.unknown,
    name=None,
    dtype=None,
    **kwargs,
):
    """Scalar Engine: dst = op(data * scale + bias), with an optional sum of the results along
    the free dimension into reduce_res (reduce_cmd controls the reduction registers; passing
    reduce_res with the default idle command resets and reduces)."""
    bvec, bimm = _scalar_or_vec(bias)
    svec, simm = _scalar_or_vec(scale)
    if svec is None and scale is None:
        simm = 1.0
    dst, alloc = _dst(dst, data.shape, dtype or data.dtype)
    rcmd = int(reduce_cmd)
    if reduce_res is not None and rcmd == reduce_cmd.idle:
        rcmd = reduce_cmd.reset_reduce
    rop = (
        _alu(reduce_op, "reduce_op")
        if reduce_op is not None
        else (_tracer.alu_code("add") if reduce_res is not None else -1)
    )
    rres = (
        reduce_res
        if reduce_res is None or reduce_res.ndim == 2
        else reduce_res._view((reduce_res.shape[0], 1), (reduce_res.strides[0], 1))
    )
    emit(
        "Activation",
        _engine(engine, "scalar"),
        {"dst": dst, "data": data, "bias": bvec, "scale": svec, "reduce_res": rres},
        {"op": _act(op), "reduce_op": rop, "reduce_cmd": rcmd, "scale_imm": simm, "bias_imm": bimm},
    )
    return _result(dst, alloc)


@_old_style("op", "data", tensors=("data",))
def activation_reduce(
    dst: NkiTensor = None,
    op=None,
    data: NkiTensor = None,
    reduce_op=None,
    reduce_res: NkiTensor = None,
    bias=None,
    scale=1.0,
    name=None,
    **kwargs,
):
    """activation + reduction of the results into reduce_res (reset_reduce)."""
    return activation(
        dst=dst,
        op=op,
        data=data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        reduce_cmd=reduce_cmd.reset_reduce,
        **kwargs,
    )


@_old_style("data", tensors=("data",))
def reciprocal(
    dst: NkiTensor = None, data: NkiTensor = None, name=None, engine=engine.unknown, dtype=None, **kwargs
):
    """dst = 1 / data (Vector Engine for small tiles, Scalar Engine for large ones)."""
    dst, alloc = _dst(dst, data.shape, dtype or data.dtype)
    f = data.size // data.shape[0]
    emit("Reciprocal", _engine(engine, "vector" if f < 64 else "scalar"), {"dst": dst, "data": data})
    return _result(dst, alloc)


@_old_style("data0", "data1", "initial", "op0", "op1", "reverse0", "reverse1", tensors=("data0", "data1"))
def tensor_tensor_scan(
    dst: NkiTensor = None,
    data0: NkiTensor = None,
    data1: NkiTensor = None,
    initial=0.0,
    op0=None,
    op1=None,
    reverse0=False,
    reverse1=False,
    name=None,
    dtype=None,
    **kwargs,
):
    """Per partition: r[0] = (data0[0] op0 initial) op1 data1[0]; r[i] = (data0[i] op0 r[i-1]) op1 data1[i]."""
    ivec, iimm = _scalar_or_vec(initial)
    dst, alloc = _dst(dst, data0.shape, dtype or _dt.promote(data0.dtype, data1.dtype))
    emit(
        "TensorTensorScan",
        "vector",
        {"dst": dst, "data0": data0, "data1": data1, "initial": ivec},
        {
            "op0": _alu(op0, "op0"),
            "op1": _alu(op1, "op1"),
            "reverse0": reverse0,
            "reverse1": reverse1,
            "initial_imm": iimm,
        },
    )
    return _result(dst, alloc)


@_old_style(tensors=("data",))
def tensor_scalar_reduce(
    dst: NkiTensor = None,
    data: NkiTensor = None,
    op0=None,
    operand0=None,
    reduce_op=None,
    reduce_res: NkiTensor = None,
    reverse0=False,
    reduce_cmd=reduce_cmd.reset_reduce,
    reduce_init=None,
    reduce_res_negate=False,
    name=None,
    dtype=None,
    **kwargs,
):
    """tensor_scalar with one operator plus a reduction of the results into reduce_res."""
    if reduce_res is None:
        return tensor_scalar(dst=dst, data=data, op0=op0, operand0=operand0, reverse0=reverse0, dtype=dtype)
    v0, i0 = _scalar_or_vec(operand0)
    dst, alloc = _dst(dst, data.shape, dtype or data.dtype)
    rres = (
        reduce_res
        if reduce_res.ndim == 2
        else reduce_res._view((reduce_res.shape[0], 1), (reduce_res.strides[0], 1))
    )
    emit(
        "TensorScalarReduce",
        "vector",
        {"dst": dst, "data": data, "operand0": v0, "reduce_res": rres},
        {
            "op0": _alu(op0, "op0"),
            "reduce_op": _alu(reduce_op, "reduce_op"),
            "reverse0": reverse0,
            "negate": reduce_res_negate,
            "imm0": i0,
        },
    )
    return _result(dst, alloc)


def _pattern_attrs(pattern) -> dict:
    """The pattern attributes of iota / affine_select: up to 4 [step, num] pairs."""
    pattern = [tuple(int(v) for v in p) for p in pattern]
    if not 1 <= len(pattern) <= 4 or any(len(p) != 2 for p in pattern):
        raise ValueError(f"pattern must be 1 to 4 [step, num] pairs, got {pattern!r}")
    flat = [v for p in pattern for v in p] + [0, 0] * (4 - len(pattern))
    return {"pattern_dims": len(pattern), "pattern": flat}


def _expr_pattern(expr: IndexExpr, ndim: int, shape=None):
    """Old-style affine index expression -> (pattern, channel_multiplier, offset); `shape` gives
    the sizes of axes the expression does not use (else 1)."""
    cm = 0
    axes = {}
    for v, c in expr.terms.items():
        if v.axis == 0:
            cm += c
        else:
            axes[v.axis] = (c, v.size)
    pattern = [
        [axes.get(a, (0, 1))[0], axes[a][1] if a in axes else (shape[a] if shape else 1)]
        for a in range(1, max(ndim, 2))
    ]
    return pattern, cm, expr.const


def iota(
    dst: NkiTensor = None, pattern=None, offset=0, channel_multiplier=0, name=None, dtype=None, **kwargs
):
    """GpSimd: dst[p, ...] = offset + p * channel_multiplier + sum(index * step) over `pattern`."""
    if isinstance(dst, IndexExpr) or isinstance(pattern, IndexExpr):  # old style iota(expr, dtype)
        expr = dst if isinstance(dst, IndexExpr) else pattern
        nd = max([v.ndim for v in expr.terms] or [2])
        shape = [1] * nd
        for v in expr.terms:
            shape[v.axis] = v.size
        grid = next((v.grid for v in expr.terms if v.grid is not None), None)
        if grid is not None and len(grid) == nd:  # nl.mgrid grids are dense: the whole grid's shape
            shape = list(grid)
        pattern, channel_multiplier, offset = _expr_pattern(expr, nd, shape)
        dst = nl.ndarray(tuple(shape), dtype or kwargs.get("dtype") or nl.int32, nl.sbuf)
        alloc = True
    else:
        alloc = False
    attrs = _pattern_attrs(pattern)
    attrs.update(offset=int(offset), channel_multiplier=int(channel_multiplier))
    emit("Iota", "gpsimd", {"dst": dst}, attrs)
    return _result(dst, alloc)


_CMP_NAMES = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}


def affine_select(
    dst: NkiTensor = None,
    pattern=None,
    channel_multiplier=0,
    on_true_tile: NkiTensor = None,
    on_false_value=0.0,
    cmp_op=None,
    offset=0,
    name=None,
    pred=None,
    dtype=None,
    **kwargs,
):
    """GpSimd: dst = cmp_op(affine_value, 0) ? on_true_tile : on_false_value, where
    affine_value = offset + p * channel_multiplier + sum(index * step) over `pattern`."""
    mask = kwargs.pop("mask", None)
    old = isinstance(pattern, Mask) or pred is not None or isinstance(dst, Mask)
    if old:
        m = pred if pred is not None else (pattern if isinstance(pattern, Mask) else dst)
        if len(m.preds) != 1:
            raise ValueError("affine_select: the old-style predicate must be a single comparison")
        expr, op = m.preds[0]
        src = on_true_tile
        pattern, channel_multiplier, offset = _expr_pattern(expr, src.ndim, src.shape)
        cmp_op = nl.__dict__[_CMP_NAMES[op]]
        dst = None
    elif mask is not None:
        raise TypeError("affine_select: mask= belongs to the older call affine_select(pred, on_true_tile, ...)")
    if on_true_tile is None:
        raise TypeError("affine_select: on_true_tile is required")
    dst, alloc = _dst(dst, on_true_tile.shape, dtype or on_true_tile.dtype)
    if old:
        if isinstance(mask, bool) and not mask:  # masked off at compile time: allocated, not written
            dst._mask = False
            return dst
        if mask is not None and not isinstance(mask, bool):
            # The mask restricts the tiles to a sub-range; the predicate keeps its grid indices:
            # the sub-range's origin moves into the offset and its extents into the pattern.
            ranges = mask.axis_ranges()
            r = nl._apply_mask(mask, dst, on_true_tile)
            if r is None:
                dst._mask = False
                return dst
            out, on_true_tile = r
            if on_true_tile.buffer == nl.psum:
                on_true_tile = nl._as_sbuf(on_true_tile)
            for axis, (lo, hi) in ranges.items():
                if axis == 0:
                    offset += lo * channel_multiplier
                else:
                    offset += lo * pattern[axis - 1][0]
                    pattern[axis - 1][1] = hi - lo + 1
            _affine_select_emit(out, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset)
            dst._mask = mask
            return dst
        if on_true_tile.buffer == nl.psum:
            # The older compiler legalized a PSUM operand (the GpSimd Engine reads SBUF only)
            # with a copy to SBUF on the Vector Engine; the newer call requires SBUF (checked).
            on_true_tile = nl._as_sbuf(on_true_tile)
    _affine_select_emit(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset)
    return _result(dst, alloc)


def _affine_select_emit(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset):
    cmp = _alu(cmp_op if cmp_op is not None else nl.equal, "cmp_op")
    attrs = _pattern_attrs(pattern)
    attrs.update(
        offset=int(offset),
        channel_multiplier=int(channel_multiplier),
        cmp_op=cmp,
        on_false_value=float(on_false_value),
    )
    emit("AffineSelect", "gpsimd", {"dst": dst, "on_true_tile": on_true_tile}, attrs)


@_old_style(tensors=("predicate", "on_true"))
def select_reduce(
    dst: NkiTensor = None,
    predicate: NkiTensor = None,
    on_true: NkiTensor = None,
    on_false=0.0,
    reduce_res: NkiTensor = None,
    reduce_cmd=reduce_cmd.idle,
    reduce_op=None,
    reverse_pred=False,
    name=None,
    **kwargs,
):
    """dst = predicate ? on_true : on_false, optionally max-reducing the result into reduce_res."""
    fvec, fimm = _scalar_or_vec(on_false)
    dst, alloc = _dst(dst, on_true.shape, on_true.dtype)
    emit(
        "SelectReduce",
        "vector",
        {"dst": dst, "predicate": predicate, "on_true": on_true, "on_false": fvec, "reduce_res": reduce_res},
        {
            "reduce_op": _alu(reduce_op if reduce_op is not None else nl.maximum, "reduce_op"),
            "reduce_cmd": int(reduce_cmd),
            "reverse_pred": reverse_pred,
            "on_false_imm": fimm,
        },
    )
    return _result(dst, alloc)


@_old_style(tensors=("src",))
def tensor_scalar_cumulative(
    dst: NkiTensor = None,
    src: NkiTensor = None,
    op0=None,
    op1=None,
    imm0=None,
    imm1=None,
    reduce_cmd=reduce_cmd.idle,
    reverse0=False,
    name=None,
    **kwargs,
):
    """Per partition: reg = op1(src[i] op0 imm0, reg); dst[i] = reg. reduce_cmd reset_reduce
    starts from the identity of op1, load_reduce from imm1, reduce continues the Vector
    Engine's accumulator."""
    v0, i0 = _scalar_or_vec(imm0)
    v1, i1 = _scalar_or_vec(imm1)
    dst, alloc = _dst(dst, src.shape, kwargs.get("dtype") or src.dtype)
    emit(
        "TensorScalarCumulative",
        "vector",
        {"dst": dst, "src": src, "imm0_vector": v0, "imm1_vector": v1},
        {
            "op0": _alu(op0, "op0"),
            "op1": _alu(op1, "op1"),
            "reduce_cmd": int(reduce_cmd),
            "reverse0": reverse0,
            "imm0": i0,
            "imm1": i1,
        },
    )
    return _result(dst, alloc)


@_old_style(tensors=("on_true_tile",))
def range_select(
    dst: NkiTensor = None,
    on_true_tile: NkiTensor = None,
    comp_op0=None,
    comp_op1=None,
    bound0: NkiTensor = None,
    bound1: NkiTensor = None,
    reduce_cmd=reduce_cmd.reset_reduce,
    reduce_res: NkiTensor = None,
    reduce_op=None,
    range_start=0,
    on_false_value=-3.4028234663852886e38,
    name=None,
    **kwargs,
):
    """dst[p, i] = on_true_tile[p, i] if comp_op0(i + range_start, bound0[p]) and
    comp_op1(i + range_start, bound1[p]) else on_false_value (default: the most negative fp32),
    with an optional max-reduction of the result into reduce_res (NeuronCore-v3+)."""
    b0, _ = _scalar_or_vec(bound0)
    b1, _ = _scalar_or_vec(bound1)
    if b0 is None or b1 is None:
        raise TypeError("range_select: bound0 and bound1 are [partition, 1] tiles")
    dst, alloc = _dst(dst, on_true_tile.shape, kwargs.get("dtype") or on_true_tile.dtype)
    rres = reduce_res
    if rres is not None and rres.ndim != 2:
        rres = rres._view((rres.shape[0], 1), (rres.strides[0], 1))
    emit(
        "RangeSelect",
        "vector",
        {"dst": dst, "on_true_tile": on_true_tile, "bound0": b0, "bound1": b1, "reduce_res": rres},
        {
            "comp_op0": _alu(comp_op0, "comp_op0"),
            "comp_op1": _alu(comp_op1, "comp_op1"),
            "reduce_op": _alu(reduce_op if reduce_op is not None else nl.maximum, "reduce_op"),
            "reduce_cmd": int(reduce_cmd),
            "range_start": float(range_start),
            "on_false_value": float(on_false_value),
        },
    )
    return _result(dst, alloc)


@_old_style("data", tensors=("data",))
def bn_stats(dst: NkiTensor = None, data: NkiTensor = None, name=None, dtype=None, **kwargs):
    """Per partition (count, mean, var*count) of the even and of the odd elements (6 values)."""
    dst, alloc = _dst(dst, (data.shape[0], 6), dtype or nl.float32)
    emit("BnStats", "vector", {"dst": dst, "data": data})
    return _result(dst, alloc)


@_old_style("data", tensors=("data",))
def bn_aggr(dst: NkiTensor = None, data: NkiTensor = None, name=None, dtype=None, **kwargs):
    """Aggregates bn_stats outputs into (mean, variance) per partition."""
    dst, alloc = _dst(dst, (data.shape[0], 2), dtype or nl.float32)
    emit("BnAggr", "vector", {"dst": dst, "data": data})
    return _result(dst, alloc)


@_old_style("src", tensors=("src",))
def nonzero_with_count(
    dst: NkiTensor = None, src: NkiTensor = None, index_offset=0, padding_val=-1, name=None, **kwargs
):
    """GpSimd (NeuronCore-v3+): for partitions 0, 16, ..., 112 of ``src`` [P, T] (float32 or
    int32), ``dst`` [P, T + 1] int32 gets the indices of the nonzero elements plus
    ``index_offset``, then ``padding_val`` up to T, then the count. Other partitions of ``dst``
    are left unchanged (each of the eight GpSimd cores works on the first of its 16 partitions)."""
    if src is None:
        raise TypeError("nonzero_with_count(dst=, src=) needs src")
    dst, alloc = _dst(dst, (src.shape[0], src.shape[-1] + 1), nl.int32)
    emit(
        "NonzeroWithCount",
        "gpsimd",
        {"dst": dst, "src": src},
        {"index_offset": int(index_offset), "padding_val": int(padding_val)},
    )
    return _result(dst, alloc)


def nc_find_index8(dst: NkiTensor = None, data: NkiTensor = None, vals: NkiTensor = None, name=None, **kwargs):
    """Vector: dst[p, k] = index of the first occurrence of vals[p, k] in data[p] (free dims
    flattened), for the 8 values of each partition; dst is uint32 (default) or uint16. A value
    that does not occur is an error (undefined on the hardware)."""
    if data is None or vals is None:
        raise TypeError("nc_find_index8(dst=, data=, vals=) needs data and vals")
    dst, alloc = _dst(dst, (data.shape[0], 8), nl.uint32)
    emit("FindIndex8", "vector", {"dst": dst, "data": data, "vals": vals})
    return _result(dst, alloc)


def nc_match_replace8(
    dst: NkiTensor = None, data: NkiTensor = None, vals: NkiTensor = None, imm=0.0, dst_idx: NkiTensor = None,
    name=None, **kwargs
):
    """Vector: a copy of data in which the first occurrence of each of the 8 values of a
    partition (looked up in order, free dims flattened) is replaced by ``imm``; ``dst_idx``
    (optional) gets the matched indices. dst may be data. A value that does not occur is an
    error (undefined on the hardware)."""
    if data is None or vals is None:
        raise TypeError("nc_match_replace8(dst=, data=, vals=, imm=) needs data and vals")
    mask = kwargs.pop("mask", None)
    if mask is not None:  # the older mask=: it restricts data (and dst, of data's shape)
        kw = dict(dst=dst, data=data, vals=vals, imm=imm, dst_idx=dst_idx)
        return _masked(nc_match_replace8, kw, mask, ("data",))
    dst, alloc = _dst(dst, data.shape, data.dtype)
    emit("MatchReplace8", "vector", {"dst": dst, "data": data, "vals": vals, "dst_idx": dst_idx}, {"imm": float(imm)})
    return _result(dst, alloc)


def nc_n_gather(dst: NkiTensor = None, data: NkiTensor = None, indices: NkiTensor = None, name=None, **kwargs):
    """GpSimd: dst[p, j] = data[p, indices[p, j]] within each partition, the free dims of
    ``data`` flattened; ``indices`` is uint32, ``dst`` takes data's dtype and the shape
    [P, *indices free dims]. An index outside the partition's data is an error."""
    if data is None or indices is None:
        raise TypeError("nc_n_gather(dst=, data=, indices=) needs data and indices")
    dst, alloc = _dst(dst, (data.shape[0], *indices.shape[1:]), data.dtype)
    emit("NGather", "gpsimd", {"dst": dst, "data": data, "indices": indices})
    return _result(dst, alloc)


def local_gather(
    dst: NkiTensor = None,
    src_buffer: NkiTensor = None,
    index: NkiTensor = None,
    num_elem_per_idx=None,
    num_valid_indices=None,
    name=None,
    **kwargs,
):
    """GpSimd: each core (16 partitions) flattens its slice of the uint16 ``index`` partition
    first, keeps the first ``num_valid_indices`` (default: all of them), and every partition p of
    the core gets ``dst[p, j, e] = src_buffer[p, idx[j] + e]`` for e < ``num_elem_per_idx``
    (free dims of src_buffer flattened; indices count elements). ``dst`` takes src_buffer's dtype
    and the shape [P, num_valid_indices, num_elem_per_idx]. The older returning form
    ``local_gather(src_buffer, index, num_elem_per_idx, num_valid_indices)`` is accepted too."""
    if index is None or isinstance(index, int):
        # local_gather(src_buffer, index[, num_elem_per_idx[, num_valid_indices]]) returning dst.
        if num_valid_indices is None:
            num_valid_indices = num_elem_per_idx
        num_elem_per_idx = index
        dst, src_buffer, index = None, dst, src_buffer
    if not isinstance(src_buffer, NkiTensor) or not isinstance(index, NkiTensor):
        raise TypeError("local_gather(dst=, src_buffer=, index=) needs src_buffer and index tiles")
    P = src_buffer.shape[0]
    per_core = math.prod(index.shape) // max(1, index.shape[0] // 16)
    nv = per_core if num_valid_indices is None else int(num_valid_indices)
    ne = 1 if num_elem_per_idx is None else int(num_elem_per_idx)
    dst, alloc = _dst(dst, (P, nv, ne), src_buffer.dtype)
    emit(
        "LocalGather",
        "gpsimd",
        {"dst": dst, "src_buffer": src_buffer, "index": index},
        {"num_elem_per_idx": ne, "num_valid_indices": nv},
    )
    return _result(dst, alloc)


def sequence_bounds(dst: NkiTensor = None, segment_ids: NkiTensor = None, name=None, **kwargs):
    """GpSimd: for each element i of the one-partition ``segment_ids`` [1, n] (float32 or int32),
    ``dst[0, 0, i]`` is the first index and ``dst[0, 1, i]`` one past the last index of the run
    of equal ids containing i; padding elements (id 0) get n and -1. ``dst`` [1, 2, n] is float32
    or int32 (default: segment_ids' dtype). A negative id is an error."""
    if not isinstance(segment_ids, NkiTensor):
        raise TypeError("sequence_bounds(dst=, segment_ids=) needs a segment_ids tile")
    n = math.prod(segment_ids.shape[1:])
    dst, alloc = _dst(dst, (segment_ids.shape[0], 2, n), segment_ids.dtype)
    emit("SequenceBounds", "gpsimd", {"dst": dst, "segment_ids": segment_ids})
    return _result(dst, alloc)


def max8(dst: NkiTensor = None, src: NkiTensor = None, name=None, **kwargs):
    """The 8 largest values of each partition, descending (of the masked part of src with the
    older ``mask=``)."""
    mask = kwargs.pop("mask", None)
    dst, alloc = _dst(dst, (src.shape[0], 8), src.dtype)
    if mask is not None:
        r = nl._apply_mask(mask, src)
        if r is None:
            return _result(dst, alloc)
        (src,) = r
        if src.shape[0] != dst.shape[0]:
            dst = dst[0 : src.shape[0]]
    emit("Max8", "vector", {"dst": dst, "data": src})
    return _result(dst, alloc)


def nc_stream_shuffle(dst: NkiTensor = None, src: NkiTensor = None, shuffle_mask=None, name=None, **kwargs):
    """Moves partitions within each quadrant of 32: dst partition ``q*32 + i`` takes src partition
    ``q*32 + shuffle_mask[i]``; an entry of 255 leaves dst partition ``i`` unchanged. dst may be
    src (every source row is read before any is written)."""
    if dst is None or src is None or shuffle_mask is None:
        raise TypeError("nc_stream_shuffle(dst=, src=, shuffle_mask=) needs all three")
    mask = [int(m) for m in shuffle_mask]
    if len(mask) > 32:
        raise ValueError(f"nc_stream_shuffle: shuffle_mask has {len(mask)} entries, at most 32 (one quadrant)")
    mask += [255] * (32 - len(mask))
    bad = [m for m in mask if not (0 <= m < 32 or m == 255)]
    if bad:
        raise ValueError(f"nc_stream_shuffle: shuffle_mask entries are partitions 0..31 of the quadrant or 255 (unchanged), got {bad[0]}")
    slots = [0, 0, 0, 0]
    for i, m in enumerate(mask):
        slots[i // 8] |= (63 if m == 255 else m) << (6 * (i % 8))
    emit("StreamShuffle", "vector", {"dst": dst, "src": src}, {"mask": slots})


# ---------------------------------------------------------------------------------------------
# Registers


def register_alloc(x: int | None = None) -> VirtualRegister:
    tr = _tracer.current()
    r = VirtualRegister(tr.program.add_register())
    if x is not None:
        emit("RegMove", "sync", {}, {"dst": r.id, "src": -1, "imm": int(x)})
    return r


def register_move(dst: VirtualRegister, src) -> None:
    if isinstance(src, VirtualRegister):
        emit("RegMove", "sync", {}, {"dst": dst.id, "src": src.id, "imm": 0})
    else:
        emit("RegMove", "sync", {}, {"dst": dst.id, "src": -1, "imm": int(src)})


def register_load(dst: VirtualRegister, src: NkiTensor) -> None:
    emit("RegLoad", "sync", {"src": src}, {"reg": dst.id})


def register_store(dst: NkiTensor, src: VirtualRegister) -> None:
    emit("RegStore", "sync", {"dst": dst}, {"reg": src.id})


# ---------------------------------------------------------------------------------------------
# The NeuronCores of a logical core (LNC=2, ``kernel[2](...)``): the instances of a launch run
# at the same time, one per physical core, and meet here (rank = the instance's core,
# ``nl.program_id(0)`` within the logical core).


def core_barrier(data: NkiTensor, cores=(0, 1), engine=engine.gpsimd, name=None) -> None:
    """Waits until every core of `cores` has reached this barrier (the n-th barrier of a core
    meets the n-th of the others); `data` is the shared HBM tensor the cores synchronize on:
    its writes before the barrier are visible to every core after it."""
    ranks = [int(c) for c in (cores if isinstance(cores, (tuple, list)) else (cores,))]
    if not ranks or any(not 0 <= c < 2 for c in ranks):
        raise ValueError(f"core_barrier: cores {tuple(ranks)} must name cores 0 and/or 1 of the logical core")
    if not isinstance(data, NkiTensor):
        raise TypeError(f"core_barrier: data must be an HBM tensor, got {type(data).__name__}")
    emit("CoreBarrier", _engine(engine, "gpsimd"), {"data": data}, {"cores": sum(1 << c for c in set(ranks))})


def sendrecv(src: NkiTensor, dst: NkiTensor, send_to_rank, recv_from_rank, pipe_id=0, dma_engine=dma_engine.dma,
             name=None) -> None:
    """Sends `src` to the `dst` of core `send_to_rank` while receiving the `src` of core
    `recv_from_rank` into `dst` (SBUF or HBM tiles of the same shape and dtype on both cores);
    the n-th sendrecv of a core on `pipe_id` pairs with the n-th of its peer."""
    if not isinstance(src, NkiTensor) or not isinstance(dst, NkiTensor):
        raise TypeError("sendrecv: src and dst must be tiles (SBUF or HBM tensors)")
    emit(
        "SendRecv",
        "dma",
        {"dst": dst, "src": src},
        {
            "send_to_rank": int(send_to_rank),
            "recv_from_rank": int(recv_from_rank),
            "pipe_id": int(pipe_id),
            "dma_engine": 1 if dma_engine == _DmaEngine.gpsimd_dma else 0,
        },
    )


def topk(val_dst: NkiTensor = None, idx_dst: NkiTensor = None, src: NkiTensor = None, n=None, name=None):
    """GpSimd top-K per 16-partition core: src holds a snake of n bf16 values (element s at
    partition s % 16, column s // 16 of the core); the K largest (K = val_dst's free size) go to
    output snake positions 0..K-1 of val_dst (bf16, ascending) and idx_dst (uint32, their snake
    positions). Other elements of val_dst/idx_dst are left as they were."""
    if val_dst is None or idx_dst is None or src is None or n is None:
        raise TypeError("topk: val_dst, idx_dst, src and n are required")
    emit("TopK", "gpsimd", {"val_dst": val_dst, "idx_dst": idx_dst, "src": src}, {"n": int(n)})
    return NkiInstruction(_tracer.current().program.size() - 1)


# ---------------------------------------------------------------------------------------------
# Random numbers. Every compute lane (partition) of a NeuronCore has one XORWOW generator on the
# GpSimd Engine and four on the Vector Engine; their state belongs to the core and persists
# across the instructions of a launch (csrc/nki/exec_random.cpp, docs/nki.md "Random numbers").


def rng(dst: NkiTensor = None, engine=engine.vector, name=None, **kwargs):
    """32 random bits per element of `dst` (SBUF or PSUM; int8/int16/int32/uint8/uint16/uint32),
    truncated to its dtype (the low bits), from the engine's generators: Vector (the default; the
    only one on NeuronCore-v2) or GpSimd (NeuronCore-v3+, SBUF only)."""
    if not isinstance(dst, NkiTensor):
        raise TypeError("nki.isa.rng(dst=, engine=) needs a destination tile")
    emit("Rng", _engine(engine, "vector"), {"dst": dst})
    return _result(dst, False)


def rand2(dst: NkiTensor = None, min=None, max=None, name=None, **kwargs):
    """Uniform values in [min, max] (fp32: ``min + u * (max - min)`` with ``u`` the 24 high bits of
    a draw times 2^-24), converted to dst's dtype, on the Vector Engine (NeuronCore-v4+). `min` and
    `max` are scalars or [partition, 1] float32 tiles."""
    if not isinstance(dst, NkiTensor) or min is None or max is None:
        raise TypeError("nki.isa.rand2(dst=, min=, max=) needs a destination tile and both bounds")
    lo_v, lo = _scalar_or_vec(min)
    hi_v, hi = _scalar_or_vec(max)
    emit("Rand2", "vector", {"dst": dst, "min_vec": lo_v, "max_vec": hi_v}, {"min": lo, "max": hi})
    return _result(dst, False)


@_old_style("data", "prob", tensors=("data",))
def dropout(dst: NkiTensor = None, data: NkiTensor = None, prob=None, name=None, dtype=None, **kwargs):
    """Replaces each element of `data` by zero with probability `prob` (a scalar or a [partition, 1]
    tile: 0.0 keeps everything, 1.0 drops everything) on the Vector Engine; kept elements are
    copied unchanged (no 1 / (1 - prob) rescaling). dst has data's dtype. The older form
    ``dropout(data, prob, dtype=None, mask=None)`` returns a new tile (converted to `dtype`)."""
    if prob is None and isinstance(dst, NkiTensor) and isinstance(data, NkiTensor):
        dst, data, prob = None, dst, data  # old positional form dropout(data, prob_tile)
    if not isinstance(data, NkiTensor) or prob is None:
        raise TypeError("nki.isa.dropout(dst=, data=, prob=) needs a data tile and a probability")
    out_dt = _dt.to_dtype(dtype) if dtype is not None else _dt.to_dtype(data.dtype)
    res, alloc = _dst(dst, data.shape, out_dt)
    # The instruction writes data's dtype; a returned tile of another dtype is converted after it.
    convert = alloc and out_dt != _dt.to_dtype(data.dtype)
    target = nl.ndarray(res.shape, data.dtype, nl.sbuf) if convert else res
    pv, p = _scalar_or_vec(prob)
    emit("Dropout", "vector", {"dst": target, "data": data, "prob": pv}, {"prob_imm": p})
    if convert:
        emit("TensorCopy", "vector", {"dst": res, "src": target})
    return _result(res, alloc)


def set_rng_seed(src_seeds: NkiTensor = None, name=None, **kwargs):
    """Seeds the Vector Engine's generators of every lane from one 32-bit value: `src_seeds` is a
    [1, 1] int32/uint32/float32 tile in SBUF or PSUM (its bits are the seed)."""
    if not isinstance(src_seeds, NkiTensor):
        raise TypeError(
            f"nki.isa.set_rng_seed: src_seeds must be a [1, 1] tile in SBUF or PSUM, got {src_seeds!r} "
            "(e.g. nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf))"
        )
    emit("SetRngSeed", "vector", {"src_seeds": _one_element(src_seeds)})


def _one_element(t: NkiTensor) -> NkiTensor:
    """A [1, 1] view of a tensor of one element (a (1,) or () tile)."""
    if t.size != 1:
        return t
    return t if t.shape == (1, 1) else t._view((1, 1), (t.strides[0] if t.ndim else 1, 1))


def rand_set_state(src_seeds: NkiTensor = None, engine=engine.gpsimd, name=None, **kwargs):
    """Loads the generator state of the lanes of `src_seeds`' partitions (uint32 in SBUF): 6 words
    per lane on GpSimd (NeuronCore-v3+; x, y, z, w, v, d of its XORWOW generator), 24 on Vector
    (NeuronCore-v4+; its four generators one after the other)."""
    if not isinstance(src_seeds, NkiTensor):
        raise TypeError("nki.isa.rand_set_state(src_seeds=, engine=) needs a uint32 SBUF tile")
    emit("RandSetState", _engine(engine, "gpsimd"), {"src_seeds": src_seeds})


def rand_get_state(dst: NkiTensor = None, engine=engine.gpsimd, name=None, **kwargs):
    """Stores the generator state of the lanes of `dst`'s partitions (uint32; the layout of
    rand_set_state): GpSimd into SBUF (NeuronCore-v3+), Vector into SBUF or PSUM (v4+)."""
    if not isinstance(dst, NkiTensor):
        raise TypeError("nki.isa.rand_get_state(dst=, engine=) needs a uint32 destination tile")
    emit("RandGetState", _engine(engine, "gpsimd"), {"dst": dst})
    return _result(dst, False)


# ---------------------------------------------------------------------------------------------
# Instructions neuron-emu does not model yet: they exist, and calling one raises an error that
# names it (and, for NeuronCore-v4 instructions on an older target, the target), never an
# AttributeError and never a silently wrong result.

_V4_ONLY = ("nc_matmul_mx", "quantize_mx", "exponential", "activate2")
_NOT_MODELED: dict[str, str] = {}  # name -> what it is (none left)


def _unmodeled(name: str, what: str):
    def fn(*args, **kwargs):
        tr = _tracer.active()
        if name in _V4_ONLY and (tr.target["nc_version"] if tr is not None else get_nc_version()) < 4:
            gen = tr.target.get("platform", "trn2") if tr is not None else "this target"
            raise NotImplementedError(
                f"nki.isa.{name} is a NeuronCore-v4 (trn3) instruction; this kernel is traced for {gen} "
                "(set NEURON_PLATFORM_TARGET_OVERRIDE=trn3 or nki.jit(platform_target='trn3'))"
            )
        raise NotImplementedError(
            f"nki.isa.{name} ({what}) is not modeled by neuron-emu yet; see the compatibility table in docs/nki.md"
        )

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Not modeled by neuron-emu yet ({what}): calling it raises NotImplementedError."
    return fn


for _n, _what in list(_NOT_MODELED.items()) + [(n, "MX (microscaling) arithmetic") for n in _V4_ONLY]:
    globals()[_n] = _unmodeled(_n, _what)


def _mask_refused(fn):
    """The older ``mask=`` on an instruction that does not model it raises (never ignored)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs.get("mask") is not None:
            raise NotImplementedError(f"nki.isa.{fn.__name__}: mask= is not supported on this instruction")
        kwargs.pop("mask", None)
        return fn(*args, **kwargs)

    return wrapper


for _n in ("dma_compute", "memset", "iota", "nc_find_index8", "nc_n_gather", "local_gather",
           "sequence_bounds", "rng", "set_rng_seed", "rand_set_state", "rand_get_state"):
    globals()[_n] = _mask_refused(globals()[_n])


# ---------------------------------------------------------------------------------------------
# nki.isa.constants: the enums, as the real library imports them
# (``from nki.isa.constants import oob_mode, dge_mode``).

def _constants_module():
    import sys
    import types

    m = types.ModuleType("nki.isa.constants", "Enums of nki.isa instructions.")
    for n in ("engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine"):
        setattr(m, n, globals()[n])
    sys.modules[m.__name__] = m
    return m


constants = _constants_module()
