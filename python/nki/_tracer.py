"""Trace-time state: the program being built for one kernel instance, source locations, and
the instruction emitter every ``nki.isa`` / ``nki.language`` call goes through.

The instruction set itself (opcodes, operand names, attribute slots, ALU operators,
activation functions, engines, memories) is declared once in csrc/nki/isa.def; ``isa()``
reads it from the native core, and ``emit`` places operands and attributes by name.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from ._core import core


class _Op:
    """One instruction of the table: where each operand and attribute goes."""

    __slots__ = ("api", "attrs", "code", "engines", "name", "nfloats", "nints", "noperands", "operands", "writes")

    def __init__(self, name: str, e: dict):
        self.name = name
        self.code = e["code"]
        self.api = e["api"]
        self.engines = frozenset(e["engines"])
        self.operands = {n: k for k, n in enumerate(e["operands"])}
        self.noperands = len(e["operands"])
        self.writes = frozenset(e["writes"])
        # name -> (kind, slot, count)
        self.attrs = {n: tuple(v) for n, v in e["attrs"].items()}
        self.nints = max([s + c for k, s, c in self.attrs.values() if k != "float"] or [0])
        self.nfloats = max([s + c for k, s, c in self.attrs.values() if k == "float"] or [0])


class Isa:
    """The native instruction set tables (read once)."""

    def __init__(self, t: dict):
        self.ops = {name: _Op(name, e) for name, e in t["ops"].items()}
        self.alu = {n: i for i, n in enumerate(t["alu"])}
        self.act = {n: i for i, n in enumerate(t["act"])}
        self.engine = {n: i for i, n in enumerate(t["engines"])}
        self.mem = {n: i for i, n in enumerate(t["mems"])}
        self.reduce_cmd = list(t["reduce_cmd"])
        self.dtypes = [(n, size) for n, size in t["dtypes"]]


_ISA: Isa | None = None


def isa() -> Isa:
    global _ISA
    if _ISA is None:
        _ISA = Isa(core().isa_table())
    return _ISA


def alu_code(name: str) -> int | None:
    return isa().alu.get(name)


def act_code(name: str) -> int | None:
    return isa().act.get(name)


def mem_code(name: str) -> int:
    """The code of memory "hbm", "sbuf" or "psum"."""
    return isa().mem[name]


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames in these files are not kernel code: nki's own, and the packages of frameworks that
# registered with nki (nki._frameworks).
_NOT_KERNEL_CODE: tuple[str, ...] = (_PKG_DIR, "<frozen")


def add_library_dir(d: str) -> None:
    """Frames in `d` are not kernel code either (nki._frameworks.register)."""
    global _NOT_KERNEL_CODE
    if d not in _NOT_KERNEL_CODE:
        _NOT_KERNEL_CODE = (*_NOT_KERNEL_CODE, d)


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
        self.psum_written: dict = {}  # PSUM tensor id -> bytes an nc_matmul wrote (numpy bool)
        self.fresh_matmul = None  # (buffer, instruction index, nc_matmul arguments) of an old-style result
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
            if not fn.startswith(_NOT_KERNEL_CODE):
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


class LoopIndex(int):
    """The value of an unrolled loop's iterator (an ``int`` everywhere); it also tells whether
    it is the loop's first iteration (``nl.loop_reduce`` starts its reduction there)."""

    def __new__(cls, value: int, first: bool):
        self = super().__new__(cls, value)
        self.first = first
        return self


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
            for k, i in enumerate(self.range):
                yield LoopIndex(i, k == 0)
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
    while f is not None and f.f_code.co_filename.startswith(_NOT_KERNEL_CODE):
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


