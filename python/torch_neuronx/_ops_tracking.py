"""Which aten ops ran on the neuron device, and which fell back to the CPU."""

from __future__ import annotations

from . import _C


def get_fallback_ops() -> list[str]:
    """Ops that ran through the CPU fallback in this process, first-seen order, no duplicates.

    Names include the overload, e.g. ``['aten::argmax.out']``.
    """
    return list(_C._get_fallback_ops())


def get_executed_ops() -> list[str]:
    """Every aten op that ran on a neuron tensor (native kernels and CPU fallbacks)."""
    return list(_C._get_executed_ops())


def clear_op_tracking() -> None:
    """Forget the ops recorded so far."""
    _C._clear_op_tracking()
