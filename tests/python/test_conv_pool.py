"""Convolutions and pooling on neuron vs PyTorch CPU, forward and backward: conv1d/2d/3d with
stride, padding, dilation and groups, transposed convolutions, max/avg/adaptive-avg pooling with
ceil_mode, padding, dilation and divisor_override.

Tolerances: fp32 im2col + GEMM sums in another order than oneDNN (1e-4 relative with k up to a
few hundred terms). bf16 is compared with an fp64 reference at bf16 resolution.
"""

import pytest
import torch
import torch_neuronx
from torch.nn import functional as F

N = "neuron"


def rnd(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def compare(fn, *inputs, rtol=1e-4, atol=1e-5):
    cpu = [t.clone().requires_grad_() for t in inputs]
    neu = [t.to(N).requires_grad_() for t in inputs]
    out_c, out_n = fn(*cpu), fn(*neu)
    torch.testing.assert_close(out_n.detach().cpu(), out_c.detach(), rtol=rtol, atol=atol)
    g = rnd(*out_c.shape, seed=99)
    out_c.backward(g)
    out_n.backward(g.to(N))
    for c, n in zip(cpu, neu):
        torch.testing.assert_close(n.grad.cpu(), c.grad, rtol=rtol, atol=atol * 10)
    assert torch_neuronx.get_fallback_ops() == [] or all(
        "convolution" not in o and "pool" not in o for o in torch_neuronx.get_fallback_ops())


@pytest.mark.parametrize(
    "kw",
    [{}, {"stride": 2, "padding": 1}, {"stride": (1, 2), "padding": (2, 1), "dilation": 2},
     {"padding": "same"}, {"groups": 2}, {"groups": 4, "stride": 2}],
    ids=str,
)
def test_conv2d(kw):
    groups = kw.get("groups", 1)
    compare(lambda x, w, b: F.conv2d(x, w, b, **kw), rnd(2, 4, 9, 10), rnd(8, 4 // groups, 3, 3, seed=1), rnd(8, seed=2))
    assert "aten::convolution_backward_overrideable" in torch_neuronx.get_executed_ops()


def test_conv2d_1x1_no_batch_and_no_bias():
    compare(lambda x, w: F.conv2d(x, w), rnd(3, 5, 4, 4), rnd(7, 5, 1, 1, seed=1))
    compare(lambda x, w: F.conv2d(x, w, padding=1), rnd(3, 6, 6), rnd(4, 3, 3, 3, seed=1))  # unbatched


def test_conv1d_and_conv3d():
    compare(lambda x, w, b: F.conv1d(x, w, b, padding=2, stride=2), rnd(2, 3, 20), rnd(5, 3, 5, seed=1), rnd(5, seed=2))
    compare(lambda x, w, b: F.conv3d(x, w, b, padding=1), rnd(1, 2, 5, 6, 7), rnd(3, 2, 3, 3, 3, seed=1), rnd(3, seed=2))


@pytest.mark.parametrize("kw", [{"stride": 2, "padding": 1, "output_padding": 1}, {"stride": 2, "groups": 2, "dilation": 2},
                                {}], ids=str)
def test_conv_transpose2d(kw):
    groups = kw.get("groups", 1)
    compare(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), rnd(2, 4, 5, 5), rnd(4, 6 // groups, 3, 3, seed=1),
            rnd(6, seed=2))


def test_conv_transpose1d():
    compare(lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=1), rnd(2, 4, 7), rnd(4, 3, 3, seed=1))


def test_conv2d_bf16_against_fp64():
    x, w = rnd(2, 3, 8, 8).bfloat16(), rnd(4, 3, 3, 3, seed=1).bfloat16()
    out = F.conv2d(x.to(N), w.to(N), padding=1).cpu()
    ref = F.conv2d(x.double(), w.double(), padding=1)
    torch.testing.assert_close(out.double(), ref, rtol=1.6e-2, atol=3e-2)


def test_conv_errors():
    with pytest.raises(RuntimeError, match="channels"):
        F.conv2d(torch.randn(1, 3, 5, 5, device=N), torch.randn(2, 4, 3, 3, device=N))
    with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input size"):
        F.conv2d(torch.randn(1, 3, 2, 2, device=N), torch.randn(2, 3, 3, 3, device=N))


@pytest.mark.parametrize(
    "kw", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
           {"kernel_size": 2, "stride": 1, "dilation": 2}, {"kernel_size": (3, 2), "stride": (2, 1)}], ids=str)
def test_max_pool2d(kw):
    compare(lambda x: F.max_pool2d(x, **kw), rnd(2, 3, 9, 8))
    compare(lambda x: F.max_pool2d(x, **kw), rnd(3, 9, 8))  # unbatched
    _, idx = F.max_pool2d(rnd(2, 3, 9, 8).to(N), return_indices=True, **kw)
    _, idx_c = F.max_pool2d(rnd(2, 3, 9, 8), return_indices=True, **kw)
    assert torch.equal(idx.cpu(), idx_c)


def test_max_pool2d_nan_propagates():
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 1, 1] = float("nan")
    out = F.max_pool2d(x.to(N), 2).cpu()
    torch.testing.assert_close(out, F.max_pool2d(x, 2), equal_nan=True)


@pytest.mark.parametrize(
    "kw", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
           {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 5},
           {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}], ids=str)
def test_avg_pool2d(kw):
    compare(lambda x: F.avg_pool2d(x, **kw), rnd(2, 3, 9, 8))


@pytest.mark.parametrize("size", [(3, 5), (7, 7), (1, 2), 4])
def test_adaptive_avg_pool2d(size):
    compare(lambda x: F.adaptive_avg_pool2d(x, size), rnd(2, 3, 8, 11))
    compare(lambda x: F.adaptive_avg_pool2d(x, size), rnd(3, 5, 4))
