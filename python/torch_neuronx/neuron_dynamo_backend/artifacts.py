"""Compilation artifacts and reports under TORCH_NEURONX_DEBUG_DIR.

TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1 keeps, per graph, the FX graph
(``fx_graphs/``), the IR after every pass (``ir/<graph>/``) and the NEFF (``neff/``) under
``<debug dir>/proc_<rank>/``. Ops that could not be compiled are listed in
``fallback_ops.txt`` whenever TORCH_NEURONX_DEBUG_DIR is set or artifacts are preserved.
"""

from __future__ import annotations

import os
import time


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def debug_root() -> str:
    return os.environ.get("TORCH_NEURONX_DEBUG_DIR") or "/tmp/neuron_backend"


def preserve() -> bool:
    return _truthy(os.environ.get("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS"))


def reports_enabled() -> bool:
    return preserve() or bool(os.environ.get("TORCH_NEURONX_DEBUG_DIR"))


def rank() -> int:
    for var in ("RANK", "LOCAL_RANK"):
        v = os.environ.get(var)
        if v and v.isdigit():
            return int(v)
    return 0


def proc_dir() -> str:
    return os.path.join(debug_root(), f"proc_{rank()}")


def path(kind: str, name: str) -> str:
    d = os.path.join(proc_dir(), kind)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def save_fx_graph(name: str, gm) -> None:
    if not preserve():
        return
    with open(path("fx_graphs", f"{name}.txt"), "w") as f:
        f.write(gm.print_readable(print_output=False, include_stride=True, include_device=True))


def ir_dump_dir(name: str) -> str:
    if not preserve():
        return ""
    d = os.path.join(proc_dir(), "ir", name)
    os.makedirs(d, exist_ok=True)
    return d


def neff_path(name: str) -> str:
    return path("neff", f"{name}.neff") if preserve() else ""


def report_fallback(name: str, ops: dict[str, str]) -> str:
    """Appends the ops of graph `name` that run eagerly; returns the report path ('' if off)."""
    if not reports_enabled():
        return ""
    p = os.path.join(proc_dir(), "fallback_ops.txt")
    os.makedirs(proc_dir(), exist_ok=True)
    with open(p, "a") as f:
        f.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} graph {name}: {len(ops)} op(s) run eagerly\n")
        f.writelines(f"{op}\t{why}\n" for op, why in sorted(ops.items()))
    return p
