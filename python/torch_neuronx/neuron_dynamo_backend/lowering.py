"""FX (aten) graph -> Neuron IR, through the C++ GraphBuilder.

Every supported aten overload has a rule here that emits IR ops; ``Unsupported`` marks a node
the compiler cannot take (it then runs eagerly, see ``_split_and_compile`` in ``backend.py``). Types come from the
FX node metadata (``meta["val"]``), so the IR carries the exact dtypes eager would produce.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from .. import _C

aten = torch.ops.aten
prims = torch.ops.prims

DTYPE = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.float8_e4m3fn: "f8e4m3",
    torch.float8_e5m2: "f8e5m2",
}
TORCH_DTYPE = {v: k for k, v in DTYPE.items()}


class V(int):
    """An IR value id (distinguishes graph values from Python int scalars in rule arguments)."""

    __slots__ = ()


class Unsupported(Exception):
    """The compiler cannot lower this node (it runs eagerly instead)."""


def dtype_code(dt: torch.dtype) -> int:
    return int(_C._cc.DTYPE_CODES[DTYPE[dt]])


def _is_float(dt: torch.dtype) -> bool:
    return dt.is_floating_point


# Opaque custom ops: qualified name -> function(node) -> payload string. The native kernel is
# registered in C++ (torch_neuronx._C._cc.has_custom_kernel) - e.g. by the NKI layer.
_OPAQUE: dict[str, Callable[[torch.fx.Node], str]] = {}


def register_opaque_op(qualname: str, payload: Callable[[torch.fx.Node], str] | None = None) -> None:
    """Makes the torch.library custom op ``qualname`` ("ns::op"), or a higher-order operator
    of that name, one opaque node of compiled graphs, run by the native kernel registered
    under the same name (C++ ``neuron::cc::dense::register_custom_kernel``). Its tensor
    arguments (positional, then keyword, flattened) are the kernel's inputs, the node's tensor
    results its outputs; ``payload(node)`` may serialize everything else (sizes, scalars, an
    NKI program) into a string for the kernel."""
    _OPAQUE[qualname] = payload or (lambda node: "")


# Lowerings of custom ops / higher-order operators that need more than an opaque node (NKI ops:
# nki_lowering.py): fn(lowering, node) -> IR values, or NotImplemented when the node is not theirs.
_CUSTOM_LOWERINGS: list[Callable[[Lowering, torch.fx.Node], Any]] = []


def register_custom_lowering(fn: Callable[[Lowering, torch.fx.Node], Any]) -> Callable:
    """Adds a lowering tried for call nodes without an aten rule (before opaque custom ops)."""
    if fn not in _CUSTOM_LOWERINGS:
        _CUSTOM_LOWERINGS.append(fn)
    return fn


class Lowering:
    """Builds one IR graph from an FX graph of aten ops."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, tolerant: bool = False,
                 example_inputs: Sequence[Any] | None = None) -> None:
        self.gm = gm
        # Non-tensor inputs (specialized sizes of a dynamic graph) take their example values.
        self.examples = list(example_inputs) if example_inputs is not None else None
        self.b = _C._cc.GraphBuilder(name)
        self.env: dict[torch.fx.Node, Any] = {}
        self.placeholders: list[torch.fx.Node] = []
        self.input_index: dict[torch.fx.Node, int] = {}
        self.mutations: dict[int, V] = {}
        # Tolerant mode (support analysis): an unsupported node is recorded with its reason and
        # replaced by fresh inputs of its type so that the rest of the graph is still checked.
        self.tolerant = tolerant
        self.unsupported: dict[torch.fx.Node, str] = {}
        # Source files the compiled program depends on beyond the FX graph (NKI kernels traced
        # into it): a warm start must not reuse the NEFF after they change.
        self.sources: set[str] = set()
        # What the NKI ops' bodies and kernels read while traced (nki._deps manifests, None
        # when one cannot be checked in another process).
        self.nki_deps: list = []
        # Names of the NKI ops lowered as `custom` nodes (one entry per node).
        self.nki_ops: list[str] = []

    # ---- helpers -------------------------------------------------------------------------
    def type(self, v: int) -> tuple[torch.dtype, list[int]]:
        dt, shape = self.b.type(v)
        return TORCH_DTYPE[dt], list(shape)

    def node(self, op: str, inputs: Sequence[int], attrs: dict | None = None, out_types=None) -> list[V]:
        return [V(i) for i in self.b.node(op, [int(i) for i in inputs], attrs or {}, out_types)]

    def op1(self, op: str, inputs: Sequence[int], attrs: dict | None = None, out_dtype: torch.dtype | None = None) -> int:
        a = dict(attrs or {})
        if out_dtype is not None:
            a["dtype"] = dtype_code(out_dtype)
        return self.node(op, inputs, a)[0]

    def const(self, value: float, dt: torch.dtype) -> int:
        if dt not in DTYPE:
            raise Unsupported(f"constant of dtype {dt}")
        if not _is_float(dt) and dt != torch.bool:
            return V(self.b.scalar_int(int(value), DTYPE[dt]))
        return V(self.b.scalar(float(value), DTYPE[dt]))

    def cast(self, v: int, dt: torch.dtype) -> int:
        if self.type(v)[0] == dt:
            return v
        return self.op1("cast", [v], {"dtype": dtype_code(dt)})

    def reshape(self, v: int, shape: Sequence[int]) -> int:
        if list(self.type(v)[1]) == list(shape):
            return v
        return self.op1("reshape", [v], {"shape": list(shape)})

    def expand(self, v: int, shape: Sequence[int]) -> int:
        if list(self.type(v)[1]) == list(shape):
            return v
        return self.op1("expand", [v], {"shape": list(shape)})

    def operand(self, x: Any, compute: torch.dtype) -> V:
        """An IR value for a tensor argument or a Python scalar (as a constant of the compute
        dtype; floating scalars stay fp32 for 16-bit math, like ATen's opmath)."""
        if isinstance(x, V):
            return x
        if isinstance(x, bool):
            return self.const(x, torch.bool if not _is_float(compute) else torch.float32)
        if isinstance(x, (int, float)):
            if _is_float(compute):
                return self.const(float(x), torch.float64 if compute == torch.float64 else torch.float32)
            if isinstance(x, float):
                raise Unsupported("a float scalar in integer arithmetic")
            return self.const(int(x), torch.bool if compute == torch.bool else torch.int64)
        raise Unsupported(f"argument {x!r}")

    # ---- driving -------------------------------------------------------------------------
    def run(self) -> None:
        # A graph that works on neuron tensors keeps its CPU-side ops (values the user moved to
        # the CPU) eager; a graph of CPU tensors only is compiled whole (its inputs are copied in).
        self.neuron_graph = any(
            isinstance(v, torch.Tensor) and v.device.type == "neuron"
            for n in self.gm.graph.nodes
            for v in _flatten(n.meta.get("val"))
        )
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                self.placeholder(n)
            elif n.op == "get_attr":
                self.env[n] = self.attribute(n)
            elif n.op == "call_function":
                try:
                    self.env[n] = self.call(n)
                except Unsupported as e:
                    if not self.tolerant:
                        raise
                    self.unsupported[n] = str(e)
                    self.env[n] = self.stand_in(n.meta.get("val"))
                except (RuntimeError, ValueError) as e:
                    # A rule produced a graph the verifier rejects: treat as unsupported.
                    if not self.tolerant:
                        raise Unsupported(f"{_target_name(n.target)}: {e}") from e
                    self.unsupported[n] = f"{_target_name(n.target)}: {e}"
                    self.env[n] = self.stand_in(n.meta.get("val"))
            elif n.op == "output":
                self.output(n)
            else:
                raise Unsupported(f"FX node kind {n.op}")

    def placeholder(self, n: torch.fx.Node) -> None:
        val = n.meta.get("val")
        pos = len(self.placeholders)
        if val is None and self.examples is not None and pos < len(self.examples):
            ex = self.examples[pos]
            if isinstance(ex, (int, float, bool, torch.SymInt)):
                val = int(ex) if isinstance(ex, torch.SymInt) else ex
        if not isinstance(val, torch.Tensor):
            if isinstance(val, (int, float, bool)):
                self.env[n] = val
                self.placeholders.append(n)
                return
            raise Unsupported(f"input {n.name} of type {type(val).__name__}")
        if val.dtype not in DTYPE:
            raise Unsupported(f"input {n.name} of dtype {val.dtype}")
        for s in list(val.shape) + list(val.stride()):
            if not isinstance(s, int):
                raise Unsupported("dynamic shapes")
        self.input_index[n] = len(self.input_index)
        self.placeholders.append(n)
        self.env[n] = V(self.b.input(DTYPE[val.dtype], list(val.shape), list(val.stride()), n.name))

    def attribute(self, n: torch.fx.Node) -> V:
        """A tensor the graph reads as a module attribute becomes a constant of the program.
        Attributes are real tensors (parameters, buffers, tensors a model keeps such as an
        empty KV-cache placeholder), often on the neuron device, while AOT compiles under its
        fake mode: read them outside that mode."""
        from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

        t = _fetch_attr(self.gm, n.target)
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"attribute {n.target} of type {type(t).__name__}")
        if isinstance(t, FakeTensor):
            raise Unsupported(f"attribute {n.target} is a fake tensor (its value is unknown at compile time)")
        if t.dtype not in DTYPE:
            raise Unsupported(f"attribute {n.target} of dtype {t.dtype}")
        with unset_fake_temporarily():
            return V(self.b.constant(t.detach().to("cpu").contiguous()))

    def stand_in(self, val: Any) -> Any:
        if isinstance(val, torch.Tensor) and val.dtype in DTYPE and all(isinstance(s, int) for s in val.shape):
            return V(self.b.input(DTYPE[val.dtype], list(val.shape), list(val.stride()), "stand_in"))
        if isinstance(val, (list, tuple)):
            return tuple(self.stand_in(v) for v in val)
        if isinstance(val, (int, float, bool)):
            return val
        return None

    def output(self, n: torch.fx.Node) -> None:
        for idx, v in self.mutations.items():
            self.b.mutation(idx, v)
        outs, strides = [], []
        for a in _flatten(n.args[0]):
            if a is None or not isinstance(a, torch.fx.Node):
                continue
            v = self.env[a]
            if not isinstance(v, V):
                continue
            outs.append(v)
            val = a.meta.get("val")
            strides.append(list(val.stride()) if isinstance(val, torch.Tensor) else [])
        self.b.set_outputs(outs, strides)

    def arg(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self.arg(v) for k, v in a.items()}
        return a

    def call(self, n: torch.fx.Node) -> Any:
        target = n.target
        if target is operator.getitem:
            base = self.env[n.args[0]]
            return base[n.args[1]]
        rule = RULES.get(target)
        if rule is None and isinstance(target, torch._ops.OpOverload):
            rule = RULES.get(target.overloadpacket)
        if rule is None:
            for lower in _CUSTOM_LOWERINGS:
                r = lower(self, n)
                if r is not NotImplemented:
                    return r
        if rule is None and _opaque_name(target) in _OPAQUE:
            return self.opaque(n)
        if rule is None:
            raise Unsupported(_target_name(target))
        val = n.meta.get("val")
        for v in _flatten(val):
            if isinstance(v, torch.Tensor) and v.dtype not in DTYPE:
                raise Unsupported(f"{_target_name(target)} producing {v.dtype}")
            if isinstance(v, torch.Tensor) and self.neuron_graph and v.device.type != "neuron":
                raise Unsupported(f"{_target_name(target)} on {v.device.type}")
        args = [self.arg(a) for a in n.args]
        kwargs = {k: self.arg(v) for k, v in n.kwargs.items()}
        return rule(self, n, *args, **kwargs)

    def opaque(self, n: torch.fx.Node) -> Any:
        name = _opaque_name(n.target)
        if not _C._cc.has_custom_kernel(name):
            raise Unsupported(f"{name} (custom op without a native kernel)")
        # Tensor operands in argument order (kwargs too: higher-order ops such as NKI kernel
        # wrappers pass their tensors there).
        ins = [v for v in _flatten(self.arg(list(n.args) + list(n.kwargs.values()))) if isinstance(v, V)]
        outs = [o for o in _flatten(n.meta["val"]) if isinstance(o, torch.Tensor)]
        types = [(DTYPE[o.dtype], list(o.shape)) for o in outs]
        ids = self.node("custom", ins, {"target": name, "payload": _OPAQUE[name](n)}, types)
        return ids[0] if len(ids) == 1 and isinstance(n.meta["val"], torch.Tensor) else tuple(ids)

    def meta(self, n: torch.fx.Node) -> torch.Tensor:
        return n.meta["val"]


