"""torch.distributed for the neuron device: the ``neuron`` c10d backend.

``dist.init_process_group("neuron")`` (or no backend, with neuron tensors) creates groups whose
collectives run between the processes of this host over shared memory (the emulated
NeuronLink), ordered with the work on each rank's device streams. All-reduce, all-gather,
reduce-scatter (incl. the ``_base``/coalesced forms FSDP uses), broadcast, reduce, gather,
scatter, all-to-all (even and uneven splits), barrier, and send/recv are supported.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta

import torch.distributed as dist

from .. import _C

_registered = False


def _create_neuron_backend(store, rank: int, world_size: int, timeout: timedelta):
    _C._init_distributed()
    # One shared-memory name per group, chosen by rank 0 and published through the group's
    # (prefixed) store.
    key = "neuron_emu_shm_prefix"
    if rank == 0:
        store.set(key, f"neuron_emu_{os.getpid()}_{uuid.uuid4().hex[:16]}")
    prefix = store.get(key).decode()
    return _C._ProcessGroupNeuron(prefix, rank, world_size, timeout)


def register_backend() -> None:
    global _registered
    if _registered or not dist.is_available():
        return
    if "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", _create_neuron_backend, devices=["neuron"])
    _registered = True


register_backend()
