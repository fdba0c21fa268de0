"""Gaps PyTorch's own PrivateUse1 test suite (OpenReg's tests, adapted to `neuron`) found: the
out-of-range device message, device capabilities, and Dynamo's device interface."""

from __future__ import annotations

import pytest
import torch


def test_out_of_range_index_says_so():
    n = torch.accelerator.device_count()
    with pytest.raises(RuntimeError, match="The device index is out of range"):
        torch.accelerator.set_device_index(n)
    with pytest.raises(RuntimeError, match="The device index is out of range"):
        torch.neuron.set_device(n)


def test_device_capability_lists_every_dtype():
    cap = torch.accelerator.get_device_capability("neuron:0")
    dtypes = cap["supported_dtypes"]
    assert isinstance(dtypes, set)
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool, torch.uint8):
        assert dt in dtypes
    assert torch.accelerator.get_device_capability("neuron:1")["supported_dtypes"] == dtypes
    with pytest.raises(RuntimeError, match="The device index is out of range"):
        torch.accelerator.get_device_capability(torch.accelerator.device_count())


def test_dynamo_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("neuron")
    assert get_interface_for_device(torch.device("neuron:1")) is iface
    assert iface.device_count() == torch.neuron.device_count() and iface.is_available()
    assert iface.current_device() == torch.neuron.current_device()
    prev = iface.exchange_device(1)
    assert iface.current_device() == 1
    iface.exchange_device(prev)
    s = iface.current_stream()
    assert s.device.type == "neuron"
    x = torch.ones(4, device="neuron")
    ev = iface.Event()
    ev.record()
    iface.synchronize()
    assert ev.query() and x.sum().item() == 4
    assert iface.memory_allocated() > 0
    assert iface.get_compute_capability().startswith("NeuronCore-v")
    assert not iface.is_triton_capable()


def test_backend_metadata_is_kept_by_set_get_and_torch_save(tmp_path):
    t = torch.empty(3, 3, device="neuron")
    assert torch._utils.get_tensor_metadata(t) == {}
    flags = {"version_number": True, "format_number": False}
    torch._utils.set_tensor_metadata(t, flags)
    assert torch._utils.get_tensor_metadata(t) == flags
    # Detached tensors carry the flags (as on CUDA-like backends: TensorImpl clones them); views
    # and results of ops are new tensors without them.
    assert torch._utils.get_tensor_metadata(t.detach()) == flags
    assert torch._utils.get_tensor_metadata(t[1:]) == {}
    assert torch._utils.get_tensor_metadata(t + 1) == {}
    path = tmp_path / "t.pt"
    torch.save(t, path)
    loaded = torch.load(path)
    assert loaded.device.type == "neuron" and torch._utils.get_tensor_metadata(loaded) == flags
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu.is_cpu and torch._utils.get_tensor_metadata(on_cpu) == {}
    # The conj/neg bits stay PyTorch's; an empty dict clears the device's flags.
    torch._utils.set_tensor_metadata(t, {})
    assert torch._utils.get_tensor_metadata(t) == {}
