"""``torch.neuron``: the device module of the neuron device (CUDA-like API)."""

from __future__ import annotations

import torch

from .. import _C
from ._device import (
    NeuronDeviceProperties,
    _is_in_bad_fork,
    _lazy_init,
    current_device,
    device,
    device_count,
    device_of,
    get_amp_supported_dtype,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
)
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    query,
    record_event,
    set_stream,
    stream,
    wait_event,
    wait_stream,
)


def _sleep(cycles: int) -> None:
    """No-op kept for API compatibility (the real device spins for `cycles`)."""


def __getattr__(name: str):
    if name == "default_generators":
        return tuple(_C._default_generator(i) for i in range(device_count()))
    raise AttributeError(f"module 'torch.neuron' has no attribute {name!r}")


__all__ = [
    "Event",
    "NeuronDeviceProperties",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "query",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "record_event",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
    "wait_event",
    "wait_stream",
]

del torch
