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
from .estimate import EstimatedTime, device_time_params, estimated_time
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


def get_dynamo_metrics() -> dict:
    """Counters of ``torch.compile(backend="neuron")``: graphs compiled, NEFF cache hits and
    misses, compile time, eager fallbacks."""
    from ..neuron_dynamo_backend.metrics import get_dynamo_metrics as _get

    return _get()


def reset_dynamo_metrics() -> None:
    """Resets the counters returned by :func:`get_dynamo_metrics`."""
    from ..neuron_dynamo_backend.metrics import reset_dynamo_metrics as _reset

    _reset()


def _sleep(cycles: int) -> None:
    """No-op kept for API compatibility (the real device spins for `cycles`)."""


def __getattr__(name: str):
    if name == "default_generators":
        return tuple(_C._default_generator(i) for i in range(device_count()))
    raise AttributeError(f"module 'torch.neuron' has no attribute {name!r}")


__all__ = [
    "EstimatedTime",
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
    "device_time_params",
    "empty_cache",
    "estimated_time",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_dynamo_metrics",
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
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "query",
    "record_event",
    "reset_accumulated_memory_stats",
    "reset_dynamo_metrics",
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
