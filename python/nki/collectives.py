"""nki.collectives: collective communication between the NeuronCores of a logical core and
across the logical cores of a process group. neuron-emu does not model multi-core exchange
yet: the names exist (so the real library imports), and calling a collective raises
NotImplementedError naming it; ``rank_id()`` is 0 and ``ReplicaGroup`` records its groups."""

from __future__ import annotations


class ReplicaGroup:
    """The ranks taking part in a collective (a list of rank lists)."""

    def __init__(self, groups=None, *args, **kwargs):
        self.groups = [list(g) for g in groups] if groups is not None else []

    def __repr__(self) -> str:
        return f"ReplicaGroup({self.groups!r})"


def rank_id() -> int:
    """The rank of this logical core in the process group (single-rank launches: 0)."""
    return 0


def _unmodeled(name: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"nki.collectives.{name} is not modeled by neuron-emu yet (multi-core exchange); "
            "see the compatibility table in docs/nki.md"
        )

    fn.__name__ = fn.__qualname__ = name
    return fn


_NAMES = (
    "all_reduce",
    "all_gather",
    "all_gather_v",
    "reduce_scatter",
    "all_to_all",
    "all_to_all_v",
    "collective_permute",
    "collective_permute_implicit",
    "collective_permute_implicit_current_processing_rank_id",
)
for _n in _NAMES:
    globals()[_n] = _unmodeled(_n)

__all__ = ["ReplicaGroup", "rank_id", *_NAMES]
