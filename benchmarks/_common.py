"""Shared helpers of the benchmarks: repeated timing with medians, and JSON results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def sync(device: str) -> None:
    if device.startswith("neuron"):
        torch.neuron.synchronize()


def time_per_call(fn: Callable[[], object], device: str, iters: int, repeats: int = 7) -> float:
    """Median seconds per call of `fn` over `repeats` runs of `iters` calls (synchronized)."""
    for _ in range(max(3, iters // 10)):
        fn()
    sync(device)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync(device)
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def read_bandwidth(mib: int = 256, repeats: int = 7) -> float:
    """The host's measured read bandwidth in bytes/s: a float32 sum over `mib` MiB (far larger
    than the caches) with torch's threads, median of `repeats`. The roofline of decode-style
    work (every weight read once per token) is bytes / this."""
    x = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    x.sum()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        samples.append(time.perf_counter() - t0)
    return x.numel() * 4 / statistics.median(samples)


def write_result(name: str, payload: dict) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    payload = {
        "benchmark": name,
        "torch": torch.__version__,
        "host": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **payload,
    }
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    return path
