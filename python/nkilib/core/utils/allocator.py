"""The library's SBUF manager (``SbufManager`` = ``BufferManager``): places a kernel's SBUF
tensors at explicit per-partition byte addresses inside a region ``[lower, upper)``, a stack
growing up from ``lower`` (freed by closing scopes) and a heap growing down from ``upper``
(freed with ``pop_heap``), so that kernels written for it run here unchanged.

With ``use_auto_alloc=True`` (``create_auto_alloc_manager``) it places nothing: tensors are
allocated by neuron-emu's allocator, as by ``nl.ndarray``. Explicit addresses are checked by
the rule checker like any ``address=`` placement (overlaps of live tensors, SBUF capacity).
"""

from __future__ import annotations

import logging

import nki.language as nl
from nki import _dtypes

from .kernel_assert import kernel_assert

_log = logging.getLogger(__name__)

_HBM_BUFFERS = ("hbm", "shared_hbm", "private_hbm")


def sizeinbytes(dtype) -> int:
    """Bytes per element of an NKI (or numpy) dtype."""
    return _dtypes.to_dtype(dtype).itemsize


def align_to(value: int, alignment: int) -> int:
    """The smallest multiple of `alignment` >= `value`."""
    kernel_assert(alignment > 0, f"align_to: alignment must be positive, got {alignment}")
    return (value + alignment - 1) // alignment * alignment


def num_elts(shape) -> int:
    """Elements per partition of an SBUF tensor of `shape` (the free dimensions' product)."""
    n = 1
    for s in tuple(shape)[1:]:
        n *= int(s)
    return n


def _is_hbm(buffer) -> bool:
    return getattr(buffer, "name", str(buffer)).split(".")[-1] in _HBM_BUFFERS


class _Scope:
    """A stack frame: the stack address to return to when the scope closes."""

    def __init__(self, stack_addr: int, name: str):
        self.stack_addr, self.name = stack_addr, name


