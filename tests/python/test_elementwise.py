"""Elementwise ops on neuron against PyTorch CPU: every op family, dtypes (incl. bf16/fp16),
broadcasting, non-contiguous views, 0-dim and empty tensors, out= and in-place variants, CPU
scalars, type promotion. Each test also checks that nothing fell back to the CPU.

Tolerances: fp32 results come from our own vectorized exp/log/tanh/erf (<= 3 ulp from the
correctly rounded value; ATen's Sleef versions are <= 1 ulp), so fp32 compares at rtol 1e-5.
bf16/fp16 compute in fp32 and round once, so a 1-ulp difference of the fp32 value can flip the
final rounding: one bf16 ulp is 2^-7 relative (rtol 1e-2), one fp16 ulp 2^-10 (rtol 2e-3).
fp64 uses the C library like ATen (rtol 1e-12).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch_neuronx

DEV = "neuron"
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]

TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-6),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.float64: dict(rtol=1e-12, atol=1e-12),
}


def assert_close(got: torch.Tensor, want: torch.Tensor, **kw):
    assert got.device.type == DEV, got.device
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = TOL.get(want.dtype, dict(rtol=0, atol=0))
    tol.update(kw)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)


def make(shape, dtype, lo=-3.0, hi=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo_i = 0 if dtype == torch.uint8 else -20
    return torch.randint(lo_i, 20, shape, generator=g, dtype=dtype)


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_neuronx.clear_op_tracking()
    yield
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []


# name -> (function, input domain)
UNARY_FLOAT = {
    "sqrt": (torch.sqrt, (0.0, 9.0)),
    "rsqrt": (torch.rsqrt, (0.1, 9.0)),
    "reciprocal": (torch.reciprocal, (0.2, 4.0)),
    "exp": (torch.exp, (-20.0, 20.0)),
    "exp2": (torch.exp2, (-20.0, 20.0)),
    "expm1": (torch.expm1, (-3.0, 3.0)),
    "log": (torch.log, (0.01, 100.0)),
    "log2": (torch.log2, (0.01, 100.0)),
    "log10": (torch.log10, (0.01, 100.0)),
    "log1p": (torch.log1p, (-0.9, 10.0)),
    "sin": (torch.sin, (-6.0, 6.0)),
    "cos": (torch.cos, (-6.0, 6.0)),
    "tan": (torch.tan, (-1.2, 1.2)),
    "asin": (torch.asin, (-0.99, 0.99)),
    "acos": (torch.acos, (-0.99, 0.99)),
    "atan": (torch.atan, (-5.0, 5.0)),
    "sinh": (torch.sinh, (-4.0, 4.0)),
    "cosh": (torch.cosh, (-4.0, 4.0)),
    "tanh": (torch.tanh, (-6.0, 6.0)),
    "erf": (torch.erf, (-4.0, 4.0)),
    "erfc": (torch.erfc, (-3.0, 3.0)),
    "erfinv": (torch.erfinv, (-0.99, 0.99)),
    "sigmoid": (torch.sigmoid, (-10.0, 10.0)),
    "floor": (torch.floor, (-5.0, 5.0)),
    "ceil": (torch.ceil, (-5.0, 5.0)),
    "round": (torch.round, (-5.0, 5.0)),
    "trunc": (torch.trunc, (-5.0, 5.0)),
    "frac": (torch.frac, (-5.0, 5.0)),
    "neg": (torch.neg, (-5.0, 5.0)),
    "abs": (torch.abs, (-5.0, 5.0)),
    "sign": (torch.sign, (-5.0, 5.0)),
    "lgamma": (torch.lgamma, (0.1, 5.0)),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
def test_unary_float(name, dtype):
    fn, (lo, hi) = UNARY_FLOAT[name]
    x = make((37, 19), dtype, lo, hi)
    assert_close(fn(x.to(DEV)), fn(x))


@pytest.mark.parametrize("name", ["exp", "tanh", "erf", "log", "sigmoid", "sqrt"])
def test_unary_special_values(name):
    fn = UNARY_FLOAT[name][0]
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40, 88.5, -88.5, 100.0])
    assert_close(fn(x.to(DEV)), fn(x))


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", ["neg", "abs", "sign", "floor", "round", "trunc", "ceil"])
def test_unary_int(name, dtype):
    if name == "neg" and dtype == torch.uint8:
        pytest.skip("neg of uint8 wraps differently by design in torch")
    fn = UNARY_FLOAT[name][0]
    x = make((50,), dtype)
    assert_close(fn(x.to(DEV)), fn(x))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32])
def test_int_to_float_promotion(dtype):
    x = make((10,), dtype, 1, 9).abs() + 1
    for fn in (torch.sqrt, torch.exp, torch.sigmoid, torch.reciprocal):
        assert_close(fn(x.to(DEV)), fn(x))


BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "sub": lambda a, b: a - b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=2),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
}
FLOAT_ONLY = {"atan2": torch.atan2, "hypot": torch.hypot, "copysign": torch.copysign, "pow": torch.pow}


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int64, torch.int8, torch.uint8])
@pytest.mark.parametrize("name", sorted(BINARY) + sorted(FLOAT_ONLY))
def test_binary(name, dtype):
    fn = BINARY.get(name) or FLOAT_ONLY[name]
    if name in FLOAT_ONLY and not dtype.is_floating_point:
        pytest.skip("float op")
    if name == "sub_alpha" and dtype == torch.uint8:
        pytest.skip("negative alpha on uint8")
    a = make((6, 1, 5), dtype, -4, 4, seed=1)
    b = make((7, 1), dtype, 0.5, 4, seed=2)  # broadcasts to (6, 7, 5); positive divisors
    if not dtype.is_floating_point:
        b = b.abs() + 1
    if name == "pow":
        a = a.abs() + 0.1
    assert_close(fn(a.to(DEV), b.to(DEV)), fn(a, b))


def test_integer_division_semantics():
    a = torch.tensor([7, -7, 7, -7, 0, 5], dtype=torch.int32)
    b = torch.tensor([2, 2, -2, -2, 3, -1], dtype=torch.int32)
    for fn in (torch.floor_divide, torch.remainder, torch.fmod,
               lambda x, y: torch.div(x, y, rounding_mode="trunc"),
               lambda x, y: torch.div(x, y, rounding_mode="floor"), torch.div):
        assert_close(fn(a.to(DEV), b.to(DEV)), fn(a, b))


def test_float_floor_division_and_remainder_edge_cases():
    a = torch.tensor([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 1.0, float("inf"), 3.0])
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 2.0, float("inf")])
    for fn in (torch.floor_divide, torch.remainder, torch.fmod):
        assert_close(fn(a.to(DEV), b.to(DEV)), fn(a, b))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_bitwise(dtype):
    a, b = make((40,), dtype, seed=3), make((40,), dtype, seed=4)
    an, bn = a.to(DEV), b.to(DEV)
    for fn in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        assert_close(fn(an, bn), fn(a, b))
    assert_close(torch.bitwise_not(an), torch.bitwise_not(a))
    if dtype != torch.bool:
        s = torch.tensor([0, 1, 3, 7, 9, 40, 70] * 6, dtype=dtype)[:40]
        assert_close(torch.bitwise_left_shift(an, s.to(DEV)), torch.bitwise_left_shift(a, s))
        assert_close(torch.bitwise_right_shift(an, s.to(DEV)), torch.bitwise_right_shift(a, s))
        assert_close(an << 2, a << 2)
        assert_close(an >> 1, a >> 1)


def test_pow_forms():
    x = make((20,), torch.float32, 0.1, 3)
    xn = x.to(DEV)
    for e in (0, 1, 2, 3, 0.5, -0.5, -1, -2, 1.7, -2.3):
        assert_close(xn ** e, x ** e)
    assert_close(2.0 ** xn, 2.0 ** x)
    assert_close(torch.pow(1, xn), torch.pow(1, x))
    i = torch.arange(-4, 6, dtype=torch.int64)
    assert_close(i.to(DEV) ** 3, i ** 3)
    assert_close(torch.pow(i.to(DEV), i.abs().to(DEV)), torch.pow(i, i.abs()))
    assert_close(i.to(DEV) ** 0.5, i ** 0.5)  # int ** float promotes


def test_cpu_scalar_operands_and_promotion():
    x = make((5, 4), torch.bfloat16)
    xn = x.to(DEV)
    # Python scalars are wrapped CPU tensors; a bf16 tensor stays bf16 and the scalar keeps
    # its full precision in the fp32 computation.
    assert_close(xn * 0.1, x * 0.1)
    assert_close(xn + 3, x + 3)
    assert_close(xn + torch.tensor(2.5, dtype=torch.float64), x + torch.tensor(2.5, dtype=torch.float64))
    i = make((5, 4), torch.int32)
    assert_close(i.to(DEV) * 2.5, i * 2.5)  # int * float -> float32
    assert_close(i.to(DEV) + xn, i + x)  # int + bf16 -> bf16
    assert_close(i.to(DEV) / 3, i / 3)  # true division of ints -> float32
    assert_close(xn.float() + i.to(DEV).long(), x.float() + i.long())
    assert_close(torch.where(xn > 0, xn, 0.0), torch.where(x > 0, x, 0.0))


def test_noncontiguous_broadcast_zero_dim_empty():
    x = make((8, 6), torch.float32)
    y = make((6,), torch.float32, seed=5)
    xn, yn = x.to(DEV), y.to(DEV)
    assert_close(xn.t() * 2 + 1, x.t() * 2 + 1)
    assert_close(xn[::2, 1::2] - yn[1::2], x[::2, 1::2] - y[1::2])
    assert_close(xn.t()[:, :3].exp(), x.t()[:, :3].exp())
    s = torch.tensor(1.5)
    assert_close(s.to(DEV) * xn, s * x)
    assert_close(s.to(DEV) + s.to(DEV), s + s)  # 0-dim result
    e = torch.empty(0, 3)
    assert_close(e.to(DEV) + 1, e + 1)
    assert_close(torch.sigmoid(e.to(DEV)), torch.sigmoid(e))
    # expanded (stride 0) input
    assert_close(yn.expand(4, 6).sin(), y.expand(4, 6).sin())
    big = make((3, 70000), torch.float32, seed=6)  # large enough to run in parallel
    assert_close(torch.tanh(big.to(DEV)[:, ::3]), torch.tanh(big[:, ::3]))


def test_out_and_inplace_variants():
    a, b = make((4, 5), torch.float32, seed=7), make((5,), torch.float32, seed=8)
    an, bn = a.to(DEV), b.to(DEV)
    out = torch.empty(0, device=DEV)
    torch.mul(an, bn, out=out)
    assert_close(out, a * b)
    # out= with another dtype converts like ATen (compute fp32, store fp64)
    out64 = torch.empty(4, 5, dtype=torch.float64, device=DEV)
    torch.add(an, bn, out=out64)
    assert_close(out64, torch.add(a, b, out=torch.empty(4, 5, dtype=torch.float64)))
    # a strided out=
    big = torch.zeros(4, 10, device=DEV)
    torch.sub(an, bn, out=big[:, ::2])
    want = torch.zeros(4, 10)
    want[:, ::2] = a - b
    assert_close(big, want)
    c, cn = a.clone(), an.clone()
    c.mul_(b).add_(1).exp_().clamp_(max=3)
    cn.mul_(bn).add_(1).exp_().clamp_(max=3)
    assert_close(cn, c)
    # in-place on a transposed view
    c, cn = a.clone(), an.clone()
    c.t().sigmoid_()
    cn.t().sigmoid_()
    assert_close(cn, c)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.ones(3, dtype=torch.int32, device=DEV).add_(torch.ones(3, device=DEV))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_ternary(dtype):
    a, b, c = (make((4, 1, 6), dtype, seed=s) for s in (10, 11, 12))
    c = c.abs() + 0.5
    args = [t.to(DEV) for t in (a, b, c)]
    assert_close(torch.addcmul(*args, value=0.5), torch.addcmul(a, b, c, value=0.5))
    assert_close(torch.addcdiv(*args, value=-2), torch.addcdiv(a, b, c, value=-2))
    assert_close(torch.lerp(args[0], args[1], 0.3), torch.lerp(a, b, 0.3))
    assert_close(torch.lerp(args[0], args[1], 0.8), torch.lerp(a, b, 0.8))
    w = make((6,), dtype, 0, 1, seed=13)
    assert_close(torch.lerp(args[0], args[1], w.to(DEV)), torch.lerp(a, b, w))
    cond = a > 0
    assert_close(torch.where(cond.to(DEV), args[1], args[2]), torch.where(cond, b, c))
    assert_close(torch.clamp(args[0], -1, 1), torch.clamp(a, -1, 1))
    assert_close(torch.clamp(args[0], min=0.5), torch.clamp(a, min=0.5))
    lo, hi = -c, c
    assert_close(torch.clamp(args[0], lo.to(DEV), hi.to(DEV)), torch.clamp(a, lo, hi))
    assert_close(torch.clamp(args[0], min=lo.to(DEV)), torch.clamp(a, min=lo))


def test_int_ternary_and_where_promotion():
    a = make((10,), torch.int32)
    b = make((10,), torch.int64, seed=2)
    cond = a > 0
    assert_close(torch.where(cond.to(DEV), a.to(DEV), b.to(DEV)), torch.where(cond, a, b))
    assert_close(torch.where(cond.to(DEV), a.to(DEV), 2.5), torch.where(cond, a, 2.5))
    assert_close(torch.addcmul(a.to(DEV), a.to(DEV), a.to(DEV), value=2), torch.addcmul(a, a, a, value=2))
    assert_close(torch.clamp(a.to(DEV), -3, 4), torch.clamp(a, -3, 4))


def test_nan_handling():
    x = torch.tensor([1.0, float("nan"), -2.0, float("inf"), float("-inf"), 0.5])
    y = torch.tensor([float("nan"), 1.0, -3.0, 1.0, 2.0, 0.5])
    xn, yn = x.to(DEV), y.to(DEV)
    for fn in (torch.maximum, torch.minimum, torch.fmax, torch.fmin, torch.eq, torch.ne, torch.lt):
        assert_close(fn(xn, yn), fn(x, y))
    assert_close(torch.isnan(xn), torch.isnan(x))
    assert_close(torch.isinf(xn), torch.isinf(x))
    assert_close(torch.isfinite(xn), torch.isfinite(x))
    assert_close(torch.isposinf(xn), torch.isposinf(x))
    assert_close(torch.signbit(xn), torch.signbit(x))
    assert_close(torch.nan_to_num(xn), torch.nan_to_num(x))
    assert_close(torch.nan_to_num(xn, nan=7.0, posinf=1.0, neginf=-1.0), torch.nan_to_num(x, 7.0, 1.0, -1.0))
    xb = x.bfloat16()
    assert_close(torch.nan_to_num(xb.to(DEV)), torch.nan_to_num(xb))
    assert_close(torch.clamp(xn, -1, 1), torch.clamp(x, -1, 1))
    assert_close(torch.clamp(xn, min=float("nan")), torch.clamp(x, min=float("nan")))
    assert_close(torch.relu(xn), torch.relu(x))


def test_round_decimals():
    x = make((30,), torch.float32, -100, 100)
    for d in (0, 1, 2, -1):
        assert_close(torch.round(x.to(DEV), decimals=d), torch.round(x, decimals=d))


ACTIVATIONS = {
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softplus": lambda x: torch.nn.functional.softplus(x, beta=2, threshold=5),
    "elu": lambda x: torch.nn.functional.elu(x, alpha=0.7),
    "selu": torch.nn.functional.selu,
    "celu": lambda x: torch.nn.functional.celu(x, alpha=1.3),
    "leaky_relu": lambda x: torch.nn.functional.leaky_relu(x, 0.1),
    "hardswish": torch.nn.functional.hardswish,
    "hardsigmoid": torch.nn.functional.hardsigmoid,
    "hardtanh": lambda x: torch.nn.functional.hardtanh(x, -0.5, 2.0),
    "relu6": torch.nn.functional.relu6,
    "mish": torch.nn.functional.mish,
    "threshold": lambda x: torch.nn.functional.threshold(x, 0.3, -1.0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_forward_backward(name, dtype):
    fn = ACTIVATIONS[name]
    x = make((33, 17), dtype, -5, 5, seed=21)
    x[0, :4] = torch.tensor([0.0, -3.0, 3.0, 20.0], dtype=dtype)  # kinks and thresholds
    g = make((33, 17), dtype, -1, 1, seed=22)
    xc = x.clone().requires_grad_()
    xn = x.to(DEV).requires_grad_()
    yc, yn = fn(xc), fn(xn)
    assert_close(yn.detach(), yc.detach())
    yc.backward(g)
    yn.backward(g.to(DEV))
    assert_close(xn.grad, xc.grad)


@pytest.mark.parametrize("name", ["relu", "silu", "gelu", "elu", "leaky_relu", "hardswish", "hardsigmoid", "sigmoid"])
def test_activation_inplace(name):
    fns = {
        "relu": lambda t: torch.relu_(t),
        "silu": lambda t: torch.nn.functional.silu(t, inplace=True),
        "gelu": lambda t: t.copy_(torch.nn.functional.gelu(t)),
        "elu": lambda t: torch.nn.functional.elu(t, inplace=True),
        "leaky_relu": lambda t: torch.nn.functional.leaky_relu(t, 0.2, inplace=True),
        "hardswish": lambda t: torch.nn.functional.hardswish(t, inplace=True),
        "hardsigmoid": lambda t: torch.nn.functional.hardsigmoid(t, inplace=True),
        "sigmoid": lambda t: t.sigmoid_(),
    }
    x = make((9, 8), torch.float32, seed=30)
    xc, xn = x.clone(), x.to(DEV)
    fns[name](xc.t())
    fns[name](xn.t())
    assert_close(xn, xc)


def test_ops_are_native_and_async():
    x = torch.ones(1 << 20, device=DEV)
    gate = torch_neuronx._C._debug_launch_gate(0)  # holds the stream until opened
    try:
        y = torch.nn.functional.gelu(x * 2 + 1)
        # The ops returned while the gate still held the stream: none of them waited for the
        # device (a CPU fallback or a blocking launch would have synchronized first).
        assert gate.wait_entered() and not gate.is_open
        assert not torch.neuron.current_stream().query()
    finally:
        gate.open()
    torch.neuron.synchronize()
    assert not gate.timed_out
    assert y[0].item() == pytest.approx(torch.nn.functional.gelu(torch.tensor(3.0)).item())
    executed = torch_neuronx.get_executed_ops()
    for op in ("aten::mul.Tensor", "aten::add.Tensor", "aten::gelu"):
        assert op in executed


def test_kernel_error_surfaces_with_op_name():
    a = torch.tensor([1, 2], dtype=torch.int32, device=DEV)
    b = torch.tensor([1, 0], dtype=torch.int32, device=DEV)
    with pytest.raises(RuntimeError, match=r"aten::floor_divide.*ZeroDivisionError"):
        torch.floor_divide(a, b)
        torch.neuron.synchronize()


def test_complex_falls_back_visibly():
    z = torch.tensor([1 + 2j, 3 - 1j])
    got = z.to(DEV) * z.to(DEV)
    torch.testing.assert_close(got.cpu(), z * z)
    assert "aten::mul.Tensor" in torch_neuronx.get_fallback_ops()
    torch_neuronx.clear_op_tracking()  # the autouse fixture checks for no fallbacks


def test_math_values_close_to_correctly_rounded():
    # Over a dense sample, the fp32 transcendental functions stay within a few ulp of the
    # fp64 result (a tighter check than the rtol above).
    x = torch.linspace(-9, 9, 100001)
    for fn in (torch.exp, torch.tanh, torch.erf, torch.sigmoid):
        got = fn(x.to(DEV)).cpu().double()
        want = fn(x.double())
        ulp = torch.finfo(torch.float32).eps * want.abs().clamp_min(torch.finfo(torch.float32).tiny)
        err = ((got - want).abs() / ulp).max().item()
        assert err < 4, (fn.__name__, err)
    y = torch.exp(torch.linspace(-80, 80, 100001))
    got = torch.log(y.to(DEV)).cpu().double()
    want = torch.log(y.double())
    assert ((got - want).abs() / (torch.finfo(torch.float32).eps * want.abs().clamp_min(1e-30))).max() < 4
    assert math.isfinite(got.sum().item())


MORE_BINARY = {
    "xlogy": torch.xlogy,
    "xlog1py": torch.special.xlog1py,
    "heaviside": torch.heaviside,
    "logaddexp": torch.logaddexp,
    "logaddexp2": torch.logaddexp2,
    "nextafter": torch.nextafter,
    "rsub": torch.rsub,
}


@pytest.mark.parametrize("name", sorted(MORE_BINARY))
def test_more_binary_math(name):
    fn = MORE_BINARY[name]
    x = make((6, 5), torch.float32, -3, 3, seed=40)
    y = make((5,), torch.float32, 0.1, 3, seed=41)
    x[0, 0], y[1] = 0.0, float("nan")
    assert_close(fn(x.to(DEV), y.to(DEV)), fn(x, y))


def test_integer_gcd_lcm_and_angle():
    a = torch.tensor([12, -18, 0, 7, -9], dtype=torch.int32)
    b = torch.tensor([8, 12, 5, 0, -6], dtype=torch.int32)
    assert_close(torch.gcd(a.to(DEV), b.to(DEV)), torch.gcd(a, b))
    assert_close(torch.lcm(a.to(DEV), b.to(DEV)), torch.lcm(a, b))
    x = torch.tensor([-1.0, 0.0, 2.0, float("nan")])
    assert_close(torch.angle(x.to(DEV)), torch.angle(x))
    assert_close(torch.angle(a.to(DEV)), torch.angle(a))


@pytest.mark.parametrize("name", ["logsigmoid", "hardshrink", "softshrink", "logit", "sinc"])
def test_more_activations_forward_backward(name):
    fns = {
        "logsigmoid": torch.nn.functional.logsigmoid,
        "hardshrink": lambda t: torch.nn.functional.hardshrink(t, 0.7),
        "softshrink": lambda t: torch.nn.functional.softshrink(t, 0.7),
        "logit": lambda t: torch.logit(torch.sigmoid(t), eps=0.05),
        "sinc": torch.sinc,
    }
    fn = fns[name]
    x = make((20, 9), torch.float32, -4, 4, seed=42)
    xc, xn = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
    yc, yn = fn(xc), fn(xn)
    assert_close(yn.detach(), yc.detach())
    yc.sum().backward()
    yn.sum().backward()
    assert_close(xn.grad, xc.grad, rtol=1e-5, atol=1e-5)


def test_high_rank_operands_that_do_not_coalesce():
    # 8 dims permuted so the iterator cannot merge them: exercises the wide task path.
    base = make((2, 3, 2, 3, 2, 3, 2, 2), torch.float32, seed=60)
    perm = (7, 5, 3, 1, 0, 2, 4, 6)
    x, xn = base.permute(*perm), base.to(DEV).permute(*perm)  # shape (2, 3, 3, 3, 2, 2, 2, 2)
    y = make((2, 1, 3, 1, 2, 1, 2, 1), torch.float32, seed=61)
    assert_close(xn * 2 + y.to(DEV), x * 2 + y)
    assert_close(torch.exp(xn), torch.exp(x))
    # Alternating broadcast dims cannot merge either: 7 dims reach the kernel.
    a = make((2, 1, 2, 1, 2, 1, 2), torch.float32, seed=62)
    b = make((1, 2, 1, 2, 1, 2, 1), torch.float32, seed=63)
    assert_close(a.to(DEV) - b.to(DEV), a - b)
    assert_close(torch.where(a.to(DEV) > 0, a.to(DEV), b.to(DEV)), torch.where(a > 0, a, b))
