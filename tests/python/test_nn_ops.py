"""NN layers on neuron vs PyTorch CPU, forward and backward (gradients through autograd):
softmax/log_softmax, cross_entropy (nll_loss/nll_loss2d), layer_norm, rms_norm, batch_norm and
embedding, over dtypes, shapes and strides; errors raised inside queued work surface at the next
synchronization and name the op.

Tolerances: fp32 differs from CPU by summation order only (1e-5). 16-bit inputs compute in fp32
on neuron, so they are compared with the fp32 CPU result of the same (rounded) inputs at the
16-bit format's resolution (bf16 2^-7, fp16 2^-10 relative).
"""

import pytest
import torch
import torch_neuronx
from torch import nn
from torch.nn import functional as F

N = "neuron"
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (1.6e-2, 1.6e-2),
       torch.float16: (2e-3, 2e-3)}


def run_both(fn, *inputs, dtype=torch.float32, grad=True, seed=0):
    """Runs fn on CPU (fp32 compute for 16-bit dtypes) and on neuron; compares outputs and grads."""
    ref_dtype = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    cpu_in = [t.to(dtype).to(ref_dtype).detach().requires_grad_(grad and t.is_floating_point()) if isinstance(t, torch.Tensor) else t
              for t in inputs]
    neu_in = [t.to(dtype).to(N).detach().requires_grad_(grad and t.is_floating_point()) if isinstance(t, torch.Tensor) else t
              for t in inputs]
    out_c, out_n = fn(*cpu_in), fn(*neu_in)
    rtol, atol = TOL[dtype]
    assert out_n.device.type == "neuron"
    torch.testing.assert_close(out_n.detach().cpu().to(ref_dtype), out_c.detach(), rtol=rtol, atol=atol)
    if grad:
        g = torch.randn(out_c.shape, generator=torch.Generator().manual_seed(seed))
        out_c.backward(g.to(ref_dtype))
        out_n.backward(g.to(out_n.dtype).to(N))
        for c, n in zip(cpu_in, neu_in):
            if isinstance(c, torch.Tensor) and c.requires_grad:
                torch.testing.assert_close(n.grad.cpu().to(ref_dtype), c.grad, rtol=rtol, atol=atol * 4)
    return out_n


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_backward(dtype, dim, log):
    f = (lambda x: torch.log_softmax(x, dim)) if log else (lambda x: torch.softmax(x, dim))
    run_both(f, randn(5, 37, 3) * 4, dtype=dtype)


def test_softmax_strided_long_rows_and_extremes():
    x = randn(64, 4100) * 10
    run_both(lambda t: torch.softmax(t.t(), 0), x)  # transposed view, rows of 4100
    y = torch.tensor([[0.0, float("-inf"), 3.0], [float("-inf")] * 3, [1e4, -1e4, 0.0]])
    out = torch.softmax(y.to(N), -1).cpu()
    torch.testing.assert_close(out, torch.softmax(y, -1), equal_nan=True)
    torch.testing.assert_close(torch.log_softmax(y.to(N), -1).cpu(), torch.log_softmax(y, -1), equal_nan=True)
    assert torch.softmax(torch.tensor(2.0).to(N), 0).item() == 1.0


def test_softmax_half_to_float_and_out():
    x = randn(4, 9).bfloat16()
    out = torch.ops.aten._softmax(x.to(N), 1, True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), torch.softmax(x.float(), 1))
    o = torch.empty(4, 9, device=N)
    torch.ops.aten._log_softmax.out(x.float().to(N), 1, False, out=o)
    torch.testing.assert_close(o.cpu(), torch.log_softmax(x.float(), 1))
    with torch.autocast("cpu", enabled=False):
        y = F.softmax(x.to(N), 1, dtype=torch.float32)
    torch.testing.assert_close(y.cpu(), torch.softmax(x.float(), 1))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("target_dtype", [torch.int64, torch.int32])
