"""Shared fixtures/helpers of the torch.compile tests."""

from __future__ import annotations

import os
import sys

import pytest
import torch

WORKLOADS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads")
if WORKLOADS not in sys.path:
    sys.path.insert(0, WORKLOADS)


@pytest.fixture
def fresh_compile(tmp_path, monkeypatch):
    """A private NEFF cache, empty in-memory caches, reset Dynamo and metrics."""
    from torch_neuronx import _C

    cache = tmp_path / "neff_cache"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    monkeypatch.delenv("TORCH_NEURONX_DEBUG_DIR", raising=False)
    monkeypatch.delenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", raising=False)
    torch._dynamo.reset()
    _C._cc.clear_memory_cache()
    from torch_neuronx.neuron_dynamo_backend import backend

    backend._warned.clear()  # warnings are once per process; each test sees its own
    torch.neuron.reset_dynamo_metrics()
    yield cache
    torch._dynamo.reset()


def to_neuron(x):
    return x.to("neuron") if isinstance(x, torch.Tensor) else x
