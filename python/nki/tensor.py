"""nki.tensor: the trace-time tensor type (``nki.tensor.NkiTensor``, also ``nl.tensor``)."""

from __future__ import annotations

from ._tensor import MemoryRegion, NkiTensor, VirtualRegister  # noqa: F401

tensor = NkiTensor

__all__ = ["MemoryRegion", "NkiTensor", "VirtualRegister", "tensor"]
