"""Lab 1 Step 1, line by line, in a fresh interpreter with only `import torch`."""

import pytest
import torch


def test_step1_session_fresh_interpreter(py):
    r = py(
        """
        import torch
        cpu_tensor = torch.randn(3, 3)
        print(cpu_tensor.device)
        neuron_tensor = cpu_tensor.to('neuron')
        print(neuron_tensor.device)
        result = neuron_tensor * 2 + 1
        print(repr(result))
        assert torch.allclose(result.cpu(), cpu_tensor * 2 + 1)
        device = torch.accelerator.current_accelerator()
        print(device)
        portable_tensor = torch.randn(3, 3, device=device)
        print(portable_tensor.device)
        """
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "cpu"
    assert lines[1] == "neuron:0"
    assert lines[2].startswith("tensor([[") and "device='neuron:0'" in r.stdout
    assert lines[-2] == "neuron:0"
    assert lines[-1] == "neuron:0"


def test_lab0_one_liner_prints_neuron_tensor(py):
    r = py("import torch; print(torch.__version__); t = torch.randn(2,2).to('neuron'); print(t)")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == torch.__version__
    assert out[1].startswith("tensor([[")
    assert out[-1].endswith("device='neuron:0')")


def test_autoload_off_then_explicit_import(py):
    r = py(
        """
        import torch
        try:
            torch.zeros(1, device='neuron')
            raise SystemExit('neuron must not exist without autoload')
        except RuntimeError:
            pass
        import torch_neuronx
        print(torch.zeros(2, device='neuron').device)
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.strip().splitlines()[-1] == "neuron:0"


@pytest.mark.parametrize("first", ["import torch_neuronx", "import nki", "import nkilib",
                                   "from torch_neuronx import nki_op"])
def test_any_package_may_be_imported_first(py, first):
    # `import torch` inside the package runs the torch.backends entry point, which finds this
    # package half-initialized: that must not fail.
    r = py(f"{first}\nimport torch\nprint(torch.zeros(2, device='neuron').device)")
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.strip().splitlines()[-1] == "neuron:0"


def test_device_strings_and_module():
    t = torch.ones(2, device="neuron")
    assert t.device == torch.device("neuron:0")
    assert t.device.type == "neuron"
    assert t.is_neuron
    assert str(t.device) == "neuron:0"
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == 4
    assert torch.accelerator.device_count() == 4
    acc = torch.accelerator.current_accelerator()
    assert acc.type == "neuron" and str(acc) == "neuron:0"
    assert torch.cpu.is_available()


def test_tensor_and_module_methods():
    x = torch.randn(4, 4).neuron()
    assert x.device.type == "neuron"
    m = torch.nn.Linear(4, 2).neuron()
    assert m.weight.device.type == "neuron"
    y = torch.randn(3).to("neuron:1")
    assert y.device == torch.device("neuron", 1)
    assert y.cpu().device.type == "cpu"


def test_set_device_and_context():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(2):
        assert torch.neuron.current_device() == 2
        assert torch.empty(3, device="neuron").device.index == 2
    assert torch.neuron.current_device() == 0
    import pytest

    with pytest.raises(RuntimeError, match="neuron:7"):
        torch.neuron.set_device(7)
    with pytest.raises(RuntimeError):
        torch.empty(1, device="neuron:9")


def test_device_properties():
    p = torch.neuron.get_device_properties(0)
    assert p.total_memory == 24 * 2**30
    assert p.name.startswith("NeuronCore-v3")
    assert p.logical_nc_config == 2
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


def test_printing_does_not_fall_back():
    import torch_neuronx

    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("neuron")
    torch_neuronx.clear_op_tracking()
    s = str(t)
    assert "device='neuron:0'" in s and "[3., 4., 5.]" in s
    assert torch_neuronx.get_fallback_ops() == []


def test_param_data_assignment_across_devices():
    m = torch.nn.Linear(3, 3)
    w = torch.randn(3, 3)
    m.weight.data = w.to("neuron")
    assert m.weight.device.type == "neuron"
    m.weight.data = torch.zeros(3, 3)
    assert m.weight.device.type == "cpu"
