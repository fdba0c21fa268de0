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


@pytest.mark.parametrize(
    "B,S,nq,nkv,d,out_layout,layout",
    [
        (1, 1, 8, 8, 64, "NBSd", WeightLayout.OUT_IN),  # the Lab 2 decode shape
        (2, 1, 4, 2, 32, "BSD", WeightLayout.IN_OUT),  # 8 heads: Q on core 0, K and V on core 1
        (1, 3, 3, 1, 64, "NBdS", WeightLayout.OUT_IN),  # 5 heads: 3 + 2
    ],
)
def test_qkv_tkg_splits_the_heads_over_two_cores(B, S, nq, nkv, d, out_layout, layout):
    from nkilib.core.qkv.qkv import qkv
    from nkilib.core.utils.common_types import QKVOutputLayout

    torch.manual_seed(nq * 10 + nkv)
    H = 256
    x = torch.randn(B, S, H)
    I = (nq + 2 * nkv) * d
    wq, wk, wv = (torch.randn(n * d, H) * H**-0.5 for n in (nq, nkv, nkv))
    ws = (wq, wk, wv) if layout == WeightLayout.OUT_IN else torch.cat([wq, wk, wv], 0).T.contiguous()
    ang = torch.rand(B, S, d // 2) * 6
    kw = dict(
        input=x,
        fused_qkv_weights=ws,
        output_layout=getattr(QKVOutputLayout, out_layout),
        bias=torch.randn(1, I) * 0.1,
        fused_norm_type=NormType.RMS_NORM,
        gamma_norm_weights=torch.randn(1, H),
        fused_rope=True,
        cos_cache=ang.cos(),
        sin_cache=ang.sin(),
        d_head=d,
        num_q_heads=nq,
        num_kv_heads=nkv,
        weight_layout=layout,
    )
    one = qkv(**kw)
    two = qkv[2](**kw)
    # Each head is computed by one core exactly as the one-core kernel computes it.
    assert torch.equal(two, one)
    if out_layout == "NBSd" and layout == WeightLayout.OUT_IN:
        est1 = nki.estimate(qkv, **{k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
                            | {"fused_qkv_weights": tuple(w.numpy() for w in ws)})
        est2 = nki.estimate(qkv[2], **{k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
                            | {"fused_qkv_weights": tuple(w.numpy() for w in ws)})
        weights = sum(w.numel() * 4 for w in ws)
        for e in est2.per_instance:
            assert e.hbm_read_bytes < 0.6 * weights
        assert est1.per_instance[0].hbm_read_bytes >= weights