def _fetch_attr(gm: torch.nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flatten(y)
    else:
        yield x


def _opaque_name(target) -> str:
    """"ns::op" of a custom op overload, the name of a higher-order operator."""
    if isinstance(target, torch._ops.OpOverload):
        return target.name()
    name = getattr(target, "name", None)
    if callable(name):
        try:
            return str(name())
        except TypeError:
            pass
    return getattr(target, "__name__", str(target))


def _target_name(t) -> str:
    if isinstance(t, torch._ops.OpOverload):
        return f"aten::{t._opname}.{t._overloadname}" if t.namespace == "aten" else t.name()
    return getattr(t, "__name__", str(t))


# =======================================================================================
# Rules

RULES: dict[Any, Callable] = {}


def rule(*targets):
    def deco(fn):
        for t in targets:
            RULES[t] = fn
        return fn

    return deco


def _out_dtype(n: torch.fx.Node) -> torch.dtype:
    v = n.meta["val"]
    return v.dtype if isinstance(v, torch.Tensor) else v[0].dtype


UNARY = {
    aten.abs: "abs", aten.neg: "neg", aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1", aten.log: "log",
    aten.log2: "log2", aten.log10: "log10", aten.log1p: "log1p", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt",
    aten.reciprocal: "reciprocal", aten.sin: "sin", aten.cos: "cos", aten.tan: "tan", aten.asin: "asin",
    aten.acos: "acos", aten.atan: "atan", aten.sinh: "sinh", aten.cosh: "cosh", aten.tanh: "tanh",
    aten.asinh: "asinh", aten.acosh: "acosh", aten.atanh: "atanh", aten.sigmoid: "sigmoid", aten.relu: "relu",
    aten.silu: "silu", aten.erf: "erf", aten.erfc: "erfc", aten.floor: "floor", aten.ceil: "ceil",
    aten.trunc: "trunc", aten.sign: "sign", aten.logical_not: "logical_not", aten.bitwise_not: "bitwise_not",
    aten.isnan: "isnan", aten.isinf: "isinf",
}

BINARY = {
    aten.mul: "mul", aten.div: "div", aten.maximum: "maximum", aten.minimum: "minimum", aten.atan2: "atan2",
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
    aten.logical_and: "logical_and", aten.logical_or: "logical_or", aten.logical_xor: "logical_xor",
    aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or", aten.bitwise_xor: "bitwise_xor",
    aten.fmod: "fmod", aten.remainder: "remainder", aten.floor_divide: "floordiv", aten.pow: "pow",
}

COMPARE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}