def test_cross_entropy(reduction, weighted, target_dtype):
    x = randn(9, 7) * 3
    y = torch.randint(0, 7, (9,), generator=torch.Generator().manual_seed(1))
    y[2] = -100  # ignored
    w = torch.rand(7, generator=torch.Generator().manual_seed(2)) + 0.5 if weighted else None
    xc = x.clone().requires_grad_()
    out_c = F.cross_entropy(xc, y, weight=w, reduction=reduction)
    xn = x.to(N).requires_grad_()
    out_n = F.cross_entropy(xn, y.to(target_dtype).to(N), weight=None if w is None else w.to(N), reduction=reduction)
    torch.testing.assert_close(out_n.detach().cpu(), out_c.detach(), rtol=1e-5, atol=1e-6)
    g = torch.rand(out_c.shape)
    out_c.backward(g)
    out_n.backward(g.to(N))
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    assert not {"aten::nll_loss_forward", "aten::_log_softmax"} & set(torch_neuronx.get_fallback_ops())


def test_cross_entropy_spatial_label_smoothing_and_no_batch():
    x = randn(2, 5, 3, 4)
    y = torch.randint(0, 5, (2, 3, 4), generator=torch.Generator().manual_seed(3))
    run_both(lambda t: F.cross_entropy(t, y.to(t.device)), x)
    run_both(lambda t: F.cross_entropy(t, y.to(t.device), ignore_index=2, reduction="sum"), x)
    x2 = randn(6, 5)
    y2 = torch.randint(0, 5, (6,), generator=torch.Generator().manual_seed(4))
    run_both(lambda t: F.cross_entropy(t, y2.to(t.device), label_smoothing=0.2), x2)
    run_both(lambda t: F.nll_loss(torch.log_softmax(t, 0), y2[0].to(t.device)), x2[0])
    assert {"aten::nll_loss2d_forward", "aten::nll_loss2d_backward"} <= set(torch_neuronx.get_executed_ops())


def test_cross_entropy_all_ignored_is_nan_like_cpu():
    x, y = randn(3, 4), torch.full((3,), -100)
    assert torch.isnan(F.cross_entropy(x.to(N), y.to(N))).item()
    assert torch.isnan(F.cross_entropy(x, y)).item()


def test_nll_loss_bad_target_fails_at_synchronize_naming_the_op():
    x = torch.randn(4, 3, device=N)
    loss = F.nll_loss(x, torch.tensor([0, 1, 7, 2], device=N))  # queued; nothing raised yet
    with pytest.raises(RuntimeError, match=r"nll_loss.*Target 7 is out of bounds"):
        torch.neuron.synchronize()
    del loss


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(dtype, affine):
    x = randn(6, 5, 40) * 3 + 1
    shape = (5, 40)
    if affine:
        w, b = randn(*shape, seed=1), randn(*shape, seed=2)
        run_both(lambda t, w_, b_: F.layer_norm(t, shape, w_, b_, 1e-5), x, w, b, dtype=dtype)
    else:
        run_both(lambda t: F.layer_norm(t, (40,), eps=1e-3), x, dtype=dtype)
    run_both(lambda t: F.layer_norm(t.transpose(0, 1), (6, 40)), x, dtype=dtype)  # non-contiguous input


