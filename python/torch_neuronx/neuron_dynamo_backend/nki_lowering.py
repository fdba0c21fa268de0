"""NKI custom ops (``torch_neuronx.nki_op``) as native nodes of compiled graphs.

At lowering time the op's body runs once more on fake tensors shaped like the node's inputs,
under a recorder that sees every tensor operation and every NKI kernel launch:

* kernel launches (``wrap_nki(k)(...)``, ``wrap_nki(k)[grid](...)``, direct ``@nki.jit`` calls)
  are recorded with their traced programs (one per grid instance) and which memory each HBM
  argument of each instance is: an op input, a buffer the body or a kernel allocated, or
  kernel-private scratch;
* allocations (``empty``/``zeros``/``full``/..._like), views, copies (``copy_``, ``clone``,
  ``.to(dtype)``, ``.contiguous()``) and fills are recorded as plan steps;
* anything else (arithmetic, reductions, ``.item()``, ...) makes the node unsupported: it runs
  eagerly between compiled parts exactly as before (graph split, logged).

The recording becomes a plan (csrc/compiler/nki_call.h): the node's inputs, its outputs (the
returned tensors, the new values of mutated arguments, one scratch buffer for everything else)
and the steps. The plan, with the programs' bytes, is the payload of one ``custom`` IR node with
target "nki", run by the native kernel inside the compiled program's stream task - so the NEFF
is self-contained and its cache key covers the kernels. In-place ops (``mutates_args``) arrive
functionalized as ``auto_functionalized_v2``: the mutated arguments' bases become outputs that
start as copies of the inputs (the compiler writes them in place when nothing else reads the
old values).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from typing import Any

import torch
import torch.fx
from nki import _deps
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _C
from .lowering import DTYPE, Lowering, Unsupported, V, _flatten, dtype_code, register_custom_lowering

log = logging.getLogger(__name__)

aten = torch.ops.aten
_ALIGN = 64
_INPUT, _OUTPUT, _SCRATCH = 0, 1, 2
_CACHE_KEY = "_neuron_nki_call"

_EMPTY = {
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.empty_strided.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
}
# Factories that also fill: op -> position of the fill value (None: the constant in _FILL_CONST).
_FILLED = {
    aten.zeros.default: None,
    aten.ones.default: None,
    aten.zeros_like.default: None,
    aten.ones_like.default: None,
    aten.new_zeros.default: None,
    aten.new_ones.default: None,
    aten.full.default: 1,
    aten.full_like.default: 1,
    aten.new_full.default: 2,
}
_FILL_CONST = {
    aten.zeros.default: 0,
    aten.zeros_like.default: 0,
    aten.new_zeros.default: 0,
    aten.ones.default: 1,
    aten.ones_like.default: 1,
    aten.new_ones.default: 1,
}
_VIEWS = {aten._unsafe_view.default, aten.alias.default, aten.lift_fresh.default}


def _metadata_ops() -> set:
    ops = set()
    for name in ("sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous",
                 "is_non_overlapping_and_dense", "_assert_tensor_metadata"):
        packet = getattr(aten, name, None)
        if packet is not None:
            ops.update(getattr(packet, o) for o in packet.overloads())
    for name in ("device", "layout"):
        packet = getattr(torch.ops.prim, name, None)
        if packet is not None:
            ops.update(getattr(packet, o) for o in packet.overloads())
    return ops


_METADATA = _metadata_ops()


def _contiguous(sizes, strides) -> bool:
    expect = 1
    for s, st in zip(reversed(sizes), reversed(strides)):
        if s != 1 and st != expect:
            return False
        expect *= s
    return True


def _contiguous_strides(sizes) -> list[int]:
    out, s = [], 1
    for n in reversed(sizes):
        out.append(s)
        s *= n
    return list(reversed(out))


class _Root:
    __slots__ = ("base_input", "device", "dtype", "index", "kind", "name", "nbytes", "numel", "offset")

    def __init__(self, kind: str, nbytes: int, name: str, dtype=None, numel=0, device=None):
        self.kind = kind  # "input" | "fresh" | "base" (new value of a mutated base) | "output"
        self.index = -1
        self.dtype = dtype
        self.numel = numel
        self.nbytes = nbytes
        self.name = name
        self.device = device
        self.base_input = -1  # "base": the input root it starts as a copy of
        self.offset = 0


class _Recording:
    """What an nki_op body did with fake tensors: memory roots and steps."""

    def __init__(self, op_name: str) -> None:
        self.op = op_name
        self.roots: list[_Root] = []
        self.by_storage: dict[StorageWeakRef, int] = {}
        self.keep: list[torch.Tensor] = []
        self.steps: list[tuple] = []
        self.programs: list[bytes] = []
        self._program_index: dict[bytes, int] = {}
        self._serialized: dict[int, int] = {}
        self.kernels: list = []
        self.kernel_deps: list = []  # per launch: the portable manifest of what its trace read
        self.device = None
        self.launches = 0

    # ---- memory -------------------------------------------------------------------------
    def add_root(self, t: torch.Tensor, kind: str, name: str) -> int:
        if self.device is None:
            self.device = t.device
        elif t.device != self.device:
            raise Unsupported(f"{self.op}: the body uses tensors on {self.device} and {t.device}")
        if t.dtype not in DTYPE:
            raise Unsupported(f"{self.op}: a tensor of dtype {t.dtype}")
        nbytes = int(t.untyped_storage().nbytes())
        r = _Root(kind, nbytes, name, t.dtype, t.numel(), t.device)
        self.roots.append(r)
        self.by_storage[StorageWeakRef(t.untyped_storage())] = len(self.roots) - 1
        self.keep.append(t)
        return len(self.roots) - 1

    def scratch(self, nbytes: int, name: str) -> int:
        self.roots.append(_Root("fresh", max(int(nbytes), 1), name))
        return len(self.roots) - 1

    def root_of(self, t: torch.Tensor) -> int:
        r = self.by_storage.get(StorageWeakRef(t.untyped_storage()))
        if r is None:
            raise Unsupported(f"{self.op}: the body uses a tensor that is neither an op input nor allocated in the body")
        return r

    def view(self, t: torch.Tensor) -> tuple:
        if t.dtype not in DTYPE:
            raise Unsupported(f"{self.op}: a tensor of dtype {t.dtype}")
        return (self.root_of(t), dtype_code(t.dtype), int(t.storage_offset()), list(t.shape), list(t.stride()))

    def full_view(self, root: int, dtype: torch.dtype, shape) -> tuple:
        return (root, dtype_code(dtype), 0, list(shape), _contiguous_strides(list(shape)))

    def written(self, root: int, what: str) -> None:
        r = self.roots[root]
        if r.kind == "input":
            raise Unsupported(
                f"{self.op}: {what} writes the op input '{r.name}', which the op does not declare in mutates_args"
            )

    # ---- steps --------------------------------------------------------------------------
    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        if tuple(src.shape) != tuple(dst.shape):
            src = src.expand(dst.shape)
        d = self.view(dst)
        self.written(d[0], "a copy")
        self.steps.append(("copy", d, self.view(src)))

    def fill(self, dst: torch.Tensor, value) -> None:
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise Unsupported(f"{self.op}: a symbolic fill value")
        if not isinstance(value, (bool, int, float)):
            raise Unsupported(f"{self.op}: fill with {type(value).__name__}")
        d = self.view(dst)
        self.written(d[0], "a fill")
        integral = isinstance(value, (bool, int))
        self.steps.append(("fill", d, float(value), int(value) if integral else 0, integral))

    def program(self, p) -> int:
        idx = self._serialized.get(id(p))
        if idx is not None:
            return idx
        b = bytes(p.serialize())
        idx = self._program_index.get(b)
        if idx is None:
            idx = len(self.programs)
            self.programs.append(b)
            self._program_index[b] = idx
        self._serialized[id(p)] = idx
        return idx

    def launch(self, kernel, traced, tensors: list, device):
        """The launch observer (nki._jit.observe_launches): records and returns fake outputs."""
        from nki import _dtypes as ndt

        meta = traced.meta
        kname = meta["name"] + (f"[{', '.join(map(str, meta['grid']))}]" if meta["grid"] else "")
        self.kernels.append(kernel.func)
        self.kernel_deps.append(traced.deps.portable(kernel.func))
        self.launches += 1
        shared = []
        for i, s in enumerate(meta["shared"]):
            t = torch.empty(s["shape"], dtype=ndt.torch_dtype(ndt.to_dtype(s["dtype"])), device=device)
            self.roots[self.root_of(t)].name = f"{meta['name']}:{s.get('name') or f'output {i}'}"
            shared.append(t)
        written = set(meta["written_inputs"])
        pre, post = [], []
        bound: dict[int, tuple] = {}

        def arg(i: int) -> tuple:
            if i in bound:
                return bound[i]
            t = tensors[i]
            v = self.view(t)
            nb = t.numel() * t.element_size()
            if i in written:
                self.written(v[0], f"kernel {meta['name']}")
            if _contiguous(v[3], v[4]):
                b = (v[0], v[2] * t.element_size(), nb)
            else:  # like eager: a strided argument goes through a contiguous copy (and back)
                r = self.scratch(nb, f"{meta['name']}: staged argument {i}")
                dense = (r, v[1], 0, v[3], _contiguous_strides(v[3]))
                pre.append(("copy", dense, v))
                if i in written:
                    post.append(("copy", v, dense))
                b = (r, 0, nb)
            bound[i] = b
            return b

        progs, instances = [], []
        for k, inst in enumerate(meta["instances"]):
            progs.append(self.program(traced.programs[k]))
            args = []
            for s in inst["slots"]:
                if s["kind"] == "in":
                    root, off, nb = arg(s["arg"])
                    args.append((root, off, nb, s.get("name", ""), True, False))
                elif s["kind"] == "shared":
                    t = shared[s["index"]]
                    args.append((self.root_of(t), 0, t.numel() * t.element_size(),
                                 meta["shared"][s["index"]]["name"], False, False))
                elif s["kind"] == "const":
                    raise Unsupported(f"{meta['name']}: nl.shared_constant '{s['name']}' (runs eagerly)")
                else:
                    r = self.scratch(s["bytes"], f"{meta['name']}: private HBM")
                    args.append((r, 0, int(s["bytes"]), "", False, True))
            instances.append(args)
        self.steps.extend(pre)
        self.steps.append(("launch", kname, progs, instances))
        self.steps.extend(post)

        from nki._jit import resolve_outputs

        return resolve_outputs(meta["output"], tensors, shared)


class _Recorder(TorchDispatchMode):
    """Sees every aten op the body runs (on fake tensors) and records the supported ones."""

    def __init__(self, rec: _Recording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.rec
        if func in _METADATA:
            return func(*args, **kwargs)
        if getattr(func, "is_view", False) or func in _VIEWS:
            out = func(*args, **kwargs)
            for t in _flatten(out):
                if isinstance(t, torch.Tensor):
                    rec.root_of(t)  # a view of known memory
            return out
        if func in _EMPTY:
            out = func(*args, **kwargs)
            rec.add_root(out, "fresh", f"buffer {len(rec.roots)}")
            return out
        if func in _FILLED:
            out = func(*args, **kwargs)
            rec.add_root(out, "fresh", f"buffer {len(rec.roots)}")
            pos = _FILLED[func]
            value = _FILL_CONST[func] if pos is None else (args[pos] if len(args) > pos else kwargs["fill_value"])
            rec.fill(out, value)
            return out
        if func is aten.fill_.Scalar:
            rec.fill(args[0], args[1])
            return func(*args, **kwargs)
        if func is aten.zero_.default:
            rec.fill(args[0], 0)
            return func(*args, **kwargs)
        if func is aten.copy_.default:
            rec.copy(args[0], args[1])
            return func(*args, **kwargs)
        if func in (aten.clone.default, aten._to_copy.default):
            out = func(*args, **kwargs)
            if not isinstance(out, torch.Tensor) or out.device != args[0].device:
                raise Unsupported(f"{rec.op}: the body moves a tensor to {getattr(out, 'device', '?')}")
            rec.add_root(out, "fresh", f"buffer {len(rec.roots)}")
            rec.copy(out, args[0])
            return out
        raise Unsupported(
            f"{rec.op}: the body runs {func} (compiled NKI ops may only launch kernels, allocate, view, copy and fill)"
        )


# =======================================================================================
# FX node -> recording -> IR


def _nki_info(op) -> Any:
    from ..nki_hop import _NKI_OPS

    if not isinstance(op, torch._ops.OpOverload):
        return None
    return _NKI_OPS.get(op.name())


def _classify(n: torch.fx.Node):
    """("call" | "v2" | "v1", op, info) for NKI op nodes, else None."""
    t = n.target
    info = _nki_info(t)
    if info is not None:
        return "call", t, info
    hop = torch.ops.higher_order
    for kind, name in (("v2", "auto_functionalized_v2"), ("v1", "auto_functionalized")):
        h = getattr(hop, name, None)
        if h is not None and t is h and n.args and _nki_info(n.args[0]) is not None:
            return kind, n.args[0], _nki_info(n.args[0])
    return None


class _Out(int):
    """Output number of a returned tensor inside the op's result structure."""

    __slots__ = ()


