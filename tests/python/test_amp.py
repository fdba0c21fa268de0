"""torch.autocast("neuron") follows CUDA's autocast policy (ATen's op lists): matmul-like ops in
the autocast dtype, precision-sensitive ops in fp32, multi-input ops at the widest dtype."""

from __future__ import annotations

import pytest
import torch

DEV = "neuron"


def test_amp_supported_dtypes_and_defaults():
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.amp.is_autocast_available(DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        assert torch.is_autocast_enabled(DEV)
        assert torch.get_autocast_dtype(DEV) == torch.bfloat16
    assert not torch.is_autocast_enabled(DEV)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_lowers_softmax_stays_fp32(dtype):
    lin = torch.nn.Linear(8, 4).to(DEV)
    x = torch.randn(3, 8, device=DEV)
    with torch.autocast(DEV, dtype=dtype):
        y = lin(x)
        assert y.dtype == dtype
        assert torch.softmax(y, -1).dtype == torch.float32
        assert torch.log_softmax(y, -1).dtype == torch.float32
        assert torch.mm(x, x.t()).dtype == dtype
        assert torch.matmul(x, x.t()).dtype == dtype
        assert y.exp().dtype == torch.float32
        assert y.sum().dtype == torch.float32
        assert torch.cumsum(y, 0).dtype == torch.float32
        assert torch.nn.functional.layer_norm(y, (4,)).dtype == torch.float32
        assert torch.nn.functional.softplus(y).dtype == torch.float32
        assert torch.norm(y).dtype == torch.float32
        # promote: the widest input dtype
        assert torch.addcmul(torch.zeros(3, 4, device=DEV), y, y).dtype == torch.float32
        assert torch.atan2(y, torch.ones(3, 4, device=DEV)).dtype == torch.float32
        # ops without a policy keep their input dtype
        assert torch.relu(y).dtype == dtype
    # Outside the region nothing is cast.
    assert lin(x).dtype == torch.float32


def test_autocast_matches_cpu_values():
    # CUDA's policy, computed by hand on the CPU: linear in bf16, softmax in fp32.
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    h = torch.nn.functional.linear(x.bfloat16(), lin.weight.bfloat16(), lin.bias.bfloat16())
    want = torch.softmax(h.float(), -1)
    lin_n = lin.to(DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        got = torch.softmax(lin_n(x.to(DEV)), -1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), want, rtol=2e-2, atol=2e-3)


def test_binary_cross_entropy_is_banned_like_cuda():
    p = torch.rand(4, device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(p, p)


def test_backward_through_autocast():
    lin = torch.nn.Linear(8, 8).to(DEV)
    x = torch.randn(5, 8, device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        loss = lin(x).float().pow(2).mean()
    loss.backward()
    assert lin.weight.grad.dtype == torch.float32
    assert torch.isfinite(lin.weight.grad).all()


def test_float32_is_not_an_autocast_dtype():
    """Like CUDA's unsupported dtypes: a warning, and autocast disables itself."""
    with pytest.warns(UserWarning, match="In neuron autocast, but the target dtype is not supported"):
        with torch.autocast(DEV, dtype=torch.float32):
            assert not torch.is_autocast_enabled(DEV)


def test_dot_follows_cuda_lists():
    """CUDA's lists put dot/vdot under `promote` (widest input dtype): fp16 inputs stay fp16,
    mixed fp16/fp32 inputs run in fp32; mm runs in the autocast dtype."""
    a16 = torch.randn(8, device=DEV, dtype=torch.float16)
    a32 = torch.randn(8, device=DEV)
    with torch.autocast(DEV, dtype=torch.float16):
        assert torch.dot(a16, a16).dtype == torch.float16
        assert torch.dot(a16, a32).dtype == torch.float32
        assert torch.mm(a32[None], a32[:, None]).dtype == torch.float16
