"""Trace-time state: the program being built for one kernel instance, source locations, and
the instruction emitter every ``nki.isa`` / ``nki.language`` call goes through.

The codes below mirror the C++ enums in csrc/nki (program.h, alu.h); instr_layout.md there
documents the operand slots of every opcode.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from ._core import core

# neuron::nki::Op
OP = {
    name: i
    for i, name in enumerate(
        [
            "DmaCopy",
            "TensorCopy",
            "Memset",
            "Iota",
            "TensorTensor",
            "TensorScalar",
            "ScalarTensorTensor",
            "TensorReduce",
            "PartitionReduce",
            "Activation",
            "Reciprocal",
            "TensorTensorScan",
            "TensorScalarReduce",
            "Matmul",
            "Transpose",
            "AffineSelect",
            "SelectReduce",
            "CopyPredicated",
            "BnStats",
            "BnAggr",
            "Max8",
            "RegMove",
            "RegLoad",
            "RegStore",
            "LoopBegin",
            "LoopEnd",
            "WhileBegin",
            "WhileEnd",
            "TensorScalarCumulative",
            "RangeSelect",
        ]
    )
}
# neuron::nki::Engine
ENGINE = {"tensor": 0, "vector": 1, "scalar": 2, "gpsimd": 3, "dma": 4, "sync": 5}
# neuron::nki::Mem
MEM_HBM, MEM_SBUF, MEM_PSUM = 0, 1, 2
# neuron::nki::Alu
ALU = {
    name: i
    for i, name in enumerate(
        [
            "bypass",
            "add",
            "subtract",
            "multiply",
            "divide",
            "maximum",
            "minimum",
            "abs_max",
            "abs_min",
            "power",
            "mod",
            "fmod",
            "equal",
            "not_equal",
            "less",
            "less_equal",
            "greater",
            "greater_equal",
            "logical_and",
            "logical_or",
            "logical_xor",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
            "left_shift",
            "right_shift",
        ]
    )
}
# neuron::nki::Act
ACT = {
    name: i
    for i, name in enumerate(
        [
            "copy",
            "exp",
            "log",
            "sqrt",
            "rsqrt",
            "tanh",
            "sigmoid",
            "relu",
            "gelu",
            "gelu_apprx_tanh",
            "gelu_apprx_sigmoid",
            "gelu_dx",
            "gelu_apprx_sigmoid_dx",
            "silu",
            "silu_dx",
            "softplus",
            "mish",
            "erf",
            "erf_dx",
            "reciprocal",
            "sin",
            "cos",
            "tan",
            "arctan",
            "square",
            "abs",
            "sign",
            "negative",
            "ceil",
            "floor",
            "trunc",
            "logical_not",
            "invert",
        ]
    )
}

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_NEURONX_DIR = os.path.join(os.path.dirname(_PKG_DIR), "torch_neuronx")


class TraceError(Exception):
    pass


class Trace:
    """The program of one kernel instance while its Python meta-code runs."""

    def __init__(self, target: dict, grid: tuple, pid: tuple, kernel_name: str):
        self.target = target
        self.grid = grid
        self.pid = pid
        self.kernel_name = kernel_name
        self.program = core().Program({k: target[k] for k in _TARGET_KEYS})
        self.loc_cache: dict[tuple, int] = {}
        self.api: str | None = None
        self.hbm: list[dict] = []  # per HBM slot: {"kind": "in"/"shared"/"private", ...}
        self.psum_written: dict[int, list[tuple[int, int]]] = {}
        self.loop_depth = 0
        self.default_loc = -1
        self.emitted = 0
        self.max_instructions = max_instructions()
        self.unrolling: list[UnrolledRange] = []  # trace-time loops being unrolled, outermost first

    def loc(self) -> int:
        """Index of the kernel source location that is executing (first frame outside nki)."""
        f = sys._getframe(1)
        while f is not None:
            fn = f.f_code.co_filename
            if not fn.startswith((_PKG_DIR, _TORCH_NEURONX_DIR, "<frozen")):
                key = (fn, f.f_lineno)
                idx = self.loc_cache.get(key)
                if idx is None:
                    idx = self.program.intern(f"{_short_path(fn)}:{f.f_lineno}")
                    self.loc_cache[key] = idx
                return idx
            f = f.f_back
        return self.default_loc


MAX_INSTRUCTIONS_ENV = "NEURON_EMU_NKI_MAX_INSTRUCTIONS"
DEFAULT_MAX_INSTRUCTIONS = 250_000  # ~190 MB of instructions; the largest nkilib test kernel has ~2,300


def max_instructions() -> int:
    """The cap on instructions one kernel instance may emit while it is traced."""
    v = os.environ.get(MAX_INSTRUCTIONS_ENV, "").strip()
    if not v:
        return DEFAULT_MAX_INSTRUCTIONS
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(
            f"{MAX_INSTRUCTIONS_ENV}={v!r}: expected a positive integer (default {DEFAULT_MAX_INSTRUCTIONS})"
        )
    return n


class UnrolledRange:
    """A loop unrolled at trace time (``nl.affine_range`` / ``sequential_range`` /
    ``static_range``): iterates like ``range`` and, while it runs, tells the instruction cap which
    loop of the kernel is unrolling."""

    __slots__ = ("api", "range", "where")

    def __init__(self, r: range, api: str, where: str):
        self.range = r
        self.api = api
        self.where = where

    def __iter__(self):
        tr = active()
        if tr is None:
            yield from self.range
            return
        tr.unrolling.append(self)
        try:
            yield from self.range
        finally:
            try:
                tr.unrolling.remove(self)
            except ValueError:
                pass

    def __len__(self) -> int:
        return len(self.range)

    def __getitem__(self, i):
        return self.range[i]

    def __reversed__(self):
        return reversed(self.range)

    def __contains__(self, x) -> bool:
        return x in self.range

    @property
    def start(self) -> int:
        return self.range.start

    @property
    def stop(self) -> int:
        return self.range.stop

    @property
    def step(self) -> int:
        return self.range.step

    def __repr__(self) -> str:
        r = self.range
        return f"nl.{self.api}({r.start}, {r.stop}, {r.step})"


def caller_location() -> str:
    """file:line of the first frame outside the nki package (the kernel code calling an API)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith((_PKG_DIR, _TORCH_NEURONX_DIR, "<frozen")):
        f = f.f_back
    return f"{_short_path(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else "<unknown>"


