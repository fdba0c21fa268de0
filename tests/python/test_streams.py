import pytest
import torch
import torch_neuronx


def test_work_is_queued_then_synchronized():
    x = torch.ones(1000, device="neuron")
    gate = torch_neuronx._C._debug_launch_gate(0)  # holds the stream until opened
    try:
        x.fill_(3.0)  # queued behind the gate: returns while the gate still holds the stream
        assert gate.wait_entered()
        stream = torch.neuron.current_stream()
        assert not stream.query()  # the gate task and the fill are pending
        assert not torch.neuron.query()
    finally:
        gate.open()
    torch.neuron.synchronize()
    assert not gate.timed_out  # nothing waited for the stream while the gate was closed
    assert stream.query() and torch.neuron.query()
    assert x.sum().item() == 3000.0


def test_a_gate_that_is_never_opened_times_out():
    gate = torch_neuronx._C._debug_launch_gate(0, 0.05)
    torch.neuron.synchronize()
    assert gate.timed_out and not gate.is_open


def test_failing_queued_op_surfaces_at_synchronize_with_its_name():
    torch_neuronx._C._debug_launch_failing_task(0, "aten::my_failing_op", "index 7 is out of bounds")
    with pytest.raises(RuntimeError, match=r"aten::my_failing_op failed on neuron:0.*index 7 is out of bounds"):
        torch.neuron.synchronize()
    torch.neuron.synchronize()  # raised once, then cleared


def test_failing_queued_op_surfaces_at_next_read():
    x = torch.ones(4, device="neuron")
    torch_neuronx._C._debug_launch_failing_task(0, "aten::boom", "bad")
    with pytest.raises(RuntimeError, match="aten::boom"):
        x.cpu()


def test_launch_blocking_raises_at_the_launch(py):
    r = py(
        """
        import torch, torch_neuronx
        assert torch_neuronx._C._launch_blocking()
        try:
            torch_neuronx._C._debug_launch_failing_task(0, 'aten::eager_fail', 'boom')
        except RuntimeError as e:
            print('raised at launch:', 'aten::eager_fail' in str(e))
        """,
        env={"NEURON_LAUNCH_BLOCKING": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "raised at launch: True"


def test_streams_and_events():
    s = torch.neuron.Stream()
    assert s.device.type == "neuron"
    default = torch.neuron.current_stream()
    assert default == torch.neuron.default_stream()
    x = torch.zeros(10, device="neuron")
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
        torch_neuronx._C._debug_launch_sleep(0, 50)
        x.fill_(5.0)
        ev = torch.neuron.Event()
        ev.record(s)
    assert torch.neuron.current_stream() == default
    default.wait_event(ev)  # default stream waits for s
    y = torch.empty(10, device="neuron")
    y.copy_(x)
    assert torch.equal(y.cpu(), torch.full((10,), 5.0))
    assert ev.query()


def test_event_elapsed_time():
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    torch_neuronx._C._debug_launch_sleep(0, 30)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert ms >= 25.0


def test_accelerator_synchronize_and_streams():
    torch.accelerator.synchronize()
    s = torch.accelerator.current_stream()
    assert s.device.type == "neuron"
    assert torch.accelerator.current_device_index() == 0
