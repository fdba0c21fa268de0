"""Reductions and scans on neuron against PyTorch CPU: full and dim reductions, dim lists,
keepdim, dtype=, non-contiguous inputs, out=, empty and 0-dim tensors, NaN handling.

Tolerances: fp32 sums accumulate in fp32 blocks combined in fp64 (ATen: fp32 cascade), so sums
agree to ~1e-6 relative; bf16/fp16 outputs are rounded once from fp32, so a last-bit difference
can flip the final rounding (rtol 1e-2 / 2e-3). var/std/norm accumulate in fp64 on our side.
"""

from __future__ import annotations

import zlib

import pytest
import torch
import torch_neuronx

DEV = "neuron"
TOL = {
    torch.float32: dict(rtol=2e-5, atol=2e-5),
    torch.bfloat16: dict(rtol=1.6e-2, atol=2e-2),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
}


def close(got, want, **kw):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w, **kw)
        return
    assert got.device.type == DEV
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = dict(TOL.get(want.dtype, dict(rtol=0, atol=0)))
    tol.update(kw)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)


def make(shape, dtype=torch.float32, seed=0, lo=-2.0, hi=2.0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.7
    return torch.randint(-50 if dtype != torch.uint8 else 0, 50, shape, generator=g, dtype=dtype)


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_neuronx.clear_op_tracking()
    yield
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []


REDUCTIONS = {
    "sum": lambda t, d, k: t.sum(d, keepdim=k) if d is not None else t.sum(),
    "mean": lambda t, d, k: t.mean(d, keepdim=k) if d is not None else t.mean(),
    "amax": lambda t, d, k: t.amax(d if d is not None else (), keepdim=k),
    "amin": lambda t, d, k: t.amin(d if d is not None else (), keepdim=k),
    "var": lambda t, d, k: t.var(d, keepdim=k),
    "std": lambda t, d, k: t.std(d, correction=0, keepdim=k),
    "norm": lambda t, d, k: torch.linalg.vector_norm(t, 2, dim=d, keepdim=k),
    "norm1": lambda t, d, k: torch.linalg.vector_norm(t, 1, dim=d, keepdim=k),
    "norminf": lambda t, d, k: torch.linalg.vector_norm(t, float("inf"), dim=d, keepdim=k),
    "logsumexp": lambda t, d, k: torch.logsumexp(t, d if d is not None else tuple(range(t.dim())), keepdim=k),
    "nansum": lambda t, d, k: torch.nansum(t, d, keepdim=k),
}
DIMS = [None, 0, 1, -1, (0, 2), (1, 2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_float_reductions(name, dim, dtype):
    fn = REDUCTIONS[name]
    x = make((6, 35, 9), dtype, seed=zlib.crc32(name.encode()) % 1000)
    ref = fn
    if name == "nansum" and dtype in (torch.float16, torch.bfloat16):
        # ATen's CPU nansum accumulates 16-bit floats in 16 bits; the device (and ATen's sum)
        # accumulates in fp32, so compare with the fp32-accumulated result.
        ref = lambda t, d, k: fn(t.float(), d, k).to(dtype)
    for keepdim in (False, True):
        close(fn(x.to(DEV), dim, keepdim), ref(x, dim, keepdim))
    # non-contiguous input: the same values through a transposed view
    xt = x.transpose(0, 2).contiguous().transpose(0, 2)
    close(fn(xt.to(DEV), dim, False), ref(x, dim, False))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_reductions(dtype):
    x = make((5, 7, 3), dtype)
    xn = x.to(DEV)
    close(xn.sum(), x.sum())
    close(xn.sum(1), x.sum(1))
    close(xn.sum(0, dtype=torch.int32), x.sum(0, dtype=torch.int32))
    if dtype != torch.bool:
        close(xn.prod(1), x.prod(1))
        close(xn.amax((0, 2)), x.amax((0, 2)))
    close(xn.max(), x.max())
    close(xn.min(1), x.min(1))
    if dtype == torch.bool:
        with pytest.raises(RuntimeError, match="does not support bool"):
            xn.argmax()
    else:
        close(xn.argmax(), x.argmax())
        close(xn.argmin(2), x.argmin(2))
    close(xn.any(1), x.any(1))
    close(xn.all(), x.all())
    close(xn.cumsum(1), x.cumsum(1))
    close(xn.float().mean(), x.float().mean())
    close(xn.sum(dtype=torch.float32), x.sum(dtype=torch.float32))


def test_dtype_argument_and_promotion():
    x = make((64, 33), torch.bfloat16)
    xn = x.to(DEV)
    close(xn.sum(1, dtype=torch.float32), x.sum(1, dtype=torch.float32))
    close(xn.mean(0, dtype=torch.float64), x.mean(0, dtype=torch.float64))
    close(torch.cumsum(xn, 0, dtype=torch.float32), torch.cumsum(x, 0, dtype=torch.float32))
    close(torch.linalg.vector_norm(xn, dtype=torch.float32), torch.linalg.vector_norm(x, dtype=torch.float32))
    close(xn.prod(0, dtype=torch.float32), x.prod(0, dtype=torch.float32), rtol=1e-4)


def test_max_min_with_indices_and_ties():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [float("nan"), 1.0, float("nan"), 5.0], [-1.0, -1.0, -2.0, -2.0]])
    xn = x.to(DEV)
    for fn in (lambda t: t.max(1), lambda t: t.min(1), lambda t: t.argmax(1), lambda t: t.argmin(1),
               lambda t: t.max(0), lambda t: t.argmax(), lambda t: t.amax(1), lambda t: t.max()):
        close(fn(xn), fn(x))
    values, indices = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    torch.max(xn, 1, keepdim=True, out=(values, indices))
    close((values, indices), torch.max(x, 1, keepdim=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_row_arg_reductions_ties_and_nans(dtype):
    # Rows longer than one vector block: the vector scan must still return the first extreme
    # (ties, +-0) and the first NaN, also across 1024-element chunks.
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-20, 20, (9, 3000), generator=g).to(dtype)
    x[1, 2500] = 100
    x[2, 10] = x[2, 2000] = 100  # ties across chunks
    x[3, 1500] = x[3, 40] = float("nan")
    x[4, :] = 0.0
    x[4, 1200] = -0.0
    x[5, 2999] = -100
    xn = x.to(DEV)
    for fn in (lambda t: t.argmax(1), lambda t: t.argmin(1), lambda t: t.max(1), lambda t: t.min(1),
               lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.amax(0),
               lambda t: torch.logsumexp(t.float(), 1)):
        close(fn(xn), fn(x))


def test_arg_reductions_split_into_blocks_keep_the_first_index():
    # Few outputs and rows longer than one 65536-element block: partial results combine in
    # order, so ties and NaNs resolve to the first index across block boundaries too.
    x = torch.zeros(2, 200000)
    x[0, 70000] = x[0, 140000] = x[0, 190000] = 5.0
    x[0, 65535] = x[0, 65536] = -5.0
    x[1, 131072] = float("nan")
    x[1, 131073] = x[1, 150000] = float("nan")
    x[1, 10] = 9.0
    xn = x.to(DEV)
    for fn in (lambda t: t.argmax(1), lambda t: t.argmin(1), lambda t: t.max(1), lambda t: t.min(1),
               lambda t: t[0].argmax(), lambda t: t[0].argmin(), lambda t: t.argmax()):
        close(fn(xn), fn(x))


def test_large_reductions_inner_and_outer():
    x = make((1 << 20,), torch.float32, seed=3)
    xn = x.to(DEV)
    close(xn.sum(), x.sum(), rtol=1e-5, atol=1e-2)
    close(xn.amax(), x.amax())
    close(xn.argmax(), x.argmax())
    y = make((4096, 64), torch.float32, seed=4)
    yn = y.to(DEV)
    close(yn.sum(0), y.sum(0), rtol=1e-5, atol=1e-3)  # strided (outer) mode
    close(yn.sum(1), y.sum(1), rtol=1e-5, atol=1e-3)  # contiguous (inner) mode
    close(yn.max(0), y.max(0))
    close(yn.var(0), y.var(0), rtol=1e-5, atol=1e-5)
    z = make((3, 300000), torch.float32, seed=5)  # few outputs, long rows: split into blocks
    close(z.to(DEV).sum(1), z.sum(1), rtol=1e-5, atol=1e-2)
    close(z.to(DEV).mean(1), z.mean(1), rtol=1e-5, atol=1e-6)


def test_sum_is_more_accurate_than_naive_fp32():
    # 2^24 + many small values: naive fp32 accumulation loses them all.
    x = torch.full((1 << 20,), 1.0)
    x[0] = 2.0**24
    got = x.to(DEV).sum().item()
    exact = 2.0**24 + (1 << 20) - 1
    # Only the ones sharing an fp32 lane with 2^24 in the first block can be lost (31 of them).
    assert abs(got - exact) <= 32


def test_empty_and_zero_dim():
    e = torch.empty(0, 4)
    en = e.to(DEV)
    close(en.sum(0), e.sum(0))
    close(en.sum(), e.sum())
    close(en.prod(0), e.prod(0))
    close(en.mean(0), e.mean(0))
    close(en.any(0), e.any(0))
    close(en.all(), e.all())
    close(en.amax(1), e.amax(1))  # reduces the non-empty dim: empty result
    with pytest.raises(IndexError, match="non-zero size"):
        e.amax(0)  # the CPU error, which neuron must match
    with pytest.raises(IndexError, match="non-zero size"):
        en.amax(0)
    for fn in (torch.max, torch.argmax):
        with pytest.raises(Exception) as cpu_err:
            fn(e)
        with pytest.raises(cpu_err.type):
            fn(en)
    s = torch.tensor(3.5)
    sn = s.to(DEV)
    for fn in (torch.sum, torch.mean, torch.amax, torch.max, torch.argmax, lambda t: torch.logsumexp(t, 0)):
        close(fn(sn), fn(s))
    close(sn.cumsum(0), s.cumsum(0))


def test_out_variants():
    x = make((8, 5))
    xn = x.to(DEV)
    out = torch.empty(0, device=DEV)
    torch.sum(xn, 1, out=out)
    close(out, x.sum(1))
    out = torch.empty(0, device=DEV)
    torch.mean(xn, 0, keepdim=True, out=out)
    close(out, x.mean(0, keepdim=True))
    out = torch.empty(0, device=DEV)
    torch.cumsum(xn, 1, out=out)
    close(out, torch.cumsum(x, 1))
    big = torch.zeros(8, 10, device=DEV)
    torch.cumprod(xn, 1, out=big[:, ::2])  # strided out
    want = torch.zeros(8, 10)
    want[:, ::2] = torch.cumprod(x, 1)
    close(big, want)
    y, yn = x.clone(), xn.clone()
    y.cumsum_(0)
    yn.cumsum_(0)
    close(yn, y)


def test_nan_propagation():
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), 2.0, -float("inf")]])
    xn = x.to(DEV)
    for fn in (torch.sum, torch.amax, torch.amin, torch.max, torch.nansum, torch.mean,
               lambda t: torch.logsumexp(t, 1), lambda t: t.var(1), lambda t: t.norm(dim=1)):
        close(fn(xn), fn(x))
    inf = torch.full((2, 3), -float("inf"))
    close(torch.logsumexp(inf.to(DEV), 1), torch.logsumexp(inf, 1))