def emit(
    op: str, engine: str, operands: dict | None = None, attrs: dict | None = None, api_name: str | None = None
) -> None:
    """Appends instruction `op` (its isa.def name) run by `engine` with operands and attributes
    given by name; every attribute the entry declares must be given (loop jump targets are
    filled in by the core)."""
    tr = current()
    if getattr(tr, "suppress", False):
        return
    operands = operands or {}
    blocked = [a for a in operands.values() if a is not None and getattr(a, "_nblock", 0)]
    if blocked:
        _emit_per_block(op, engine, operands, attrs, api_name, blocked)
        return
    tr.emitted += 1
    if tr.emitted > tr.max_instructions:
        _too_many_instructions(tr)
    t = isa()
    info = t.ops[op]
    aps = [None] * info.noperands
    shared = []
    for name, v in operands.items():
        k = info.operands.get(name)
        if k is None:
            raise TypeError(f"{info.api} has no operand {name!r} (operands: {sorted(info.operands)})")
        aps[k] = None if v is None else v._ap()
        if v is not None and getattr(getattr(v, "_b", None), "mod", None) is not None:
            shared.append((name, v))
    if shared:
        _check_mod_slots(tr, info, shared, attrs or {}, api_name)
    ints = [0] * info.nints
    floats = [0.0] * info.nfloats
    attrs = attrs or {}
    for name, (kind, slot, count) in info.attrs.items():
        if name not in attrs:
            if kind == "jump":
                continue
            raise TypeError(f"{info.api}: attribute {name!r} not given")
        v = attrs[name]
        if kind == "float":
            floats[slot] = float(v)
        elif count > 1:
            vals = [int(x) for x in v]
            if len(vals) != count:
                raise ValueError(f"{info.api}: attribute {name!r} takes {count} values, got {len(vals)}")
            ints[slot : slot + count] = vals
        else:
            ints[slot] = int(bool(v)) if kind == "bool" else int(v)
    for name in attrs:
        if name not in info.attrs:
            raise TypeError(f"{info.api} has no attribute {name!r} (attributes: {sorted(info.attrs)})")
    name = api_name or tr.api
    api_idx = tr.program.intern(name) if name else -1
    engine_code = t.engine.get(engine)
    if engine_code is None:
        raise ValueError(f"{info.api}: unknown engine {engine!r}")
    tr.program.add(info.code, engine_code, aps, ints, floats, tr.loc(), api_idx)


def _kernel_where() -> str:
    """``file:line`` of the kernel source executing (first frame outside nki)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_NOT_KERNEL_CODE):
        f = f.f_back
    return f"{_short_path(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else "?"


def _check_mod_slots(tr, info, shared, attrs, api_name) -> None:
    """Blocks of a modulo-allocated tensor (``sbuf/psum.mod_alloc(num_free_tiles=...)``) share
    physical tiles round-robin: reading a block whose tile another block has written since is
    a hazard (the data is gone), reported here; a write makes the block the tile's owner."""
    from ._errors import NkiValidationError

    accumulates = bool(attrs.get("accumulate"))
    for name, v in shared:
        blk = v._b.mod
        if name in info.writes and not (accumulates and name == "dst"):
            continue
        owner = blk.owner.get(blk.slot)
        if owner is not None and owner[0] != blk.index:
            where = _kernel_where()
            what = api_name or tr.api
            instr = info.api if not what or what == info.api else f"{info.api} (from {what})"
            if isinstance(blk.slot, tuple):  # a placed PSUM block: (bank, partition, byte)
                tile = f"PSUM place (bank {blk.slot[0]}, partition {blk.slot[1]}, byte {blk.slot[2]})"
            else:
                tile = f"physical tile {blk.slot} (modulo allocation, {blk.nslots} tile(s) for the blocks)"
            e = NkiValidationError(
                f"{instr} at {where}: reads block {blk.index} of '{v.name}', whose {tile} was overwritten "
                f"by block {owner[0]} at {owner[1]} [rule: a modulo-allocated block is read before "
                "another block reuses its tile]"
            )
            e.kind, e.instruction, e.location = "validation", instr, where
            e.rule = "a modulo-allocated block is read before another block reuses its tile"
            raise e
    for name, v in shared:
        if name in info.writes:
            blk = v._b.mod
            blk.owner[blk.slot] = (blk.index, _kernel_where())


def _emit_per_block(op, engine, operands: dict, attrs, api_name, blocked) -> None:
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
        per_block = {
            name: a[idx] if a is not None and getattr(a, "_nblock", 0) else a for name, a in operands.items()
        }
        emit(op, engine, per_block, attrs, api_name)
