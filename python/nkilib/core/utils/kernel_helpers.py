"""Small helpers shared by the kernels: integer tiling arithmetic and launch-grid sharding."""

from __future__ import annotations

import nki.language as nl

from .kernel_assert import kernel_assert

PSUM_BANK_SIZE = 2048  # bytes per partition per PSUM bank


def div_ceil(n: int, d: int) -> int:
    return (n + d - 1) // d


def get_program_sharding_info() -> tuple[int, int, int]:
    """(grid ndim, number of programs on axis 0, this program's id) of the current launch."""
    ndim = nl.program_ndim()
    if ndim == 0:
        return 0, 1, 0
    return ndim, nl.num_programs(0), nl.program_id(0)


def get_verified_program_sharding_info(kernel_name: str = "", allowed_ndims=None, max_sharding=None):
    """Like get_program_sharding_info, checking the grid is one the kernel supports: its number
    of axes in `allowed_ndims` and at most `max_sharding` programs on axis 0 (None: no check)."""
    ndim, n, pid = get_program_sharding_info()
    name = kernel_name or "kernel"
    kernel_assert(
        allowed_ndims is None or ndim in tuple(allowed_ndims),
        f"{name}: launch grid with {ndim} axes is not supported (allowed: {allowed_ndims})",
    )
    kernel_assert(
        max_sharding is None or n <= max_sharding,
        f"{name}: at most {max_sharding} programs (LNC), got {n}",
    )
    return ndim, n, pid


def shard_range(total: int, n: int, k: int, quantum: int = 1) -> tuple[int, int]:
    """[start, stop) of shard k of n over `total` items, in multiples of `quantum` where possible."""
    units = div_ceil(total, quantum)
    per = div_ceil(units, n)
    start = min(total, k * per * quantum)
    stop = min(total, (k + 1) * per * quantum)
    return start, stop
