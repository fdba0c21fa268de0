"""Random ops on neuron: reproducibility (torch.manual_seed, torch.neuron.manual_seed,
get/set_rng_state, explicit generators), independence from the thread count and the SIMD path,
distribution statistics, parameter checks, dropout forward/backward, randperm."""

from __future__ import annotations

import math

import pytest
import torch
import torch_neuronx

DEV = "neuron"


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_neuronx.clear_op_tracking()
    yield
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []


def draw_all():
    """One of every random op, as CPU tensors."""
    out = [
        torch.rand(1000, device=DEV),
        torch.randn(1001, device=DEV),
        torch.randn(17, dtype=torch.float64, device=DEV),
        torch.empty(300, dtype=torch.bfloat16, device=DEV).uniform_(-2, 3),
        torch.randint(0, 10, (500,), device=DEV, dtype=torch.int32),
        torch.randint(-(2**40), 2**40, (50,), device=DEV),
        torch.empty(64, device=DEV).bernoulli_(0.3),
        torch.bernoulli(torch.full((64,), 0.7, device=DEV)),
        torch.empty(64, device=DEV).exponential_(2.0),
        torch.randperm(100, device=DEV),
        torch.nn.functional.dropout(torch.ones(256, device=DEV), 0.25),
        torch.empty(30, dtype=torch.int64, device=DEV).random_(),
    ]
    return [t.cpu() for t in out]


def test_manual_seed_reproduces_every_op():
    torch.manual_seed(1234)
    a = draw_all()
    torch.manual_seed(1234)
    b = draw_all()
    torch.neuron.manual_seed(1234)
    c = draw_all()
    for x, y, z in zip(a, b, c):
        assert torch.equal(x, y)
        assert torch.equal(x, z)
    torch.manual_seed(4321)
    d = draw_all()
    assert not torch.equal(a[0], d[0])


def test_consecutive_ops_differ_and_state_round_trips():
    torch.manual_seed(7)
    x = torch.rand(100, device=DEV)
    state = torch.neuron.get_rng_state()
    y = torch.rand(100, device=DEV)
    z = torch.rand(100, device=DEV)
    assert not torch.equal(x.cpu(), y.cpu())
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.rand(100, device=DEV).cpu(), y.cpu())
    assert torch.equal(torch.rand(100, device=DEV).cpu(), z.cpu())


