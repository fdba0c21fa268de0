"""torch.distributed for the neuron device: the ``neuron`` c10d backend.

``dist.init_process_group("neuron")`` (or no backend, with neuron tensors) creates groups whose
collectives run, ordered with the work on each rank's device streams, between the processes of
one host over shared memory (the emulated NeuronLink) and between hosts over Gloo (TCP, from
the torch wheel), hierarchically for all-reduce, all-gather and reduce-scatter. Multi-node
``torchrun --nnodes N`` works as on one host. All-reduce, all-gather, reduce-scatter (incl. the
``_base``/coalesced forms FSDP uses), broadcast, reduce, gather, scatter, all-to-all (even and
uneven splits), barrier, send/recv and ``batch_isend_irecv`` are supported.

Ranks compare a descriptor of every collective (op, dtypes, shapes, sequence number) and fail
naming the ranks whose calls differ; a rank that is gone makes the others fail within seconds
naming it (see docs/architecture.md, "Distributed").
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

from .. import _C

_registered = False
_JOIN_TIMEOUT_VAR = "NEURON_EMU_COLLECTIVE_JOIN_TIMEOUT"
_DEFAULT_JOIN_TIMEOUT_S = 60


def _join_timeout(timeout: timedelta) -> timedelta:
    """How long group creation waits for every rank: NEURON_EMU_COLLECTIVE_JOIN_TIMEOUT seconds
    (default 60), never longer than the group's timeout."""
    raw = os.environ.get(_JOIN_TIMEOUT_VAR, "").strip()
    seconds: float = _DEFAULT_JOIN_TIMEOUT_S
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1
        if not 0 < seconds <= 86400:
            raise ValueError(f"{_JOIN_TIMEOUT_VAR}={raw}: expected a number of seconds in (0, 86400]")
    return min(timedelta(seconds=seconds), timeout)


def _create_neuron_backend(opts, backend_options=None):
    _C._init_distributed()
    store, rank, size, timeout = opts.store, opts.group_rank, opts.group_size, opts.timeout
    join_timeout = _join_timeout(timeout)

    def make_gloo(tag: str, ranks: list[int]):
        # The transport between hosts: a Gloo group over some ranks of this group.
        sub_store = dist.PrefixStore(f"neuron_gloo_{tag}/", store)
        return dist.ProcessGroupGloo(sub_store, ranks.index(rank), len(ranks), join_timeout)

    return _C._ProcessGroupNeuron(store, rank, size, timeout, join_timeout, str(opts.group_id), make_gloo)


def register_backend() -> None:
    global _registered
    if _registered or not dist.is_available():
        return
    if "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", _create_neuron_backend, extended_api=True, devices=["neuron"])
    _registered = True


register_backend()
