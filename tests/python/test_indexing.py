"""Indexing on neuron vs PyTorch CPU (exact: these ops move or select values, or sum them in
index order): index_select, gather, scatter/scatter_add/scatter_reduce, advanced indexing and
index_put_, masked_fill/masked_scatter/masked_select, nonzero, index_copy/index_fill/index_add;
int32 and CPU index tensors; out-of-range indices surface at synchronization naming the op."""

import pytest
import torch
import torch_neuronx

N = "neuron"


def same(a, b):
    assert a.device.type == "neuron"
    torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)


def rnd(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def rint(lo, hi, shape, seed=0):
    return torch.randint(lo, hi, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select(dtype, dim):
    x = (rnd(5, 4, 6) * 5).to(dtype)
    idx = rint(0, x.shape[dim], (7,), seed=dim)
    same(x.to(N).index_select(dim, idx.to(N)), x.index_select(dim, idx))
    same(x.to(N).index_select(dim, idx.int()), x.index_select(dim, idx))  # int32, on the CPU
    same(x.transpose(0, 2).to(N).index_select(dim, idx.to(N).clamp(max=3)), x.transpose(0, 2).index_select(dim, idx.clamp(max=3)))
    out = torch.empty(0, dtype=dtype, device=N)
    torch.index_select(x.to(N), dim, idx.to(N), out=out)
    same(out, x.index_select(dim, idx))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_gather_and_scatter_family():
    x = rnd(5, 4, 3)
    idx = rint(0, 4, (5, 6, 3), seed=1)
    same(x.to(N).gather(1, idx.to(N)), x.gather(1, idx))
    same(x.to(N).gather(1, idx[:, :2, :1].to(N)), x.gather(1, idx[:, :2, :1]))
    src = rnd(5, 6, 3, seed=2)
    same(torch.zeros(5, 4, 3, device=N).scatter_add(1, idx.to(N), src.to(N)), torch.zeros(5, 4, 3).scatter_add(1, idx, src))
    same(x.to(N).scatter(1, idx[:, :1].to(N), 7.5), x.scatter(1, idx[:, :1], 7.5))
    perm = torch.stack([torch.randperm(4, generator=torch.Generator().manual_seed(i))[:2] for i in range(15)])
    perm = perm.view(5, 3, 2).transpose(1, 2).contiguous()  # unique indices along dim 1
    same(x.to(N).scatter(1, perm.to(N), src[:, :2].to(N)), x.scatter(1, perm, src[:, :2]))
    same(x.to(N).scatter(1, perm.to(N), src[:, :2].to(N), reduce="multiply"), x.scatter(1, perm, src[:, :2], reduce="multiply"))
    y = x.to(N)
    y.scatter_add_(0, idx[:3, :4].clamp(max=4).to(N), src[:3, :4].to(N))
    same(y, x.clone().scatter_add_(0, idx[:3, :4].clamp(max=4), src[:3, :4]))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_scatter_reduce(reduce, include_self, dtype):
    x = (rnd(5, 4, 3) * 4).to(dtype)
    idx = rint(0, 4, (5, 6, 3), seed=1)
    src = (torch.arange(90.0).view(5, 6, 3) - 40).to(dtype)
    same(x.to(N).scatter_reduce(1, idx.to(N), src.to(N), reduce, include_self=include_self),
         x.scatter_reduce(1, idx, src, reduce, include_self=include_self))


def test_advanced_indexing():
    x = rnd(5, 4, 3)
    i = torch.tensor([4, 0, 2, 2])
    j = torch.tensor([1, 3, 0, 1])
    for key in [(i,), (i, j), (slice(None), j), (i, slice(None), j % 3), (-i - 1,), (i[:, None], j[None, :]),
                (Ellipsis, j % 3), (x[:, 0, 0] > 0,), (x[..., 0] > 0,), (1, j), (i.int(), j.int())]:
        kn = tuple(k.to(N) if isinstance(k, torch.Tensor) else k for k in key)
        same(x.to(N)[kn], x[key])
    assert "aten::index.Tensor" in torch_neuronx.get_executed_ops()


def test_index_put_and_setitem():
    x = rnd(5, 4, 3)
    i = torch.tensor([4, 0, 2, 2])
    for acc in (False, True):
        v = rnd(4, 4, 3, seed=3)
        same(x.to(N).index_put_((i.to(N),), v.to(N), accumulate=acc), x.clone().index_put_((i,), v, accumulate=acc))
    y, yn = x.clone(), x.to(N)
    y[y > 0] = 0.5
    yn[yn > 0] = 0.5
    same(yn, y)
    y[:, torch.tensor([1, 3])] = rnd(5, 2, 3, seed=4)
    yn[:, torch.tensor([1, 3]).to(N)] = rnd(5, 2, 3, seed=4).to(N)
    same(yn, y)
    y[y < 0] = y[y < 0] * 2
    yn[yn < 0] = yn[yn < 0] * 2
    same(yn, y)


def test_masked_ops_and_nonzero():
    x = rnd(4, 5)
    m = x > 0
    same(x.to(N).masked_fill(m.to(N), -1.0), x.masked_fill(m, -1.0))
    same(x.to(N).masked_fill(m[:1].to(N), torch.tensor(3.0, device=N)), x.masked_fill(m[:1], 3.0))
    same(x.to(N).masked_scatter(m.to(N), torch.arange(20.0).to(N)), x.masked_scatter(m, torch.arange(20.0)))
    same(x.to(N).masked_select(m[0].to(N)), x.masked_select(m[0]))
    same(m.to(N).nonzero(), m.nonzero())
    same(m.t().to(N).nonzero(), m.t().nonzero())
    same(torch.argwhere(x.to(N) > 0.5), torch.argwhere(x > 0.5))
    same(torch.zeros(0, 3, device=N).nonzero(), torch.zeros(0, 3).nonzero())
    same(torch.tensor(2.0, device=N).nonzero(), torch.tensor(2.0).nonzero())
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        x.to(N).masked_fill_(m.int().to(N), 1.0)


def test_index_copy_fill_add():
    x = rnd(5, 4, 3)
    i = torch.tensor([3, 0])
    same(x.to(N).index_copy(1, i.to(N), rnd(5, 2, 3, seed=1).to(N)), x.index_copy(1, i, rnd(5, 2, 3, seed=1)))
    same(x.to(N).index_fill(1, torch.tensor([-1, 0]).to(N), 2.5), x.index_fill(1, torch.tensor([-1, 0]), 2.5))
    same(x.to(N).index_add(0, torch.tensor([4, 0, 4]).to(N), rnd(3, 4, 3, seed=2).to(N), alpha=2),
         x.index_add(0, torch.tensor([4, 0, 4]), rnd(3, 4, 3, seed=2), alpha=2))
    cache = torch.zeros(1, 2, 8, 4, device=N)  # a static KV cache update
    cache.index_copy_(2, torch.tensor([5], device=N, dtype=torch.int32), torch.ones(1, 2, 1, 4, device=N))
    assert cache.sum(dim=(0, 1, 3)).cpu().tolist() == [0, 0, 0, 0, 0, 8, 0, 0]


def test_out_of_range_indices_fail_at_synchronize_naming_the_op():
    x = torch.randn(3, 4, device=N)
    cases = [
        (lambda: x[torch.tensor([5], device=N)], r"index: index 5 is out of bounds for dimension 0 with size 3"),
        (lambda: x.gather(1, torch.tensor([[4]], device=N)), r"gather: index 4 is out of bounds for dimension 1 with size 4"),
        (lambda: x.index_select(0, torch.tensor([3], device=N)), r"index_select: index 3 is out of bounds"),
        (lambda: x.scatter_(1, torch.tensor([[9]], device=N), 1.0), r"index 9 is out of bounds"),
    ]
    for fn, msg in cases:
        fn()  # queued
        with pytest.raises(RuntimeError, match=msg):
            torch.neuron.synchronize()