def _too_many_instructions(tr: Trace) -> None:
    if tr.unrolling:
        loops = " inside ".join(f"{u!r} at {u.where} ({len(u)} iterations)" for u in reversed(tr.unrolling))
        what = f"while unrolling {loops}"
    else:
        what = f"at {caller_location()}"
    raise TraceError(
        f"kernel {tr.kernel_name}: tracing emitted more than {tr.max_instructions} instructions {what}. "
        "Trace-time loops (nl.affine_range, nl.sequential_range, nl.static_range, Python loops) are unrolled "
        f"into one instruction per iteration; use nl.fori_loop for a loop that runs on the device, or raise "
        f"{MAX_INSTRUCTIONS_ENV} (now {tr.max_instructions})"
    )


_TARGET_KEYS = (
    "nc_version",
    "sbuf_bytes_per_partition",
    "psum_bytes_per_partition",
    "psum_banks",
    "partitions",
)


def _short_path(fn: str) -> str:
    try:
        rel = os.path.relpath(fn)
    except ValueError:
        return fn
    return rel if not rel.startswith("..") else fn


_state = threading.local()


def current() -> Trace:
    tr = getattr(_state, "trace", None)
    if tr is None:
        raise TraceError(
            "this NKI API can only be called while an @nki.jit kernel is being traced "
            "(call the kernel, e.g. kernel(a, b), instead of calling the API directly)"
        )
    return tr


def active() -> Trace | None:
    return getattr(_state, "trace", None)


@contextlib.contextmanager
def tracing(tr: Trace):
    prev = getattr(_state, "trace", None)
    _state.trace = tr
    try:
        yield tr
    finally:
        _state.trace = prev


@contextlib.contextmanager
def api(name: str):
    """Marks instructions emitted inside as coming from nki.language.<name> (outermost wins)."""
    tr = current()
    outer = tr.api
    if outer is None:
        tr.api = name
    try:
        yield
    finally:
        tr.api = outer


@contextlib.contextmanager
def suppressed():
    """Inside the block, instructions are not emitted (tensors are still allocated): an old-style
    call masked off by a compile-time False mask, or the allocation pass of a masked call."""
    tr = current()
    prev = getattr(tr, "suppress", False)
    tr.suppress = True
    try:
        yield
    finally:
        tr.suppress = prev


def emit(op: str, engine: str, aps, ints=(), floats=(), api_name: str | None = None) -> None:
    tr = current()
    if getattr(tr, "suppress", False):
        return
    blocked = [a for a in aps if a is not None and getattr(a, "_nblock", 0)]
    if blocked:
        _emit_per_block(op, engine, aps, ints, floats, api_name, blocked)
        return
    tr.emitted += 1
    if tr.emitted > tr.max_instructions:
        _too_many_instructions(tr)
    name = api_name or tr.api
    api_idx = tr.program.intern(name) if name else -1
    tr.program.add(
        OP[op],
        ENGINE[engine],
        [None if a is None else a._ap() for a in aps],
        [int(x) for x in ints],
        [float(x) for x in floats],
        tr.loc(),
        api_idx,
    )


def _emit_per_block(op, engine, aps, ints, floats, api_name, blocked) -> None:
    """An instruction on tensors with nl.par_dim block dimensions runs once per block (each
    block is a separate tile); operands without blocks are reused by every block."""
    import itertools

    shape = blocked[0].shape[: blocked[0]._nblock]
    for a in blocked:
        if a.shape[: a._nblock] != shape:
            raise ValueError(
                f"operands with different block dimensions (nl.par_dim): {shape} and {a.shape[: a._nblock]}"
            )
    for idx in itertools.product(*[range(n) for n in shape]):
        emit(op, engine, [a[idx] if a is not None and getattr(a, "_nblock", 0) else a for a in aps],
             ints, floats, api_name)
