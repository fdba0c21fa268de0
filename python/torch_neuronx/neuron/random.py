"""Random number generator state of the neuron devices (one generator per device)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .. import _C
from ._device import _index, _lazy_init, device_count


def _generator(device) -> torch.Generator:
    _lazy_init()
    return _C._default_generator(_index(device))


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (``torch.manual_seed`` calls this)."""
    for i in range(device_count()):
        _C._default_generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a random number."""
    _generator(None).seed()


def seed_all() -> None:
    s = _generator(None).seed()
    for i in range(device_count()):
        _C._default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator(None).initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    _generator(device).set_state(new_state.clone() if new_state.is_contiguous() else new_state.contiguous())


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
