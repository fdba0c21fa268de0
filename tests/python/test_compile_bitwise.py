"""Compiled == eager, bit for bit: the compiler's executor computes with the eager kernels
(csrc/kernels), so one op compiled alone gives exactly the eager op's result.

Each case runs `f` eagerly on neuron and as `torch.compile(f, backend="neuron")`, in fp32 and
bf16, and compares the raw bits (no tolerance: one implementation per algorithm). Shapes have
odd inner sizes so vector loops run their tails too.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_neuronx  # noqa: F401


def _x(shape, lo=-4.0, hi=4.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * (hi - lo) + lo


# name -> (function, input range)
ELEMENTWISE = {
    "exp": (torch.exp, (-20.0, 20.0)),
    "exp2": (torch.exp2, (-20.0, 20.0)),
    "expm1": (torch.expm1, (-3.0, 3.0)),
    "log": (torch.log, (1e-3, 100.0)),
    "log2": (torch.log2, (1e-3, 100.0)),
    "log10": (torch.log10, (1e-3, 100.0)),
    "log1p": (torch.log1p, (-0.9, 10.0)),
    "tanh": (torch.tanh, (-6.0, 6.0)),
    "sigmoid": (torch.sigmoid, (-10.0, 10.0)),
    "erf": (torch.erf, (-4.0, 4.0)),
    "erfc": (torch.erfc, (-4.0, 4.0)),
    "sin": (torch.sin, (-10.0, 10.0)),
    "cos": (torch.cos, (-10.0, 10.0)),
    "tan": (torch.tan, (-1.5, 1.5)),
    "atan": (torch.atan, (-10.0, 10.0)),
    "asin": (torch.asin, (-1.0, 1.0)),
    "sinh": (torch.sinh, (-5.0, 5.0)),
    "cosh": (torch.cosh, (-5.0, 5.0)),
    "sqrt": (torch.sqrt, (0.0, 100.0)),
    "rsqrt": (torch.rsqrt, (1e-3, 100.0)),
    "gelu": (F.gelu, (-6.0, 6.0)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), (-6.0, 6.0)),
    "silu": (F.silu, (-8.0, 8.0)),
}


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.cpu()
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def _assert_bitwise(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = (_bits(got) != _bits(want)).sum().item()
    assert diff == 0, f"{diff} of {want.numel()} elements differ from eager (first: " \
        f"{got.cpu().flatten()[(_bits(got) != _bits(want)).flatten()][:4].tolist()} vs " \
        f"{want.cpu().flatten()[(_bits(got) != _bits(want)).flatten()][:4].tolist()})"


def _check(f, *args):
    dev = [a.to("neuron") for a in args]
    want = f(*dev)
    got = torch.compile(f, backend="neuron")(*dev)
    assert torch.neuron.get_dynamo_metrics()["graphs_compiled"] >= 1
    _assert_bitwise(got, want)


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_math(name, dtype, fresh_compile):
    f, (lo, hi) = ELEMENTWISE[name]
    _check(f, _x((5, 203), lo, hi).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax(log, dim, dtype, fresh_compile):
    f = (lambda x: torch.log_softmax(x, dim)) if log else (lambda x: torch.softmax(x, dim))
    _check(f, _x((6, 77), -8.0, 8.0).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_layer_norm(affine, dtype, fresh_compile):
    shape = (3, 5, 67)
    w = _x(shape[-1:], 0.5, 1.5, seed=1).to(dtype) if affine else None
    b = _x(shape[-1:], -0.5, 0.5, seed=2).to(dtype) if affine else None
    dev = [t.to("neuron") if t is not None else None for t in (w, b)]
    _check(lambda x: F.layer_norm(x, shape[-1:], dev[0], dev[1], 1e-5), _x(shape).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention(causal, dtype, fresh_compile):
    q, k, v = (_x((2, 4, 9, 16), -1.0, 1.0, seed=s).to(dtype) for s in (1, 2, 3))
    _check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_training_gradients(dtype, fresh_compile):
    """Backward of softmax and layer norm compiled: the same bits as eager autograd."""
    w = _x((67,), 0.5, 1.5, seed=1).to(dtype)

    def f(x, w):
        y = F.layer_norm(x, (67,), w, None, 1e-5)
        return torch.log_softmax(torch.softmax(y, -1) * 3.0, -1)

    def grads(fn):
        x = _x((4, 67)).to(dtype).to("neuron").requires_grad_()
        wd = w.to("neuron").requires_grad_()
        g = _x((4, 67), seed=5).to(dtype).to("neuron")
        fn(x, wd).backward(g)
        return x.grad, wd.grad

    want = grads(f)
    got = grads(torch.compile(f, backend="neuron"))
    assert torch.neuron.get_dynamo_metrics()["aot_graphs"]["backward"] >= 1
    for a, b in zip(got, want):
        _assert_bitwise(a, b)



@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu"])
def test_activation_backward(name, dtype, fresh_compile):
    """GELU/SiLU backward compiled whole (not decomposed): the eager kernels' bits, including a
    broadcast incoming gradient (the backward of .sum())."""
    f, (lo, hi) = ELEMENTWISE[name]

    def grad(fn, reduce):
        x = _x((5, 203), lo, hi).to(dtype).to("neuron").requires_grad_()
        y = fn(x)
        (y.sum() if reduce else (y * _x((5, 203), seed=7).to(dtype).to("neuron")).sum()).backward()
        return x.grad

    for reduce in (True, False):
        want = grad(f, reduce)
        got = grad(torch.compile(f, backend="neuron"), reduce)
        _assert_bitwise(got, want)
    assert torch.neuron.get_dynamo_metrics()["aot_graphs"]["backward"] >= 1

CONV = {
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), (2, 3, 19), (4, 3, 3)),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1, dilation=(1, 2)), (2, 4, 9, 11), (6, 4, 3, 3)),
    "conv2d_groups": (lambda x, w, b: F.conv2d(x, w, b, groups=2), (2, 4, 9, 11), (6, 2, 3, 3)),
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b, padding=1), (1, 2, 5, 6, 7), (3, 2, 3, 3, 3)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(CONV))
def test_convolution_forward_and_backward(name, dtype, fresh_compile):
    """Compiled convolutions run the eager conv kernel (kernels/conv.h), gradients included."""
    f, xs, ws = CONV[name]

    def run(fn):
        x = _x(xs, seed=1).to(dtype).to("neuron").requires_grad_()
        w = _x(ws, -0.5, 0.5, seed=2).to(dtype).to("neuron").requires_grad_()
        b = _x(ws[:1], seed=3).to(dtype).to("neuron").requires_grad_()
        y = fn(x, w, b)
        y.backward(_x(tuple(y.shape), seed=4).to(dtype).to("neuron"))
        return y, x.grad, w.grad, b.grad

    want = run(f)
    got = run(torch.compile(f, backend="neuron"))
    assert torch.neuron.get_dynamo_metrics()["fallback_ops"] == {}
    for a, b in zip(got, want):
        _assert_bitwise(a.detach(), b)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pooling_forward_and_backward(pool, dtype, fresh_compile):
    def f(x):
        if pool == "max":
            return F.max_pool2d(x, 3, stride=2, padding=1)
        return F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)

    def run(fn):
        x = _x((2, 3, 11, 13)).to(dtype).to("neuron").requires_grad_()
        y = fn(x)
        y.backward(_x(tuple(y.shape), seed=4).to(dtype).to("neuron"))
        return y, x.grad

    want = run(f)
    got = run(torch.compile(f, backend="neuron"))
    for a, b in zip(got, want):
        _assert_bitwise(a.detach(), b)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(6, 5), (4, 3, 7, 9), (2, 3, 3, 4, 5)], ids=["2d", "4d", "5d"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_batch_norm_training(affine, shape, dtype, fresh_compile):
    """Training batch norm runs the eager kernels (kernels::batch_norm_forward/backward), not a
    decomposition: output, input/weight/bias gradients and the updated running statistics."""
    C = shape[1]

    def run(compiled):
        bn = torch.nn.BatchNorm1d(C, affine=affine) if len(shape) <= 3 else (
            torch.nn.BatchNorm2d(C, affine=affine) if len(shape) == 4 else torch.nn.BatchNorm3d(C, affine=affine))
        bn = bn.to(dtype).to("neuron").train()
        if affine:
            with torch.no_grad():
                bn.weight.copy_(_x((C,), 0.5, 1.5, seed=5).to(dtype))
                bn.bias.copy_(_x((C,), -1.0, 1.0, seed=6).to(dtype))
        fn = torch.compile(bn, backend="neuron") if compiled else bn
        x = _x(shape, seed=1).to(dtype).to("neuron").requires_grad_()
        y = fn(x)
        y.backward(_x(tuple(y.shape), seed=4).to(dtype).to("neuron"))
        grads = [x.grad] + ([bn.weight.grad, bn.bias.grad] if affine else [])
        return [y.detach()] + grads + [bn.running_mean, bn.running_var]

    want = run(False)
    got = run(True)
    m = torch.neuron.get_dynamo_metrics()
    assert m["fallback_ops"] == {} and m["graphs_compiled"] >= 2  # forward and backward graphs
    for a, b in zip(got, want):
        _assert_bitwise(a, b)