def _binary(L: Lowering, n, op: str, a, b):
    out = _out_dtype(n)
    if op in COMPARE:
        compute = _arg_dtype(L, n, 0, a, b)
    else:
        compute = out
    ia = L.operand(a, compute)
    ib = L.operand(b, compute)
    if op in ("div",) and not _is_float(out):
        raise Unsupported("integer true division")
    if op == "pow" and not _is_float(out):
        raise Unsupported("integer pow")
    return L.op1(op, [ia, ib], out_dtype=out)


def _is_node_arg(n: torch.fx.Node, i: int) -> bool:
    return i < len(n.args) and isinstance(n.args[i], torch.fx.Node)


def _arg_dtype(L: Lowering, n: torch.fx.Node, i: int, a, b) -> torch.dtype:
    """Promoted dtype of two operands with ATen's rules (scalars are "wrapped numbers")."""

    def probe(j, x):
        if _is_node_arg(n, j):
            v = n.args[j].meta["val"]
            return torch.empty([1] * v.dim(), dtype=v.dtype) if v.dim() else torch.empty((), dtype=v.dtype)
        return x

    return torch.result_type(probe(0, a), probe(1, b))


for _t, _name in UNARY.items():

    def _mk(opname):
        def fn(L, n, x, *args, **kw):
            out = _out_dtype(n)
            if opname in ("floor", "ceil", "trunc") and not _is_float(out):
                return L.cast(x, out)
            return L.op1(opname, [x], out_dtype=out)

        return fn

    RULES[_t] = _mk(_name)

for _t, _name in BINARY.items():

    def _mkb(opname):
        def fn(L, n, a, b, *args, **kw):
            if opname == "div":
                mode = kw.get("rounding_mode", args[0] if args else None)
                if mode == "floor":
                    return _binary(L, n, "floordiv", a, b)
                if mode == "trunc":
                    out = _out_dtype(n)
                    if _is_float(out):
                        q = _binary(L, n, "div", a, b)
                        return L.op1("trunc", [q], out_dtype=out)
                    raise Unsupported("integer trunc division")
            return _binary(L, n, opname, a, b)

        return fn

    RULES[_t] = _mkb(_name)


@rule(aten.add, aten.sub)
def _add_sub(L, n, a, b, alpha=1, **kw):
    out = _out_dtype(n)
    op = "add" if n.target.overloadpacket is aten.add else "sub"
    ia = L.operand(a, out)
    ib = L.operand(b, out)
    if alpha != 1:
        ib = L.op1("mul", [ib, L.operand(alpha, out)], out_dtype=out)
    return L.op1(op, [ia, ib], out_dtype=out)


@rule(aten.rsub)
def _rsub(L, n, a, b, alpha=1, **kw):
    out = _out_dtype(n)
    ia = L.operand(a, out)
    ib = L.operand(b, out)
    if alpha != 1:
        ia = L.op1("mul", [ia, L.operand(alpha, out)], out_dtype=out)
    return L.op1("sub", [ib, ia], out_dtype=out)


@rule(aten.gelu)
def _gelu(L, n, x, approximate="none"):
    return L.op1("gelu_tanh" if approximate == "tanh" else "gelu", [x], out_dtype=_out_dtype(n))


@rule(aten.round)
def _round(L, n, x, decimals=0):
    out = _out_dtype(n)
    if decimals:
        s = L.operand(10.0**decimals, out)
        return L.op1("div", [L.op1("round", [L.op1("mul", [x, s], out_dtype=out)], out_dtype=out), s], out_dtype=out)
    return L.op1("round", [x], out_dtype=out)


@rule(aten.leaky_relu)
def _leaky_relu(L, n, x, slope=0.01):
    out = _out_dtype(n)
    pos = L.op1("gt", [x, L.operand(0.0, out)])
    return L.op1("where", [pos, x, L.op1("mul", [x, L.operand(slope, out)], out_dtype=out)], out_dtype=out)


@rule(aten.threshold_backward)
def _threshold_backward(L, n, grad, x, threshold):
    out = _out_dtype(n)
    keep = L.op1("gt", [x, L.operand(threshold, L.type(x)[0])])
    return L.op1("where", [keep, grad, L.operand(0.0, out)], out_dtype=out)


@rule(aten.gelu_backward)
def _gelu_backward(L, n, grad, x, approximate="none"):
    op = "gelu_tanh_backward" if approximate == "tanh" else "gelu_backward"
    return L.op1(op, [grad, x], out_dtype=_out_dtype(n))


