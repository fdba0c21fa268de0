"""The boxed CPU fallback: correctness for in-place, out=, views, multi-output and random ops,
the recorded op names, and TORCH_NEURONX_FALLBACK=error|warn."""

import pytest
import torch
import torch_neuronx


def dev(x):
    return x.to("neuron")


# The examples use special functions (Bessel), which have no neuron kernel; the usual
# arithmetic, reduction and activation ops are native.
def test_functional_and_recorded_names():
    x = torch.randn(4, 5)
    torch_neuronx.clear_op_tracking()
    out = torch.special.bessel_j0(dev(x))
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), torch.special.bessel_j0(x))
    ops = torch_neuronx.get_fallback_ops()
    assert ops and all(op.startswith("aten::special_bessel_j0") for op in ops)
    assert set(ops) <= set(torch_neuronx.get_executed_ops())


def test_out_variant_recorded_with_overload():
    x = torch.randn(4, 5)
    out = torch.empty(0, device="neuron")
    torch_neuronx.clear_op_tracking()
    torch.special.bessel_j0(dev(x), out=out)
    assert torch_neuronx.get_fallback_ops() == ["aten::special_bessel_j0.out"]
    assert out.shape == (4, 5) and torch.equal(out.cpu(), torch.special.bessel_j0(x))  # out= resized on device


def test_in_place_on_a_view():
    x = torch.randn(6, 6)
    d = dev(x)
    d[1:4, ::2].mul_(3.0)
    x[1:4, ::2].mul_(3.0)
    assert torch.allclose(d.cpu(), x)


def test_multi_output():
    x = torch.randn(5, 7)
    v, i = torch.sort(dev(x), dim=1, descending=True)
    rv, ri = torch.sort(x, dim=1, descending=True)
    assert v.device.type == "neuron" and i.device.type == "neuron"
    assert torch.equal(v.cpu(), rv) and torch.equal(i.cpu(), ri)
    vals, idx = torch.max(dev(x), dim=0)
    assert torch.equal(vals.cpu(), x.max(0).values) and torch.equal(idx.cpu(), x.max(0).indices)


def test_tensor_list_in_and_out():
    xs = [torch.randn(3), torch.randn(3)]
    ds = [dev(t) for t in xs]
    torch._foreach_add_(ds, 1.0)
    for d, x in zip(ds, xs):
        assert torch.allclose(d.cpu(), x + 1)
    outs = torch._foreach_mul(ds, 2.0)
    assert all(o.device.type == "neuron" for o in outs)
    c = torch.cat([dev(x) for x in xs])
    assert torch.equal(c.cpu(), torch.cat(xs))


def test_view_op_returns_a_real_view():
    x = torch.arange(12.0)
    d = dev(x)
    u = d.unfold(0, 4, 2)  # CPU-only view kernel: answered as a view, not a copy
    assert u.shape == (5, 4)
    assert u.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    d.add_(100)
    assert torch.equal(u.cpu(), (x + 100).unfold(0, 4, 2))
    c = torch.randn(3, 2).to("neuron")
    r = torch.view_as_complex(c)
    assert r.dtype == torch.complex64 and r.untyped_storage().data_ptr() == c.untyped_storage().data_ptr()


def test_index_ops_with_optional_tensor_lists():
    x = torch.randn(5, 4)
    idx = torch.tensor([0, 3])
    assert torch.equal(dev(x)[dev(idx)].cpu(), x[idx])
    d = dev(x)
    d[dev(idx)] = 0.0
    x[idx] = 0.0
    assert torch.equal(d.cpu(), x)


def test_random_ops_use_the_neuron_generator():
    torch.manual_seed(123)
    a = torch.randn(100, device="neuron").cpu()
    b = torch.empty(50, device="neuron").uniform_().cpu()
    torch.manual_seed(123)
    a2 = torch.randn(100, device="neuron").cpu()
    b2 = torch.empty(50, device="neuron").uniform_().cpu()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert not torch.equal(a[:50], b)  # consecutive ops draw different numbers
    # The CPU generator is not what drives neuron random numbers.
    torch.manual_seed(123)
    torch.neuron.manual_seed(7)
    c = torch.randn(100, device="neuron").cpu()
    assert not torch.equal(a, c)
    torch.neuron.manual_seed(123)
    state = torch.neuron.get_rng_state()
    d1 = torch.rand(10, device="neuron").cpu()
    torch.neuron.set_rng_state(state)
    d2 = torch.rand(10, device="neuron").cpu()
    assert torch.equal(d1, d2)
    g = torch.Generator(device="neuron")
    g.manual_seed(5)
    e1 = torch.randn(10, device="neuron", generator=g).cpu()
    g.manual_seed(5)
    e2 = torch.randn(10, device="neuron", generator=g).cpu()
    assert torch.equal(e1, e2)
    bern = torch.bernoulli(torch.full((1000,), 0.3, device="neuron"))
    assert 200 < bern.sum().item() < 400


