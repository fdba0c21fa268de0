"""Matrix products on neuron vs PyTorch CPU: mm/addmm/bmm/baddbmm/addbmm/mv/addmv/dot/vdot/addr
and the matmul/linear compositions, over dtypes, transposed and strided operands, out=, in-place
forms, aliasing, empty sizes, and the decode-time GEMV path.

Tolerances: fp32/fp64 results differ from CPU only by summation order (rtol 1e-5 / 1e-12 scale
with k); 16-bit inputs accumulate in fp32 on neuron, so they are compared with an fp64 reference
at the output format's resolution (bf16: 2^-8 relative, fp16: 2^-11) instead of PyTorch's own
16-bit CPU kernels.
"""

import pytest
import torch
import torch_neuronx
from torch.nn import functional as F

N = "neuron"
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12), torch.bfloat16: (1.6e-2, 1e-2),
       torch.float16: (2e-3, 1e-3)}


def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-5, 6, shape, generator=g).to(dtype)


def check(actual, expected, dtype=None):
    """actual: neuron result; expected: fp64 (or exact) reference computed on CPU."""
    dtype = dtype or actual.dtype
    assert actual.device.type == "neuron"
    a = actual.cpu()
    if not dtype.is_floating_point:
        assert torch.equal(a, expected.to(dtype))
        return
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(a.double(), expected.double(), rtol=rtol, atol=atol * max(1.0, expected.abs().max().item()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64],
                         ids=str)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_mm_dtypes_and_transposes(dtype, ta, tb):
    a = rnd(7, 13, dtype=dtype, seed=1)
    b = rnd(13, 5, dtype=dtype, seed=2)
    a_ = a.t().contiguous().t() if ta else a  # same values, column-major storage
    b_ = b.t().contiguous().t() if tb else b
    out = torch.mm(a_.to(N), b_.to(N))
    check(out, a.double() @ b.double() if dtype.is_floating_point else a @ b)
    assert out.dtype == dtype and out.shape == (7, 5)


def test_mm_strided_operands_without_copies_and_out():
    big = rnd(20, 30)
    a, b = big[1:15:2, 3:20:3], big[::3, 2:9]  # non-unit strides on both dims
    b = b[: a.shape[1]]
    out = torch.empty(2, 2, device=N)
    with pytest.warns(UserWarning, match="was resized"):  # like ATen for a non-empty out
        torch.mm(a.to(N), b.to(N), out=out)
    check(out, a.double() @ b.double())
    # A strided out (a transposed view) is written in place.
    out_t = torch.zeros(b.shape[1], a.shape[0], device=N).t()
    r = torch.mm(a.to(N), b.to(N), out=out_t)
    assert r.data_ptr() == out_t.data_ptr()
    check(out_t, a.double() @ b.double())