@rule(aten.silu_backward)
def _silu_backward(L, n, grad, x):
    return L.op1("silu_backward", [grad, x], out_dtype=_out_dtype(n))


@rule(aten.sigmoid_backward)
def _sigmoid_backward(L, n, grad, y):
    out = _out_dtype(n)
    one = L.operand(1.0, out)
    return L.op1("mul", [grad, L.op1("mul", [y, L.op1("sub", [one, y], out_dtype=out)], out_dtype=out)], out_dtype=out)


@rule(aten.tanh_backward)
def _tanh_backward(L, n, grad, y):
    out = _out_dtype(n)
    one = L.operand(1.0, out)
    return L.op1("mul", [grad, L.op1("sub", [one, L.op1("mul", [y, y], out_dtype=out)], out_dtype=out)], out_dtype=out)


@rule(aten.clamp, aten.clamp_min, aten.clamp_max)
def _clamp(L, n, x, lo=None, hi=None):
    out = _out_dtype(n)
    pk = n.target.overloadpacket
    if pk is aten.clamp_max:
        lo, hi = None, lo
    y = L.cast(x, out)
    if lo is not None:
        y = L.op1("maximum", [y, L.operand(lo, out)], out_dtype=out)
    if hi is not None:
        y = L.op1("minimum", [y, L.operand(hi, out)], out_dtype=out)
    return y


@rule(aten.where)
def _where(L, n, c, a, b):
    out = _out_dtype(n)
    return L.op1("where", [c, L.operand(a, out), L.operand(b, out)], out_dtype=out)


@rule(aten.masked_fill)
def _masked_fill(L, n, x, mask, value):
    out = _out_dtype(n)
    return L.op1("where", [mask, L.operand(value, out), x], out_dtype=out)


@rule(aten.clone, aten.alias, aten.lift_fresh_copy, aten.detach, aten.contiguous)
def _clone(L, n, x, *args, **kw):
    return L.op1("copy", [x])


@rule(aten._to_copy, prims.convert_element_type, aten.to)
def _to_copy(L, n, x, *args, **kw):
    src = n.args[0].meta.get("val") if isinstance(n.args[0], torch.fx.Node) else None
    dst = n.meta.get("val")
    if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.device.type != dst.device.type:
        raise Unsupported(f"a copy from {src.device.type} to {dst.device.type}")
    return L.cast(x, _out_dtype(n)) if L.type(x)[0] != _out_dtype(n) else L.op1("copy", [x])


@rule(aten.copy)
def _copy(L, n, dst, src, non_blocking=False):
    v = n.meta["val"]
    return L.expand(L.cast(src, v.dtype), list(v.shape))


# ---- reductions ----


def _dims(dim, rank):
    if dim is None:
        return []
    if isinstance(dim, int):
        dim = [dim]
    return [d % max(rank, 1) for d in dim]


def _reduce(L, n, op, x, dim, keepdim, dtype=None):
    rank = len(L.type(x)[1])
    attrs = {"dims": _dims(dim, rank), "keepdim": int(bool(keepdim)), "dtype": dtype_code(_out_dtype(n))}
    if op in ("sum", "mean", "prod") and dtype is not None:
        x = L.cast(x, dtype)
    return L.op1(op, [x], attrs)


@rule(aten.sum)
def _sum(L, n, x, dim=None, keepdim=False, dtype=None):
    if isinstance(dim, torch.dtype):
        dim, dtype = None, dim
    return _reduce(L, n, "sum", x, dim, keepdim, dtype)


@rule(aten.mean)
def _mean(L, n, x, dim=None, keepdim=False, dtype=None):
    if isinstance(dim, torch.dtype):
        dim, dtype = None, dim
    if not _is_float(_out_dtype(n)):
        raise Unsupported("integer mean")
    return _reduce(L, n, "mean", x, dim, keepdim, dtype)


@rule(aten.prod)
def _prod(L, n, x, dim=None, keepdim=False, dtype=None):
    if isinstance(dim, torch.dtype):
        dim, dtype = None, dim
    return _reduce(L, n, "prod", x, dim, keepdim, dtype)


@rule(aten.amax, aten.amin)
def _amax(L, n, x, dim=(), keepdim=False):
    return _reduce(L, n, "amax" if n.target.overloadpacket is aten.amax else "amin", x, list(dim) or None, keepdim)


@rule(aten.any, aten.all)
def _any(L, n, x, dim=None, keepdim=False):
    return _reduce(L, n, "any" if n.target.overloadpacket is aten.any else "all", x, dim, keepdim)


@rule(aten.argmax, aten.argmin)
def _argmax(L, n, x, dim=None, keepdim=False):
    op = "argmax" if n.target.overloadpacket is aten.argmax else "argmin"
    if dim is None:
        flat = L.reshape(x, [max(1, math.prod(L.type(x)[1]))])
        r = L.op1(op, [flat], {"dims": [0], "keepdim": 0})
        return L.reshape(r, list(n.meta["val"].shape))
    return _reduce(L, n, op, x, dim, keepdim)


@rule(aten.max, aten.min)
def _max(L, n, x, dim=None, keepdim=False):
    pk = n.target.overloadpacket
    if dim is None or isinstance(dim, torch.fx.Node):
        if dim is not None:
            raise Unsupported("elementwise max with a tensor")
        return _reduce(L, n, "amax" if pk is aten.max else "amin", x, None, False)
    vals = L.op1("amax" if pk is aten.max else "amin", [x], {"dims": _dims(dim, len(L.type(x)[1])), "keepdim": int(keepdim)})
    idx = L.op1("argmax" if pk is aten.max else "argmin", [x], {"dims": _dims(dim, len(L.type(x)[1])), "keepdim": int(keepdim)})
    return (vals, idx)


@rule(aten.var, aten.var_mean, aten.std)
def _var(L, n, x, dim=None, *args, correction=None, keepdim=False, unbiased=None, **kw):
    if args:
        if isinstance(args[0], bool):
            unbiased = args[0]
        if len(args) > 1:
            keepdim = args[1]
    if correction is None:
        correction = 0 if unbiased is False else 1
    out = _out_dtype(n)
    xdt = L.type(x)[0]
    shape = L.type(x)[1]
    dims = _dims(dim, len(shape)) if dim is not None else list(range(len(shape)))
    count = math.prod(shape[d] for d in dims) if dims else 1
    xf = L.cast(x, torch.float32 if xdt != torch.float64 else xdt)
    mean = L.op1("mean", [xf], {"dims": dims, "keepdim": 1})
    d = L.op1("sub", [xf, mean])
    ss = L.op1("sum", [L.op1("mul", [d, d])], {"dims": dims, "keepdim": int(bool(keepdim))})
    var = L.op1("div", [ss, L.const(float(max(count - correction, 0)), L.type(ss)[0])])
    pk = n.target.overloadpacket
    if pk is aten.std:
        return L.cast(L.op1("sqrt", [var]), out)
    if pk is aten.var_mean:
        m = mean if keepdim else L.reshape(mean, list(n.meta["val"][1].shape))
        return (L.cast(var, out), L.cast(m, out))
    return L.cast(var, out)


