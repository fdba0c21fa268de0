"""Gaps PyTorch's own PrivateUse1 test suite (OpenReg's tests, adapted to `neuron`) found: the
out-of-range device message, device capabilities, Dynamo's device interface, tensor backend
metadata, and the fused LSTM/GRU cells nn.LSTM and nn.GRU use on accelerators."""

from __future__ import annotations

import pytest
import torch
import torch_neuronx


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


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_rnn_layers_match_cpu_forward_and_backward(kind):
    # On accelerators ATen runs nn.LSTM/nn.GRU through _thnn_fused_{lstm,gru}_cell (CUDA-only in
    # PyTorch); on the CPU it composes the cell, so the CPU is an independent reference.
    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    ref = cls(input_size=6, hidden_size=5, num_layers=2, bidirectional=True).double()
    dev = cls(input_size=6, hidden_size=5, num_layers=2, bidirectional=True).double()
    dev.load_state_dict(ref.state_dict())
    dev = dev.to("neuron")
    x = torch.randn(4, 3, 6, dtype=torch.float64, requires_grad=True)
    xd = x.detach().to("neuron").requires_grad_()
    torch_neuronx.clear_op_tracking()
    out, state = ref(x)
    out_d, state_d = dev(xd)
    states = state if kind == "lstm" else (state,)
    states_d = state_d if kind == "lstm" else (state_d,)
    loss = out.square().sum() + sum(s.sin().sum() for s in states)
    loss_d = out_d.square().sum() + sum(s.sin().sum() for s in states_d)
    loss.backward()
    loss_d.backward()
    # float64 on both sides: only summation order differs.
    torch.testing.assert_close(out_d.cpu(), out, rtol=1e-10, atol=1e-12)
    for s, sd in zip(states, states_d):
        assert sd.device.type == "neuron"
        torch.testing.assert_close(sd.cpu(), s, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-10, atol=1e-12)
    for (name, p), pd in zip(ref.named_parameters(), dev.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), p.grad, rtol=1e-10, atol=1e-12, msg=name)
    assert not [op for op in torch_neuronx.get_fallback_ops() if "_thnn_fused" in op]


def test_fused_cells_check_shapes():
    g = torch.zeros(2, 8, device="neuron")
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell: the state must be"):
        torch.ops.aten._thnn_fused_lstm_cell(g, g, torch.zeros(2, 3, device="neuron"))
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell: input_gates and hidden_gates"):
        torch.ops.aten._thnn_fused_gru_cell(g, torch.zeros(2, 9, device="neuron"), torch.zeros(2, 3, device="neuron"))


def test_quantized_results_raise_a_clear_error():
    x = torch.randn(3, 4, device="neuron")
    with pytest.warns(UserWarning, match="deprecated"), pytest.raises(
        RuntimeError, match="aten::quantize_per_tensor: quantized tensors .* are not supported on neuron"
    ):
        torch.quantize_per_tensor(x, 0.1, 10, torch.qint8)
    q = torch.quantize_per_tensor(x.cpu(), 0.1, 10, torch.qint8)  # the CPU path keeps working
    assert q.is_quantized and q.device.type == "cpu"


def test_autograd_profiler_with_use_device_neuron_times_device_work():
    code = """
import torch
x = torch.randn(128, 128, device="neuron")
with torch.autograd.profiler.profile(use_device="neuron") as p:
    y = (x @ x).relu().sum()
    y.item()
ev = {e.key: e for e in p.key_averages()}
assert all(e.cpu_time_total >= 0 and e.device_time_total >= 0 for e in ev.values()), [(k, e.cpu_time_total) for k, e in ev.items()]
assert ev["aten::mm"].device_time_total > 0 and ev["aten::mm"].count == 1
print("ok")
"""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    assert "not enabled" not in r.stderr, r.stderr  # the stubs are registered: no per-op warning
