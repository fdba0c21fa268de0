"""torch.optim on neuron vs CPU: SGD (momentum, nesterov, weight decay), Adam and AdamW
(amsgrad, maximize) through the foreach path (the default on neuron) and fused=True, plus the
_foreach_* ops themselves, the mixed-dtype slow path and clip_grad_norm_.

Tolerance: the update formulas match ATen's; fp32 results differ only by fused multiply-adds
and summation order (rtol 1e-5 after several steps). bf16 parameters compute in fp32 and round
once per step (rtol 2e-2).
"""

from __future__ import annotations

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


def make_params(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (3, 4, 2), (1,), (300, 70)]
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def run(opt_cls, kwargs, device, dtype=torch.float32, steps=4):
    params = [p.to(device).requires_grad_() for p in make_params(dtype)]
    opt = opt_cls(params, **kwargs)
    g = torch.Generator().manual_seed(1)
    grads = [[torch.randn(p.shape, generator=g).to(dtype) for p in params] for _ in range(steps)]
    for step in range(steps):
        for p, gr in zip(params, grads[step]):
            p.grad = gr.to(device)
        opt.step()
    return [p.detach().cpu() for p in params], opt


CONFIGS = [
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.1, maximize=True)),
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=0.01, maximize=True, betas=(0.8, 0.9))),
    (torch.optim.AdamW, dict(lr=0.01)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
]


@pytest.mark.parametrize("mode", ["foreach", "fused"])
@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
def test_optimizer_matches_cpu(cfg, mode):
    cls, kw = CONFIGS[cfg]
    kw = dict(kw)
    kw["foreach" if mode == "foreach" else "fused"] = True
    want, _ = run(cls, dict(kw), "cpu")
    got, _ = run(cls, dict(kw), DEV)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    executed = torch_neuronx.get_executed_ops()
    if mode == "fused":
        fused = {"SGD": "aten::_fused_sgd_", "Adam": "aten::_fused_adam_", "AdamW": "aten::_fused_adamw_"}[cls.__name__]
        assert fused in executed
    else:
        assert any(op.startswith("aten::_foreach_") for op in executed)


def test_foreach_is_the_default_on_neuron():
    params = [torch.zeros(3, device=DEV, requires_grad=True)]
    opt = torch.optim.Adam(params)
    params[0].grad = torch.ones(3, device=DEV)
    opt.step()
    assert "aten::_foreach_lerp_.Scalar" in torch_neuronx.get_executed_ops()


def test_bf16_params():
    for cls, kw in [(torch.optim.AdamW, dict(lr=0.01, foreach=True)), (torch.optim.Adam, dict(lr=0.01, fused=True)),
                    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, foreach=True))]:
        want, _ = run(cls, dict(kw), "cpu", torch.bfloat16, steps=2)
        got, _ = run(cls, dict(kw), DEV, torch.bfloat16, steps=2)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_one_launch_per_list_op():
    xs = [torch.ones(10, device=DEV) for _ in range(50)]
    ys = [torch.full((10,), 2.0, device=DEV) for _ in range(50)]
    torch.neuron.synchronize()
    stream = torch.neuron.current_stream()
    torch._foreach_add_(xs, ys, alpha=3)
    # All 50 tensors were updated by the one queued task.
    stream.synchronize()
    assert all(torch.equal(x.cpu(), torch.full((10,), 7.0)) for x in xs)


def lists(dtype=torch.float32, n=4):
    g = torch.Generator().manual_seed(3)
    return [torch.rand((i + 1, 3), generator=g).to(dtype) + 0.5 for i in range(n)]


