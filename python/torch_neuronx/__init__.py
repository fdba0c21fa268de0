"""torch_neuronx: the AWS Neuron (Trainium) device for PyTorch, emulated on the CPU by neuron-emu.

Importing this package (or just ``import torch``, through the ``torch.backends`` entry point)
registers the ``neuron`` device: ``tensor.to("neuron")``, ``torch.neuron.*``,
``torch.accelerator`` and the CPU-fallback tracking API below.
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing the package did the work.

    Defined before ``import torch``: when this package is imported first, ``import torch`` runs
    the entry points and finds this (still initializing) module; the registration below runs as
    soon as torch is imported."""


import torch  # noqa: F401  (the device registration below needs it imported)

from . import _C
from ._registration import register_device as _register_device

__version__ = "2.11.3+neuronemu"

# Kineto prints "USDT: ... SyncActivityProfilerHandler.cpp:52] profiler_start/stop" on every
# profile; the real stack's users do not see them. KINETO_LOG_LEVEL (read when a profile
# starts) set by the user wins.
import os as _os

_os.environ.setdefault("KINETO_LOG_LEVEL", "6")

_register_device()

# NKI: importing it here emits the NKI_ENABLE_TRACE_CACHE notice at `import torch` like the real
# stack; the torch operator helpers (torch.library, Dynamo) load on first use. nki imports no
# torch: this package registers the neuron device with it (the launch of NKI kernels on neuron
# tensors, and this folder, whose frames are not kernel code).
import nki as nki
import nki._frameworks as _nki_frameworks

_nki_frameworks.register(
    "neuron",
    package_dir=_os.path.dirname(_os.path.abspath(__file__)),
    launch=_C._nki_launch,
    launch_template=_C._NkiLaunchTemplate,
)

from . import distributed, neuron
from ._ops_tracking import clear_op_tracking, get_executed_ops, get_fallback_ops
from .neuron import (
    Event,
    Stream,
    StreamContext,
    current_device,
    current_stream,
    default_stream,
    device,
    device_count,
    empty_cache,
    get_device_properties,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_peak_memory_stats,
    set_device,
    set_stream,
    stream,
    synchronize,
)
from .neuron_dynamo_backend import _install as _install_dynamo_backend
from .neuron_dynamo_backend import get_dynamo_metrics, reset_dynamo_metrics

_LAZY = {"nki_op", "wrap_nki", "NKIHOPCaller"}


def __getattr__(name: str):
    if name in _LAZY:
        from . import nki_hop

        return getattr(nki_hop, name)
    raise AttributeError(f"module 'torch_neuronx' has no attribute {name!r}")


_install_dynamo_backend()


def is_neuron_runtime_initialized() -> bool:
    """True once the emulated Neuron runtime has started in this process."""
    return bool(_C._is_initialized())


__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "clear_op_tracking",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_device_properties",
    "get_dynamo_metrics",
    "get_executed_ops",
    "get_fallback_ops",
    "is_neuron_runtime_initialized",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "neuron",
    "nki",
    "nki_op",
    "reset_dynamo_metrics",
    "reset_peak_memory_stats",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
    "wrap_nki",
]
