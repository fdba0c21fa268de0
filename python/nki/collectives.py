"""nki.collectives: collective communication between the logical cores of a job.

A rank is a logical core of the job: one process of a torchrun job whose neuron process group
(``torch.distributed.init_process_group("neuron")``) is initialized, ranked as in the group.
Without a process group the world is one rank: ``rank_id()`` is 0 and a replica group naming
other ranks is an error. At LNC=2 (``kernel[2](...)``) every physical core of a rank runs its
collectives on its own (in a world of one: a copy of its own data).

The n-th collective of a rank meets the n-th of the other ranks of its group; calls that
differ (kind, shape, dtype, replica group, kernel line) are an error naming both ranks.
Reductions combine the ranks in group order, so every rank gets the same bits. Sources and
destinations are HBM tensors (``nl.shared_hbm``) or SBUF tiles (all_reduce, all_gather,
reduce_scatter and the ring permutes). Coalesced calls (several tensors) run one collective
per (src, dst) pair. ``all_gather_v`` and ``all_to_all_v`` (metadata-driven sizes) are not
modeled yet and raise NotImplementedError."""

from __future__ import annotations

from . import _tracer
from ._tensor import NkiTensor, VirtualRegister
from ._tracer import emit


class ReplicaGroup:
    """The ranks taking part in a collective: disjoint lists of ranks, all of one size (a
    collective runs within the group of each rank)."""

    def __init__(self, groups=None, *args, **kwargs):
        self.groups = [[int(r) for r in g] for g in groups] if groups is not None else []

    def __repr__(self) -> str:
        return f"ReplicaGroup({self.groups!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ReplicaGroup) and self.groups == other.groups

    def __hash__(self) -> int:  # a kernel argument: part of the kernel's specialization key
        return hash(tuple(tuple(g) for g in self.groups))


def _groups_attr(replica_group, api: str) -> int:
    if not isinstance(replica_group, ReplicaGroup):
        raise TypeError(f"{api}: replica_group must be a nki.collectives.ReplicaGroup, got {type(replica_group).__name__}")
    if not replica_group.groups or any(not g for g in replica_group.groups):
        raise ValueError(f"{api}: the replica group {replica_group.groups!r} is empty")
    text = ";".join(",".join(str(r) for r in g) for g in replica_group.groups)
    return _tracer.current().program.intern(text)


def _pairs(srcs, dsts, api: str):
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    dsts = list(dsts) if isinstance(dsts, (list, tuple)) else [dsts]
    if len(srcs) != len(dsts) or not srcs:
        raise ValueError(f"{api}: {len(srcs)} source(s) for {len(dsts)} destination(s)")
    for t in (*srcs, *dsts):
        if not isinstance(t, NkiTensor):
            raise TypeError(f"{api}: sources and destinations are tensors (HBM or SBUF), got {type(t).__name__}")
    return list(zip(srcs, dsts))


def _alu(op):
    from .isa import _alu as alu

    return alu(op)


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    """dst = op (nl.add, nl.maximum, nl.minimum) over the ranks of this rank's group of src."""
    g = _groups_attr(replica_group, "all_reduce")
    for s, d in _pairs(srcs, dsts, "all_reduce"):
        emit("AllReduce", "sync", {"dst": d, "src": s}, {"op": _alu(op), "groups": g})


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """dst = the srcs of the group's ranks concatenated along collective_dim, in group order."""
    g = _groups_attr(replica_group, "all_gather")
    for s, d in _pairs(srcs, dsts, "all_gather"):
        emit("AllGather", "sync", {"dst": d, "src": s}, {"collective_dim": int(collective_dim), "groups": g})


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None) -> None:
    """src is split along collective_dim into one block per rank of the group; dst = op over
    the group's ranks of the block of this rank's position."""
    g = _groups_attr(replica_group, "reduce_scatter")
    for s, d in _pairs(srcs, dsts, "reduce_scatter"):
        emit(
            "ReduceScatter",
            "sync",
            {"dst": d, "src": s},
            {"op": _alu(op), "collective_dim": int(collective_dim), "groups": g},
        )


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """src is split along collective_dim into one block per rank of the group; block i goes to
    the i-th rank, and dst is the blocks received, in group order (HBM tensors)."""
    g = _groups_attr(replica_group, "all_to_all")
    for s, d in _pairs(srcs, dsts, "all_to_all"):
        emit("AllToAll", "sync", {"dst": d, "src": s}, {"collective_dim": int(collective_dim), "groups": g})


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    """Each (source, target) pair sends the source rank's src to the target rank's dst; a rank
    that is no target keeps its dst (HBM tensors)."""
    pairs = [(int(a), int(b)) for a, b in source_target_pairs]
    if not pairs:
        raise ValueError("collective_permute: no source-target pairs")
    text = ";".join(f"{a}>{b}" for a, b in pairs)
    idx = _tracer.current().program.intern(text)
    for s, d in _pairs(srcs, dsts, "collective_permute"):
        emit("CollectivePermute", "sync", {"dst": d, "src": s}, {"pairs": idx})