def test_degrees_of_freedom_warning():
    x = make((3, 1))
    with pytest.warns(UserWarning, match="degrees of freedom"):
        got = x.to(DEV).var(1)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        want = x.var(1)
    close(got, want)


def test_reductions_are_async_and_native():
    x = torch.ones(1000, 100, device=DEV)
    s = x.sum(1).mean()
    torch.neuron.synchronize()
    assert s.item() == 100.0
    for op in ("aten::sum.dim_IntList", "aten::mean.dim"):
        assert op in torch_neuronx.get_executed_ops()


def test_aminmax_count_nonzero_equal_trace():
    x = make((9, 7), seed=50)
    xn = x.to(DEV)
    close(torch.aminmax(xn), torch.aminmax(x))
    close(torch.aminmax(xn, dim=0, keepdim=True), torch.aminmax(x, dim=0, keepdim=True))
    i = make((9, 7), torch.int32, seed=51) // 20
    close(torch.count_nonzero(i.to(DEV), 1), torch.count_nonzero(i, 1))
    close(torch.count_nonzero(xn), torch.count_nonzero(x))
    assert torch.equal(xn, xn.clone()) is True
    assert torch.equal(xn, xn + 1) is False
    assert torch.equal(xn, xn[:3]) is False
    close(torch.trace(xn), torch.trace(x))
    close(torch.trace(i.to(DEV)), torch.trace(i))