# ---- views ----


@rule(aten.view, aten._unsafe_view, aten.reshape)
def _view(L, n, x, shape):
    return L.reshape(x, list(n.meta["val"].shape))


@rule(aten.permute)
def _permute(L, n, x, dims):
    r = len(L.type(x)[1])
    return L.op1("permute", [x], {"perm": [d % r for d in dims]})


@rule(aten.transpose)
def _transpose(L, n, x, d0, d1):
    r = len(L.type(x)[1])
    perm = list(range(r))
    if r:
        d0, d1 = d0 % r, d1 % r
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return L.op1("permute", [x], {"perm": perm})


@rule(aten.t, aten.numpy_T)
def _t(L, n, x):
    r = len(L.type(x)[1])
    return x if r < 2 else L.op1("permute", [x], {"perm": [1, 0]})


@rule(aten.expand)
def _expand(L, n, x, shape, implicit=False):
    return L.expand(x, list(n.meta["val"].shape))


@rule(aten.unsqueeze, aten.squeeze, aten.flatten, aten.unflatten, aten.view_as)
def _reshape_like(L, n, x, *args, **kw):
    return L.reshape(x, list(n.meta["val"].shape))


@rule(aten.slice)
def _slice(L, n, x, dim=0, start=None, end=None, step=1):
    shape = L.type(x)[1]
    d = dim % len(shape)
    size = shape[d]
    s, e, _ = slice(start, end, step).indices(size)
    e = max(e, s)
    return L.op1("slice", [x], {"dim": d, "start": s, "end": e, "step": step})


@rule(aten.narrow)
def _narrow(L, n, x, dim, start, length):
    shape = L.type(x)[1]
    d = dim % len(shape)
    s = start % shape[d] if start < 0 else start
    return L.op1("slice", [x], {"dim": d, "start": s, "end": s + length, "step": 1})


@rule(aten.select)
def _select(L, n, x, dim, index):
    shape = L.type(x)[1]
    d = dim % len(shape)
    i = index % shape[d]
    s = L.op1("slice", [x], {"dim": d, "start": i, "end": i + 1, "step": 1})
    return L.reshape(s, list(n.meta["val"].shape))


@rule(aten.split, aten.split_with_sizes)
def _split(L, n, x, sizes, dim=0):
    shape = L.type(x)[1]
    d = dim % len(shape)
    outs, off = [], 0
    for v in n.meta["val"]:
        ln = v.shape[d]
        outs.append(L.op1("slice", [x], {"dim": d, "start": off, "end": off + ln, "step": 1}))
        off += ln
    return tuple(outs)


@rule(aten.unbind)
def _unbind(L, n, x, dim=0):
    shape = L.type(x)[1]
    d = dim % len(shape)
    return tuple(
        L.reshape(L.op1("slice", [x], {"dim": d, "start": i, "end": i + 1, "step": 1}), list(v.shape))
        for i, v in enumerate(n.meta["val"])
    )


@rule(aten.as_strided)
def _as_strided(L, n, x, size, stride, storage_offset=None):
    src = n.args[0]
    base_off = 0
    if src.op == "placeholder":
        base_off = src.meta["val"].storage_offset()
    elif src.op != "placeholder":
        raise Unsupported("as_strided of an intermediate")
    off = (storage_offset if storage_offset is not None else base_off) - base_off
    return L.op1("as_strided", [x], {"shape": list(size), "strides": list(stride), "offset": off})


# ---- structured ----


@rule(aten.cat)
def _cat(L, n, tensors, dim=0):
    out = _out_dtype(n)
    ins = [t for t in tensors if L.type(t)[1] != [0]]  # legacy empty 1-D tensors are skipped
    if not ins:
        raise Unsupported("cat of empty tensors")
    d = dim % len(L.type(ins[0])[1])
    return L.op1("cat", [L.cast(t, out) for t in ins], {"dim": d, "dtype": dtype_code(out)})


@rule(aten.stack)
def _stack(L, n, tensors, dim=0):
    out = n.meta["val"]
    d = dim % out.dim()
    parts = []
    for t in tensors:
        s = L.type(t)[1]
        parts.append(L.reshape(L.cast(t, out.dtype), s[:d] + [1] + s[d:]))
    return L.op1("cat", parts, {"dim": d, "dtype": dtype_code(out.dtype)})


@rule(aten.constant_pad_nd)
def _pad(L, n, x, pad, value=0):
    return L.op1("pad", [x], {"pads": list(pad), "value": float(value)})


@rule(aten.repeat)
def _repeat(L, n, x, repeats):
    shape = L.type(x)[1]
    lead = len(repeats) - len(shape)
    xs = [1] * lead + shape
    y = L.reshape(x, [v for s in xs for v in (1, s)])
    y = L.expand(y, [v for r, s in zip(repeats, xs) for v in (r, s)])
    return L.reshape(y, list(n.meta["val"].shape))


# ---- factories ----


def _full(L, n, value):
    v = n.meta["val"]
    return L.expand(L.const(value, v.dtype), list(v.shape))


@rule(aten.full)
def _full_rule(L, n, size, value, **kw):
    return _full(L, n, value)


@rule(aten.zeros, aten.empty, aten.empty_strided, aten.empty_permuted, aten.new_zeros, aten.new_empty,
      aten.new_empty_strided, aten.zeros_like, aten.empty_like)
def _zeros(L, n, *args, **kw):
    return _full(L, n, 0)


@rule(aten.ones, aten.new_ones, aten.ones_like)
def _ones(L, n, *args, **kw):
    return _full(L, n, 1)


@rule(aten.full_like)
def _full_like(L, n, x, value, **kw):
    return _full(L, n, value)


@rule(aten.new_full)
def _new_full(L, n, x, size, value, **kw):
    return _full(L, n, value)


@rule(aten.scalar_tensor)
def _scalar_tensor(L, n, value, **kw):
    return _full(L, n, value)


@rule(aten.arange)
def _arange(L, n, *args, **kw):
    nums = [a for a in args if isinstance(a, (int, float))]
    if len(nums) == 1:
        start, step = 0, 1
    elif len(nums) == 2:
        start, step = nums[0], 1
    else:
        start, step = nums[0], nums[2]
    v = n.meta["val"]
    return L.op1("iota", [], {"shape": list(v.shape), "dim": 0, "start": float(start), "step": float(step), "dtype": dtype_code(v.dtype)})


