"""The NKI Library kernels that shard over the two cores of a logical core (LNC=2): mlp's TKG
path splits the intermediate dimension (each core reads half of every weight, the partial sums
of the down projection are exchanged with nisa.sendrecv). Results match the unsharded kernel to
fp tolerance and repeat bit for bit."""

import numpy as np
import pytest
import torch

import nki
from nkilib.core.mlp.mlp import mlp
from nkilib.core.utils.common_types import NormType, WeightLayout


def _weights(H, I, dtype, layout, bias=False):
    g = torch.randn(H, I) * H**-0.5
    u = torch.randn(H, I) * H**-0.5
    d = torch.randn(I, H) * I**-0.5
    w = {"gate_proj_weights_tensor": g, "up_proj_weights_tensor": u, "down_proj_weights_tensor": d}
    if layout == WeightLayout.OUT_IN:
        w = {k: v.T.contiguous() for k, v in w.items()}
    w = {k: v.to(dtype) for k, v in w.items()}
    if bias:
        w["gate_proj_bias_tensor"] = (torch.randn(1, I) * 0.1).to(dtype)
        w["up_proj_bias_tensor"] = (torch.randn(1, I) * 0.1).to(dtype)
        w["down_proj_bias_tensor"] = (torch.randn(1, H) * 0.1).to(dtype)
    return w


@pytest.mark.parametrize(
    "H,I,T,dtype,layout,extra",
    [
        (512, 1024, 1, torch.bfloat16, WeightLayout.OUT_IN, {}),
        (512, 1024, 4, torch.float32, WeightLayout.IN_OUT, {"bias": True}),
        # Unequal halves: I = 640 -> 384 + 256 columns, H = 384 -> 256 + 128 stored columns.
        (384, 640, 3, torch.float32, WeightLayout.IN_OUT, {"norm": True}),
        (256, 512, 2, torch.float32, WeightLayout.OUT_IN, {"skip_gate": True, "fused_add": True}),
    ],
)
def test_mlp_tkg_sharded_over_two_cores_matches_one_core(H, I, T, dtype, layout, extra):
    torch.manual_seed(H + I + T)
    w = _weights(H, I, dtype, layout, extra.get("bias", False))
    x = torch.randn(1, T, H).to(dtype)
    kw = dict(hidden_tensor=x, weight_layout=layout, **w)
    if extra.get("norm"):
        kw.update(normalization_type=NormType.RMS_NORM, normalization_weights_tensor=torch.randn(H).to(dtype))
    if extra.get("skip_gate"):
        kw.update(skip_gate_proj=True)
        kw["gate_proj_weights_tensor"] = None
    if extra.get("fused_add"):
        kw.update(fused_add_tensor=torch.randn(1, T, H).to(dtype), store_fused_add_result=True)
    one = mlp(**kw)
    two = mlp[2](**kw)
    assert len(one) == len(two)
    # fp32: the two partial sums of the down projection add in another order than one PSUM
    # accumulation (a few ulps); bf16: the output's own rounding (one bf16 ulp at most).
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for a, b in zip(two, one):
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)
    for _ in range(3):  # deterministic: both cores add the partial sums in rank order
        again = mlp[2](**kw)
        for a, b in zip(again, two):
            assert torch.equal(a, b)


def test_mlp_tkg_each_core_reads_half_of_the_weights():
    H, I = 512, 2048
    w = {k: v.numpy() for k, v in _weights(H, I, torch.float32, WeightLayout.IN_OUT).items()}
    x = np.random.default_rng(0).standard_normal((1, 1, H)).astype(np.float32)
    weights = sum(v.nbytes for v in w.values())
    one = nki.estimate(mlp, hidden_tensor=x, **w)
    two = nki.estimate(mlp[2], hidden_tensor=x, **w)
    assert one.per_instance[0].hbm_read_bytes >= weights
    for e in two.per_instance:
        assert weights / 2 <= e.hbm_read_bytes < 0.52 * weights
    # The two cores stream their halves at the same time: the launch takes about half as long.
    assert two.total_ns < 0.6 * one.total_ns