class _Call:
    """A recorded NKI op node, ready to emit: where its tensor inputs are among the node's
    arguments (paths, so a copy of the node in a split graph reuses the recording), the output
    types, the result structure and the payload."""

    def __init__(self) -> None:
        self.input_paths: list[tuple] = []
        self.input_devices: list[str] = []
        self.scratch_bytes = 0
        self.out_types: list[tuple[torch.dtype, list[int]]] = []
        self.inplace: list[int] = []
        self.result = None  # structure of the op's results with output numbers in place of tensors
        self.n_bases = 0
        self.payload = b""
        self.sources: set[str] = set()
        self.nki_deps: dict | None = None  # nki._deps manifest (None: cannot be checked later)
        self.summary = ""


def _fake_like(val: torch.Tensor) -> torch.Tensor:
    return torch.empty(list(val.shape), dtype=val.dtype, device=val.device)


def _record(n: torch.fx.Node, kind: str, op, info) -> _Call:
    from nki._jit import observe_launches
    from torch._subclasses.fake_tensor import FakeTensorMode

    name = info.name
    if kind == "call" and info.mutates_args:
        raise Unsupported(f"{name}: a mutating op that was not functionalized")
    rec = _Recording(name)
    call = _Call()
    fake_mode = FakeTensorMode()
    base_roots: list[int] = []

    def tensor_input(a: torch.fx.Node, label: str, path: tuple) -> torch.Tensor:
        val = a.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise Unsupported(f"{name}: argument {label} without a tensor value")
        if any(not isinstance(s, int) for s in val.shape):
            raise Unsupported(f"{name}: dynamic shapes")
        t = _fake_like(val)
        r = rec.add_root(t, "input", label)
        rec.roots[r].index = len(call.input_paths)
        call.input_paths.append(path)
        call.input_devices.append(val.device.type)
        return t

    def to_fake(x: Any, label: str, path: tuple) -> Any:
        if isinstance(x, torch.fx.Node):
            if isinstance(x.meta.get("val"), torch.Tensor):
                return tensor_input(x, label, path)
            raise Unsupported(f"{name}: argument {label} is a graph value that is not a tensor")
        if isinstance(x, (list, tuple)):
            return type(x)(to_fake(y, f"{label}[{i}]", (*path, i)) for i, y in enumerate(x))
        if isinstance(x, torch.Tensor):
            raise Unsupported(f"{name}: a constant tensor argument")
        return x

    with fake_mode:
        if kind == "call":
            sig_names = [a.name for a in op._schema.arguments]
            args = [
                to_fake(a, sig_names[i] if i < len(sig_names) else f"arg{i}", ("args", i)) for i, a in enumerate(n.args)
            ]
            kwargs = {k: to_fake(v, k, ("kwargs", k)) for k, v in n.kwargs.items()}
        else:
            from torch._higher_order_ops.auto_functionalize import get_mutable_args

            kwargs = dict(n.kwargs)
            kwargs.pop("_only_clone_these_bases", None)
            mutable, _ = get_mutable_args(op)
            if kind == "v2":
                bases = list(kwargs.pop("_all_bases", []))
                base_paths = [("kwargs", "_all_bases", i) for i in range(len(bases))]
            else:
                bases = [kwargs.pop(m) for m in mutable]
                base_paths = [("kwargs", m) for m in mutable]
                if any(isinstance(b, (list, tuple)) for b in bases):
                    raise Unsupported(f"{name}: a mutable tensor-list argument")
            new_bases = []
            for i, b in enumerate(bases):
                if b is None:
                    new_bases.append(None)
                    continue
                val = b.meta.get("val") if isinstance(b, torch.fx.Node) else None
                if not isinstance(val, torch.Tensor) or not val.is_contiguous() or val.storage_offset() != 0:
                    raise Unsupported(f"{name}: a mutated argument that is not a dense tensor")
                src = tensor_input(b, f"mutated base {i}", base_paths[i])
                nb = _fake_like(val)
                r = rec.add_root(nb, "base", f"{name}: new value of mutated base {i}")
                rec.roots[r].base_input = rec.root_of(src)
                base_roots.append(r)
                rec.steps.append(("copy", rec.full_view(r, val.dtype, val.shape),
                                  rec.full_view(rec.root_of(src), val.dtype, val.shape)))
                new_bases.append(nb)
            call.n_bases = len(new_bases)
            kwargs = {k: to_fake(v, k, ("kwargs", k)) for k, v in kwargs.items()}
            if kind == "v2":
                try:
                    from torch._higher_order_ops.auto_functionalize import _generate_new_op_kwargs_from_bases

                    with _Recorder(rec):
                        kwargs, _ = _generate_new_op_kwargs_from_bases(op._schema, kwargs, new_bases, (), False)
                except Unsupported:
                    raise
                except Exception as e:
                    raise Unsupported(f"{name}: cannot rebuild the mutated arguments ({e})") from e
            else:
                for m, nb in zip(mutable, new_bases):
                    kwargs[m] = nb
            args = []
        try:
            # What the body and its kernels read (sources, globals) goes with the NEFF into the
            # warm-start index, which must not serve the NEFF after any of it changed.
            with observe_launches(rec.launch), _Recorder(rec), _deps.recording_required(), \
                    _deps.Recorder(info.fn) as body_reads:
                result = info.fn(*args, **kwargs)
        except Unsupported:
            raise
        except Exception as e:
            raise Unsupported(f"{name}: recording the body failed ({type(e).__name__}: {e})") from e

    if rec.launches == 0:
        raise Unsupported(f"{name}: the body launches no NKI kernel")
    _assign_outputs(rec, call, result, base_roots)
    _check_against_meta(n, kind, call)
    call.payload = _encode(rec, call)
    for f in [info.fn, *rec.kernels]:
        try:
            path = inspect.getsourcefile(f)
        except TypeError:
            path = None
        # Code without a source file cannot be checked later: a name that never hashes keeps
        # the graph out of the warm-start index.
        call.sources.add(path if path and os.path.exists(path) else f"<no source file: {f.__qualname__}>")
    call.nki_deps = _deps.merge([body_reads.finish().portable(info.fn), *rec.kernel_deps])
    call.summary = f"{rec.launches} launch(es), {len(rec.programs)} program(s)"
    return call


