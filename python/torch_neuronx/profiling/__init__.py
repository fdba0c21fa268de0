"""Profiling neuron workloads with ``torch.profiler``.

    from torch.profiler import profile, ProfilerActivity
    from torch_neuronx.profiling import NeuronConfig, ProfileMode, NeuronProfiler

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="./profile")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=cfg, on_trace_ready=NeuronProfiler(cfg).export_trace) as prof:
        model(x)
        torch.neuron.synchronize()

With ``ProfilerActivity.PrivateUse1`` every task the neuron streams run is recorded with its
device time (a Kineto plugin in torch_neuronx._C): ``prof.key_averages()`` shows "Self NEURON"
time per kernel, and the Chrome trace has one row per logical core and stream.
``NeuronProfiler.export_trace`` writes, under ``profile_output_dir``:

- ``neuron_trace.json``: the Chrome/Perfetto trace: host ops, device activity per logical core
  (rows ``neuron:<i>``, with flow arrows from the host op that launched each task), the CPU
  fallbacks on the device timeline, and an "estimated Trainium2" row per core (every task at
  its cost-model estimate, docs/cost-model.md),
- ``neuron_summary.json`` and ``neuron_summary.txt``: device time per kernel (measured here and
  estimated for Trainium2) and per core, CPU-fallback ops, and (per mode) CPU utilisation and
  host/device memory.
"""

from __future__ import annotations

import enum
import json
import os
import resource
import time
from collections import defaultdict
from typing import Any

import torch
from torch._C._profiler import _ExperimentalConfig

from .. import _C
from .._ops_tracking import get_fallback_ops
from ._trace import annotate

__all__ = ["NeuronConfig", "NeuronProfiler", "ProfileMode"]

_DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


class ProfileMode(enum.Enum):
    """What a profile captures (the real stack's names)."""

    DEVICE = "device"  # device activity: kernels, copies, fills per logical core and stream
    RUNTIME = "runtime"  # host-side runtime activity: the aten ops that launched the work
    CPU_UTIL = "cpu_util"  # process CPU utilisation over the profiled region
    HOST_MEMORY = "host_memory"  # host RSS and device (HBM pool) memory


class NeuronConfig(_ExperimentalConfig):
    """Neuron settings for ``torch.profiler.profile(experimental_config=...)``."""

    def __init__(
        self,
        modes: list[ProfileMode] | None = None,
        max_events_per_nc: int = 1_000_000,
        capture_enabled_for_nc: list[int] | None = None,
        profile_output_dir: str = "./neuron_profile",
        neff_cache_dir: str | None = None,
        precache_node_info: bool = False,
    ):
        super().__init__()
        modes = list(modes) if modes is not None else [ProfileMode.DEVICE, ProfileMode.RUNTIME]
        for m in modes:
            if not isinstance(m, ProfileMode):
                raise TypeError(f"NeuronConfig: modes must be ProfileMode values, got {m!r}")
        if max_events_per_nc <= 0:
            raise ValueError(f"NeuronConfig: max_events_per_nc must be positive, got {max_events_per_nc}")
        n = torch.neuron.device_count()
        for c in capture_enabled_for_nc or []:
            if not 0 <= c < n:
                raise ValueError(f"NeuronConfig: capture_enabled_for_nc has core {c}; this process sees {n} cores")
        self.modes = modes
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = list(capture_enabled_for_nc) if capture_enabled_for_nc is not None else None
        self.profile_output_dir = profile_output_dir
        self.neff_cache_dir = neff_cache_dir or os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR", "/tmp/neff_cache")
        self.precache_node_info = precache_node_info


