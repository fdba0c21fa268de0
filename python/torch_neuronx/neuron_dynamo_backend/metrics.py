"""Counters behind ``torch.neuron.get_dynamo_metrics()``: Dynamo graphs received, AOT graphs
compiled, NEFF cache hits/misses, compile time, eager fallbacks and NKI ops compiled as native
nodes (merged with the C++ compiler's counters)."""

from __future__ import annotations

import threading

from .. import _C

_lock = threading.Lock()
_py: dict = {}


def _reset_py() -> None:
    _py.clear()
    _py.update(
        dynamo_graphs=0,
        aot_graphs={"inference": 0, "forward": 0, "backward": 0},
        neff_sources={"compiled": 0, "memory": 0, "disk": 0},
        warm_starts=0,
        backend_time_s=0.0,
        fallback_ops={},
        nki_ops={},
    )


_reset_py()


def record_dynamo_graph() -> None:
    with _lock:
        _py["dynamo_graphs"] += 1


def record_aot_graph(kind: str) -> None:
    with _lock:
        _py["aot_graphs"][kind] = _py["aot_graphs"].get(kind, 0) + 1


def record_compile(source: str) -> None:
    with _lock:
        _py["neff_sources"][source] = _py["neff_sources"].get(source, 0) + 1


def record_warm_start() -> None:
    with _lock:
        _py["warm_starts"] += 1


def record_backend_time(seconds: float) -> None:
    with _lock:
        _py["backend_time_s"] += seconds


def record_fallback(ops: dict[str, str]) -> None:
    with _lock:
        for op in ops:
            _py["fallback_ops"][op] = _py["fallback_ops"].get(op, 0) + 1


def record_nki_op(name: str) -> None:
    with _lock:
        _py["nki_ops"][name] = _py["nki_ops"].get(name, 0) + 1


def get_dynamo_metrics() -> dict:
    """A snapshot of the neuron torch.compile metrics."""
    m = dict(_C._cc.metrics())
    with _lock:
        m.update(
            dynamo_graphs=_py["dynamo_graphs"],
            aot_graphs=dict(_py["aot_graphs"]),
            neff_sources=dict(_py["neff_sources"]),
            warm_starts=_py["warm_starts"],
            backend_time_s=_py["backend_time_s"],
            fallback_ops=dict(_py["fallback_ops"]),
            nki_ops=dict(_py["nki_ops"]),
        )
    m["cache_hits"] = m["cache_hits_memory"] + m["cache_hits_disk"]
    return m


def reset_dynamo_metrics() -> None:
    """Zeroes every counter (the caches keep their contents)."""
    _C._cc.reset_metrics()
    with _lock:
        _reset_py()
