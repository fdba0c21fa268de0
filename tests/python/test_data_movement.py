"""Data movement and factories on neuron vs PyTorch CPU (exact): cat/stack (type promotion,
legacy empty tensors, strided inputs), flip, roll, tril/triu (and in-place), repeat, pad,
arange, linspace, eye."""

import pytest
import torch
import torch_neuronx
from torch.nn import functional as F

N = "neuron"


def same(a, b, **kw):
    assert a.device.type == "neuron"
    torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, **kw)


def rnd(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_cat_and_stack():
    x, y = rnd(3, 4, 5), rnd(3, 2, 5, seed=1)
    same(torch.cat([x.to(N), y.to(N)], 1), torch.cat([x, y], 1))
    same(torch.cat([x.to(N), x.to(N).transpose(0, 2).transpose(0, 2)], -1), torch.cat([x, x], -1))
    same(torch.cat([x.to(N), x.double().to(N)], 0), torch.cat([x, x.double()], 0))  # promotes to float64
    same(torch.cat([x.to(N), torch.tensor([], device=N)], 0), torch.cat([x, torch.tensor([])], 0))
    same(torch.stack([x.to(N), x.to(N) * 1], 1), torch.stack([x, x], 1))
    out = torch.empty(0, device=N)
    torch.cat([x.to(N)[:, :1], y.to(N)], 1, out=out)
    same(out, torch.cat([x[:, :1], y], 1))
    assert "aten::cat" in torch_neuronx.get_executed_ops()
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        torch.cat([x.to(N), y.to(N)], 0)


def test_flip_roll():
    x = rnd(3, 4, 5)
    same(x.to(N).flip(0, 2), x.flip(0, 2))
    same(x.to(N).transpose(0, 2).flip(1), x.transpose(0, 2).flip(1))
    same(x.to(N).roll(2, 1), x.roll(2, 1))
    same(x.to(N).roll((1, -7), (0, 2)), x.roll((1, -7), (0, 2)))
    same(x.to(N).roll(7), x.roll(7))
    same(x.to(N).roll((1, 1), (0, 0)), x.roll((1, 1), (0, 0)))


@pytest.mark.parametrize("diag", [-2, 0, 1, 4])
def test_tril_triu(diag):
    x = rnd(2, 4, 5)
    same(x.to(N).tril(diag), x.tril(diag))
    same(x.to(N).triu(diag), x.triu(diag))
    y = x.to(N)
    y.tril_(diag)
    same(y, x.tril(diag))
    same(x.transpose(1, 2).to(N).triu(diag), x.transpose(1, 2).triu(diag))


def test_repeat_pad_clone():
    x = rnd(2, 3)
    same(x.to(N).repeat(2, 1, 3), x.repeat(2, 1, 3))
    same(F.pad(x.to(N), (1, 2, 0, 1), value=3.0), F.pad(x, (1, 2, 0, 1), value=3.0))
    same(x.to(N).t().contiguous(), x.t().contiguous())
    assert torch_neuronx.get_fallback_ops() == [] or "aten::unfold" not in torch_neuronx.get_fallback_ops()


def test_factories():
    same(torch.arange(3, 17, 3, device=N), torch.arange(3, 17, 3))
    same(torch.arange(5, device=N, dtype=torch.int32), torch.arange(5, dtype=torch.int32))
    same(torch.arange(10, 0, -3, device=N), torch.arange(10, 0, -3))
    same(torch.arange(0, 10, dtype=torch.bfloat16, device=N), torch.arange(0, 10, dtype=torch.bfloat16))
    torch.testing.assert_close(torch.arange(0, 1, 0.1, device=N).cpu(), torch.arange(0, 1, 0.1))
    torch.testing.assert_close(torch.linspace(-1, 1, 11, device=N).cpu(), torch.linspace(-1, 1, 11), rtol=0, atol=1e-7)
    same(torch.linspace(0, 10, 4, dtype=torch.int32, device=N), torch.linspace(0, 10, 4, dtype=torch.int32))
    same(torch.eye(3, 5, device=N), torch.eye(3, 5))
    same(torch.eye(4, dtype=torch.int32, device=N), torch.eye(4, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        torch.arange(0, 10, -1, device=N)
    for op in ("aten::arange.start_out", "aten::linspace.out", "aten::eye.m_out"):
        assert op in torch_neuronx.get_executed_ops()
