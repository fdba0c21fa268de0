"""Memory statistics of the logical cores' HBM pools (caching allocator)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from .. import _C
from ._device import _index, _lazy_init


def _idx(device) -> int:
    _lazy_init()
    return _index(device)


def empty_cache() -> None:
    """Release cached blocks of every device back to the host."""
    if _C._is_initialized():
        torch.accelerator.empty_cache()


def memory_stats(device=None) -> OrderedDict[str, Any]:
    """Allocator statistics, with the same keys as ``torch.cuda.memory_stats``."""
    return torch.accelerator.memory_stats(_idx(device))


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_idx(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_idx(device))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_idx(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_idx(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_idx(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_idx(device))


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the device's HBM pool."""
    return torch.accelerator.get_memory_info(_idx(device))


def _fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.2f} GiB"


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A human-readable table of the allocator statistics of `device`."""
    idx = _idx(device)
    s = memory_stats(idx)
    free, total = mem_get_info(idx)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Segments", "segment", False),
    ]
    width = 75
    lines = ["=" * width, f" neuron:{idx} memory summary (HBM capacity {_fmt(total)}, {_fmt(free)} free)".ljust(width)]
    lines.append("-" * width)
    lines.append(f" {'Metric':<22}| {'Cur Usage':>11} | {'Peak Usage':>11} | {'Tot Alloc':>11} | {'Tot Freed':>8}")
    lines.append("-" * width)
    for label, key, is_bytes in rows:
        vals = [s.get(f"{key}.all.{k}", 0) for k in ("current", "peak", "allocated", "freed")]
        cells = [_fmt(v) if is_bytes else str(v) for v in vals]
        lines.append(f" {label:<22}| {cells[0]:>11} | {cells[1]:>11} | {cells[2]:>11} | {cells[3]:>8}")
    lines.append("-" * width)
    lines.append(f" Allocation retries: {s.get('num_alloc_retries', 0)}    OOMs: {s.get('num_ooms', 0)}")
    lines.append("=" * width)
    return "\n".join(lines) + "\n"
