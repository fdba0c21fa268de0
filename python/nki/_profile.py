"""``nki.simulate``, ``nki.benchmark`` and ``nki.profile``: run a kernel on the host and report
what a Trainium NeuronCore would take (the cost model in csrc/nki/cost_model.cpp, documented in
docs/cost-model.md), with a Chrome-trace / Perfetto timeline of the engines."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

from ._core import core, target
from ._jit import Kernel, TracedKernel, _execute, jit


def _as_kernel(kernel) -> Kernel:
    # A launcher of the older API (nki.baremetal(k), nki.benchmark(k), cpu_simulate(k)[lnc])
    # given to another launcher (simulate_kernel(baremetal(k), ...)) runs its kernel.
    inner = getattr(kernel, "_nki_launched_kernel", None)
    if inner is not None:
        return inner
    return kernel if isinstance(kernel, Kernel) else jit(kernel)


def _sync_if_neuron(framework: str, device) -> None:
    if framework == "neuron":
        import torch

        torch.neuron.synchronize(device)


def simulate(kernel):
    """Returns a callable that runs `kernel` on the host with every check on (hardware rules,
    uninitialized memory), with numpy arrays or torch tensors, and returns its outputs."""
    k = _as_kernel(kernel)

    def run(*args, **kwargs):
        traced, tensors, framework, device = k._specialize(args, kwargs)
        _sync_if_neuron(framework, device)
        return _execute(k, traced, tensors, framework, device, check=True, host=True)

    run.__name__ = getattr(k, "__name__", "simulate")
    return run


class LatencyStats:
    """Latency samples in microseconds."""

    def __init__(self, samples_us: list[float]):
        self.samples_us = list(samples_us)

    def get_latency_percentile(self, p: float) -> float:
        s = sorted(self.samples_us)
        if not s:
            return float("nan")
        k = (len(s) - 1) * p / 100.0
        lo, hi = int(k), min(int(k) + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples_us) if self.samples_us else float("nan")


class KernelEstimate:
    """Estimated execution of one launch on Trainium (all grid instances)."""

    def __init__(self, traced: TracedKernel, traces=None, max_events: int = 0):
        tgt = target()
        self.platform = tgt.get("platform", "trn2")
        self.cores = max(1, int(tgt.get("lnc", 1)))
        progs = traced.programs
        # Instances run in waves on the physical cores of the logical core, at the same time
        # within a wave, their timelines synchronised at core_barrier / sendrecv.
        trs = [traces[i] if (traces is not None and p.dynamic) else None for i, p in enumerate(progs)]
        est, starts = core().estimate_launch(list(progs), trs, self.cores, max_events)
        self.per_instance = list(est)
        self.offsets = [(i % self.cores, starts[i]) for i in range(len(progs))]
        self.total_ns = max((starts[i] + e.total_ns for i, e in enumerate(est)), default=0.0)
        self.hbm_read_bytes = sum(e.hbm_read_bytes for e in self.per_instance)
        self.hbm_write_bytes = sum(e.hbm_write_bytes for e in self.per_instance)
        self.flops = sum(e.flops for e in self.per_instance)
        self.instructions = sum(e.instructions for e in self.per_instance)
        busy: dict[str, float] = {}
        for e in self.per_instance:
            for k, v in e.busy_ns.items():
                busy[k] = busy.get(k, 0.0) + v
        self.busy_ns = busy
        span = self.total_ns * len(self.per_instance) if self.per_instance else 0.0
        dma_lanes = 16
        self.utilization = {
            k: (v / (span * (dma_lanes if k == "DMA" else 1)) if span else 0.0) for k, v in busy.items()
        }
        self.params = progs[0].cost_params() if progs else {}
        self._traced = traced

    @property
    def total_us(self) -> float:
        return self.total_ns / 1000.0

    @property
    def achieved_tflops(self) -> float:
        return self.flops / self.total_ns / 1000.0 if self.total_ns else 0.0

    def summary(self) -> dict:
        return {
            "platform": self.platform,
            "estimated_latency_us": self.total_us,
            "instructions": self.instructions,
            "grid_instances": len(self.per_instance),
            "physical_cores": self.cores,
            "engine_utilization": self.utilization,
            "engine_busy_us": {k: v / 1000.0 for k, v in self.busy_ns.items()},
            "hbm_read_bytes": self.hbm_read_bytes,
            "hbm_write_bytes": self.hbm_write_bytes,
            "flops": self.flops,
            "achieved_tflops": self.achieved_tflops,
            "cost_params": self.params,
        }

    def write_timeline(self, path: str) -> str:
        parts = []
        for i, (p, e) in enumerate(zip(self._traced.programs, self.per_instance)):
            c, off = self.offsets[i]
            name = f"NeuronCore {c}" + (f" (instance {i})" if len(self.per_instance) > self.cores else "")
            parts.append(p.timeline_json(e, i, name, off))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write('{"displayTimeUnit":"ns","otherData":')
            json.dump(self.summary(), f)
            f.write(',"traceEvents":[')
            f.write(",".join(parts))
            f.write("]}")
        os.replace(tmp, path)
        return path

    def __repr__(self) -> str:
        util = ", ".join(f"{k} {v:.0%}" for k, v in self.utilization.items() if v > 0)
        return (
            f"KernelEstimate({self.platform}: {self.total_us:.2f} us, {self.instructions} instructions, "
            f"HBM {self.hbm_read_bytes + self.hbm_write_bytes} B, {util})"
        )


class BenchmarkResult:
    """``nc_latency``: estimated Trainium latency (the model is deterministic, so every sample is
    the same); ``emulator_latency``: wall-clock time of the host runs; ``estimate``: engine
    utilisation, HBM traffic and FLOPs; ``timeline_path``: the Perfetto trace."""

    def __init__(self, estimate: KernelEstimate, wall_us: list[float], iters: int, timeline_path, outputs):
        self.estimate = estimate
        self.nc_latency = LatencyStats([estimate.total_us] * max(1, iters))
        self.emulator_latency = LatencyStats(wall_us)
        self.timeline_path = timeline_path
        self.outputs = outputs

    def __repr__(self) -> str:
        return (
            f"BenchmarkResult(estimated {self.estimate.platform} latency {self.estimate.total_us:.2f} us, "
            f"emulator p50 {self.emulator_latency.get_latency_percentile(50):.1f} us, timeline {self.timeline_path})"
        )


def _default_trace_path(name: str, working_directory: str | None, save_trace_name: str | None) -> str:
    if save_trace_name:
        if os.path.isabs(save_trace_name) or working_directory is None:
            return save_trace_name
        return os.path.join(working_directory, save_trace_name)
    d = working_directory or os.path.join(tempfile.gettempdir(), "neuron-emu-nki")
    return os.path.join(d, f"{name}.trace.json")


class _Benchmarked:
    def __init__(self, kernel: Kernel, warmup: int, iters: int, working_directory, save_trace_name):
        self.kernel = kernel
        self.warmup, self.iters = warmup, iters
        self.working_directory, self.save_trace_name = working_directory, save_trace_name
        self.benchmark_result: BenchmarkResult | None = None

    @property
    def _nki_launched_kernel(self) -> Kernel:
        return self.kernel

    def __getitem__(self, grid):
        return _Benchmarked(
            self.kernel[grid], self.warmup, self.iters, self.working_directory, self.save_trace_name
        )

    def __call__(self, *args, **kwargs) -> BenchmarkResult:
        k = self.kernel
        traced, tensors, framework, device = k._specialize(args, kwargs)
        _sync_if_neuron(framework, device)
        outs, traces = _execute(k, traced, tensors, framework, device, record=True, host=True)
        for _ in range(self.warmup):
            _execute(k, traced, tensors, framework, device, host=True)
        wall = []
        for _ in range(self.iters):
            t0 = time.perf_counter()
            _execute(k, traced, tensors, framework, device, host=True)
            wall.append((time.perf_counter() - t0) * 1e6)
        est = KernelEstimate(traced, traces, max_events=200_000)
        path = est.write_timeline(
            _default_trace_path(traced.meta["name"], self.working_directory, self.save_trace_name)
        )
        self.benchmark_result = BenchmarkResult(est, wall, self.iters, path, outs)
        return self.benchmark_result


def benchmark(
    kernel=None,
    *,
    warmup: int = 10,
    iters: int = 100,
    working_directory: str | None = None,
    save_trace_name: str | None = None,
    **ignored,
):
    """``nki.benchmark(kernel)(*args)`` (or ``@nki.benchmark(warmup=, iters=)`` on a kernel):
    runs the kernel `warmup + iters` times on the host and returns a BenchmarkResult with the
    estimated Trainium latency (``nc_latency.get_latency_percentile(50)``, microseconds), the
    emulator's own timings, and the engine timeline written as Perfetto JSON."""

    def wrap(kern):
        return _Benchmarked(_as_kernel(kern), warmup, iters, working_directory, save_trace_name)

    return wrap(kernel) if kernel is not None else wrap