@rule(prims.iota)
def _iota(L, n, length, *, start, step, **kw):
    v = n.meta["val"]
    return L.op1("iota", [], {"shape": [length], "dim": 0, "start": float(start), "step": float(step), "dtype": dtype_code(v.dtype)})


# ---- dense ----


@rule(aten.mm, aten.bmm)
def _mm(L, n, a, b):
    if L.type(a)[0] != L.type(b)[0] or L.type(a)[0] not in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        raise Unsupported(f"matmul of {L.type(a)[0]} and {L.type(b)[0]}")
    return L.op1("matmul", [a, b])


@rule(aten.addmm)
def _addmm(L, n, bias, a, b, beta=1, alpha=1):
    out = _out_dtype(n)
    if L.type(a)[0] != L.type(b)[0] or L.type(a)[0] not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported("addmm dtypes")
    acc = torch.float32 if out in (torch.bfloat16, torch.float16) else out
    y = L.op1("matmul", [a, b], {"dtype": dtype_code(acc)}) if acc != out else L.op1("matmul", [a, b])
    if alpha != 1:
        y = L.op1("mul", [y, L.const(float(alpha), acc)])
    bb = bias if beta == 1 else L.op1("mul", [bias, L.const(float(beta), acc)], out_dtype=acc)
    return L.cast(L.op1("add", [y, bb], out_dtype=acc), out)


@rule(aten.baddbmm)
def _baddbmm(L, n, bias, a, b, beta=1, alpha=1):
    out = _out_dtype(n)
    y = L.op1("matmul", [a, b])
    if alpha != 1:
        y = L.op1("mul", [y, L.const(float(alpha), torch.float32)], out_dtype=out)
    if beta == 0:
        return y
    bb = bias if beta == 1 else L.op1("mul", [bias, L.const(float(beta), torch.float32)], out_dtype=out)
    return L.op1("add", [y, bb], out_dtype=out)


@rule(aten._softmax, aten._log_softmax)
def _softmax(L, n, x, dim, half_to_float):
    op = "softmax" if n.target.overloadpacket is aten._softmax else "log_softmax"
    return L.op1(op, [x], {"dim": dim, "dtype": dtype_code(_out_dtype(n))})


@rule(aten._softmax_backward_data, aten._log_softmax_backward_data)
def _softmax_bwd(L, n, grad, out, dim, input_dtype):
    op = "softmax_backward" if n.target.overloadpacket is aten._softmax_backward_data else "log_softmax_backward"
    return L.op1(op, [grad, out], {"dim": dim, "dtype": dtype_code(_out_dtype(n))})


def _sdpa(L, n, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *args, scale=None, **kw):
    if dropout_p:
        raise Unsupported("attention dropout")
    # The fused forward of training graphs also returns the log-sum-exp its backward reads.
    want_lse = any(u.target is operator.getitem and u.args[1] == 1 and u.users for u in n.users)
    val = n.meta["val"]
    extra = {}  # other results a backward may save: the (unused, no dropout) philox seed/offset
    for u in n.users:
        if u.target is not operator.getitem or u.args[1] in (0, 1) or not u.users:
            continue
        r = val[u.args[1]] if isinstance(val, (list, tuple)) else None
        if isinstance(r, torch.Tensor) and r.dim() == 0 and r.dtype == torch.int64:
            extra[u.args[1]] = L.const(0, torch.int64)
        else:
            raise Unsupported(f"attention result {u.args[1]} (only the output and its log-sum-exp are compiled)")
    qs = L.type(q)[1]
    if len(qs) != 4 or len(L.type(k)[1]) != 4:
        raise Unsupported("attention on non 4-D tensors")
    sc = scale if scale is not None else 1.0 / math.sqrt(qs[-1])
    ins = [q, k, v]
    if attn_mask is not None:
        full = [qs[0], qs[1], qs[2], L.type(k)[1][2]]
        ins.append(L.expand(attn_mask, full))
    attrs = {"scale": float(sc), "causal": int(bool(is_causal)), "zero_masked_rows": 1, "lse": int(want_lse)}
    outs = L.node("attention", ins, attrs)
    if isinstance(val, (list, tuple)):
        return (outs[0], outs[1] if want_lse else None) + tuple(extra.get(i) for i in range(2, len(val)))
    return outs[0]


RULES[aten.scaled_dot_product_attention] = _sdpa


@rule(aten._scaled_dot_product_fused_attention_overrideable, aten._scaled_dot_product_efficient_attention)
def _sdpa_fused(L, n, q, k, v, attn_bias=None, *args, **kw):
    if n.target.overloadpacket is aten._scaled_dot_product_efficient_attention:
        # (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, *, scale)
        dropout_p = args[1] if len(args) > 1 else kw.get("dropout_p", 0.0)
        is_causal = args[2] if len(args) > 2 else kw.get("is_causal", False)
        if any(u.target is operator.getitem and u.args[1] == 1 and u.users for u in n.users):
            raise Unsupported("the efficient-attention log-sum-exp layout")
    else:
        # (q, k, v, attn_bias, dropout_p, is_causal, return_debug_mask, *, scale)
        dropout_p = args[0] if args else kw.get("dropout_p", 0.0)
        is_causal = args[1] if len(args) > 1 else kw.get("is_causal", False)
    return _sdpa(L, n, q, k, v, attn_bias, dropout_p, is_causal, scale=kw.get("scale"))