FOREACH_CASES = {
    "add_list": lambda a, b: torch._foreach_add(a, b, alpha=2),
    "sub_list": lambda a, b: torch._foreach_sub(a, b),
    "mul_list": torch._foreach_mul,
    "div_list": torch._foreach_div,
    "add_scalar": lambda a, b: torch._foreach_add(a, 1.5),
    "sub_scalar": lambda a, b: torch._foreach_sub(a, 0.5),
    "mul_scalar": lambda a, b: torch._foreach_mul(a, 3),
    "div_scalar": lambda a, b: torch._foreach_div(a, 4.0),
    "add_scalarlist": lambda a, b: torch._foreach_add(a, [1.0, 2.0, 3.0, 4.0]),
    "mul_scalarlist": lambda a, b: torch._foreach_mul(a, [1.0, -2.0, 3.0, 0.5]),
    "div_scalarlist": lambda a, b: torch._foreach_div(a, [1.0, -2.0, 3.0, 0.5]),
    "mul_tensor": lambda a, b: torch._foreach_mul(a, torch.tensor(2.5)),
    "add_tensor": lambda a, b: torch._foreach_add(a, torch.tensor(2.5), alpha=2),
    "maximum": torch._foreach_maximum,
    "minimum": torch._foreach_minimum,
    "clamp_min": lambda a, b: torch._foreach_clamp_min(a, 1.0),
    "clamp_max": lambda a, b: torch._foreach_clamp_max(a, [1.0, 1.1, 1.2, 0.9]),
    "pow_list": torch._foreach_pow,
    "pow_scalar": lambda a, b: torch._foreach_pow(a, 2),
    "pow_scalar_and_tensor": lambda a, b: torch._foreach_pow(2.0, a),
    "lerp_scalar": lambda a, b: torch._foreach_lerp(a, b, 0.3),
    "lerp_list": lambda a, b: torch._foreach_lerp(a, b, b),
    "addcmul": lambda a, b: torch._foreach_addcmul(a, b, b, value=0.5),
    "addcdiv": lambda a, b: torch._foreach_addcdiv(a, b, a, value=-1),
    "addcdiv_scalarlist": lambda a, b: torch._foreach_addcdiv(a, b, a, [1.0, 2.0, 3.0, 4.0]),
    "addcmul_tensor": lambda a, b: torch._foreach_addcmul(a, b, b, torch.tensor([1.0, 2.0, 3.0, 4.0])),
    "sqrt": lambda a, b: torch._foreach_sqrt(a),
    "neg": lambda a, b: torch._foreach_neg(a),
    "reciprocal": lambda a, b: torch._foreach_reciprocal(a),
    "exp": lambda a, b: torch._foreach_exp(a),
    "sigmoid": lambda a, b: torch._foreach_sigmoid(a),
    "norm": lambda a, b: torch._foreach_norm(a),
    "norm_inf": lambda a, b: torch._foreach_norm(a, float("inf")),
}


@pytest.mark.parametrize("name", sorted(FOREACH_CASES))
def test_foreach_functional(name):
    fn = FOREACH_CASES[name]
    a, b = lists(), lists()
    b = [x * 0.7 for x in b]
    want = fn(a, b)
    got = fn([x.to(DEV) for x in a], [x.to(DEV) for x in b])
    for x, y in zip(got, want):
        torch.testing.assert_close(x.cpu(), y, rtol=1e-6, atol=1e-6)


def test_foreach_inplace_and_noncontiguous():
    a = [t.t() for t in lists()]  # transposed views
    an = [t.to(DEV).t() for t in lists()]
    torch._foreach_mul_(a, 2.0)
    torch._foreach_mul_(an, 2.0)
    torch._foreach_addcmul_(a, a, a, value=0.1)
    torch._foreach_addcmul_(an, an, an, value=0.1)
    torch._foreach_zero_(a[:1])
    torch._foreach_zero_(an[:1])
    for x, y in zip(an, a):
        torch.testing.assert_close(x.cpu(), y)


def test_foreach_slow_path_keeps_aten_semantics():
    ints = [torch.arange(4, dtype=torch.int32) + 1 for _ in range(3)]
    intsn = [t.to(DEV) for t in ints]
    got = torch._foreach_div(intsn, 2)  # promotes to float: per-tensor ops
    want = torch._foreach_div(ints, 2)
    for x, y in zip(got, want):
        assert x.dtype == torch.float32
        torch.testing.assert_close(x.cpu(), y)
    mixed = [torch.ones(2, device=DEV), torch.ones(2, dtype=torch.float64, device=DEV)]
    out = torch._foreach_add(mixed, 1)
    assert out[1].dtype == torch.float64 and out[1].cpu().tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError):
        torch._foreach_add([torch.ones(2, device=DEV)], [torch.ones(3, device=DEV)])


def test_clip_grad_norm():
    for device in ("cpu", DEV):
        params = [p.to(device).requires_grad_() for p in make_params()]
        for p in params:
            p.grad = torch.full_like(p, 0.5)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0, foreach=True)
        if device == "cpu":
            want_total, want_grads = total, [p.grad.clone() for p in params]
        else:
            torch.testing.assert_close(total.cpu(), want_total)
            for p, w in zip(params, want_grads):
                torch.testing.assert_close(p.grad.cpu(), w)
    torch.neuron.synchronize()
    assert "aten::_foreach_norm.Scalar" in torch_neuronx.get_executed_ops()
    # clip_grad_norm_ stacks the per-tensor norms (torch.stack -> cat, a data-movement op
    # outside this file's scope); everything else must be native.
    assert set(torch_neuronx.get_fallback_ops()) <= {"aten::cat.out"}
    torch_neuronx.clear_op_tracking()
