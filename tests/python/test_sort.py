"""Sorting and sampling on neuron: sort/argsort (stable, descending, NaN placement) and topk vs
PyTorch CPU (exact), unique with inverse and counts, and multinomial: valid, seed-deterministic
samples with the right frequencies."""

import pytest
import torch
import torch_neuronx

N = "neuron"


def same(a, b):
    torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable(dtype, descending):
    x = torch.randint(0, 5, (4, 33), generator=torch.Generator().manual_seed(0)).to(dtype)
    if dtype.is_floating_point:
        x[1, 2] = float("nan")
    for dim in (0, 1):
        v, i = x.to(N).sort(dim=dim, descending=descending, stable=True)
        vc, ic = x.sort(dim=dim, descending=descending, stable=True)
        same(v, vc)
        same(i, ic)
    same(x.to(N).argsort(dim=1, descending=descending, stable=True), x.argsort(dim=1, descending=descending, stable=True))


def test_topk():
    x = torch.randn(6, 50, generator=torch.Generator().manual_seed(1))
    for k, dim, largest in ((5, 1, True), (3, 0, False), (50, 1, True), (0, 1, True)):
        v, i = x.to(N).topk(k, dim=dim, largest=largest)
        vc, ic = x.topk(k, dim=dim, largest=largest)
        same(v, vc)
        same(i, ic)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        x.to(N).topk(51)


def test_unique():
    x = torch.tensor([[3, 1, 3], [2, 2, 7]])
    for kw in ({}, {"return_inverse": True}, {"return_counts": True}, {"return_inverse": True, "return_counts": True}):
        got, want = torch.unique(x.to(N), **kw), torch.unique(x, **kw)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            same(g, w)


def test_multinomial():
    p = torch.tensor([[0.1, 0.0, 0.5, 0.4], [1.0, 1.0, 1.0, 1.0]])
    g = torch.Generator(N).manual_seed(3)
    a = torch.multinomial(p.to(N), 3, generator=g).cpu()
    g.manual_seed(3)
    b = torch.multinomial(p.to(N), 3, generator=g).cpu()
    assert torch.equal(a, b)  # counter-based: the seed decides
    for row in a:
        assert len(set(row.tolist())) == 3  # without replacement: distinct
    assert 1 not in a[0].tolist()  # zero probability is never drawn
    s = torch.multinomial(p.to(N), 20000, replacement=True).cpu()
    freq = torch.stack([(s[0] == k).double().mean() for k in range(4)])
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.0, 0.5, 0.4], dtype=torch.float64), atol=0.015, rtol=0)
    assert "aten::multinomial" in torch_neuronx.get_executed_ops()
    torch.multinomial(torch.tensor([0.0, -1.0], device=N), 1)
    with pytest.raises(RuntimeError, match="multinomial: probability tensor contains either `inf`, `nan` or element < 0"):
        torch.neuron.synchronize()


@pytest.mark.parametrize("n", [5, 100, 3000])
def test_topk_ties_and_nans_match_the_cpu_exactly(n):
    # Same selection algorithm as ATen's CPU kernel (partial_sort for small k, else nth_element),
    # so even the order of tied values and NaNs is the CPU's.
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-5, 6, (4, n), generator=g).float()
    x[0, ::7] = float("nan")
    for k in (1, 3, 47):
        if k > n:
            continue
        for largest in (True, False):
            for sorted_ in (True, False):
                want = torch.topk(x, k, largest=largest, sorted=sorted_)
                got = torch.topk(x.to("neuron"), k, largest=largest, sorted=sorted_)
                assert torch.equal(got.indices.cpu(), want.indices)
                torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True, rtol=0, atol=0)
    xi = torch.randint(-9, 10, (2, 12), generator=g)
    assert torch.equal(torch.topk(xi.to("neuron"), 5, largest=False).indices.cpu(), torch.topk(xi, 5, largest=False).indices)
