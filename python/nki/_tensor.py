"""Trace-time tensors: ``NkiTensor`` is a view (an access pattern) into one allocated tensor in
HBM, SBUF or PSUM. Every view operation (slicing, reshape, permute, broadcast, rearrange,
``ap()``) is pure index arithmetic at specialization time and costs nothing at run time.
Also the old-style index grids (``nl.arange(128)[:, None]``, ``nl.mgrid``) and masks, and
virtual registers (runtime loop variables used as dynamic offsets)."""

from __future__ import annotations

import enum
import itertools
import math
import re

from . import _dtypes as dt
from ._tracer import current, mem_code


class MemoryRegion(enum.Enum):
    """Where a tensor lives: on-chip ``sbuf``/``psum`` or device memory (``hbm``)."""

    sbuf = "sbuf"
    psum = "psum"
    hbm = "hbm"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    def __repr__(self) -> str:
        return f"nl.{self.value}"

    @property
    def mem(self) -> int:
        return mem_code(self.value if self.value in ("sbuf", "psum") else "hbm")


class _Buffer:
    """One allocated tensor of the program being traced."""

    __slots__ = ("dtype", "id", "mod", "name", "region", "shape", "slot_info")

    def __init__(self, id_: int, region: MemoryRegion, dtype: dt.DType, shape: tuple, name: str):
        self.id = id_
        self.region = region
        self.dtype = dtype
        self.shape = shape
        self.name = name
        self.slot_info = None
        self.mod = None  # _ModAlloc (the block tensor) or _ModBlock (one block of it)

    def _block(self, index: tuple) -> _Buffer:
        """The buffer of one logical block of a modulo-allocated tensor (one object per block:
        views of the same block share it)."""
        m = self.mod
        b = m.blocks.get(index)
        if b is None:
            b = _Buffer(self.id, self.region, self.dtype, self.shape, self.name)
            b.slot_info = self.slot_info
            b.mod = _ModBlock(index, m.slot_of(index), m.nslots, m.owner)
            m.blocks[index] = b
        return b

    @property
    def on_chip(self) -> bool:
        return self.region in (MemoryRegion.sbuf, MemoryRegion.psum)


def _mod_linear(index: tuple, tiles: tuple) -> int:
    """The physical tile of block `index` under ``num_*_tiles=tiles``: each block index modulo
    its tile count (block dimensions past the tuple's length share tile 0), row-major."""
    lin = 0
    for i, n in zip(index, tiles):
        lin = lin * n + i % n
    return lin


class _ModAlloc:
    """A tensor whose blocks (dimensions in front of nl.par_dim) share a few physical tiles
    round-robin, as ``nki.compiler.sbuf/psum.mod_alloc(num_*_tiles=...)`` places them."""

    __slots__ = ("blocks", "nslots", "owner", "step", "tiles")

    def __init__(self, tiles: list, step: int):
        self.tiles = [tuple(int(n) for n in t) for t in tiles]
        self.nslots = 1
        for t in self.tiles:
            for n in t:
                self.nslots *= n
        self.step = step  # elements per partition from one physical tile to the next
        self.owner: dict = {}  # physical tile -> (block index, source location) last written
        self.blocks: dict = {}

    def slot_of(self, index: tuple) -> int:
        slot = 0
        for t in self.tiles:
            n = 1
            for x in t:
                n *= x
            slot = slot * n + _mod_linear(index, t)
        return slot


class _ModBlock:
    __slots__ = ("index", "nslots", "owner", "slot")

    def __init__(self, index: tuple, slot: int, nslots: int, owner: dict):
        self.index = index
        self.slot = slot
        self.nslots = nslots
        self.owner = owner


def _row_major(shape) -> tuple:
    steps, acc = [], 1
    for s in reversed(shape):
        steps.append(acc)
        acc *= s
    return tuple(reversed(steps))


class VirtualRegister:
    """A register value (runtime loop variable, value loaded from a tensor). Unknown while the
    kernel is traced: use it as a dynamic offset (``nl.ds(i, n)``, ``t.ap(..., scalar_offset=i)``),
    not in Python control flow."""

    __slots__ = ("id",)

    def __init__(self, id_: int):
        self.id = id_

    def _expr(self) -> RegExpr:
        return RegExpr(self, 1, 0)

    def __mul__(self, k):
        return self._expr() * k

    __rmul__ = __mul__

    def __add__(self, k):
        return self._expr() + k

    __radd__ = __add__

    def __sub__(self, k):
        return self._expr() - k

    def _unknown(self, *a):
        raise TypeError(
            "the value of a VirtualRegister is only known on the device: it cannot be used in Python "
            "control flow or converted with int()/bool()/range() while the kernel is traced; "
            "use nl.fori_loop / nl.while_loop and dynamic offsets (nl.ds(i, size))"
        )

    __bool__ = __int__ = __index__ = __float__ = __iter__ = _unknown  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"VirtualRegister(r{self.id})"


class RegExpr:
    """``reg * scale + bias`` in element units of the indexed dimension."""

    __slots__ = ("bias", "reg", "scale")

    def __init__(self, reg: VirtualRegister, scale: int, bias: int):
        self.reg, self.scale, self.bias = reg, scale, bias

    def __mul__(self, k):
        if not isinstance(k, int):
            return NotImplemented
        return RegExpr(self.reg, self.scale * k, self.bias * k)

    __rmul__ = __mul__

    def __add__(self, k):
        if not isinstance(k, int):
            return NotImplemented
        return RegExpr(self.reg, self.scale, self.bias + k)

    __radd__ = __add__

    def __sub__(self, k):
        return self + (-k)

    __bool__ = __int__ = __index__ = VirtualRegister._unknown  # type: ignore[assignment]


class ParDim(int):
    """``nl.par_dim(n)``: marks the partition dimension of an on-chip tensor's shape. Dimensions
    in front of it are block dimensions: ``nl.ndarray((4, nl.par_dim(128), 512), buffer=nl.sbuf)``
    is four [128, 512] tiles (index a block with ``t[i]``)."""

    def __repr__(self) -> str:
        return f"nl.par_dim({int(self)})"


class DynSlice:
    """``nl.ds(start, size)``: ``size`` elements from ``start`` (an int or a register)."""

    __slots__ = ("size", "start")

    def __init__(self, start, size: int):
        # size 0 is an empty view (a shard with no rows); an instruction given one is refused
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"nl.ds: size must be a non-negative int, got {size!r}")
        self.start, self.size = start, size

    def __repr__(self) -> str:
        return f"nl.ds({self.start!r}, {self.size})"


# ---------------------------------------------------------------------------------------------
# Old-style index grids: nl.arange(n)[:, None] etc.


class _Var:
    # grid: the whole shape of the nl.mgrid the variable comes from (mgrid grids are dense: an
    # expression of them, e.g. iota's pattern, has the grid's shape); None for nl.arange.
    __slots__ = ("axis", "grid", "ndim", "size")

    def __init__(self, size: int, axis: int, ndim: int, grid: tuple | None = None):
        self.size, self.axis, self.ndim, self.grid = size, axis, ndim, grid


