"""Estimated Trainium2 time of the work a block of code does (``torch.neuron.estimated_time``).

Every task the runtime runs carries a duration estimated by the cost model
(docs/cost-model.md): eager ops, compiled programs, NKI kernels, host<->device copies,
collectives. An estimated clock overlaps the host's own time (Python and dispatch, measured
on this machine, without the time it spends waiting for this machine to emulate the device)
with the estimated device work, as the asynchronous runtime would. The figures are a model's
estimate, not a measurement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from .. import _C
from ._device import synchronize


@dataclass
class EstimatedTime:
    """What :func:`estimated_time` measured; filled in when the ``with`` block ends."""

    wall_s: float = 0.0  # estimated Trainium2 wall time of the block (host and device overlapped)
    device_s: float = 0.0  # estimated device busy time (sum of the tasks' estimates)
    host_wall_s: float = 0.0  # wall time of the block on this machine
    tasks: int = 0  # device tasks launched
    host_waits: int = 0  # host waits that found the estimated device busy

    def __str__(self) -> str:
        return (
            f"Trainium2 est. {self.wall_s * 1e3:.3f} ms (device busy {self.device_s * 1e3:.3f} ms, "
            f"{self.tasks} tasks); this host {self.host_wall_s * 1e3:.3f} ms"
        )


def device_time_params() -> dict:
    """The cost model's constants for this topology (launch costs, bandwidths, peaks)."""
    return dict(_C._device_time_params())


@contextlib.contextmanager
def estimated_time() -> Iterator[EstimatedTime]:
    """Estimates what the enclosed work would take on Trainium2::

        with torch.neuron.estimated_time() as t:
            for _ in range(100):
                y = model(x)
        print(t.wall_s, t.device_s, t.host_wall_s)

    The devices are synchronized on entry and on exit, so the block's work is complete."""
    synchronize_all()
    r0 = _C._device_clock()
    t = EstimatedTime()
    try:
        yield t
    finally:
        synchronize_all()
        r1 = _C._device_clock()
        t.wall_s = (r1["est_host_ns"] - r0["est_host_ns"]) / 1e9
        t.device_s = (r1["device_busy_ns"] - r0["device_busy_ns"]) / 1e9
        t.host_wall_s = (r1["real_ns"] - r0["real_ns"]) / 1e9
        t.tasks = r1["tasks"] - r0["tasks"]
        t.host_waits = r1["host_waits"] - r0["host_waits"]


def synchronize_all() -> None:
    from ._device import device_count

    for i in range(device_count()):
        synchronize(i)