class NeuronProfiler:
    """Exports a finished ``torch.profiler`` run in the Neuron layout (``on_trace_ready``)."""

    def __init__(self, config: NeuronConfig | None = None):
        self.config = config or NeuronConfig()
        self._t0 = time.perf_counter()
        self._cpu0 = os.times()
        self.last_summary: dict[str, Any] | None = None

    def export_trace(self, prof: torch.profiler.profile) -> str:
        """Writes the trace and summaries; returns the output directory."""
        cfg = self.config
        torch.neuron.synchronize()
        out = cfg.profile_output_dir
        os.makedirs(out, exist_ok=True)
        raw = os.path.join(out, ".raw_trace.json")
        prof.export_chrome_trace(raw)
        with open(raw) as f:
            trace = json.load(f)
        os.remove(raw)

        events = trace.get("traceEvents", [])
        kept, dropped = self._filter(events)
        estimate = None
        if ProfileMode.DEVICE in cfg.modes:
            cores = cfg.capture_enabled_for_nc
            session = [s for s in _C._profiler_last_session() if cores is None or s["device"] in cores]
            estimate = annotate(kept, session)
        trace["traceEvents"] = kept
        trace_path = os.path.join(out, "neuron_trace.json")
        tmp = trace_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(trace, f)
        os.replace(tmp, trace_path)

        summary = self._summarize(kept, dropped, estimate)
        self.last_summary = summary
        with open(os.path.join(out, "neuron_summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        with open(os.path.join(out, "neuron_summary.txt"), "w") as f:
            f.write(self.format_summary(summary))
        return out

    # -- internals ---------------------------------------------------------------------------

    def _filter(self, events: list[dict]) -> tuple[list[dict], int]:
        cfg = self.config
        keep_device = ProfileMode.DEVICE in cfg.modes
        keep_runtime = ProfileMode.RUNTIME in cfg.modes
        per_core: dict[int, int] = defaultdict(int)
        kept, dropped = [], 0
        for e in events:
            cat = e.get("cat")
            if cat in _DEVICE_CATEGORIES:
                core = int(e.get("pid", 0))
                if not keep_device:
                    continue
                if cfg.capture_enabled_for_nc is not None and core not in cfg.capture_enabled_for_nc:
                    continue
                if per_core[core] >= cfg.max_events_per_nc:
                    dropped += 1
                    continue
                per_core[core] += 1
            elif cat in ("cpu_op", "user_annotation", "python_function") and not keep_runtime:
                continue
            kept.append(e)
        return kept, dropped

    def _summarize(self, events: list[dict], dropped: int, estimate: dict | None = None) -> dict[str, Any]:
        cfg = self.config
        kernels: dict[str, dict[str, float]] = {}
        cores: dict[int, float] = defaultdict(float)
        span: dict[int, list[float]] = {}
        for e in events:
            if e.get("cat") not in _DEVICE_CATEGORIES or e.get("ph") != "X":
                continue
            dur = float(e.get("dur", 0.0))
            k = kernels.setdefault(e["name"], {"calls": 0, "device_us": 0.0})
            k["calls"] += 1
            k["device_us"] += dur
            core = int(e.get("pid", 0))
            cores[core] += dur
            ts = float(e.get("ts", 0.0))
            lo, hi = span.get(core, [ts, ts + dur])
            span[core] = [min(lo, ts), max(hi, ts + dur)]
        total = sum(k["device_us"] for k in kernels.values())
        summary: dict[str, Any] = {
            "modes": [m.name for m in cfg.modes],
            "device_time_us": total,
            "kernels": dict(sorted(kernels.items(), key=lambda kv: -kv[1]["device_us"])),
            "cores": {
                f"neuron:{c}": {
                    "busy_us": busy,
                    "span_us": span[c][1] - span[c][0],
                    "utilization": busy / (span[c][1] - span[c][0]) if span[c][1] > span[c][0] else 0.0,
                }
                for c, busy in sorted(cores.items())
            },
            "dropped_events": dropped,
            "cpu_fallback_ops": get_fallback_ops(),
        }
        if estimate is not None:
            est = estimate["kernels"]
            for name, k in summary["kernels"].items():
                k["trn2_est_us"] = est.get(name, {}).get("est_us", 0.0)
            summary["trn2_estimate"] = {
                "device_time_us": sum(k["est_us"] for k in est.values()),
                "cpu_fallback_events": estimate["fallback_events"],
                "flows": estimate["flows"],
                "note": "cost model (docs/cost-model.md), not a measurement",
            }
        if ProfileMode.CPU_UTIL in cfg.modes:
            wall = time.perf_counter() - self._t0
            now = os.times()
            cpu = (now.user - self._cpu0.user) + (now.system - self._cpu0.system)
            summary["cpu_util"] = {"wall_s": wall, "cpu_s": cpu, "cpus_busy": cpu / wall if wall > 0 else 0.0}
        if ProfileMode.HOST_MEMORY in cfg.modes:
            summary["host_memory"] = {"max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
            summary["device_memory"] = {
                f"neuron:{i}": {
                    "allocated_bytes": torch.neuron.memory_allocated(i),
                    "max_allocated_bytes": torch.neuron.max_memory_allocated(i),
                    "reserved_bytes": torch.neuron.memory_reserved(i),
                }
                for i in range(torch.neuron.device_count())
                if torch.neuron.is_initialized()
            }
        return summary

    @staticmethod
    def format_summary(summary: dict[str, Any], top: int = 20) -> str:
        lines = [f"Neuron profile: {summary['device_time_us'] / 1000:.3f} ms of device time"]
        est = summary.get("trn2_estimate")
        if est is not None:
            lines.append(f"Trainium2 estimate: {est['device_time_us'] / 1000:.3f} ms of device time ({est['note']})")
        lines.append(f"{'kernel':<48} {'calls':>7} {'device ms':>11} {'share':>7} {'trn2 est. ms':>13}")
        total = summary["device_time_us"] or 1.0
        for name, k in list(summary["kernels"].items())[:top]:
            e = f"{k['trn2_est_us'] / 1000:>13.3f}" if "trn2_est_us" in k else f"{'-':>13}"
            lines.append(
                f"{name[:48]:<48} {k['calls']:>7} {k['device_us'] / 1000:>11.3f} {100 * k['device_us'] / total:>6.1f}% {e}"
            )
        for core, c in summary["cores"].items():
            lines.append(f"{core}: busy {c['busy_us'] / 1000:.3f} ms of {c['span_us'] / 1000:.3f} ms "
                         f"({100 * c['utilization']:.1f}%)")
        if summary["dropped_events"]:
            lines.append(f"dropped {summary['dropped_events']} events (max_events_per_nc)")
        lines.append(f"CPU fallback ops: {summary['cpu_fallback_ops']}")
        if "cpu_util" in summary:
            u = summary["cpu_util"]
            lines.append(f"CPU: {u['cpu_s']:.3f} s over {u['wall_s']:.3f} s wall ({u['cpus_busy']:.2f} CPUs busy)")
        if "host_memory" in summary:
            lines.append(f"host max RSS: {summary['host_memory']['max_rss_bytes'] / 2**20:.1f} MiB")
        return "\n".join(lines) + "\n"
