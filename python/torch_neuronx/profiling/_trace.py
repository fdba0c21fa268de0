"""Neuron additions to an exported Chrome trace (``NeuronProfiler.export_trace``).

- device processes named ``neuron:<i>`` (Kineto labels them "GPU <i>"), the CPU-fallback row
  named, the estimated rows ordered after the measured ones;
- an "estimated Trainium2" process per logical core: every device task at its cost-model
  estimate, placed on the estimated clock (torch.neuron.estimated_time), and the CPU fallbacks;
- CPU fallbacks as events on the device timeline (the device waits while the host runs them);
- flow arrows from the host op that launched a task to the task.
"""

from __future__ import annotations

import bisect
from typing import Any

from .. import _C

EST_PID_BASE = 100_000  # estimated rows: pid EST_PID_BASE + device
FALLBACK_TID = -1  # the CPU-fallback row of a device (rt::kFallbackRow)
_DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _meta(name: str, pid: int, args: dict, tid: int | None = None) -> dict:
    e = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        e["tid"] = tid
    return e


def annotate(events: list[dict[str, Any]], session: list[dict] | None = None) -> dict[str, Any]:
    """Adds the neuron rows, estimated track, fallback events and flows to `events` (in place);
    returns what it added: counts and the estimated per-kernel times."""
    session = _C._profiler_last_session() if session is None else session
    by_key = {}
    for e in events:
        if e.get("cat") in _DEVICE_CATEGORIES and e.get("ph") == "X":
            seq = (e.get("args") or {}).get("seq")
            if seq is not None:
                by_key[(int(e["pid"]), int(e["tid"]), int(seq))] = e
    # The session's times are relative to its start; one matched task anchors them on the trace.
    base = None
    for s in session:
        e = by_key.get((s["device"], s["stream"], s["seq"]))
        if e is not None and not s["fallback"]:
            base = float(e["ts"]) - s["start_us"]
            break
    devices = sorted({s["device"] for s in session} | {k[0] for k in by_key})
    added: list[dict] = []
    for d in devices:
        added.append(_meta("process_name", d, {"name": f"neuron:{d}"}))
        added.append(_meta("process_labels", d, {"labels": "measured on this host"}))
        added.append(_meta("process_sort_index", d, {"sort_index": 1000 + 2 * d}))
        added.append(_meta("process_name", EST_PID_BASE + d, {"name": f"neuron:{d} estimated Trainium2"}))
        added.append(_meta("process_labels", EST_PID_BASE + d, {"labels": "cost model, not a measurement"}))
        added.append(_meta("process_sort_index", EST_PID_BASE + d, {"sort_index": 1001 + 2 * d}))
    for e in events:  # Kineto's own labels of the device processes
        if e.get("ph") == "M" and e.get("name") == "process_name" and e.get("pid") in devices:
            e["args"] = {"name": f"neuron:{e['pid']}"}
    est_kernels: dict[str, dict[str, float]] = {}
    n_fallback = n_flow = n_est = 0
    if base is None:
        events.extend(added)
        return {"estimated_events": 0, "fallback_events": 0, "flows": 0, "kernels": {}}
    streams = {(s["device"], s["stream"]) for s in session}
    for d, st in sorted(streams):
        name = "CPU fallback (host runs the op)" if st == FALLBACK_TID else f"stream {st}"
        added.append(_meta("thread_name", EST_PID_BASE + d, {"name": name}, st))
        if st == FALLBACK_TID:
            added.append(_meta("thread_name", d, {"name": name}, st))
    cpu_ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"), key=lambda e: float(e["ts"])
    )
    starts = [float(e["ts"]) for e in cpu_ops]
    for s in session:
        dur = max(0.0, s["est_end_us"] - s["est_start_us"])
        est = {
            "name": s["name"],
            "ph": "X",
            "cat": "cpu_fallback_estimate" if s["fallback"] else "trn2_estimate",
            "pid": EST_PID_BASE + s["device"],
            "tid": s["stream"],
            "ts": base + s["est_start_us"],
            "dur": dur,
            "args": {"measured_us": s["end_us"] - s["start_us"]},
        }
        added.append(est)
        n_est += 1
        if s["fallback"]:
            added.append(
                {
                    "name": s["name"],
                    "ph": "X",
                    "cat": "cpu_fallback",
                    "pid": s["device"],
                    "tid": FALLBACK_TID,
                    "ts": base + s["start_us"],
                    "dur": s["end_us"] - s["start_us"],
                    "args": {"trn2_est_us": dur},
                }
            )
            n_fallback += 1
            continue
        k = est_kernels.setdefault(s["name"], {"calls": 0, "est_us": 0.0, "measured_us": 0.0})
        k["calls"] += 1
        k["est_us"] += dur
        k["measured_us"] += s["end_us"] - s["start_us"]
        dev_event = by_key.get((s["device"], s["stream"], s["seq"]))
        if dev_event is None or not s["launch_us"]:
            continue
        ts = base + s["launch_us"]
        op = _enclosing(cpu_ops, starts, ts)
        if op is None:
            continue
        n_flow += 1
        flow = {"name": "neuron launch", "cat": "neuron_launch", "id": n_flow}
        added.append({**flow, "ph": "s", "pid": op["pid"], "tid": op["tid"], "ts": ts})
        added.append({**flow, "ph": "f", "bp": "e", "pid": s["device"], "tid": s["stream"], "ts": float(dev_event["ts"])})
    events.extend(added)
    return {"estimated_events": n_est, "fallback_events": n_fallback, "flows": n_flow, "kernels": est_kernels}


def _enclosing(ops: list[dict], starts: list[float], ts: float, look_back: int = 256) -> dict | None:
    """The innermost host op running at `ts` (the shortest one that contains it)."""
    i = bisect.bisect_right(starts, ts)
    best = None
    for j in range(i - 1, max(-1, i - 1 - look_back), -1):
        e = ops[j]
        end = float(e["ts"]) + float(e.get("dur", 0.0))
        if end >= ts and (best is None or float(e.get("dur", 0.0)) < float(best.get("dur", 0.0))):
            best = e
    return best