def test_out_aliasing_an_input_is_computed_through_a_temporary():
    a = rnd(6, 6, seed=3)
    an = a.to(N)
    torch.mm(an, an, out=an)
    check(an, a.double() @ a.double())
    c = rnd(6, 6, seed=4)
    cn = c.to(N)
    cn.addmm_(cn, cn, beta=0.5, alpha=2)
    check(cn, 0.5 * c.double() + 2 * (c.double() @ c.double()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_addmm_broadcast_bias_alpha_beta(dtype):
    bias, m1, m2 = rnd(5, dtype=dtype), rnd(4, 3, dtype=dtype, seed=1), rnd(3, 5, dtype=dtype, seed=2)
    out = torch.addmm(bias.to(N), m1.to(N), m2.to(N), beta=0.5, alpha=-2.0)
    check(out, 0.5 * bias.double() + -2.0 * (m1.double() @ m2.double()))
    # beta=0 ignores NaNs in the bias, like BLAS and ATen
    nan_bias = torch.full((4, 5), float("nan"), dtype=dtype)
    out = torch.addmm(nan_bias.to(N), m1.to(N), m2.to(N), beta=0)
    check(out, m1.double() @ m2.double())
    o = torch.empty(4, 5, dtype=dtype, device=N)
    torch.addmm(bias.to(N), m1.to(N), m2.to(N), out=o)
    check(o, bias.double() + m1.double() @ m2.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_bmm_baddbmm_addbmm(dtype):
    b1, b2 = rnd(3, 4, 6, dtype=dtype, seed=1), rnd(3, 6, 5, dtype=dtype, seed=2)
    ref = b1.double() @ b2.double()
    check(torch.bmm(b1.to(N), b2.to(N)), ref)
    check(torch.bmm(b1.transpose(1, 2).contiguous().transpose(1, 2).to(N), b2.to(N)), ref)
    # expanded (stride-0) batch operand
    b2e = b2[:1].expand(3, 6, 5)
    check(torch.bmm(b1.to(N), b2e.to(N)), b1.double() @ b2e.double())
    s = rnd(4, 5, dtype=dtype, seed=3)
    check(torch.baddbmm(s.to(N), b1.to(N), b2.to(N), beta=2, alpha=0.5), 2 * s.double() + 0.5 * ref)
    check(torch.addbmm(s.to(N), b1.to(N), b2.to(N), beta=-1), -s.double() + ref.sum(0))
    x = s.to(N).clone()
    x.addbmm_(b1.to(N), b2.to(N))
    check(x, s.double() + ref.sum(0))
    y = torch.zeros(3, 4, 5, dtype=dtype, device=N)
    y.baddbmm_(b1.to(N), b2.to(N))
    check(y, ref)


def test_mv_addmv_dot_vdot_addr():
    m, v, w = rnd(6, 4), rnd(4, seed=1), rnd(6, seed=2)
    check(torch.mv(m.to(N), v.to(N)), m.double() @ v.double())
    check(torch.mv(m.t().contiguous().t().to(N), v.to(N)), m.double() @ v.double())
    check(torch.addmv(w.to(N), m.to(N), v.to(N), beta=2, alpha=3), 2 * w.double() + 3 * (m.double() @ v.double()))
    check(torch.dot(v.to(N), v.to(N)), v.double() @ v.double())
    check(torch.dot(w[::2].to(N), w[1::2].to(N)), w[::2].double() @ w[1::2].double())
    check(torch.vdot(v.to(N), v.flip(0).to(N)), v.double() @ v.flip(0).double())
    check(torch.addr(torch.ones(6, 4).to(N), w.to(N), v.to(N), alpha=2), 1 + 2 * torch.outer(w.double(), v.double()))
    check(torch.outer(w.to(N), v.to(N)), torch.outer(w.double(), v.double()))
    o = torch.empty(0, device=N)
    torch.dot(v.to(N), v.to(N), out=o)
    assert o.shape == ()


@pytest.mark.parametrize(
    "sa,sb",
    [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (4,)), ((5, 2, 3, 4), (2, 4, 6)),
     ((1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3))],
)
def test_matmul_shapes_and_backward(sa, sb):
    a = rnd(*sa, seed=5).requires_grad_()
    b = rnd(*sb, seed=6).requires_grad_()
    an = a.detach().to(N).requires_grad_()
    bn = b.detach().to(N).requires_grad_()
    out = torch.matmul(a, b)
    outn = torch.matmul(an, bn)
    torch.testing.assert_close(outn.detach().cpu(), out.detach(), rtol=1e-5, atol=1e-5)
    g = rnd(*out.shape, seed=7)
    out.backward(g)
    outn.backward(g.to(N))
    torch.testing.assert_close(an.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bn.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5)
    native = {"aten::mm", "aten::bmm", "aten::mv", "aten::dot"}
    assert native & set(torch_neuronx.get_executed_ops())
    assert not native & set(torch_neuronx.get_fallback_ops())


@pytest.mark.parametrize("k,n", [(512, 2048), (4096, 64), (77, 300)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_decode_gemv_linear(k, n, dtype):
    # Batch-1 x @ W^T (the small-side kernel), its transpose W @ x, and a 3-row batch.
    x, w, b = rnd(1, k, dtype=dtype, seed=1), rnd(n, k, dtype=dtype, seed=2), rnd(n, dtype=dtype, seed=3)
    ref = x.double() @ w.double().t() + b.double()
    check(F.linear(x.to(N), w.to(N), b.to(N)), ref)
    check(torch.mv(w.to(N), x[0].to(N)), w.double() @ x[0].double())
    x3 = rnd(3, k, dtype=dtype, seed=4)
    check(F.linear(x3.to(N), w.to(N)), x3.double() @ w.double().t())
    # x @ W with W stored [k, n] (the other operand layout)
    wt = w.t().contiguous()
    check(x.to(N) @ wt.to(N), x.double() @ wt.double())


def test_mixed_precision_dtype_overloads():
    a, b = rnd(5, 7, dtype=torch.bfloat16), rnd(7, 3, dtype=torch.bfloat16, seed=1)
    out = torch.ops.aten.mm.dtype(a.to(N), b.to(N), torch.float32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu().double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    ob = torch.ops.aten.bmm.dtype(a[None].to(N), b[None].to(N), torch.float32)
    torch.testing.assert_close(ob[0].cpu().double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


def test_empty_sizes():
    a, b = torch.randn(3, 0), torch.randn(0, 4)
    assert torch.equal(torch.mm(a.to(N), b.to(N)).cpu(), torch.zeros(3, 4))
    bias = torch.randn(3, 4)
    torch.testing.assert_close(torch.addmm(bias.to(N), a.to(N), b.to(N), beta=2).cpu(), 2 * bias)
    assert torch.mm(torch.randn(0, 3).to(N), torch.randn(3, 4).to(N)).shape == (0, 4)
    assert torch.bmm(torch.randn(0, 3, 2).to(N), torch.randn(0, 2, 4).to(N)).shape == (0, 3, 4)


def test_errors_name_the_op():
    with pytest.raises(RuntimeError, match=r"mm: mat1 and mat2 shapes cannot be multiplied \(3x4 and 5x6\)"):
        torch.mm(torch.randn(3, 4, device=N), torch.randn(5, 6, device=N))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(torch.randn(3, 4, device=N), torch.randn(4, 2, device=N, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.randn(3, 4, device=N), torch.randn(4, 2))
    with pytest.raises(RuntimeError, match="batch1 and batch2 must have same number of batches"):
        torch.bmm(torch.randn(2, 3, 4, device=N), torch.randn(3, 4, 2, device=N))


def test_complex_uses_the_visible_cpu_fallback():
    a = torch.randn(3, 3, dtype=torch.complex64)
    out = torch.mm(a.to(N), a.to(N))
    torch.testing.assert_close(out.cpu(), a @ a)
    assert "aten::mm" in torch_neuronx.get_fallback_ops()


def test_products_are_queued_not_blocking():
    a = torch.randn(64, 64, device=N)
    torch.neuron.synchronize()
    gate = torch_neuronx._C._debug_launch_gate(0)  # holds the stream until opened
    try:
        out = a @ a  # queued behind the gate: returns before it has run
        assert gate.wait_entered()
        assert not torch.neuron.current_stream().query()
    finally:
        gate.open()
    torch.neuron.synchronize()
    assert not gate.timed_out
    torch.testing.assert_close(out.cpu(), a.cpu() @ a.cpu(), rtol=1e-5, atol=1e-5)
