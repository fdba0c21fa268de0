"""NKI, the Neuron Kernel Interface, on neuron-emu.

Kernels written for Trainium run unchanged: ``@nki.jit`` traces the kernel's Python once per
argument signature into a program of NeuronCore ISA instructions, which a C++ model of the
NeuronCore checks against the hardware rules and executes on numpy arrays, CPU tensors or
neuron tensors. ``nki.benchmark`` / ``nki.profile`` report the estimated Trainium latency and
an engine timeline.

    import nki, nki.language as nl, nki.isa as nisa
"""

from __future__ import annotations

import warnings as _warnings

__version__ = "0.5.0+neuronemu.1"

from . import _cache

if _cache.enabled():
    _warnings.warn(
        "NKI_ENABLE_TRACE_CACHE=1: the NKI kernel compile cache is persisted across processes "
        f"(traced kernels are stored in {_cache.cache_dir()} and reused by later runs while the kernel, the "
        "sources that ran while tracing it and the values it read are unchanged; unset the variable to trace "
        "in every process)",
        UserWarning,
        stacklevel=2,
    )

from . import collectives, compiler, dtype, isa, language, tensor, typing
from ._errors import NkiValidationError
from ._jit import Kernel, TracedKernel, jit

trace = jit  # the older releases' decorator (``nki_jit = nki.trace``): the same kernel object
from ._legacy import baremetal, cpu_simulate, simulate_kernel
from ._profile import (
    BenchmarkResult,
    KernelEstimate,
    ProfileResult,
    benchmark,
    estimate,
    profile,
    simulate,
)

__all__ = [
    "BenchmarkResult",
    "collectives",
    "Kernel",
    "KernelEstimate",
    "NkiValidationError",
    "ProfileResult",
    "TracedKernel",
    "baremetal",
    "benchmark",
    "compiler",
    "cpu_simulate",
    "dtype",
    "estimate",
    "isa",
    "jit",
    "trace",
    "language",
    "profile",
    "simulate",
    "simulate_kernel",
    "tensor",
    "typing",
]