def _channels(by_channel, channel_ids, api: str):
    ids = [int(c) for c in channel_ids]
    if ids != list(range(len(ids))):
        raise ValueError(f"{api}: channel_ids {ids} must be consecutive integers from 0")
    if len(by_channel) != len(ids):
        raise ValueError(f"{api}: {len(by_channel)} channel(s) of tensors for channel_ids {ids}")
    out = []
    for ts in by_channel:
        ts = list(ts) if isinstance(ts, (list, tuple)) else [ts]
        if len(ts) != 1:
            raise ValueError(f"{api}: each channel takes exactly one tensor, got {len(ts)}")
        out.append(ts[0])
    return out


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,), priority=None,
                                name=None) -> None:
    """A ring step: every rank sends src to its successor in its group and receives its
    predecessor's src into dst (one transfer per channel)."""
    api = "collective_permute_implicit"
    g = _groups_attr(replica_group, api)
    srcs = _channels(srcs_by_channel, channel_ids, api)
    dsts = _channels(dsts_by_channel, channel_ids, api)
    for ch, (s, d) in enumerate(_pairs(srcs, dsts, api)):
        emit("PermuteImplicit", "sync", {"dst": d, "src": s}, {"groups": g, "channel": ch})


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=(0,), priority=None, name=None) -> None:
    """A reducing ring step: every rank sends op(src0, src1) to its successor and receives its
    predecessor's into dst."""
    api = "collective_permute_implicit_reduce"
    g = _groups_attr(replica_group, api)
    s0 = _channels(srcs0_by_channel, channel_ids, api)
    s1 = _channels(srcs1_by_channel, channel_ids, api)
    ds = _channels(dsts_by_channel, channel_ids, api)
    for ch, ((a, d), b) in enumerate(zip(_pairs(s0, ds, api), s1)):
        if not isinstance(b, NkiTensor):
            raise TypeError(f"{api}: sources are tensors, got {type(b).__name__}")
        emit(
            "PermuteImplicitReduce",
            "sync",
            {"dst": d, "src": a, "src1": b},
            {"op": _alu(op), "groups": g, "channel": ch},
        )


def _rank_register(groups: int, iteration: int, iteration_reg: int, channel: int) -> VirtualRegister:
    r = VirtualRegister(_tracer.current().program.add_register())
    emit(
        "RankId",
        "sync",
        {},
        {"reg": r.id, "groups": groups, "iteration": iteration, "iteration_reg": iteration_reg, "channel": channel},
    )
    return r


def rank_id(name=None) -> VirtualRegister:
    """This rank's id in the job (a register: use it as ``t.ap(..., scalar_offset=r)``)."""
    return _rank_register(-1, 0, -1, 0)


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0, name=None):
    """The rank whose data this rank holds at ring step `iteration_id` (an int or a loop
    register) of collective_permute_implicit*: itself at step 0, its predecessor at step 1, ..."""
    g = _groups_attr(replica_group, "collective_permute_implicit_current_processing_rank_id")
    if isinstance(iteration_id, VirtualRegister):
        return _rank_register(g, 0, iteration_id.id, int(channel_id))
    return _rank_register(g, int(iteration_id), -1, int(channel_id))


def _unmodeled(name: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"nki.collectives.{name} (metadata-driven sizes) is not modeled by neuron-emu yet; "
            "see the compatibility table in docs/nki.md"
        )

    fn.__name__ = fn.__qualname__ = name
    return fn


all_gather_v = _unmodeled("all_gather_v")
all_to_all_v = _unmodeled("all_to_all_v")

__all__ = [
    "ReplicaGroup",
    "rank_id",
    "all_reduce",
    "all_gather",
    "all_gather_v",
    "reduce_scatter",
    "all_to_all",
    "all_to_all_v",
    "collective_permute",
    "collective_permute_implicit",
    "collective_permute_implicit_reduce",
    "collective_permute_implicit_current_processing_rank_id",
]