def test_autograd_through_fallback():
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    dx = x.detach().to("neuron").requires_grad_()
    dw = w.detach().to("neuron").requires_grad_()
    (x @ w).tanh().sum().backward()
    (dx @ dw).tanh().sum().backward()
    assert torch.allclose(dx.grad.cpu(), x.grad, atol=1e-6)
    assert torch.allclose(dw.grad.cpu(), w.grad, atol=1e-6)


def test_fallback_error_mode(monkeypatch):
    x = torch.randn(3, 3).to("neuron")  # copies are native
    monkeypatch.setenv("TORCH_NEURONX_FALLBACK", "error")
    with pytest.raises(RuntimeError, match=r"aten::special_bessel_j0(\.out)? has no neuron kernel and CPU fallback is disabled"):
        torch.special.bessel_j0(x)


def test_fallback_warn_mode(monkeypatch):
    x = torch.randn(3, 3).to("neuron")
    monkeypatch.setenv("TORCH_NEURONX_FALLBACK", "warn")
    with pytest.warns(UserWarning, match=r"aten::special_bessel_j1(\.out)? has no neuron kernel and falls back to the CPU"):
        torch.special.bessel_j1(x)


def test_bad_fallback_mode(monkeypatch):
    x = torch.randn(3).to("neuron")
    monkeypatch.setenv("TORCH_NEURONX_FALLBACK", "sometimes")
    with pytest.raises(RuntimeError, match="TORCH_NEURONX_FALLBACK=sometimes"):
        torch.special.bessel_j0(x)


# --- the real stack's CPU ops (RealStackFallback.h) ----------------------------------------------


@pytest.fixture
def real_stack():
    torch_neuronx._C._set_fallback_model("real")
    yield
    torch_neuronx._C._set_fallback_model("native")


def test_real_stack_cpu_ops_fall_back_under_their_real_names(real_stack):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 50, generator=g)
    d = dev(logits)
    torch_neuronx.clear_op_tracking()
    assert torch.equal(torch.argmax(d, dim=-1).cpu(), torch.argmax(logits, dim=-1))
    assert torch_neuronx.get_fallback_ops() == ["aten::argmax.out"]

    probs = torch.softmax(logits, -1)
    values, order = torch.sort(dev(probs), dim=-1, descending=True, stable=True)
    want_v, want_i = torch.sort(probs, dim=-1, descending=True, stable=True)
    assert torch.equal(values.cpu(), want_v) and torch.equal(order.cpu(), want_i)
    torch.manual_seed(3)
    a = torch.multinomial(dev(probs), 1)
    torch.manual_seed(3)
    b = torch.multinomial(dev(probs), 1)
    assert a.device.type == "neuron" and torch.equal(a.cpu(), b.cpu())  # seeded like any neuron op
    assert torch_neuronx.get_fallback_ops() == ["aten::argmax.out", "aten::sort.values_stable",
                                                "aten::multinomial"]


def test_native_model_runs_neuron_kernels_for_them():
    torch_neuronx._C._set_fallback_model("native")
    d = dev(torch.randn(3, 40))
    torch.argmax(d, -1)
    torch.sort(d, -1)
    torch.multinomial(torch.softmax(d, -1), 2)
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []


def test_fallback_model_comes_from_the_environment(py):
    code = ("import torch, torch_neuronx; print(torch_neuronx._C._fallback_model()); "
            "torch.argmax(torch.randn(4, device='neuron')); print(torch_neuronx.get_fallback_ops())")
    r = py(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["real", "['aten::argmax.out']"]
    r = py(code, env={"NEURON_EMU_FALLBACK_MODEL": "native"})
    assert r.stdout.split("\n")[:2] == ["native", "[]"]
    r = py(code, env={"NEURON_EMU_FALLBACK_MODEL": "fast"})
    assert r.returncode != 0 and "NEURON_EMU_FALLBACK_MODEL=fast: expected real" in r.stderr