class BufferManager(nl.NKIObject):
    """SBUF placement in ``[sb_lower_bound, sb_upper_bound)`` bytes per partition (trace-time
    state; one manager per kernel trace). Not thread-safe (a trace runs on one thread)."""

    def __init__(
        self,
        sb_lower_bound: int,
        sb_upper_bound: int,
        logger=None,
        use_auto_alloc: bool = False,
        default_stack_alloc: bool = True,
    ):
        kernel_assert(
            0 <= sb_lower_bound <= sb_upper_bound,
            f"SbufManager: bounds [{sb_lower_bound}, {sb_upper_bound}) are not a valid region",
        )
        self.lower_bound, self.upper_bound = int(sb_lower_bound), int(sb_upper_bound)
        self.stack_curr_addr, self.heap_curr_addr = self.lower_bound, self.upper_bound
        self.use_auto_alloc = use_auto_alloc
        self.default_stack_alloc = default_stack_alloc
        self.logger = logger
        self.prefix = ""
        self.scopes: list = []
        self.heap: list = []  # (address before the allocation, name)
        self.max_stack_usage = self.max_heap_usage = 0
        self.total_stack_allocs = self.total_heap_allocs = 0

    # -- configuration
    def is_auto_alloc(self) -> bool:
        return self.use_auto_alloc

    def set_auto_alloc(self, value: bool) -> None:
        self.use_auto_alloc = value

    def is_default_stack_alloc(self) -> bool:
        return self.default_stack_alloc

    def is_default_heap_alloc(self) -> bool:
        return not self.default_stack_alloc

    def set_name_prefix(self, prefix: str) -> None:
        self.prefix = prefix

    def get_name_prefix(self) -> str:
        return self.prefix

    def _name(self, name) -> str:
        return f"{self.prefix}{name}" if name else ""

    # -- scopes (stack frames)
    def open_scope(self, interleave_degree: int = 1, name: str = "") -> None:
        """Starts a stack frame; close_scope frees everything allocated on the stack since.
        (interleave_degree, the library's multi-buffering hint, does not change placement.)"""
        kernel_assert(interleave_degree >= 1, f"SbufManager: interleave_degree {interleave_degree} < 1")
        self.scopes.append(_Scope(self.stack_curr_addr, name))

    def close_scope(self) -> None:
        kernel_assert(self.scopes, "SbufManager: close_scope without an open scope")
        self.stack_curr_addr = self.scopes.pop().stack_addr

    def increment_section(self) -> None:
        """The library's next multi-buffer section of a scope: here a fresh frame in place."""
        kernel_assert(self.scopes, "SbufManager: increment_section without an open scope")
        self.stack_curr_addr = self.scopes[-1].stack_addr

    # -- allocation
    def _bytes(self, shape, dtype) -> int:
        return num_elts(shape) * sizeinbytes(dtype)

    def _check_fit(self, what: str, name, need: int) -> None:
        kernel_assert(
            self.stack_curr_addr <= self.heap_curr_addr,
            f"SbufManager: {what} of {need} B for '{name}' does not fit: stack at {self.stack_curr_addr}, "
            f"heap at {self.heap_curr_addr} (region [{self.lower_bound}, {self.upper_bound}) bytes per partition)",
        )

    def alloc(self, shape, dtype, buffer=nl.sbuf, name=None, base_partition: int = 0, align=None):
        """An HBM tensor, or an SBUF tensor on the stack (default) or the heap."""
        if _is_hbm(buffer):
            return self.alloc_hbm(shape, dtype, buffer=buffer, name=name)
        if self.default_stack_alloc:
            return self.alloc_stack(shape, dtype, buffer, name, base_partition, align)
        return self.alloc_heap(shape, dtype, buffer, name, base_partition, align)

    def alloc_stack(self, shape, dtype, buffer=nl.sbuf, name=None, base_partition: int = 0, align=None):
        kernel_assert(not _is_hbm(buffer), "SbufManager.alloc_stack: use alloc_hbm for HBM tensors")
        kernel_assert(base_partition == 0, "SbufManager: base_partition other than 0 is not supported")
        if self.use_auto_alloc:
            return nl.ndarray(tuple(shape), dtype=dtype, buffer=buffer, name=self._name(name))
        size = self._bytes(shape, dtype)
        addr = align_to(self.stack_curr_addr, align) if align else self.stack_curr_addr
        self.stack_curr_addr = addr + size
        self._check_fit("stack allocation", name, size)
        self.total_stack_allocs += 1
        self.max_stack_usage = max(self.max_stack_usage, self.stack_curr_addr - self.lower_bound)
        return nl.ndarray(tuple(shape), dtype=dtype, buffer=buffer, name=self._name(name), address=(base_partition, addr))

    def alloc_heap(self, shape, dtype, buffer=nl.sbuf, name=None, base_partition: int = 0, align=None):
        kernel_assert(not _is_hbm(buffer), "SbufManager.alloc_heap: use alloc_hbm for HBM tensors")
        kernel_assert(base_partition == 0, "SbufManager: base_partition other than 0 is not supported")
        if self.use_auto_alloc:
            t = nl.ndarray(tuple(shape), dtype=dtype, buffer=buffer, name=self._name(name))
            self.heap.append((self.heap_curr_addr, name))
            return t
        size = self._bytes(shape, dtype)
        addr = self.heap_curr_addr - size
        if align:
            addr = addr // align * align
        self.heap.append((self.heap_curr_addr, name))
        self.heap_curr_addr = addr
        self._check_fit("heap allocation", name, size)
        self.total_heap_allocs += 1
        self.max_heap_usage = max(self.max_heap_usage, self.upper_bound - self.heap_curr_addr)
        return nl.ndarray(tuple(shape), dtype=dtype, buffer=buffer, name=self._name(name), address=(base_partition, addr))

    def pop_heap(self) -> None:
        """Frees the most recent heap allocation."""
        kernel_assert(self.heap, "SbufManager: pop_heap with an empty heap")
        self.heap_curr_addr = self.heap.pop()[0]

    def alloc_hbm(self, shape, dtype, buffer=nl.shared_hbm, name=None):
        return nl.ndarray(tuple(shape), dtype=dtype, buffer=buffer, name=self._name(name))

    # -- queries
    def get_total_space(self) -> int:
        return self.upper_bound - self.lower_bound

    def get_free_space(self) -> int:
        return self.heap_curr_addr - self.stack_curr_addr

    def get_used_space(self) -> int:
        return self.get_total_space() - self.get_free_space()

    def get_stack_curr_addr(self) -> int:
        return self.stack_curr_addr

    def get_heap_curr_addr(self) -> int:
        return self.heap_curr_addr

    def align_stack_curr_addr(self, align: int = 32) -> None:
        self.stack_curr_addr = align_to(self.stack_curr_addr, align)

    def flush_logs(self) -> None:
        _log.debug(
            "SbufManager: stack peak %d B (%d allocations), heap peak %d B (%d allocations)",
            self.max_stack_usage,
            self.total_stack_allocs,
            self.max_heap_usage,
            self.total_heap_allocs,
        )


SbufManager = BufferManager


def create_auto_alloc_manager(logger=None) -> BufferManager:
    """A manager over the whole SBUF partition that leaves placement to neuron-emu's allocator."""
    return BufferManager(0, nl.tile_size.total_available_sbuf_size, logger, use_auto_alloc=True)
