"""``TensorView``: shape / stride / offset bookkeeping over an NKI tensor (HBM or SBUF) that
turns slicing, permuting, broadcasting and reshaping into one access pattern
(``tensor.ap(pattern, offset)``) without copying data, as the library's TensorView does.

Strides and offsets count elements of the base tensor in row-major order; for an SBUF tensor
dimension 0 is the partition dimension (its stride is the partition row size), and it must
stay dimension 0 (``permute`` and ``reshape`` keep it in place).
"""

from __future__ import annotations

import nki.language as nl

from .kernel_assert import kernel_assert


def _is_hbm(t) -> bool:
    return getattr(t.buffer, "name", str(t.buffer)).split(".")[-1] in ("hbm", "shared_hbm", "private_hbm")


class TensorView(nl.NKIObject):
    """A view of ``base_tensor``: ``shape``, ``strides`` (elements), ``offset`` (elements),
    ``dtype``; ``scalar_offset``/``vector_offset`` + ``indirect_dim`` for runtime indexing
    (``select`` with a register / ``vector_select``). Every method returns a new view."""

    def __init__(self, base_tensor):
        kernel_assert(base_tensor is not None, "TensorView: base tensor cannot be None")
        if isinstance(base_tensor, TensorView):
            src = base_tensor
            self.base_tensor, self.shape, self.strides = src.base_tensor, src.shape, src.strides
            self.offset, self.dtype = src.offset, src.dtype
            self.scalar_offset, self.vector_offset, self.indirect_dim = (
                src.scalar_offset,
                src.vector_offset,
                src.indirect_dim,
            )
            return
        self.base_tensor = base_tensor
        self.shape = tuple(int(s) for s in base_tensor.shape)
        self.strides = TensorView.get_trivial_strides(self.shape)
        self.offset = 0
        self.dtype = base_tensor.dtype
        self.scalar_offset = self.vector_offset = self.indirect_dim = None

    # -- queries
    def get_dim(self) -> int:
        return len(self.shape)

    def is_sbuf(self) -> bool:
        return self.base_tensor.buffer == nl.sbuf

    def is_hbm(self) -> bool:
        return _is_hbm(self.base_tensor)

    def has_dynamic_access(self) -> bool:
        return self.scalar_offset is not None or self.vector_offset is not None

    @staticmethod
    def get_trivial_strides(shape, base_stride: int = 1) -> tuple:
        """Row-major strides of `shape`: (2, 3, 4) -> (12, 4, 1)."""
        strides, acc = [], base_stride
        for s in reversed(tuple(shape)):
            strides.append(acc)
            acc *= int(s)
        return tuple(reversed(strides))

    def _with(self, shape, strides, offset=None) -> TensorView:
        v = TensorView(self)
        v.shape, v.strides = tuple(shape), tuple(strides)
        if offset is not None:
            v.offset = offset
        return v

    def _check_dim(self, dim: int, what: str) -> int:
        n = self.get_dim()
        d = dim + n if dim < 0 else dim
        kernel_assert(0 <= d < n, f"TensorView.{what}: dimension {dim} out of range for {n} dimensions")
        return d

    # -- the access pattern
    def _get_pattern_and_offset(self):
        return [[self.strides[i], self.shape[i]] for i in range(self.get_dim())], self.offset

    def get_view(self):
        """The NKI tensor (an access pattern of the base tensor) this view describes."""
        pattern, offset = self._get_pattern_and_offset()
        kw = {"pattern": pattern, "offset": offset, "dtype": self.dtype}
        if self.vector_offset is not None:
            kw.update(vector_offset=self.vector_offset, indirect_dim=self.indirect_dim)
        elif self.scalar_offset is not None:
            kw.update(scalar_offset=self.scalar_offset, indirect_dim=self.indirect_dim)
        return self.base_tensor.ap(**kw)

    # -- views
    def slice(self, dim: int, start: int, end: int, step: int = 1) -> TensorView:
        """Elements start, start + step, ... < end of `dim` (end is clamped to the size)."""
        d = self._check_dim(dim, "slice")
        kernel_assert(step > 0, f"TensorView.slice: step must be positive, got {step}")
        end = min(end, self.shape[d])
        kernel_assert(0 <= start < end, f"TensorView.slice: empty or invalid range [{start}, {end}) of dim {d}")
        shape, strides = list(self.shape), list(self.strides)
        shape[d] = (end - start + step - 1) // step
        strides[d] = self.strides[d] * step
        return self._with(shape, strides, self.offset + start * self.strides[d])

    def select(self, dim: int, index) -> TensorView:
        """Drops `dim`, fixed at `index` (an int, or a runtime register / one-element SBUF
        tensor: a dynamic offset along `dim`)."""
        d = self._check_dim(dim, "select")
        if isinstance(index, int):
            kernel_assert(0 <= index < self.shape[d], f"TensorView.select: index {index} out of range of dim {d}")
            v = self.slice(d, index, index + 1)
            return v.squeeze_dim(d)
        kernel_assert(self.is_hbm(), "TensorView.select: a runtime index needs an HBM tensor")
        kernel_assert(not self.has_dynamic_access(), "TensorView.select: the view already has a runtime index")
        kernel_assert(
            self.shape == tuple(int(s) for s in self.base_tensor.shape),
            "TensorView.select: a runtime index applies to an unsliced, unpermuted view",
        )
        v = TensorView(self)
        v.scalar_offset, v.indirect_dim = index, d
        v.shape = self.shape[:d] + (1,) + self.shape[d + 1 :]
        return v.squeeze_dim(d)

    def vector_select(self, dim: int, vector_offset) -> TensorView:
        """Gathers along dim 0 of an HBM view at the indices in `vector_offset` (indirect DMA)."""
        d = self._check_dim(dim, "vector_select")
        kernel_assert(self.is_hbm(), "TensorView.vector_select: indirect access needs an HBM tensor")
        v = TensorView(self)
        v.vector_offset, v.indirect_dim = vector_offset, d
        return v

    def permute(self, dims) -> TensorView:
        dims = tuple(dims)
        kernel_assert(
            sorted(dims) == list(range(self.get_dim())),
            f"TensorView.permute: {dims} is not a permutation of {self.get_dim()} dimensions",
        )
        kernel_assert(
            not self.is_sbuf() or dims[0] == 0,
            f"TensorView.permute: the partition dimension of an SBUF view must stay first, got {dims}",
        )
        return self._with([self.shape[i] for i in dims], [self.strides[i] for i in dims])

    def broadcast(self, dim: int, size: int) -> TensorView:
        """Repeats a size-1 dimension `size` times (stride 0)."""
        d = self._check_dim(dim, "broadcast")
        kernel_assert(self.shape[d] == 1, f"TensorView.broadcast: dim {d} has size {self.shape[d]}, not 1")
        shape, strides = list(self.shape), list(self.strides)
        shape[d], strides[d] = size, 0
        return self._with(shape, strides)

    def expand_dim(self, dim: int) -> TensorView:
        """Inserts a size-1 dimension before `dim` (dim == get_dim() appends)."""
        kernel_assert(0 <= dim <= self.get_dim(), f"TensorView.expand_dim: dimension {dim} out of range")
        inner = self.strides[dim] * self.shape[dim] if dim < self.get_dim() else 1
        return self._with(self.shape[:dim] + (1,) + self.shape[dim:], self.strides[:dim] + (inner,) + self.strides[dim:])

    def squeeze_dim(self, dim: int) -> TensorView:
        d = self._check_dim(dim, "squeeze_dim")
        kernel_assert(self.shape[d] == 1, f"TensorView.squeeze_dim: dim {d} has size {self.shape[d]}, not 1")
        kernel_assert(not (self.is_sbuf() and d == 0), "TensorView.squeeze_dim: cannot drop the partition dimension")
        return self._with(self.shape[:d] + self.shape[d + 1 :], self.strides[:d] + self.strides[d + 1 :])

    def reshape_dim(self, dim: int, shape) -> TensorView:
        """Splits `dim` into `shape` (one entry may be -1)."""
        d = self._check_dim(dim, "reshape_dim")
        shape = list(shape)
        kernel_assert(shape.count(-1) <= 1, f"TensorView.reshape_dim: more than one -1 in {shape}")
        known = 1
        for s in shape:
            if s != -1:
                known *= s
        if -1 in shape:
            kernel_assert(known > 0 and self.shape[d] % known == 0, f"TensorView.reshape_dim: {shape} does not divide {self.shape[d]}")
            shape[shape.index(-1)] = self.shape[d] // known
        prod = 1
        for s in shape:
            prod *= s
        kernel_assert(prod == self.shape[d], f"TensorView.reshape_dim: {shape} has {prod} elements, dim {d} has {self.shape[d]}")
        kernel_assert(
            not (self.is_sbuf() and d == 0 and len(shape) > 1 and shape[0] != self.shape[0]),
            "TensorView.reshape_dim: cannot split the partition dimension of an SBUF view",
        )
        sub = TensorView.get_trivial_strides(shape, self.strides[d])
        return self._with(self.shape[:d] + tuple(shape) + self.shape[d + 1 :], self.strides[:d] + sub + self.strides[d + 1 :])

    def flatten_dims(self, start_dim: int, end_dim: int) -> TensorView:
        """Merges dimensions start_dim..end_dim (inclusive); they must be contiguous in memory."""
        a, b = self._check_dim(start_dim, "flatten_dims"), self._check_dim(end_dim, "flatten_dims")
        kernel_assert(a <= b, f"TensorView.flatten_dims: start {a} > end {b}")
        kernel_assert(not (self.is_sbuf() and a == 0 and b > 0), "TensorView.flatten_dims: cannot merge the partition dimension")
        for i in range(a, b):
            kernel_assert(
                self.strides[i] == self.strides[i + 1] * self.shape[i + 1],
                f"TensorView.flatten_dims: dims {i} and {i + 1} are not contiguous (strides {self.strides})",
            )
        n = 1
        for s in self.shape[a : b + 1]:
            n *= s
        return self._with(self.shape[:a] + (n,) + self.shape[b + 1 :], self.strides[:a] + (self.strides[b],) + self.strides[b + 1 :])

    def reshape(self, new_shape) -> TensorView:
        """A contiguous view reshaped (row-major), keeping an SBUF view's partition dimension."""
        new_shape = tuple(int(s) for s in new_shape)
        n_old = n_new = 1
        for s in self.shape:
            n_old *= s
        for s in new_shape:
            n_new *= s
        kernel_assert(n_old == n_new, f"TensorView.reshape: {self.shape} -> {new_shape} changes the element count")
        first = 1 if self.is_sbuf() else 0
        if first:
            kernel_assert(new_shape[0] == self.shape[0], "TensorView.reshape: an SBUF view keeps its partition dimension")
        inner = self.shape[first:]
        kernel_assert(
            self.strides[first:] == TensorView.get_trivial_strides(inner, self.strides[-1] if inner else 1),
            f"TensorView.reshape: the view (strides {self.strides}) is not contiguous",
        )
        base = self.strides[-1] if inner else 1
        strides = self.strides[:first] + TensorView.get_trivial_strides(new_shape[first:], base)
        return self._with(new_shape, strides)

    def reinterpret_cast(self, new_dtype) -> TensorView:
        """The same bytes as another dtype of the same size."""
        from .allocator import sizeinbytes

        kernel_assert(
            sizeinbytes(new_dtype) == sizeinbytes(self.dtype),
            f"TensorView.reinterpret_cast: {self.dtype} -> {new_dtype} changes the element size",
        )
        v = TensorView(self)
        v.dtype = new_dtype
        return v

    def __repr__(self) -> str:
        return f"TensorView(shape={self.shape}, strides={self.strides}, offset={self.offset}, dtype={self.dtype})"