def test_explicit_generator_and_device_check():
    g = torch.Generator(device=DEV)
    g.manual_seed(5)
    a = torch.rand(50, device=DEV, generator=g)
    g.manual_seed(5)
    b = torch.rand(50, device=DEV, generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    # The explicit generator does not advance the default one.
    torch.manual_seed(9)
    before = torch.neuron.get_rng_state()
    torch.rand(50, device=DEV, generator=g)
    assert torch.equal(torch.neuron.get_rng_state(), before)
    with pytest.raises(RuntimeError, match="device type for generator"):
        torch.rand(5, device=DEV, generator=torch.Generator())


def test_strided_fill_uses_logical_order():
    torch.manual_seed(3)
    a = torch.empty(40, 30, device=DEV).uniform_()
    torch.manual_seed(3)
    b = torch.empty(30, 40, device=DEV).t()
    b.uniform_()
    assert torch.equal(a.cpu(), b.cpu())


SCRIPT = """
import hashlib, torch, torch_neuronx
torch.manual_seed(99)
ts = [torch.rand(300000, device='neuron'), torch.randn(300001, device='neuron'),
      torch.randn(70000, dtype=torch.float64, device='neuron'),
      torch.nn.functional.dropout(torch.ones(200000, device='neuron'), 0.5),
      torch.randint(0, 1000, (100000,), device='neuron'), torch.randperm(5000, device='neuron')]
h = hashlib.sha256()
for t in ts:
    h.update(t.cpu().numpy().tobytes())
print(torch_neuronx._C._host_threads(), h.hexdigest())
"""


def test_independent_of_thread_count(py):
    many = py(SCRIPT)
    one = py("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n" + SCRIPT)
    assert many.returncode == 0, many.stderr
    assert one.returncode == 0, one.stderr
    n_many, h_many = many.stdout.split()
    n_one, h_one = one.stdout.split()
    assert n_one == "1"
    if int(n_many) == 1:
        pytest.skip("this machine has one core: nothing to compare")
    assert h_many == h_one


def test_portable_and_avx2_paths_agree(py):
    code = """
import torch, torch_neuronx
torch.manual_seed(11)
u = torch.rand(100000, device='neuron').cpu()
i = torch.randint(0, 77, (5000,), device='neuron').cpu()
n = torch.randn(100003, device='neuron').cpu()
torch.save((u, i, n), OUT)
"""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        paths = [os.path.join(d, "a.pt"), os.path.join(d, "b.pt")]
        r1 = py(code.replace("OUT", repr(paths[0])))
        r2 = py(code.replace("OUT", repr(paths[1])), env={"NEURON_EMU_SIMD": "portable"})
        assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
        (u1, i1, n1), (u2, i2, n2) = torch.load(paths[0]), torch.load(paths[1])
    assert torch.equal(u1, u2)
    assert torch.equal(i1, i2)
    # Box-Muller uses fp32 log: the AVX2 version differs by fused multiply-adds only.
    torch.testing.assert_close(n1, n2, rtol=1e-5, atol=1e-5)


def test_uniform_and_normal_statistics():
    torch.manual_seed(0)
    n = 1 << 20
    u = torch.empty(n, device=DEV).uniform_(-1, 3).cpu().double()
    assert u.min() >= -1 and u.max() < 3
    assert abs(u.mean().item() - 1.0) < 5 * math.sqrt(16 / 12 / n)
    assert abs(u.var().item() - 16 / 12) < 0.01
    z = torch.randn(n, device=DEV).cpu().double()
    assert abs(z.mean().item()) < 5 / math.sqrt(n)
    assert abs(z.var().item() - 1) < 5 * math.sqrt(2 / n)
    for t in (-2.0, -1.0, 0.0, 1.0, 2.0):
        p = 0.5 * (1 + math.erf(t / math.sqrt(2)))
        assert abs((z < t).double().mean().item() - p) < 5 * math.sqrt(p * (1 - p) / n)
    g = torch.empty(n, device=DEV).normal_(3.0, 0.5).cpu().double()
    assert abs(g.mean().item() - 3) < 0.01 and abs(g.std().item() - 0.5) < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_dtypes(dtype):
    torch.manual_seed(0)
    u = torch.rand(10000, device=DEV, dtype=dtype).cpu()
    assert u.dtype == dtype and u.min() >= 0 and u.max() <= 1
    z = torch.randn(10000, device=DEV, dtype=dtype).cpu().float()
    assert abs(z.mean().item()) < 0.05 and abs(z.std().item() - 1) < 0.05


def test_random_ranges():
    torch.manual_seed(0)
    r = torch.randint(3, 9, (20000,), device=DEV).cpu()
    assert r.min() == 3 and r.max() == 8
    counts = torch.bincount(r - 3)
    assert (counts - 20000 / 6).abs().max() < 5 * math.sqrt(20000 / 6)
    b = torch.empty(1000, dtype=torch.uint8, device=DEV).random_().cpu()
    assert b.max() > 200  # the whole [0, 255] range
    f = torch.empty(20000, device=DEV).random_(10).cpu()
    assert f.min() == 0 and f.max() == 9 and torch.equal(f, f.round())
    h = torch.empty(5000, dtype=torch.float16, device=DEV).random_().cpu()
    assert h.min() >= 0 and h.max() <= 2048
    big = torch.randint(-(2**50), 2**50, (1000,), device=DEV).cpu()
    assert big.abs().max() > 2**40
    bools = torch.empty(1000, dtype=torch.bool, device=DEV).random_().cpu()
    assert 300 < bools.sum() < 700
    with pytest.raises(RuntimeError, match="from"):
        torch.empty(3, device=DEV).random_(5, 2)


def test_bernoulli_and_exponential():
    torch.manual_seed(0)
    n = 200000
    x = torch.empty(n, device=DEV).bernoulli_(0.3).cpu()
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(x.mean().item() - 0.3) < 5 * math.sqrt(0.21 / n)
    p = torch.linspace(0, 1, 11).repeat(20000).to(DEV)
    y = torch.bernoulli(p).cpu().view(20000, 11).mean(0)
    torch.testing.assert_close(y, torch.linspace(0, 1, 11), atol=0.02, rtol=0)
    out = torch.empty(11, dtype=torch.int64, device=DEV)
    torch.bernoulli(torch.linspace(0, 1, 11).to(DEV), out=out)
    assert out.cpu()[0] == 0 and out.cpu()[-1] == 1
    e = torch.empty(n, device=DEV).exponential_(4.0).cpu()
    assert e.min() > 0 and abs(e.mean().item() - 0.25) < 0.01
    with pytest.raises(RuntimeError, match="bernoulli_ expects p"):
        torch.empty(3, device=DEV).bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="lambda"):
        torch.empty(3, device=DEV).exponential_(-1)
    with pytest.raises(RuntimeError, match="std"):
        torch.empty(3, device=DEV).normal_(0, -1)


def test_randperm():
    torch.manual_seed(0)
    for n in (0, 1, 2, 1000):
        p = torch.randperm(n, device=DEV).cpu()
        assert p.dtype == torch.int64 and torch.equal(p.sort().values, torch.arange(n))
    p32 = torch.randperm(300, device=DEV, dtype=torch.int32).cpu()
    assert torch.equal(p32.sort().values, torch.arange(300, dtype=torch.int32))
    firsts = torch.stack([torch.randperm(4, device=DEV).cpu()[0] for _ in range(400)])
    assert torch.bincount(firsts, minlength=4).min() > 60


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_dropout_forward_backward(dtype):
    torch.manual_seed(0)
    x = torch.randn(64, 33, dtype=dtype, device=DEV, requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.4, training=True)
    y.backward(torch.ones_like(y))
    keep = y.detach().cpu() != 0
    xc = x.detach().cpu()
    torch.testing.assert_close(y.detach().cpu()[keep], (xc / 0.6)[keep], rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=0)
    grad = x.grad.cpu()
    assert torch.equal(grad != 0, keep)
    torch.testing.assert_close(grad[keep], torch.full_like(grad[keep], 1 / 0.6), rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=0)
    assert abs(keep.float().mean().item() - 0.6) < 0.05
    assert "aten::native_dropout" in torch_neuronx.get_executed_ops()
    # eval mode and p = 1 / p = 0
    z = torch.nn.functional.dropout(x, 0.4, training=False)
    assert torch.equal(z.detach().cpu(), xc)
    assert torch.equal(torch.nn.functional.dropout(x, 1.0).detach().cpu(), torch.zeros_like(xc))
    assert torch.equal(torch.nn.functional.dropout(x, 0.0).detach().cpu(), xc)


def test_native_dropout_mask_and_empty():
    x = torch.ones(10, 10, device=DEV)
    out, mask = torch.ops.aten.native_dropout(x, 0.5, True)
    assert mask.dtype == torch.bool
    assert torch.equal((out.cpu() != 0), mask.cpu())
    e = torch.empty(0, 3, device=DEV)
    o, m = torch.ops.aten.native_dropout(e, 0.5, True)
    assert o.shape == (0, 3) and m.shape == (0, 3)
