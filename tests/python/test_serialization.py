import io

import torch


def test_save_load_round_trip(tmp_path):
    x = torch.randn(4, 5).to("neuron")
    m = torch.nn.Linear(5, 3).to("neuron:1")
    path = tmp_path / "ckpt.pt"
    torch.save({"x": x, "sd": m.state_dict()}, path)
    loaded = torch.load(path)
    assert loaded["x"].device == torch.device("neuron:0")
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    assert loaded["sd"]["weight"].device == torch.device("neuron:1")
    assert torch.equal(loaded["sd"]["weight"].cpu(), m.weight.detach().cpu())


def test_map_location():
    x = torch.arange(12.0).reshape(3, 4).to("neuron:2")
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, torch.arange(12.0).reshape(3, 4))
    buf.seek(0)
    moved = torch.load(buf, map_location="neuron:0")
    assert moved.device == torch.device("neuron:0") and torch.equal(moved.cpu(), on_cpu)
    # a CPU checkpoint loaded onto the device
    buf2 = io.BytesIO()
    torch.save(on_cpu, buf2)
    buf2.seek(0)
    assert torch.load(buf2, map_location="neuron").device.type == "neuron"


def test_views_share_storage_after_load(tmp_path):
    base = torch.arange(10.0).to("neuron")
    view = base[2:6]
    path = tmp_path / "v.pt"
    torch.save([base, view], path)
    b, v = torch.load(path)
    assert v.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert torch.equal(v.cpu(), torch.arange(2.0, 6.0))