class IndexExpr:
    """An affine expression of index-grid variables: ``sum(coef * var) + const``."""

    __slots__ = ("const", "terms")

    def __init__(self, terms: dict, const: int = 0):
        self.terms = terms
        self.const = const

    def __getitem__(self, key):
        # Positions an arange on a grid axis: arange(n)[:, None] -> axis 0 of 2.
        if len(self.terms) != 1:
            raise IndexError("only a plain nl.arange(...) can be positioned with [:, None] / [None, :]")
        ((var, coef),) = self.terms.items()
        if not isinstance(key, tuple):
            key = (key,)
        axes = [i for i, k in enumerate(key) if isinstance(k, slice)]
        if len(axes) != 1 or any(k is not None for i, k in enumerate(key) if i != axes[0]):
            raise IndexError(f"index grid positioning expects one ':' and Nones, got {key!r}")
        return IndexExpr({_Var(var.size, axes[0], len(key)): coef}, self.const)

    def _combine(self, other, sign: int):
        if isinstance(other, int):
            return IndexExpr(dict(self.terms), self.const + sign * other)
        if isinstance(other, IndexExpr):
            terms = dict(self.terms)
            for v, c in other.terms.items():
                terms[v] = terms.get(v, 0) + sign * c
            return IndexExpr({v: c for v, c in terms.items() if c}, self.const + sign * other.const)
        return NotImplemented

    def __add__(self, o):
        return self._combine(o, 1)

    __radd__ = __add__

    def __sub__(self, o):
        return self._combine(o, -1)

    def __rsub__(self, o):
        return (-self)._combine(o, 1)

    def __neg__(self):
        return IndexExpr({v: -c for v, c in self.terms.items()}, -self.const)

    def __mul__(self, k):
        if not isinstance(k, int):
            return NotImplemented
        return IndexExpr({v: c * k for v, c in self.terms.items() if c * k}, self.const * k)

    __rmul__ = __mul__

    def _cmp(self, op, value):
        if not isinstance(value, (int, IndexExpr)):
            return NotImplemented
        return Mask([(self - value, op)])

    def __lt__(self, v):
        return self._cmp("<", v)

    def __le__(self, v):
        return self._cmp("<=", v)

    def __gt__(self, v):
        return self._cmp(">", v)

    def __ge__(self, v):
        return self._cmp(">=", v)

    def range(self, restrict: dict | None = None) -> tuple[int, int]:
        """Min and max value; `restrict` maps grid axes to (lo, hi) index ranges (a mask)."""
        lo = hi = self.const
        for v, c in self.terms.items():
            a, b = (restrict or {}).get(v.axis, (0, v.size - 1))
            x, y = c * a, c * b
            lo += min(x, y)
            hi += max(x, y)
        return lo, hi


class Mask:
    """A conjunction of affine predicates ``expr (<, <=, >, >=) 0`` over index-grid variables."""

    def __init__(self, preds: list):
        self.preds = preds

    def __and__(self, other: Mask) -> Mask:
        # A trace-time condition (``(i * 128 < n)`` on Python ints) is a bool: True keeps the
        # mask, False masks everything off.
        if isinstance(other, bool):
            return self if other else False
        if not isinstance(other, Mask):
            return NotImplemented
        return Mask(self.preds + other.preds)

    __rand__ = __and__

    def axis_ranges(self) -> dict[int, tuple[int, int]]:
        """Per grid axis, the index range [lo, hi] the predicates allow (rectangular masks)."""
        ranges: dict[int, tuple[int, int]] = {}
        for expr, op in self.preds:
            if len(expr.terms) != 1:
                raise ValueError(
                    "mask: only predicates on a single index variable (rectangular masks) are supported; "
                    "use nisa.affine_select for triangular masks"
                )
            ((var, c),) = expr.terms.items()
            # c * v + k (op) 0 is linear in v, so the allowed values form one interval.
            k = expr.const
            test = {
                "<": lambda x: x < 0,
                "<=": lambda x: x <= 0,
                ">": lambda x: x > 0,
                ">=": lambda x: x >= 0,
            }[op]
            ok = [v for v in range(var.size) if test(c * v + k)]
            lo, hi = (ok[0], ok[-1]) if ok else (1, 0)
            old = ranges.get(var.axis, (0, var.size - 1))
            ranges[var.axis] = (max(old[0], lo), min(old[1], hi))
        return ranges


def arange(*args) -> IndexExpr:
    r = range(*args)
    if r.step != 1:
        return IndexExpr({_Var(len(r), 0, 1): r.step}, r.start)
    return IndexExpr({_Var(len(r), 0, 1): 1}, r.start)


class _Grid(tuple):
    """The index grids of ``nl.mgrid[...]``: unpack them (``i_p, i_f = nl.mgrid[0:128, 0:512]``) or
    name them as the older releases did (``g.p`` the partition grid, then ``g.x``, ``g.y``, ``g.z``)."""

    def _axis(self, k: int, name: str):
        if k >= len(self):
            raise AttributeError(f"a {len(self)}-d nl.mgrid has no .{name} grid")
        return self[k]

    p = property(lambda self: self._axis(0, "p"))
    x = property(lambda self: self._axis(1, "x"))
    y = property(lambda self: self._axis(2, "y"))
    z = property(lambda self: self._axis(3, "z"))


class _MGrid:
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        out = []
        ranges = []
        for s in key:
            if not isinstance(s, slice):
                raise IndexError("nl.mgrid takes slices, e.g. nl.mgrid[0:128, 0:512]")
            ranges.append(range(s.start or 0, s.stop, s.step or 1))
        grid = tuple(len(r) for r in ranges)
        for axis, r in enumerate(ranges):
            out.append(IndexExpr({_Var(len(r), axis, len(key), grid): r.step}, r.start))
        return out[0] if len(out) == 1 else _Grid(out)


mgrid = _MGrid()


# ---------------------------------------------------------------------------------------------


_AP_MAX_DIMS = 6  # dimensions of one hardware access pattern


def _coalesce(shape, steps) -> tuple:
    """The same elements in the same order with fewer dimensions: size-1 free dimensions are
    dropped and free dimensions that are contiguous with each other merged (the partition
    dimension stays first). Lets views with more than 6 dimensions reach the hardware access
    pattern when their memory layout needs fewer."""
    out_n, out_s = [shape[0]], [steps[0]]
    for n, st in zip(shape[1:], steps[1:]):
        if n == 1:
            continue
        if len(out_n) > 1 and out_s[-1] == st * n:
            out_n[-1] *= n
            out_s[-1] = st
        else:
            out_n.append(n)
            out_s.append(st)
    return tuple(out_n), tuple(out_s)


