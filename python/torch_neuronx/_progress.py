"""Progress notes for long silent phases (graph compilation, first runs), on stderr: stdout keeps
exactly what scripts print. A note appears only when the phase is still running after a few
seconds, and then says how long it took. NEURON_EMU_PROGRESS=0 silences them; under torchrun
only rank 0 speaks."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

DELAY_S = 2.0


def _enabled() -> bool:
    if os.environ.get("NEURON_EMU_PROGRESS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return os.environ.get("RANK", "0") == "0"


@contextmanager
def slow_step(what: str, delay_s: float = DELAY_S) -> Iterator[None]:
    """Prints ``[neuron] <what> ...`` on stderr if the block runs longer than `delay_s`, and
    ``[neuron] <what>: done in N.N s`` when it ends."""
    if not _enabled():
        yield
        return
    start = time.perf_counter()
    lock = threading.Lock()
    state = {"said": False, "over": False}

    def say() -> None:
        with lock:
            if not state["over"]:
                state["said"] = True
                print(f"[neuron] {what} ...", file=sys.stderr, flush=True)

    timer = threading.Timer(delay_s, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["over"] = True
            if state["said"]:
                print(f"[neuron] {what}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