def _assign_outputs(rec: _Recording, call: _Call, result: Any, base_roots: list[int]) -> None:
    """Returned tensors -> node outputs (a returned buffer is written in place; views and
    inputs are copied out), then the new bases, then one scratch output."""
    taken: set[int] = set()

    def out_root(dtype, shape) -> int:
        r = _Root("output", math.prod(shape) * dtype.itemsize, f"{rec.op}: result {len(call.out_types)}", dtype,
                  math.prod(shape))
        rec.roots.append(r)
        return len(rec.roots) - 1

    def assign(t: torch.Tensor) -> int:
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"{rec.op}: returns {type(t).__name__}")
        v = rec.view(t)
        r = rec.roots[v[0]]
        k = len(call.out_types)
        nbytes = t.numel() * t.element_size()
        if r.kind == "fresh" and v[0] not in taken and v[2] == 0 and _contiguous(v[3], v[4]) and nbytes == r.nbytes:
            taken.add(v[0])
            r.kind, r.index, r.dtype, r.numel = "output", k, t.dtype, t.numel()
        else:
            o = out_root(t.dtype, list(t.shape))
            rec.roots[o].index = k
            rec.steps.append(("copy", rec.full_view(o, t.dtype, t.shape), v))
        call.out_types.append((t.dtype, list(t.shape)))
        call.inplace.append(-1)
        return k

    def walk(x):
        if x is None:
            return None
        if isinstance(x, (list, tuple)):
            return type(x)(walk(y) for y in x)
        return _Out(assign(x))

    call.result = walk(result)
    for r in base_roots:
        root = rec.roots[r]
        root.kind, root.index = "output", len(call.out_types)
        call.out_types.append((root.dtype, _base_shape(rec, r)))
        call.inplace.append(rec.roots[root.base_input].index)
    off = 0
    for root in rec.roots:
        if root.kind == "fresh":
            root.kind, root.offset = "scratch", off
            off += (root.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    call.scratch_bytes = off
    if off:
        call.out_types.append((torch.uint8, [off]))
        call.inplace.append(-1)


def _base_shape(rec: _Recording, r: int) -> list[int]:
    for t in rec.keep:
        if rec.by_storage.get(StorageWeakRef(t.untyped_storage())) == r:
            return list(t.shape)
    raise AssertionError("base root without a tensor")


def _check_against_meta(n: torch.fx.Node, kind: str, call: _Call) -> None:
    """The recorded outputs must be what the graph expects (the fake impl is the same body)."""
    val = n.meta.get("val")
    expect = [v for v in _flatten(val) if isinstance(v, torch.Tensor)]
    got = call.out_types[: len(call.out_types) - (1 if call.scratch_bytes else 0)]
    if len(expect) != len(got) or any(
        e.dtype != g[0] or list(e.shape) != list(g[1]) for e, g in zip(expect, got)
    ):
        raise Unsupported(
            f"recorded outputs {[(str(d), s) for d, s in got]} differ from the graph's "
            f"{[(str(e.dtype), list(e.shape)) for e in expect]}"
        )


def _encode(rec: _Recording, call: _Call) -> bytes:
    roots = []
    n_out = len(call.out_types)
    for r in rec.roots:
        if r.kind == "input":
            roots.append((_INPUT, r.index, dtype_code(r.dtype), r.numel, 0, r.nbytes, r.name))
        elif r.kind == "output":
            nbytes = r.numel * r.dtype.itemsize
            roots.append((_OUTPUT, r.index, dtype_code(r.dtype), r.numel, 0, nbytes, r.name))
        else:
            roots.append((_SCRATCH, 0, dtype_code(torch.uint8), 0, r.offset, r.nbytes, r.name))
    return _C._cc.encode_nki_plan(
        {
            "op": rec.op,
            "n_inputs": len(call.input_paths),
            "n_outputs": n_out,
            "scratch_output": n_out - 1 if call.scratch_bytes else -1,
            "scratch_bytes": call.scratch_bytes,
            "roots": roots,
            "programs": rec.programs,
            "ops": rec.steps,
        }
    )


@register_custom_lowering
def lower_nki_op(L: Lowering, n: torch.fx.Node) -> Any:
    c = _classify(n)
    if c is None:
        return NotImplemented
    kind, op, info = c
    cached = n.meta.get(_CACHE_KEY)
    if cached is None:
        try:
            cached = _record(n, kind, op, info)
        except Unsupported as e:
            cached = e
        n.meta[_CACHE_KEY] = cached
    if isinstance(cached, Unsupported):
        raise Unsupported(str(cached))
    call: _Call = cached
    if L.neuron_graph and any(d != "neuron" for d in call.input_devices):
        raise Unsupported(f"{info.name} with inputs on {sorted(set(call.input_devices))}")
    ins = [L.env.get(_resolve(n, p)) for p in call.input_paths]
    if any(not isinstance(v, V) for v in ins):
        raise Unsupported(f"{info.name}: an input that is not a graph tensor")
    types = [(DTYPE[dt], shape) for dt, shape in call.out_types]
    ids = L.node(
        "custom",
        ins,
        {"target": _C._cc.nki_target(), "payload": call.payload, "name": info.name, "inplace": call.inplace},
        types,
    )
    L.sources.update(call.sources)
    L.nki_deps.append(call.nki_deps)
    L.nki_ops.append(info.name)  # counted when the graph is compiled (CompiledGraph)
    log.debug("neuron: %s lowered as one NKI node (%s)", info.name, call.summary)

    def build(x):
        if x is None:
            return None
        if isinstance(x, _Out):
            return ids[int(x)]
        return type(x)(build(y) for y in x)

    res = build(call.result)
    n_res = sum(1 for v in _flatten(call.result) if isinstance(v, _Out))
    bases = tuple(ids[n_res + i] for i in range(call.n_bases))
    if kind == "call":
        return res
    if isinstance(res, tuple):
        return (*res, *bases)
    return (res, *bases)


def _resolve(n: torch.fx.Node, path: tuple) -> Any:
    obj: Any = n.args if path[0] == "args" else n.kwargs
    for p in path[1:]:
        obj = obj[p]
    return obj