class NkiTensor:
    """A tensor value while an NKI kernel is traced: a view of an allocated tensor.

    For SBUF/PSUM tensors dim 0 is the partition dimension; it stays (with size 1) when indexed
    with an int and cannot be moved by view operations.
    """

    __slots__ = ("_b", "_base", "_bounds", "_mask", "_nblock", "_offset", "_reg", "_steps", "_vec", "dtype", "shape")

    def __init__(self, b: _Buffer, shape, dtype, offset: int, steps, reg=None, base=False, nblock=0):
        self._b = b
        # Leading block dimensions in front of the partition dimension (nl.par_dim): a tensor
        # of shape (4, par_dim(128), F) is four [128, F] tiles; index the blocks away before use.
        self._nblock = nblock
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self._offset = int(offset)
        self._steps = tuple(int(s) for s in steps)
        self._reg = reg  # (VirtualRegister, scale) or None
        self._base = base
        # Index-grid dimensions that exceed the tensor unless a mask restricts them:
        # [(expr, dim_size, dim)], checked by _apply_mask / when the view is used.
        self._bounds = None
        # The index-grid mask of the old-style call that produced this tile (only the masked
        # elements were written): assigning or storing the tile copies only those.
        self._mask = None
        # Indirect (vector_offset) access: (index tile [P, 1] in SBUF, element stride the index
        # is scaled by). Only a DMA can use such a view; slicing it further is refused.
        self._vec = None

    # -- properties --------------------------------------------------------------------------
    @property
    def buffer(self) -> MemoryRegion:
        return self._b.region

    @property
    def name(self) -> str:
        return self._b.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def strides(self) -> tuple:
        return self._steps

    @property
    def on_chip(self) -> bool:
        return self._b.on_chip

    def __repr__(self) -> str:
        return (
            f"NkiTensor(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, buffer={self.buffer!r})"
        )

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self):
        raise TypeError("NkiTensor is not iterable; index it with slices or nl.arange grids")

    def __bool__(self):
        # `if cfg.index:` on an HBM tensor (a kernel argument or output) asks whether it was
        # given, as on the real stack; an on-chip tile's value is only known on the device.
        if not self.on_chip:
            return True
        raise TypeError(
            "an on-chip NkiTensor has no truth value at trace time (its value is only known on the device)"
        )

    def _ap(self) -> tuple:
        if self._vec is not None:
            raise NotImplementedError(
                f"an indirect view of '{self.name}' (ap(vector_offset=)) is an operand of nisa.dma_copy "
                "only (gather/scatter DMA); this instruction cannot take it"
            )
        if self._nblock:
            if any(n != 1 for n in self.shape[: self._nblock]):
                raise ValueError(
                    f"'{self.name}' of shape {self.shape} has {self._nblock} block dimension(s) in front of its "
                    "partition dimension (nl.par_dim); an instruction takes one tile: index the block "
                    "dimensions with ints first (t[i] or t[i, :, :])"
                )
            if isinstance(self._b.mod, _ModAlloc):
                return self[(0,) * self._nblock]._ap()
            return self._view(self.shape[self._nblock :], self._steps[self._nblock :], nblock=0)._ap()
        if self._bounds:
            expr, size, d = self._bounds[0]
            lo, hi = expr.range()
            raise IndexError(
                f"index expression covers {lo}..{hi} on dimension {d} of size {size} of '{self.name}' "
                "(restrict it with mask=...)"
            )
        shape, steps = (self.shape, self._steps) if self.shape else ((1,), (1,))
        if 0 in shape:
            raise ValueError(f"an empty view of '{self.name}' (shape {self.shape}) cannot be an instruction operand")
        if len(shape) > _AP_MAX_DIMS:
            shape, steps = _coalesce(shape, steps)
        reg, scale = (self._reg[0].id, self._reg[1]) if self._reg else (-1, 0)
        return (self._b.id, self.dtype.code, self._offset, steps, shape, reg, scale)

    def _no_indirect(self, what: str) -> None:
        if self._vec is not None:
            raise NotImplementedError(
                f"{what} of an indirect view (ap(vector_offset=)) of '{self.name}': build the whole access "
                "pattern in the .ap() call"
            )

    def _view(self, shape, steps, offset=None, reg="keep", dtype=None, nblock=None) -> NkiTensor:
        self._no_indirect("a view")
        if nblock is None:
            nblock = self._nblock if len(shape) == self.ndim else 0
        return NkiTensor(
            self._b,
            shape,
            dtype or self.dtype,
            self._offset if offset is None else offset,
            steps,
            self._reg if reg == "keep" else reg,
            nblock=nblock,
        )

    def _check_partition_dim(self, what: str, dim: int) -> None:
        if self.on_chip and dim == self._nblock:
            raise ValueError(
                f"{what}: dim 0 of an on-chip tensor is the partition dimension and cannot change"
            )

    def _dim(self, d: int) -> int:
        n = self.ndim
        if not -n <= d < n:
            raise IndexError(f"dimension {d} out of range for a tensor with {n} dimensions")
        return d % n

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, idx):
        self._no_indirect("indexing")
        if not isinstance(idx, tuple):
            idx = (idx,)
        if idx and isinstance(idx[0], NkiTensor) and not self.on_chip:
            return self._index_by_tile(idx)
        k = next((i for i, x in enumerate(idx) if isinstance(x, NkiTensor)), None)
        if k and not self.on_chip and all(isinstance(x, int) and not isinstance(x, bool) for x in idx[:k]):
            return self[idx[:k]][idx[k:]]  # data[b, idx_tile, i_f]: the ints first, then indirect
        if any(isinstance(i, IndexExpr) for i in idx):
            return self._index_grid(idx)
        if isinstance(self._b.mod, _ModAlloc) and self._nblock:
            return self._mod_block(idx)
        if Ellipsis in idx:
            k = idx.index(Ellipsis)
            fill = self.ndim - (len(idx) - 1 - sum(1 for i in idx if i is None))
            idx = idx[:k] + (slice(None),) * fill + idx[k + 1 :]
        nreal = sum(1 for i in idx if i is not None)
        if nreal > self.ndim:
            raise IndexError(f"too many indices ({nreal}) for a tensor of shape {self.shape}")
        idx = idx + (slice(None),) * (self.ndim - nreal)
        shape, steps, off, reg = [], [], self._offset, self._reg
        pdim = self._nblock if self.on_chip else 0
        nblock = 0
        d = 0
        dropped = None
        beyond = []
        for item in idx:
            if d < pdim and item is not None and not isinstance(item, int):
                nblock += 1
            if item is None:
                if self.on_chip and len(shape) == nblock and d <= pdim:
                    raise IndexError("cannot insert a dimension before the partition dimension")
                shape.append(1)
                steps.append(0)
                continue
            n, st = self.shape[d], self._steps[d]
            if isinstance(item, bool):
                raise IndexError("boolean indices are not supported")
            if isinstance(item, int):
                i = item + n if item < 0 else item
                if not 0 <= i < n:
                    raise IndexError(
                        f"index {item} is out of bounds for dimension {d} of size {n} (shape {self.shape})"
                    )
                off += i * st
                if self.on_chip and d == pdim:
                    shape.append(1)
                    steps.append(st)
                elif self.on_chip and d > pdim:
                    dropped = st
            elif isinstance(item, slice):
                start, stop, step = item.start, item.stop, item.step
                step = 1 if step is None else step
                if step <= 0:
                    raise IndexError("slice steps must be positive")
                start = 0 if start is None else (start + n if start < 0 else start)
                stop = n if stop is None else (stop + n if stop < 0 else stop)
                cnt = len(range(start, stop, step))
                if 0 <= start < n < stop and self._bounds is None:
                    # Past the end: the older releases let a mask= of the instruction clip it
                    # (nl.load(a[256:384], mask=i_p + 256 < 288)); checked when used, as an
                    # index grid's range is.
                    beyond.append((start, step, cnt, n, d, len(shape)))
                elif not (0 <= start < n) or stop > n or stop <= start:
                    raise IndexError(
                        f"slice {start}:{stop} is out of bounds or empty for dimension {d} of size {n} (shape {self.shape})"
                    )
                off += start * st
                shape.append(cnt)
                steps.append(st * step)
            elif isinstance(item, DynSlice):
                start = item.start
                if isinstance(start, int):
                    if not (0 <= start and start + item.size <= n):
                        raise IndexError(f"nl.ds({start}, {item.size}) exceeds dimension {d} of size {n}")
                    off += start * st
                else:
                    if isinstance(start, VirtualRegister):
                        start = start._expr()
                    if not isinstance(start, RegExpr):
                        raise TypeError(f"nl.ds start must be an int or a VirtualRegister, got {start!r}")
                    if reg is not None:
                        raise IndexError("only one dynamic (register) offset per access")
                    if item.size > n:
                        raise IndexError(f"nl.ds(..., {item.size}) exceeds dimension {d} of size {n}")
                    off += start.bias * st
                    reg = (start.reg, start.scale * st)
                shape.append(item.size)
                steps.append(st)
            else:
                raise IndexError(f"unsupported index {item!r}")
            d += 1
        if dropped is not None and len(shape) == nblock + 1:
            # An on-chip tile keeps a free dimension: t[:, i] of a [P, F] tile is [P, 1] (the
            # older releases' tiles are 2-D at least; the partition dimension alone is no tile).
            shape.append(1)
            steps.append(dropped)
        t = NkiTensor(self._b, shape, self.dtype, off, steps, reg, nblock=nblock)
        if beyond:
            t._bounds = [
                (IndexExpr({_Var(cnt, axis, len(shape)): step}, start), n, d)
                for start, step, cnt, n, d, axis in beyond
            ]
        return t

    def _mod_block(self, idx) -> NkiTensor:
        """Indexing a modulo-allocated block tensor: the block indices (ints) pick the block's
        physical tile; the rest indexes the tile."""
        k = self._nblock
        blocks = idx[:k]
        if len(blocks) < k or not all(isinstance(i, int) and not isinstance(i, bool) for i in blocks):
            raise IndexError(
                f"'{self.name}' is modulo-allocated (mod_alloc): index its {k} block dimension(s) "
                f"with ints first, got {idx!r}"
            )
        index = []
        for d, i in enumerate(blocks):
            n = self.shape[d]
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise IndexError(f"block index {i} is out of bounds for dimension {d} of size {n}")
            index.append(j)
        index = tuple(index)
        m = self._b.mod
        if isinstance(m, _BankAlloc):
            tile = m.tile(index)
            rest = idx[k:]
            return tile[rest] if rest else tile
        b = self._b._block(index)
        tile = NkiTensor(
            b, self.shape[k:], self.dtype, self._offset + b.mod.slot * m.step, self._steps[k:], self._reg
        )
        rest = idx[k:]
        return tile[rest] if rest else tile

    def _masked_indirect(self, shape, offset, first: int) -> NkiTensor:
        """An indirect view restricted by a mask: entries ``first .. first + shape[0] - 1``
        (their indices) and the masked ranges of the other dimensions."""
        vec, scale = self._vec
        t = NkiTensor(self._b, tuple(shape), self.dtype, offset, self._steps)
        t._vec = (vec[first : first + shape[0], :], scale)
        return t

    def _index_by_tile(self, idx) -> NkiTensor:
        """``data[idx_tile[i_p, 0], i_f]`` (older releases): the first dimension of an HBM tensor
        indexed by a [P, 1] SBUF tile of integers, an indirect (gather/scatter DMA) view: entry p
        is row ``idx_tile[p]``; the other indices are index grids or ints as usual."""
        ind = idx[0]
        parts = ind.shape[0]
        rest = idx[1:]
        if any(isinstance(i, NkiTensor) for i in rest):
            raise IndexError("only the first dimension can be indexed by a tile of indices")
        row = self[(0,) + tuple(rest)] if rest else self[0]
        if not isinstance(row, NkiTensor):
            raise IndexError("indexing by a tile needs the other dimensions to give a tensor view")
        if row.ndim and row.shape[0] == 1 and any(isinstance(i, IndexExpr) for i in rest):
            row = row._view(row.shape[1:], row._steps[1:])  # the grid's partition axis is the tile's
        t = NkiTensor(self._b, (parts,) + row.shape, self.dtype, row._offset, (0,) + row._steps)
        t._vec = (_index_vector(ind, parts), self._indirect_stride(0, self.dtype))
        return t

    def _index_grid(self, idx) -> NkiTensor:
        if len(idx) > self.ndim:
            raise IndexError(f"too many indices ({len(idx)}) for a tensor of shape {self.shape}")
        if self._nblock:
            blocks = idx[: self._nblock]
            if not all(isinstance(i, int) for i in blocks):
                raise IndexError(
                    f"'{self.name}': index its block dimensions (in front of nl.par_dim) with ints, got {blocks!r}"
                )
            return self[tuple(blocks)]._index_grid(idx[self._nblock :])
        exprs = []
        for i in idx:
            if isinstance(i, int):
                exprs.append(IndexExpr({}, i))
            elif isinstance(i, IndexExpr):
                exprs.append(i)
            else:
                raise IndexError(
                    "index grids (nl.arange / nl.mgrid) cannot be mixed with slices in one index"
                )
        ndim = 0
        for e in exprs:
            for v in e.terms:
                ndim = max(ndim, v.ndim)
        sizes = [1] * ndim
        steps = [0] * ndim
        off = self._offset
        pending = []
        for d, e in enumerate(exprs):
            lo, hi = e.range()
            if lo < 0 or hi >= self.shape[d]:
                pending.append((e, self.shape[d], d))
            off += e.const * self._steps[d]
            for v, c in e.terms.items():
                if sizes[v.axis] not in (1, v.size):
                    raise IndexError("two index variables of different sizes on the same grid axis")
                sizes[v.axis] = v.size
                steps[v.axis] += c * self._steps[d]
        rest_shape = list(self.shape[len(exprs) :])
        rest_steps = list(self._steps[len(exprs) :])
        t = NkiTensor(self._b, sizes + rest_shape, self.dtype, off, steps + rest_steps, self._reg)
        t._bounds = pending or None
        return t

    def __setitem__(self, idx, value) -> None:
        from . import language as nl

        nl._assign(self[idx], value)

    # -- view operations -------------------------------------------------------------------------
    def is_contiguous(self) -> bool:
        """Row-major without gaps; the step of a dimension of size 1 (it is never taken) and of
        an empty view does not matter."""
        if 0 in self.shape:
            return True
        return all(n == 1 or s == r for s, r, n in zip(self._steps, _row_major(self.shape), self.shape))

    def get_pattern(self) -> list:
        return [[s, n] for s, n in zip(self._steps, self.shape)]

    def is_indirect(self) -> bool:
        return self._vec is not None or self._reg is not None

    def vector_select(self, dim: int, vector_offset: NkiTensor) -> NkiTensor:
        """Per-partition gather/scatter view of an HBM tensor: partition p of the access reads
        (or writes) index ``vector_offset[p]`` of dimension 0."""
        if self._dim(dim) != 0:
            raise ValueError("vector_select: dim must be 0")
        pattern = [[self._steps[0], vector_offset.shape[0]]] + [[s, n] for s, n in zip(self._steps[1:], self.shape[1:])]
        return self.ap(pattern, offset=self._offset, vector_offset=vector_offset, indirect_dim=0)

    def indirect(self, index: NkiTensor, num_elem: int | None = None) -> NkiTensor:
        raise NotImplementedError(
            "NkiTensor.indirect() (Tensor Indirection for compute instructions) is a NeuronCore-v4 (trn3) "
            "feature that neuron-emu does not model yet; for gather/scatter DMA use "
            ".ap(pattern, vector_offset=idx, indirect_dim=0) with nisa.dma_copy"
        )

    def permute(self, *dims) -> NkiTensor:
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        dims = tuple(self._dim(d) for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise ValueError(f"permute: {dims} is not a permutation of {self.ndim} dimensions")
        if self.on_chip and dims[0] != 0:
            raise ValueError("permute: the partition dimension (dim 0) of an on-chip tensor must stay first")
        return self._view([self.shape[d] for d in dims], [self._steps[d] for d in dims])

    def transpose(self, *dims) -> NkiTensor:
        return self.permute(*dims) if dims else self.permute(*reversed(range(self.ndim)))

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        d = self._dim(dim)
        self._check_partition_dim("broadcast", d)
        if self.shape[d] != 1:
            raise ValueError(
                f"broadcast: dimension {d} has size {self.shape[d]}, only size-1 dimensions broadcast"
            )
        shape, steps = list(self.shape), list(self._steps)
        shape[d], steps[d] = size, 0
        return self._view(shape, steps)

    def expand_dim(self, dim: int) -> NkiTensor:
        d = dim + self.ndim + 1 if dim < 0 else dim
        if not 0 <= d <= self.ndim:
            raise IndexError(f"expand_dim: position {dim} out of range")
        if self.on_chip and d == 0:
            raise ValueError("expand_dim: cannot insert before the partition dimension")
        shape, steps = list(self.shape), list(self._steps)
        shape.insert(d, 1)
        steps.insert(d, 0)
        return self._view(shape, steps)

    def squeeze_dim(self, dim: int) -> NkiTensor:
        d = self._dim(dim)
        self._check_partition_dim("squeeze_dim", d)
        if self.shape[d] != 1:
            raise ValueError(f"squeeze_dim: dimension {d} has size {self.shape[d]}")
        return self._view(self.shape[:d] + self.shape[d + 1 :], self._steps[:d] + self._steps[d + 1 :])

    def reshape_dim(self, dim: int, shape) -> NkiTensor:
        d = self._dim(dim)
        shape = tuple(shape)
        if math.prod(shape) != self.shape[d]:
            raise ValueError(f"reshape_dim: {shape} does not have {self.shape[d]} elements")
        if self.on_chip and d == 0 and len(shape) != 1:
            raise ValueError("reshape_dim: the partition dimension cannot be split")
        inner = _row_major(shape)
        steps = [s * self._steps[d] for s in inner]
        return self._view(
            self.shape[:d] + shape + self.shape[d + 1 :],
            self._steps[:d] + tuple(steps) + self._steps[d + 1 :],
        )

    def flatten_dims(self, start: int = 0, end: int = -1) -> NkiTensor:
        s, e = self._dim(start), self._dim(end)
        if s > e:
            raise ValueError("flatten_dims: start must not exceed end")
        if self.on_chip and s == 0 and e > 0:
            raise ValueError("flatten_dims: the partition dimension cannot be merged with free dimensions")
        for k in range(s, e):
            if self._steps[k] != self._steps[k + 1] * self.shape[k + 1]:
                raise ValueError(f"flatten_dims: dimensions {s}..{e} are not contiguous in memory")
        n = math.prod(self.shape[s : e + 1])
        return self._view(
            self.shape[:s] + (n,) + self.shape[e + 1 :],
            self._steps[:s] + (self._steps[e],) + self._steps[e + 1 :],
        )

    def reshape(self, *shape, **kw) -> NkiTensor:
        if kw:  # the older keyword form: t.reshape(shape=(N, H, W))
            if shape or set(kw) != {"shape"}:
                raise TypeError(f"reshape() takes a shape (positionally or as shape=), got {sorted(kw)}")
            shape = (kw["shape"],)
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(shape)
        if shape.count(-1) > 1:
            raise ValueError("reshape: at most one -1")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.size // known if known else 0
        if math.prod(shape) != self.size:
            raise ValueError(f"reshape: cannot view {self.shape} ({self.size} elements) as {tuple(shape)}")
        if self.on_chip:
            if shape[0] != self.shape[0]:
                raise ValueError(
                    f"reshape: the partition dimension of an on-chip tensor stays {self.shape[0]} (got {shape[0]})"
                )
            free = self._view(self.shape[1:], self._steps[1:])
            inner = free._reshape_steps(shape[1:])
            return self._view(shape, (self._steps[0],) + inner)
        return self._view(shape, self._reshape_steps(shape))

    def _reshape_steps(self, new_shape) -> tuple:
        # Groups of old dimensions that are contiguous with each other can be regrouped freely.
        old = [(n, s) for n, s in zip(self.shape, self._steps) if n != 1]
        groups = []
        for n, s in old:
            if groups and groups[-1][1] == s * n:
                groups[-1] = [groups[-1][0] * n, s]
            else:
                groups.append([n, s])
        out = []
        gi = 0
        remaining = groups[0][0] if groups else 1
        for n in new_shape:
            if n == 1:
                out.append(0)
                continue
            while gi < len(groups) and remaining == 1:
                gi += 1
                remaining = groups[gi][0] if gi < len(groups) else 1
            if gi >= len(groups) or remaining % n != 0:
                raise ValueError(
                    f"reshape: a view with shape {self.shape} and strides {self._steps} cannot be reshaped to "
                    f"{tuple(new_shape)} without a copy"
                )
            remaining //= n
            out.append(groups[gi][1] * remaining)
        return tuple(out)

    def rearrange(self, pattern: str, **sizes) -> NkiTensor:
        lhs, rhs = (p.strip() for p in pattern.split("->"))
        lgroups, rgroups = _parse_einops(lhs), _parse_einops(rhs)
        if len(lgroups) != self.ndim:
            raise ValueError(
                f"rearrange: '{lhs}' names {len(lgroups)} dimensions, the tensor has {self.ndim}"
            )
        # Split every input group into its named axes.
        t = self
        axis_names: list[str] = []
        d = 0
        for g in lgroups:
            if len(g) > 1:
                known = {n: sizes[n] for n in g if n in sizes}
                if len(known) < len(g) - 1:
                    raise ValueError(f"rearrange: give sizes for all but one of {g}")
                rest = t.shape[d] // math.prod(known.values())
                split = [known.get(n, rest) for n in g]
                t = t.reshape_dim(d, split)
            axis_names += g
            d += len(g)
        flat_r = [n for g in rgroups for n in g]
        if sorted(flat_r) != sorted(axis_names):
            raise ValueError(f"rearrange: '{rhs}' must use exactly the axes of '{lhs}'")
        t = t.permute(*[axis_names.index(n) for n in flat_r])
        for d, g in enumerate(rgroups):
            if len(g) > 1:
                t = t.flatten_dims(d, d + len(g) - 1)
        return t

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> NkiTensor:
        idx = [slice(None)] * self.ndim
        idx[self._dim(dim)] = slice(start, end, step)
        return self[tuple(idx)]

    def select(self, dim: int, index) -> NkiTensor:
        d = self._dim(dim)
        idx = [slice(None)] * self.ndim
        if isinstance(index, int):
            idx[d] = index
            return self[tuple(idx)]
        idx[d] = DynSlice(index, 1)
        v = self[tuple(idx)]
        return v if (self.on_chip and d == 0) else v.squeeze_dim(d)

    def view(self, dtype) -> NkiTensor:
        new = dt.to_dtype(dtype)
        if new.itemsize == self.dtype.itemsize:
            return self._view(self.shape, self._steps, dtype=new)
        if self.ndim == 0 or self._steps[-1] != 1:
            raise ValueError(
                "view(dtype): the innermost dimension must be contiguous to change the element size"
            )
        num, den = self.dtype.itemsize, new.itemsize
        if (self.shape[-1] * num) % den or (self._offset * num) % den:
            raise ValueError(f"view(dtype): {self.shape} {self.dtype} does not tile evenly into {new}")
        steps = [s * num // den for s in self._steps[:-1]] + [1]
        shape = list(self.shape[:-1]) + [self.shape[-1] * num // den]
        if any((s * num) % den for s in self._steps[:-1]):
            raise ValueError(f"view(dtype): strides of {self.shape} do not convert to {new}")
        return self._view(shape, steps, offset=self._offset * num // den, dtype=new)

    reinterpret_cast = view

    def ap(
        self,
        pattern,
        offset: int = 0,
        scalar_offset=None,
        vector_offset=None,
        indirect_dim: int = 0,
        dtype=None,
    ):
        self._no_indirect("ap()")
        if vector_offset is not None and scalar_offset is not None:
            raise ValueError("ap: vector_offset and scalar_offset are mutually exclusive")
        b = self._b
        new_dt = dt.to_dtype(dtype) if dtype is not None else b.dtype
        pattern = [tuple(int(x) for x in p) for p in pattern]
        if not pattern or any(len(p) != 2 for p in pattern):
            raise ValueError("ap: pattern is a list of [step, num] pairs")
        reg = None
        if scalar_offset is not None:
            if isinstance(scalar_offset, NkiTensor):
                scalar_offset = _register_from_tensor(scalar_offset)
            e = scalar_offset._expr() if isinstance(scalar_offset, VirtualRegister) else scalar_offset
            if not isinstance(e, RegExpr):
                raise TypeError(
                    "ap: scalar_offset must be a VirtualRegister (e.g. a fori_loop variable) or a "
                    f"one-element SBUF tensor holding the offset, got {type(scalar_offset).__name__}"
                )
            # The offset counts steps of dimension `indirect_dim` of this tensor (its shape, not
            # the new pattern's), as for vector_offset and as the NKI docs define it.
            st = self._indirect_stride(indirect_dim, new_dt)
            offset += e.bias * st
            reg = (e.reg, e.scale * st)
        t = NkiTensor(b, [p[1] for p in pattern], new_dt, offset, [p[0] for p in pattern], reg)
        if vector_offset is not None:
            if self.on_chip:
                raise ValueError(
                    f"ap(vector_offset=): the indexed tensor '{self.name}' must be in HBM (indirect DMA gathers "
                    "from / scatters to device memory)"
                )
            t._vec = (_index_vector(vector_offset, pattern[0][1]), self._indirect_stride(indirect_dim, new_dt))
        return t

    def _indirect_stride(self, indirect_dim: int, new_dt) -> int:
        """The element stride (in `new_dt` elements) of dimension `indirect_dim` of this tensor:
        what an indirect index is scaled by."""
        if not 0 <= indirect_dim < max(1, self.ndim):
            raise IndexError(f"ap: indirect_dim {indirect_dim} out of range for a tensor of shape {self.shape}")
        st = self._steps[indirect_dim] if self.ndim else 1
        num, den = self.dtype.itemsize, new_dt.itemsize
        if (st * num) % den:
            raise ValueError(f"ap: the stride of dimension {indirect_dim} does not convert to {new_dt}")
        return st * num // den

    # -- old-style helpers ----------------------------------------------------------------------
    def broadcast_to(self, shape) -> NkiTensor:
        from . import language as nl

        return nl.broadcast_to(self, shape)

    def astype(self, dtype) -> NkiTensor:
        from . import language as nl

        return nl.copy(self, dtype=dtype)

    # -- arithmetic (nki.language convenience ops) --------------------------------------------
    def _bin(self, other, name, reverse=False):
        from . import language as nl

        fn = getattr(nl, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o):
        return self._bin(o, "add")

    def __radd__(self, o):
        return self._bin(o, "add", True)

    def __sub__(self, o):
        return self._bin(o, "subtract")

    def __rsub__(self, o):
        return self._bin(o, "subtract", True)

    def __mul__(self, o):
        return self._bin(o, "multiply")

    def __rmul__(self, o):
        return self._bin(o, "multiply", True)

    def __truediv__(self, o):
        return self._bin(o, "divide")

    def __rtruediv__(self, o):
        return self._bin(o, "divide", True)

    def __pow__(self, o):
        return self._bin(o, "power")

    def __mod__(self, o):
        return self._bin(o, "mod")

    def __and__(self, o):
        return self._bin(o, "bitwise_and")

    def __or__(self, o):
        return self._bin(o, "bitwise_or")

    def __xor__(self, o):
        return self._bin(o, "bitwise_xor")

    def __lshift__(self, o):
        return self._bin(o, "left_shift")

    def __rshift__(self, o):
        return self._bin(o, "right_shift")

    def __lt__(self, o):
        return self._bin(o, "less")

    def __le__(self, o):
        return self._bin(o, "less_equal")

    def __gt__(self, o):
        return self._bin(o, "greater")

    def __ge__(self, o):
        return self._bin(o, "greater_equal")

    def __neg__(self):
        from . import language as nl

        return nl.negative(self)

    def __abs__(self):
        from . import language as nl

        return nl.abs(self)

    def __invert__(self):
        from . import language as nl

        return nl.invert(self)

    def _inplace(self, o, name):
        from . import isa as nisa
        from . import language as nl

        if name == "add" and isinstance(o, NkiTensor) and nisa._accumulate_fresh_matmul(self, o):
            return self
        getattr(nl, name)(self, o, _dst=self)
        return self

    def _same_access(self, other: NkiTensor) -> bool:
        """True when both views name the same elements of the same tensor in the same order."""
        if self is other:
            return True
        if self._b is not other._b or self.dtype != other.dtype or self.shape != other.shape:
            return False
        if self._offset != other._offset or self._steps != other._steps or self._reg != other._reg:
            return False
        if self._nblock != other._nblock:
            return False
        va, vb = self._vec, other._vec
        if (va is None) != (vb is None):
            return False
        return va is None or (va[0]._same_access(vb[0]) and va[1] == vb[1])

    def __iadd__(self, o):
        return self._inplace(o, "add")

    def __isub__(self, o):
        return self._inplace(o, "subtract")

    def __imul__(self, o):
        return self._inplace(o, "multiply")

    def __itruediv__(self, o):
        return self._inplace(o, "divide")

    __hash__ = object.__hash__


def _parse_einops(side: str) -> list[list[str]]:
    groups = []
    for m in re.finditer(r"\(([^)]*)\)|(\S+)", side):
        groups.append(m.group(1).split() if m.group(1) is not None else [m.group(2)])
    return groups


def new_tensor(
    shape, dtype, buffer: MemoryRegion, name: str = "", address=None, is_input: bool = False
) -> NkiTensor:
    """Allocates a tensor in the program being traced."""
    tr = current()
    region = getattr(buffer, "_nki_region", None)  # nki.compiler allocation directives
    directive = None
    if isinstance(region, MemoryRegion):
        directive, buffer = buffer, region
    if isinstance(buffer, str):
        raise TypeError(
            f"buffer={buffer!r}: use nl.sbuf / nl.psum / nl.hbm / nl.shared_hbm (strings are not accepted)"
        )
    if not isinstance(buffer, MemoryRegion):
        raise TypeError(f"buffer must be an nl memory region (nl.sbuf, nl.psum, ...), got {buffer!r}")
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    pdims = [i for i, s in enumerate(shape) if isinstance(s, ParDim)]
    if len(pdims) > 1:
        raise ValueError(f"shape {shape}: at most one nl.par_dim")
    shape = tuple(int(s) for s in shape)
    if buffer == MemoryRegion.psum and _places_banks(directive):
        if address is not None:
            raise ValueError(f"'{name}': address= and a {directive!r} placement both place the tensor")
        return _new_psum_placed(shape, pdims[0] if pdims else 0, dtype, name, directive)
    if pdims and pdims[0] > 0 and buffer in (MemoryRegion.sbuf, MemoryRegion.psum):
        k = pdims[0]
        if getattr(directive, "kind", None) == "mod_alloc":
            return _new_mod_alloc(shape, k, dtype, buffer, name, address, directive.hints)
        # Block dimensions: allocate [partition, *blocks, *free] and view it with the blocks first.
        alloc_shape = (shape[k],) + shape[:k] + shape[k + 1 :]
        base = new_tensor(alloc_shape, dtype, buffer, name, address, is_input)
        order = list(range(1, k + 1)) + [0] + list(range(k + 1, len(shape)))
        return NkiTensor(
            base._b, shape, base.dtype, 0, [base.strides[i] for i in order], nblock=k
        )
    dtype = dt.to_dtype(dtype)
    counter = tr.__dict__.setdefault("_names", itertools.count())
    if not name:
        name = f"{buffer.value}_{next(counter)}"
    fixed_p, fixed_f = -1, -1
    if address is not None:
        if buffer not in (MemoryRegion.sbuf, MemoryRegion.psum):
            raise ValueError("address= places SBUF/PSUM tensors only")
        fixed_p, fixed_f = (int(a) for a in address)
    if buffer in (MemoryRegion.sbuf, MemoryRegion.psum) and len(shape) < 1:
        raise ValueError("on-chip tensors need at least one dimension")
    loc = tr.loc()
    bid = tr.program.add_buffer(buffer.mem, dtype.code, list(shape), name, loc, is_input, fixed_p, fixed_f)
    b = _Buffer(bid, buffer, dtype, shape, name)
    if buffer not in (MemoryRegion.sbuf, MemoryRegion.psum):
        kind = "in" if is_input else ("shared" if buffer == MemoryRegion.shared_hbm else "private")
        b.slot_info = {"kind": kind, "shape": shape, "dtype": str(dtype), "name": name}
        tr.hbm.append(b.slot_info)
    return NkiTensor(b, shape, dtype, 0, _row_major(shape), base=True)


_PSUM_BANK_BYTES = 2048  # per partition: 16 KiB of PSUM in 8 banks


def _new_mod_alloc(shape, k, dtype, buffer, name, address, hints) -> NkiTensor:
    """``nl.ndarray((*blocks, nl.par_dim(P), *free), buffer=sbuf/psum.mod_alloc(...))``: the
    blocks share ``prod(num_*_tiles)`` physical tiles round-robin (block i on tile i % n per
    block dimension; no tile counts: every block on one tile). PSUM bank tiles are whole banks.
    The allocator places the tiles (base_addr/base_bank are not obeyed); reading a block whose
    tile another block has overwritten is reported (nki._tracer._check_mod_slots)."""
    blocks, parts, free = shape[:k], shape[k], shape[k + 1 :]
    dtype = dt.to_dtype(dtype)
    tiles = []
    for key in ("num_bank_tiles", "num_par_tiles", "num_free_tiles"):
        t = hints.get(key)
        if t:
            t = tuple(t)
            if len(t) > len(blocks) or any(int(n) < 1 for n in t):
                raise ValueError(
                    f"mod_alloc({key}={t}): one positive tile count per block dimension (blocks {blocks})"
                )
            tiles.append(t)
    elems = 1
    for n in free:
        elems *= n
    step = elems
    if buffer == MemoryRegion.psum and hints.get("num_bank_tiles"):
        per_bank = _PSUM_BANK_BYTES // dtype.itemsize  # partial bank allocation is not allowed
        step = -(-elems // per_bank) * per_bank
    m = _ModAlloc(tiles, step)
    base = new_tensor((parts, m.nslots * step), dtype, buffer, name, address)
    base._b.mod = m
    steps = [0] * k + [base.strides[0]] + list(_row_major(free))
    return NkiTensor(base._b, shape, dtype, 0, steps, nblock=k)


def _places_banks(directive) -> bool:
    """``psum.mod_alloc(...)`` and ``psum.alloc(func)`` name the PSUM bank (and partition and
    byte offset) of every block: the kernel places its PSUM tensors itself."""
    kind = getattr(directive, "kind", None)
    return kind == "mod_alloc" or (kind == "alloc" and callable(directive.hints.get("func")))


def _mod_place(hints: dict, index: tuple, parts: int, nbytes: int) -> tuple:
    """(bank, start partition, byte offset in the bank) of block `index` under
    ``psum.mod_alloc(base_addr, base_bank=, num_bank_tiles=, base_partition=, num_par_tiles=,
    num_free_tiles=)``, as the NKI docs define it: each block index modulo its tile count
    (missing counts: 1), row-major; a bank tile is one bank, a partition tile `parts`
    partitions, a free tile the block's bytes."""
    out = []
    for base, key, scale in (("base_bank", "num_bank_tiles", 1), ("base_partition", "num_par_tiles", parts),
                             ("base_addr", "num_free_tiles", nbytes)):
        tiles = tuple(int(n) for n in (hints.get(key) or ()))
        if len(tiles) > len(index) or any(n < 1 for n in tiles):
            raise ValueError(
                f"psum.mod_alloc({key}={tiles}): one positive tile count per block dimension (blocks {len(index)})"
            )
        out.append(int(hints.get(base) or 0) + _mod_linear(index, tiles) * scale)
    return tuple(out)


class _BankAlloc(_ModAlloc):
    """A PSUM tensor whose blocks the kernel places itself (``psum.mod_alloc`` /
    ``psum.alloc(func)``): each block is a tensor of its own at the named bank, partition and
    byte offset, so blocks of several tensors share banks exactly as the kernel says (the
    allocator checks that no two of them overlap while both are live, and places the other
    PSUM tensors around them). Blocks of one tensor on one place are read back only while no
    other block of it has written there since (nki._tracer._check_mod_slots)."""

    __slots__ = ("dtype", "free", "name", "parts", "place", "region")

    def __init__(self, place, parts: int, free: tuple, dtype, name: str):
        super().__init__([], 0)
        self.place, self.parts, self.free, self.dtype, self.name = place, parts, free, dtype, name
        self.region = MemoryRegion.psum

    def tile(self, index: tuple) -> NkiTensor:
        t = self.blocks.get(index)
        if t is not None:
            return t
        nbytes = math.prod(self.free) * self.dtype.itemsize
        where = self.place(index, self.parts, nbytes)
        if not isinstance(where, (tuple, list)) or len(where) != 3:
            raise ValueError(
                f"'{self.name}': the PSUM placement of block {index} is {where!r}; it is "
                "(bank, start partition, byte offset in the bank)"
            )
        bank, p0, off = (int(v) for v in where)
        target = current().target
        banks = int(target["psum_banks"])
        bank_bytes = int(target["psum_bytes_per_partition"]) // banks
        if not 0 <= bank < banks or off < 0 or p0 < 0:
            raise ValueError(
                f"'{self.name}': block {index} is placed on PSUM bank {bank}, partition {p0}, byte {off}; "
                f"PSUM has banks 0..{banks - 1} of {bank_bytes} bytes per partition"
            )
        label = ", ".join(str(i) for i in index)
        t = new_tensor((self.parts,) + tuple(self.free), self.dtype, MemoryRegion.psum,
                       f"{self.name}[{label}]" if index else self.name, (p0, bank * bank_bytes + off))
        t._b.mod = _ModBlock(index, (bank, p0, off), banks, self.owner)
        self.blocks[index] = t
        return t


def _new_psum_placed(shape, k, dtype, name, directive) -> NkiTensor:
    """A PSUM tensor placed by ``psum.mod_alloc`` / ``psum.alloc(func)``: its blocks (the
    dimensions in front of nl.par_dim; none: one block, index ()) each go where the directive
    puts them."""
    dtype = dt.to_dtype(dtype)
    if not name:
        counter = current().__dict__.setdefault("_names", itertools.count())
        name = f"psum_{next(counter)}"
    blocks, parts, free = shape[:k], shape[k], shape[k + 1 :]
    if directive.kind == "alloc":
        func = directive.hints["func"]

        def place(index, p, nbytes):
            return func(idx=index, pdim_size=p, fdim_size=nbytes)  # by name, as the compiler calls it
    else:
        hints = directive.hints

        def place(index, p, nbytes):
            return _mod_place(hints, index, p, nbytes)

    m = _BankAlloc(place, parts, free, dtype, name)
    if not blocks:
        return m.tile(())
    whole = _Buffer(-1, MemoryRegion.psum, dtype, shape, name)
    whole.mod = m
    return NkiTensor(whole, shape, dtype, 0, [0] * (k + 1 + len(free)), nblock=k)


def _index_vector(v, parts: int) -> NkiTensor:
    """The [P, 1] SBUF tile of per-partition indices of an indirect access pattern."""
    if not isinstance(v, NkiTensor) or not v.on_chip or v.buffer.name.lower() != "sbuf":
        raise TypeError(f"ap: vector_offset must be an SBUF tensor of shape (P, 1) holding indices, got {v!r}")
    if str(v.dtype) not in ("int32", "uint32", "int16", "uint16", "int8", "uint8"):
        raise TypeError(f"ap: vector_offset holds integer indices, got dtype {v.dtype}")
    if v.ndim == 1 or v.ndim > 2 and all(n == 1 for n in v.shape[1:]):
        v = v._view((v.shape[0], 1), (v.strides[0], 1))  # (P,), (P, 1, 1, ...): one index a partition
    if v.ndim != 2 or v.shape[1] != 1 or v.shape[0] != parts:
        raise ValueError(
            f"ap: vector_offset has shape {v.shape}; it holds one index per entry of the pattern's first "
            f"dimension: ({parts}, 1)"
        )
    return v


def _register_from_tensor(t: NkiTensor) -> VirtualRegister:
    """``ap(scalar_offset=<tensor>)``: the offset is read from memory when the access runs; load
    the element into a fresh register (``register_load``, which checks it is one element)."""
    from . import isa as nisa

    if not t.on_chip:
        raise TypeError("ap: a scalar_offset tensor must be on chip (SBUF), like the DMA's offset register source")
    r = nisa.register_alloc()
    nisa.register_load(r, t)
    return r
