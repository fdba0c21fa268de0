"""Shared helpers of the workload tests: run the same training on neuron and on CPU from one seed
and compare. Every workload also asserts that no op fell back to the CPU."""

import pytest
import torch
import torch_neuronx


@pytest.fixture(autouse=True)
def _clean_state():
    torch_neuronx.clear_op_tracking()
    yield
    torch.neuron.synchronize()
