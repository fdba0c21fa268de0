"""Streams and events of the neuron device.

Each logical NeuronCore runs in-order streams; work on different streams may overlap.
Events order streams against each other and time work between two points.
"""

from __future__ import annotations

from typing import Any

import torch

from ._device import _index, _lazy_init


class Stream(torch.Stream):
    """An in-order queue of work on one neuron device."""

    def __new__(cls, device=None, priority: int = 0, **kwargs: Any):
        _lazy_init()
        if "stream_id" in kwargs:  # rebuilding a wrapper of an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("neuron", _index(device)), priority=priority)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Make future work on this stream wait for all work queued on `stream` so far."""
        self.wait_event(stream.record_event())


class Event(torch.Event):
    """A marker in a stream: query it, wait on it, or time work between two events."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        _lazy_init()
        return super().__new__(
            cls, device=torch.device("neuron"), enable_timing=enable_timing, blocking=blocking,
            interprocess=interprocess,
        )

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event to `end_event` (both recorded with enable_timing=True)."""
        from .. import _C

        if self.device != end_event.device:
            raise RuntimeError(f"elapsed_time: events on {self.device} and {end_event.device}")
        return _C._event_elapsed_time(self.event_id, end_event.event_id)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    _lazy_init()
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None) -> Stream:
    _lazy_init()
    idx = _index(device)
    cur = torch.accelerator.current_stream(idx)
    # Stream id 0 is the default stream of every device.
    return Stream(stream_id=0, device_index=idx, device_type=cur.device_type)


def set_stream(stream: torch.Stream | None) -> None:
    if stream is None:
        return
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes `stream` current on its device, restoring the previous one."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self.prev: torch.Stream | None = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.prev = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> bool:
        if self.stream is not None and self.prev is not None:
            torch.accelerator.set_stream(self.prev)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


def wait_stream(stream: torch.Stream) -> None:
    """Make the current stream wait for work queued on `stream`."""
    current_stream(stream.device_index).wait_stream(stream)


def wait_event(event: torch.Event) -> None:
    current_stream().wait_event(event)


def query(device=None) -> bool:
    """True when all work queued on the current stream of `device` has finished."""
    return current_stream(device).query()


def record_event(enable_timing: bool = False) -> Event:
    ev = Event(enable_timing=enable_timing)
    ev.record(current_stream())
    return ev
