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


@pytest.fixture(autouse=True, scope="session")
def _native_kernels():
    """These tests exercise neuron-emu's own kernels, also for the ops the real torch-neuronx
    runs on the CPU (argmax, sort, multinomial; see RealStackFallback.h)."""
    import torch_neuronx

    torch_neuronx._C._set_fallback_model("native")
    yield