@rule(aten._scaled_dot_product_fused_attention_overrideable_backward)
def _sdpa_fused_backward(L, n, grad_out, q, k, v, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
                         max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    """The fused kernel's backward: (dq, dk, dv) from the forward's output and log-sum-exp.
    The gradient of an additive mask (grad_input_mask[3]) is not produced here."""
    if dropout_p:
        raise Unsupported("attention dropout")
    if attn_bias is not None and len(grad_input_mask) > 3 and grad_input_mask[3] and \
            L.type(attn_bias)[0] != torch.bool:
        raise Unsupported("the gradient of an attention mask")
    qs = L.type(q)[1]
    if len(qs) != 4:
        raise Unsupported("attention on non 4-D tensors")
    dt = L.type(q)[0]
    sc = scale if scale is not None else 1.0 / math.sqrt(qs[-1])
    ins = [L.cast(grad_out, dt), q, k, v, out, logsumexp]
    if attn_bias is not None:
        ins.append(L.expand(attn_bias, [qs[0], qs[1], qs[2], L.type(k)[1][2]]))
    dq, dk, dv = L.node("attention_backward", ins, {"scale": float(sc), "causal": int(bool(is_causal))})
    return (dq, dk, dv, None)


@rule(aten._scaled_dot_product_flash_attention_for_cpu)
def _sdpa_cpu(L, n, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    return _sdpa(L, n, q, k, v, attn_mask, dropout_p, is_causal, scale=scale)


@rule(aten.embedding)
def _embedding(L, n, weight, ids, padding_idx=-1, scale_grad=False, sparse=False):
    return L.node("index", [weight, ids])[0]


@rule(aten.index_select)
def _index_select(L, n, x, dim, index):
    r = len(L.type(x)[1])
    d = dim % max(r, 1)
    return L.node("index", [x] + [-1] * d + [index])[0]


def _broadcast_indices(L, idx):
    present = [i for i in idx if i is not None]
    shapes = [L.type(i)[1] for i in present]
    bshape = list(torch.broadcast_shapes(*[torch.Size(s) for s in shapes]))
    out = []
    for i in idx:
        if i is None:
            out.append(-1)
            continue
        if L.type(i)[0] == torch.bool:
            raise Unsupported("boolean mask indexing")
        out.append(L.expand(i, bshape) if L.type(i)[1] != bshape else i)
    return out


@rule(aten.index)
def _index(L, n, x, indices):
    idx = _broadcast_indices(L, list(indices))
    return L.node("index", [x] + idx)[0]


@rule(aten.index_put)
def _index_put(L, n, x, indices, values, accumulate=False):
    idx = _broadcast_indices(L, list(indices))
    # values broadcast to the shape of x[indices]
    probe = L.node("index", [x] + idx)[0]
    target = L.type(probe)[1]
    vals = L.expand(L.cast(values, L.type(x)[0]), target)
    return L.node("index_put", [x, vals] + idx, {"accumulate": int(bool(accumulate))})[0]


@rule(aten.index_copy)
def _index_copy(L, n, x, dim, index, src):
    r = len(L.type(x)[1])
    d = dim % r
    return L.node("index_put", [x, L.cast(src, L.type(x)[0])] + [-1] * d + [index], {"accumulate": 0})[0]


@rule(aten.gather)
def _gather(L, n, x, dim, index, sparse_grad=False):
    return L.op1("gather", [x, index], {"dim": dim % max(1, len(L.type(x)[1]))})


@rule(aten.scatter, aten.scatter_add)
def _scatter(L, n, x, dim, index, src, reduce=None):
    d = dim % max(1, len(L.type(x)[1]))
    if not isinstance(src, V):
        src = L.expand(L.const(src, L.type(x)[0]), L.type(index)[1])
    add = n.target.overloadpacket is aten.scatter_add or reduce == "add"
    if reduce not in (None, "add"):
        raise Unsupported(f"scatter reduce={reduce}")
    return L.op1("scatter", [x, index, L.cast(src, L.type(x)[0])], {"dim": d, "reduce": "add" if add else ""})


@rule(aten.slice_scatter)
def _slice_scatter(L, n, x, src, dim=0, start=None, end=None, step=1):
    shape = L.type(x)[1]
    d = dim % len(shape)
    s, e, _ = slice(start, end, step).indices(shape[d])
    return L.op1("slice_scatter", [x, L.cast(src, L.type(x)[0])], {"dim": d, "start": s, "end": max(e, s), "step": step})


@rule(aten.select_scatter)
def _select_scatter(L, n, x, src, dim, index):
    shape = L.type(x)[1]
    d = dim % len(shape)
    i = index % shape[d]
    s = L.reshape(L.cast(src, L.type(x)[0]), shape[:d] + [1] + shape[d + 1 :])
    return L.op1("slice_scatter", [x, s], {"dim": d, "start": i, "end": i + 1, "step": 1})


@rule(aten.convolution)
def _conv(L, n, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise Unsupported("transposed convolution")
    sp = len(L.type(x)[1]) - 2
    if sp not in (1, 2, 3) or L.type(x)[0] not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(f"{sp}-D convolution of {L.type(x)[0]}")
    attrs = {"stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups}
    if any(isinstance(p, str) for p in padding):
        raise Unsupported("string padding")
    ins = [x, w] + ([bias] if bias is not None else [])
    return L.op1("conv", ins, attrs)


@rule(aten.convolution_backward)
def _conv_bwd(L, n, gy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask):
    if transposed:
        raise Unsupported("transposed convolution")
    sp = len(L.type(x)[1]) - 2
    if sp not in (1, 2, 3):
        raise Unsupported(f"{sp}-D convolution")
    attrs = {"stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups}
    gi, gw, gb = L.node("conv_backward", [gy, x, w], attrs)
    return (gi if mask[0] else None, gw if mask[1] else None, gb if mask[2] else None)


def _ln_stat_dtype(L, x, weight) -> torch.dtype:
    """The dtype the eager layer norm keeps mean/rstd in (the input's, fp32 for 16-bit inputs
    with fp32 weights); the graph may declare another one (AOT's meta says fp32)."""
    dt = L.type(x)[0]
    if dt in (torch.bfloat16, torch.float16) and weight is not None and L.type(weight)[0] == torch.float32:
        return torch.float32
    return dt


@rule(aten.native_layer_norm)
def _layer_norm(L, n, x, normalized_shape, weight, bias, eps):
    """One `layer_norm` step on the eager kernel: out, mean and rstd as eager computes them,
    mean/rstd then cast to the dtype the graph declares."""
    dt, shape = L.type(x)
    if not _is_float(dt):
        raise Unsupported(f"layer_norm of {dt}")
    axis = len(shape) - len(normalized_shape)
    if axis < 0 or list(shape[axis:]) != list(normalized_shape):
        raise Unsupported("layer_norm: normalized_shape does not match the input")
    ins = [x] + [p for p in (weight, bias) if p is not None]
    attrs = {"axis": axis, "eps": float(eps), "has_weight": int(weight is not None),
             "has_bias": int(bias is not None), "stat_dtype": dtype_code(_ln_stat_dtype(L, x, weight))}
    out, mean, rstd = L.node("layer_norm", ins, attrs)
    declared = n.meta["val"][1].dtype
    return (out, L.cast(mean, declared), L.cast(rstd, declared))


@rule(aten.native_layer_norm_backward)
def _layer_norm_bwd(L, n, grad_out, x, normalized_shape, mean, rstd, weight, bias, mask):
    axis = len(L.type(x)[1]) - len(normalized_shape)
    sd = _ln_stat_dtype(L, x, weight)  # exact: the forward's values were computed in it
    ins = [L.cast(grad_out, L.type(x)[0]), x, L.cast(mean, sd), L.cast(rstd, sd)]
    ins += [weight] if weight is not None else []
    gx, gw, gb = L.node("layer_norm_backward", ins, {"axis": axis, "has_weight": int(weight is not None)})
    return (gx if mask[0] else None, gw if mask[1] and weight is not None else None,
            gb if mask[2] and bias is not None else None)


def _batch_norm_node(L, n, x, weight, bias, running, momentum, eps) -> list:
    """One training `batch_norm` step on the eager kernel (batch statistics; the running ones,
    when given, updated into new values); save_mean/invstd cast to the graph's dtype."""
    dt, shape = L.type(x)
    if not _is_float(dt) or len(shape) < 2:
        raise Unsupported(f"batch_norm of {dt}{list(shape)}")
    ins = [x] + [p for p in (weight, bias) if p is not None] + list(running)
    attrs = {"has_weight": int(weight is not None), "has_bias": int(bias is not None),
             "has_running": int(bool(running)), "momentum": float(momentum), "eps": float(eps),
             "stat_dtype": dtype_code(_ln_stat_dtype(L, x, weight))}
    outs = L.node("batch_norm", ins, attrs)
    vals = n.meta["val"]
    return [outs[0], L.cast(outs[1], vals[1].dtype), L.cast(outs[2], vals[2].dtype)] + outs[3:]


@rule(aten._native_batch_norm_legit_functional)
def _batch_norm_functional(L, n, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        raise Unsupported("batch_norm_functional in evaluation mode")
    return tuple(_batch_norm_node(L, n, x, weight, bias, [running_mean, running_var], momentum, eps))


@rule(aten._native_batch_norm_legit.no_stats)
def _batch_norm_no_stats(L, n, x, weight, bias, training, momentum, eps):
    if not training:
        raise Unsupported("batch_norm without running statistics in evaluation mode")
    return tuple(_batch_norm_node(L, n, x, weight, bias, [], momentum, eps))


@rule(aten.native_batch_norm_backward)
def _batch_norm_bwd(L, n, grad_out, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask):
    """The eager batch-norm backward kernel (training: the saved batch statistics)."""
    if not train or save_mean is None or save_invstd is None:
        raise Unsupported("batch_norm_backward in evaluation mode")
    sd = _ln_stat_dtype(L, x, weight)  # exact: the forward computed them in it
    ins = [L.cast(grad_out, L.type(x)[0]), x, L.cast(save_mean, sd), L.cast(save_invstd, sd)]
    ins += [weight] if weight is not None else []
    gx, gw, gb = L.node("batch_norm_backward", ins, {"has_weight": int(weight is not None), "eps": float(eps)})
    return (gx if mask[0] else None, gw if mask[1] and weight is not None else None,
            gb if mask[2] else None)


@rule(aten.max_pool2d_with_indices)
def _maxpool(L, n, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    k = _pair(kernel)
    attrs = {"kernel": k, "stride": _pair(stride) if stride else k, "padding": _pair(padding),
             "dilation": _pair(dilation), "ceil_mode": int(ceil_mode)}
    vals, idx = L.node("max_pool", [x], attrs)
    return (vals, idx)


@rule(aten.max_pool2d_with_indices_backward)
def _maxpool_bwd(L, n, gy, x, kernel, stride, padding, dilation, ceil_mode, indices):
    k = _pair(kernel)
    attrs = {"kernel": k, "stride": _pair(stride) if stride else k, "padding": _pair(padding),
             "dilation": _pair(dilation), "ceil_mode": int(ceil_mode)}
    return L.op1("max_pool_backward", [gy, x, indices], attrs)


@rule(aten.avg_pool2d)
def _avgpool(L, n, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    k = _pair(kernel)
    attrs = {"kernel": k, "stride": _pair(stride) if stride else k, "padding": _pair(padding), "ceil_mode": int(ceil_mode),
             "count_include_pad": int(count_include_pad), "divisor": int(divisor_override or 0)}
    return L.op1("avg_pool", [x], attrs)


@rule(aten.avg_pool2d_backward)
def _avgpool_bwd(L, n, gy, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    k = _pair(kernel)
    attrs = {"kernel": k, "stride": _pair(stride) if stride else k, "padding": _pair(padding), "ceil_mode": int(ceil_mode),
             "count_include_pad": int(count_include_pad), "divisor": int(divisor_override or 0)}
    return L.op1("avg_pool_backward", [gy, x], attrs)


@rule(aten._adaptive_avg_pool2d, aten.adaptive_avg_pool2d)
def _adaptive_avg(L, n, x, output_size):
    shape = L.type(x)[1]
    h, w = shape[-2], shape[-1]
    oh, ow = _pair(output_size)
    if h % oh or w % ow:
        raise Unsupported("adaptive pooling with uneven windows")
    if (oh, ow) == (1, 1):
        return L.op1("mean", [x], {"dims": [len(shape) - 2, len(shape) - 1], "keepdim": 1, "dtype": dtype_code(_out_dtype(n))})
    k = [h // oh, w // ow]
    return L.op1("avg_pool", [x], {"kernel": k, "stride": k, "padding": [0, 0], "ceil_mode": 0, "count_include_pad": 1, "divisor": 0})


@rule(aten._adaptive_avg_pool2d_backward)
def _adaptive_avg_bwd(L, n, grad, x):
    shape = L.type(x)[1]
    gshape = L.type(grad)[1]
    h, w, oh, ow = shape[-2], shape[-1], gshape[-2], gshape[-1]
    if h % oh or w % ow:
        raise Unsupported("adaptive pooling with uneven windows")
    k = [h // oh, w // ow]
    return L.op1("avg_pool_backward", [grad, x], {"kernel": k, "stride": k, "padding": [0, 0], "ceil_mode": 0,
                                                   "count_include_pad": 1, "divisor": 0})


def _pair(v):
    if isinstance(v, int):
        return [v, v]
    v = list(v)
    return v * 2 if len(v) == 1 else v


@rule(aten.copy_)
def _copy_(L, n, dst, src, non_blocking=False):
    target = n.args[0]
    if not isinstance(target, torch.fx.Node) or target not in L.input_index:
        raise Unsupported("copy_ into a value that is not a graph input")
    v = target.meta["val"]
    value = L.expand(L.cast(src, v.dtype), list(v.shape))
    L.mutations[L.input_index[target]] = value
    return dst


# No-op assertion nodes.
for _t in (aten._assert_tensor_metadata, aten._assert_async, aten.sym_constrain_range_for_size):
    RULES[_t] = lambda L, n, *a, **k: None