def test_layer_norm_mixed_bf16_input_fp32_params():
    x = randn(3, 16).bfloat16()
    w, b = randn(16, seed=1), randn(16, seed=2)
    out, mean, rstd = torch.ops.aten.native_layer_norm(x.to(N), [16], w.to(N), b.to(N), 1e-5)
    ref = torch.ops.aten.native_layer_norm(x, [16], w, b, 1e-5)
    assert (out.dtype, mean.dtype, rstd.dtype) == (ref[0].dtype, ref[1].dtype, ref[2].dtype)
    torch.testing.assert_close(out.cpu().float(), ref[0].float(), rtol=1.6e-2, atol=1.6e-2)
    torch.testing.assert_close(mean.cpu(), ref[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_rms_norm_runs_fused(dtype):
    x = randn(4, 7, 48) * 2
    w = randn(48, seed=1)
    run_both(lambda t, w_: F.rms_norm(t, (48,), w_, 1e-6), x, w, dtype=dtype)
    run_both(lambda t: F.rms_norm(t, (7, 48)), x, dtype=dtype)  # eps=None: the dtype's epsilon
    ops = set(torch_neuronx.get_executed_ops())
    assert {"aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"} <= ops
    assert "aten::pow.Tensor_Scalar" not in ops and "aten::rsqrt" not in ops  # not the decomposition
    m = nn.RMSNorm(48).to(N)
    torch.testing.assert_close(m(x.to(N)).detach().cpu(), F.rms_norm(x, (48,), torch.ones(48)), rtol=1e-5, atol=1e-5)


def test_rms_norm_inference_mode():
    x = randn(3, 16)
    with torch.inference_mode():
        out = F.rms_norm(x.to(N), (16,), torch.ones(16, device=N))
    torch.testing.assert_close(out.cpu(), F.rms_norm(x, (16,), torch.ones(16)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 10), (2, 3, 5, 6), (2, 3, 2, 3, 4)])
def test_batch_norm_train_and_eval(dtype, shape):
    x = randn(*shape).to(dtype) * 2 + 0.5
    C = shape[1]
    for train in (True, False):
        rm_c, rv_c = torch.rand(C, dtype=dtype), torch.rand(C, dtype=dtype) + 0.5
        rm_n, rv_n = rm_c.to(N), rv_c.to(N)
        w, b = randn(C, seed=1).to(dtype), randn(C, seed=2).to(dtype)
        def bn(t, w_, b_, rm_c=rm_c, rv_c=rv_c, rm_n=rm_n, rv_n=rv_n, train=train):
            on_cpu = t.device.type == "cpu"
            return F.batch_norm(t, rm_c if on_cpu else rm_n, rv_c if on_cpu else rv_n, w_, b_, train, 0.3, 1e-4)

        run_both(bn, x, w, b, dtype=dtype)
        torch.testing.assert_close(rm_n.cpu(), rm_c)  # running statistics updated alike (twice)
        torch.testing.assert_close(rv_n.cpu(), rv_c)


def test_batch_norm_module_channels_last_and_no_affine():
    m = nn.BatchNorm2d(4, affine=False)
    mn = nn.BatchNorm2d(4, affine=False).to(N)
    x = randn(3, 4, 5, 5).to(memory_format=torch.channels_last)
    torch.testing.assert_close(mn(x.to(N)).cpu(), m(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mn.running_var.cpu(), m.running_var)
    with pytest.raises(RuntimeError, match="Expected more than 1 value per channel"):
        torch.ops.aten.native_batch_norm(torch.randn(1, 4, device=N), None, None, None, None, True, 0.1, 1e-5)


def test_embedding_forward_backward_padding_and_freq():
    w = randn(20, 8)
    idx = torch.tensor([[1, 5, 1, 19], [0, 5, 5, 3]])
    for kw in ({}, {"padding_idx": 5}, {"scale_grad_by_freq": True}, {"padding_idx": 0, "scale_grad_by_freq": True}):
        run_both(lambda t, kw=kw: F.embedding(idx.to(t.device), t, **kw), w)
    run_both(lambda t: F.embedding(idx.int().to(t.device), t), w)  # int32 indices
    run_both(lambda t: F.embedding(idx.to(t.device), t), w, dtype=torch.bfloat16)
    e = nn.Embedding(20, 8).to(N)
    assert e(torch.tensor([3, 4], device=N)).shape == (2, 8)
    assert {"aten::embedding", "aten::embedding_dense_backward"} <= set(torch_neuronx.get_executed_ops())


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_embedding_max_norm_renormalizes_in_place(norm_type):
    w = randn(12, 6) * 3
    idx = torch.tensor([[1, 5, 1], [11, 0, 5]])
    wc, wn = w.clone(), w.to(N)
    out_c = F.embedding(idx, wc, max_norm=1.5, norm_type=norm_type)
    out_n = F.embedding(idx.to(N), wn, max_norm=1.5, norm_type=norm_type)
    torch.testing.assert_close(out_n.cpu(), out_c, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wn.cpu(), wc, rtol=1e-5, atol=1e-6)  # the referenced rows were renormalized
    assert "aten::embedding_renorm_" not in torch_neuronx.get_fallback_ops()


def test_embedding_bad_index_fails_at_synchronize_naming_the_op_and_index():
    w = torch.randn(10, 4, device=N)
    out = F.embedding(torch.tensor([1, 10], device=N), w)  # queued: no error yet
    with pytest.raises(RuntimeError, match=r"embedding: index 10 is out of bounds for dimension 0 with size 10"):
        torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match=r"embedding: index -1 is out of bounds"):
        F.embedding(torch.tensor([-1], device=N), w).cpu()
    torch.neuron.synchronize()  # the error was reported once; the stream works again
    torch.testing.assert_close(F.embedding(torch.tensor([2], device=N), w).cpu(), w.cpu()[2:3])
    del out