class ProfileResult:
    def __init__(self, estimate: KernelEstimate, timeline_path: str, summary_path: str, outputs):
        self.estimate = estimate
        self.timeline_path = timeline_path
        self.summary_path = summary_path
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"ProfileResult({self.estimate!r}, timeline={self.timeline_path})"


class _Profiled:
    def __init__(self, kernel: Kernel, working_directory, save_trace_name):
        self.kernel = kernel
        self.working_directory, self.save_trace_name = working_directory, save_trace_name
        self.profile_result: ProfileResult | None = None

    @property
    def _nki_launched_kernel(self) -> Kernel:
        return self.kernel

    def __getitem__(self, grid):
        return _Profiled(self.kernel[grid], self.working_directory, self.save_trace_name)

    def __call__(self, *args, **kwargs) -> ProfileResult:
        k = self.kernel
        traced, tensors, framework, device = k._specialize(args, kwargs)
        _sync_if_neuron(framework, device)
        outs, traces = _execute(k, traced, tensors, framework, device, record=True, host=True)
        est = KernelEstimate(traced, traces, max_events=1_000_000)
        path = est.write_timeline(
            _default_trace_path(traced.meta["name"], self.working_directory, self.save_trace_name)
        )
        summary = os.path.splitext(path)[0] + ".summary.json"
        with open(summary, "w") as f:
            json.dump(dict(est.summary(), kernel=traced.meta["name"], timeline=path), f, indent=2)
        self.profile_result = ProfileResult(est, path, summary, outs)
        return self.profile_result


def profile(
    kernel=None, *, working_directory: str | None = None, save_trace_name: str | None = None, **ignored
):
    """``nki.profile(kernel)(*args)``: runs once and writes the engine timeline (Perfetto /
    chrome://tracing JSON) and a JSON summary into `working_directory`."""

    def wrap(kern):
        return _Profiled(_as_kernel(kern), working_directory, save_trace_name)

    return wrap(kernel) if kernel is not None else wrap


def estimate(kernel, *args, **kwargs) -> KernelEstimate:
    """The Trainium estimate of one launch (runs the kernel once on the host when it has runtime
    loops, whose trip counts depend on data)."""
    k = _as_kernel(kernel)
    traced, tensors, framework, device = k._specialize(args, kwargs)
    if any(p.dynamic for p in traced.programs):
        _sync_if_neuron(framework, device)
        _, traces = _execute(k, traced, tensors, framework, device, record=True, host=True)
        return KernelEstimate(traced, traces)
    return KernelEstimate(traced)

