"""nkilib.core kernels against their PyTorch references (the *_torch.py modules), fp32 and bf16,
at the Lab 2 "small" shapes (hidden 512, 8 heads x 64, SwiGLU 2048) and small/ragged ones.

Every kernel runs twice: the first run takes the executor's checked paths (uninitialized-memory
tracking, gathered matmul operands), the second its fast paths; both must match.

Tolerances: fp32 kernels differ from the fp32 reference only in summation order (matmuls over
up to a few thousand terms): rtol/atol 1e-4 relative to the output scale. bf16 kernels round
their SBUF tiles (inputs to each matmul stage, outputs) to bf16 like the hardware while the
reference stays in fp32: each rounding is up to 2^-9 relative and a kernel has two or three
stages, so we allow 3e-2 relative to the output scale.
"""

from __future__ import annotations

import math

import nki
import nki.language as nl
import pytest
import torch
from nkilib.core.attention.attention_cte import attention_cte
from nkilib.core.attention.attention_cte_torch import attention_cte_torch
from nkilib.core.attention.attention_decode_hf import attention_decode_hf
from nkilib.core.attention.attention_decode_hf_torch import attention_decode_hf_torch
from nkilib.core.attention.kv_cache import update_kv_cache
from nkilib.core.embeddings.rope import RoPE
from nkilib.core.embeddings.rope_hf import rope_hf
from nkilib.core.embeddings.rope_torch import rope_hf_torch, rope_torch
from nkilib.core.mlp.mlp import mlp
from nkilib.core.mlp.mlp_torch import mlp_torch_ref
from nkilib.core.output_projection.output_projection_cte import output_projection_cte
from nkilib.core.output_projection.output_projection_tkg import output_projection_tkg
from nkilib.core.output_projection.output_projection_torch import (
    output_projection_cte_torch,
    output_projection_tkg_torch,
)
from nkilib.core.qkv.qkv import qkv
from nkilib.core.qkv.qkv_torch import qkv_torch_ref
from nkilib.core.rmsnorm.rmsnorm import rmsnorm
from nkilib.core.subkernels.rmsnorm_tkg import rmsnorm_tkg
from nkilib.core.subkernels.rmsnorm_torch import rmsnorm_tkg_torch, rmsnorm_torch
from nkilib.core.utils.common_types import (
    ActFnType,
    NormType,
    QKVOutputLayout,
    QuantizationType,
    WeightLayout,
)

DTYPES = [torch.float32, torch.bfloat16]


def close(actual, expected, dtype):
    actual = actual.float().cpu()
    expected = expected.float().cpu()
    scale = max(1.0, expected.abs().max().item())
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * scale)


def twice(kernel, **kwargs):
    """Runs the kernel twice (checked, then fast paths), each run on fresh copies of the tensor
    arguments, so that a kernel writing into an input cannot feed its first result to the second."""

    def fresh():
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}

    return kernel(**fresh()), kernel(**fresh())


def rnd(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype)


# ---------------------------------------------------------------------------------------------
# RMSNorm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,H", [(1, 512), (8, 512), (300, 200), (129, 64)])
def test_rmsnorm(dtype, rows, H):
    x, g = rnd(rows, H, dtype=dtype), rnd(H, dtype=dtype)
    ref = rmsnorm_torch(x, g, 1e-5)
    for out in twice(rmsnorm, input=x, gamma=g, eps=1e-5):
        assert out.dtype == dtype and out.shape == x.shape
        close(out, ref, dtype)
    if dtype == torch.bfloat16:  # torch's own bf16 RMSNorm: the same up to one bf16 ulp (2^-7 relative)
        torch.testing.assert_close(out, torch.nn.functional.rms_norm(x, (H,), g, 1e-5), rtol=2**-7, atol=1e-6)


def test_rmsnorm_grid_splits_rows():
    x, g = rnd(300, 96), rnd(96)
    torch.testing.assert_close(rmsnorm[2](input=x, gamma=g), rmsnorm_torch(x, g, 1e-6), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hidden_dim_tp", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_tkg_layout(hidden_dim_tp, dtype):
    @nki.jit
    def k(x, g, tp):
        B, S, H = x.shape
        out = nl.ndarray((128, B * S, H // 128), x.dtype, buffer=nl.shared_hbm)
        rmsnorm_tkg(input=x, gamma=g, output=out, eps=1e-6, hidden_dim_tp=tp)
        return out

    x, g = rnd(2, 3, 512, dtype=dtype), rnd(1, 512, dtype=dtype)
    for out in twice(k, x=x, g=g, tp=hidden_dim_tp):
        close(out, rmsnorm_tkg_torch(x, g, 1e-6, hidden_dim_tp), dtype)


def test_rmsnorm_tkg_needs_multiple_of_128():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 1, 1), x.dtype, buffer=nl.shared_hbm)
        rmsnorm_tkg(input=x, gamma=None, output=out)
        return out

    with pytest.raises(AssertionError, match="H=200 must be a multiple of 128"):
        k(torch.randn(1, 1, 200))


# ---------------------------------------------------------------------------------------------
# MLP


def _mlp_weights(H, I, dtype, layout=WeightLayout.IN_OUT):
    g, u, d = rnd(H, I, scale=H**-0.5), rnd(H, I, scale=H**-0.5), rnd(I, H, scale=I**-0.5)
    ref = {
        "gate_proj_weights_tensor": g.to(dtype),
        "up_proj_weights_tensor": u.to(dtype),
        "down_proj_weights_tensor": d.to(dtype),
    }
    if layout == WeightLayout.IN_OUT:
        return ref, dict(ref)
    kern = {k: v.T.contiguous() for k, v in ref.items()}
    return ref, kern


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "B,S,H,I,force_cte",
    [
        (1, 1, 512, 2048, False),
        (1, 8, 512, 2048, True),
        (4, 1, 512, 2048, False),
        (2, 3, 300, 200, False),
        (1, 200, 384, 640, False),
        (3, 50, 128, 256, False),
    ],
)
@pytest.mark.parametrize("layout", [WeightLayout.IN_OUT, WeightLayout.OUT_IN])
def test_mlp(dtype, B, S, H, I, force_cte, layout):
    x = rnd(B, S, H, dtype=dtype)
    ref_w, w = _mlp_weights(H, I, dtype, layout)
    ref = mlp_torch_ref(hidden_tensor=x, **ref_w)["out"]
    for out in twice(mlp, hidden_tensor=x, force_cte_mode=force_cte, weight_layout=layout, **w):
        assert isinstance(out, list) and len(out) == 1 and out[0].shape == (B, S, H) and out[0].dtype == dtype
        close(out[0], ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("S", [1, 130])
def test_mlp_fused_add_rmsnorm_biases_clamps(dtype, S):
    B, H, I = 2, 256, 384
    x, res = rnd(B, S, H, dtype=dtype), rnd(B, S, H, dtype=dtype)
    ref_w, w = _mlp_weights(H, I, dtype)
    extra = {
        "normalization_weights_tensor": rnd(1, H, dtype=dtype),
        "gate_proj_bias_tensor": rnd(1, I, dtype=dtype, scale=0.1),
        "up_proj_bias_tensor": rnd(1, I, dtype=dtype, scale=0.1),
        "down_proj_bias_tensor": rnd(1, H, dtype=dtype, scale=0.1),
        "fused_add_tensor": res,
        "store_fused_add_result": True,
        "normalization_type": NormType.RMS_NORM,
        "activation_fn": ActFnType.GELU_Tanh_Approx,
        "eps": 1e-5,
        "gate_clamp_upper_limit": 1.0,
        "up_clamp_lower_limit": -0.5,
    }
    ref = mlp_torch_ref(hidden_tensor=x, **ref_w, **extra)
    for out, added in twice(mlp, hidden_tensor=x, **w, **extra):
        close(out, ref["out"], dtype)
        torch.testing.assert_close(added, x + res, rtol=0, atol=0)  # one rounded add, like torch


@pytest.mark.parametrize("act", [ActFnType.SiLU, ActFnType.GELU])
def test_mlp_skip_gate_and_activations(act):
    x = rnd(1, 4, 128)
    ref_w, w = _mlp_weights(128, 256, torch.float32)
    for skip in (False, True):
        ref = mlp_torch_ref(hidden_tensor=x, activation_fn=act, skip_gate_proj=skip, **ref_w)["out"]
        close(mlp(hidden_tensor=x, activation_fn=act, skip_gate_proj=skip, **w)[0], ref, torch.float32)


@pytest.mark.parametrize("S", [1, 200])
def test_mlp_grid_of_two(S):
    """mlp[2] (LNC=2): TKG splits the intermediate dimension (partial sums exchanged), CTE the
    token blocks."""
    x = rnd(1, S, 512, dtype=torch.bfloat16)
    ref_w, w = _mlp_weights(512, 1024, torch.bfloat16)
    close(mlp[2](hidden_tensor=x, **w)[0], mlp_torch_ref(hidden_tensor=x, **ref_w)["out"], torch.bfloat16)


def test_mlp_on_neuron_device():
    x = rnd(1, 1, 512, dtype=torch.bfloat16)
    ref_w, w = _mlp_weights(512, 2048, torch.bfloat16, WeightLayout.OUT_IN)
    out = mlp(
        hidden_tensor=x.to("neuron"),
        weight_layout=WeightLayout.OUT_IN,
        **{k: v.to("neuron") for k, v in w.items()},
    )
    assert out[0].device.type == "neuron"
    close(out[0], mlp_torch_ref(hidden_tensor=x, **ref_w)["out"], torch.bfloat16)


def test_mlp_rejects_bad_arguments():
    x = rnd(1, 1, 128)
    _, w = _mlp_weights(128, 256, torch.float32)
    with pytest.raises(AssertionError, match="quantization"):
        mlp(hidden_tensor=x, quantization_type=QuantizationType.ROW, **w)
    with pytest.raises(AssertionError, match=r"down_proj_weights_tensor \(128, 256\) does not match"):
        mlp(
            hidden_tensor=x,
            gate_proj_weights_tensor=w["gate_proj_weights_tensor"],
            up_proj_weights_tensor=w["up_proj_weights_tensor"],
            down_proj_weights_tensor=w["down_proj_weights_tensor"].T,
        )
    with pytest.raises(AssertionError, match="RMS_NORM needs normalization_weights_tensor"):
        mlp(hidden_tensor=x, normalization_type=NormType.RMS_NORM, **w)


def test_mlp_decode_estimate_is_dma_bound():
    """Decode MLP of the small Lab 2 model on Trainium2: the 6 MiB of bf16 weights take ~17 us
    at 16 x 23 B/ns; the kernel should be within 2x of that and DMA the busiest engine."""
    x = rnd(1, 1, 512, dtype=torch.bfloat16)
    _, w = _mlp_weights(512, 2048, torch.bfloat16)
    est = nki.estimate(mlp, hidden_tensor=x, **w)
    weight_us = 3 * 512 * 2048 * 2 / (16 * 23) / 1000
    assert weight_us < est.total_us < 2 * weight_us
    assert max(est.utilization, key=est.utilization.get) == "DMA"


# ---------------------------------------------------------------------------------------------
# RoPE


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "B,Hq,Hkv,S,d,half", [(1, 8, 8, 1, 64, True), (1, 8, 8, 8, 64, False), (2, 4, 2, 130, 32, True)]
)
@pytest.mark.parametrize("backward", [False, True])
def test_rope_hf(dtype, B, Hq, Hkv, S, d, half, backward):
    q, k = rnd(B, Hq, S, d, dtype=dtype), rnd(B, Hkv, S, d, dtype=dtype)
    ang = torch.rand(S + 3, d // 2 if half else d) * 6
    cos, sin = ang.cos(), ang.sin()
    rq, rk = rope_hf_torch(q, k, cos, sin, backward)
    outs = {"q_out": torch.empty_like(q), "k_out": torch.empty_like(k)}
    for qo, ko in twice(rope_hf, q=q, k=k, **outs, cos=cos, sin=sin, backward=backward):
        close(qo, rq, dtype)
        close(ko, rk, dtype)
    if dtype == torch.float32 and half and not backward:  # same fp32 ops as Llama's rotate-half
        x1, x2 = q[..., : d // 2], q[..., d // 2 :]
        c, s = cos[:S], sin[:S]
        torch.testing.assert_close(qo, torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1), rtol=0, atol=0)


def test_rope_hf_writes_given_outputs_and_packed_cache():
    q, k = rnd(1, 2, 5, 16), rnd(1, 1, 5, 16)
    ang = torch.rand(5, 16)
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    rq, rk = rope_hf(q=q, k=k, q_out=qo, k_out=ko, rope_cache=torch.cat([ang.cos(), ang.sin()], -1))
    assert rq is qo and rk is ko
    eq, _ek = rope_hf_torch(q, k, ang.cos(), ang.sin())
    torch.testing.assert_close(qo, eq, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("contiguous", [True, False])
def test_rope_head_dim_major(dtype, contiguous):
    x = rnd(64, 2, 3, 5, dtype=dtype)
    c, s = torch.rand(32, 2, 5), torch.rand(32, 2, 5)
    for out in twice(RoPE, x_in=x, cos=c, sin=s, contiguous_layout=contiguous):
        close(out, rope_torch(x, c, s, contiguous), dtype)


# ---------------------------------------------------------------------------------------------
# QKV


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "B,S,H,nq,nkv,d,layout,out_layout",
    [
        (1, 1, 512, 8, 8, 64, WeightLayout.OUT_IN, QKVOutputLayout.BSD),
        (1, 8, 512, 8, 8, 64, WeightLayout.OUT_IN, QKVOutputLayout.NBSd),
        (2, 5, 300, 4, 2, 32, WeightLayout.IN_OUT, QKVOutputLayout.NBSd),
        (1, 130, 256, 2, 1, 64, WeightLayout.IN_OUT, QKVOutputLayout.NBdS),
    ],
)
def test_qkv_fused_norm_rope(dtype, B, S, H, nq, nkv, d, layout, out_layout):
    x = rnd(B, S, H, dtype=dtype)
    I = (nq + 2 * nkv) * d
    wq, wk, wv = (rnd(n * d, H, dtype=dtype, scale=H**-0.5) for n in (nq, nkv, nkv))
    ws = (wq, wk, wv) if layout == WeightLayout.OUT_IN else torch.cat([wq, wk, wv], 0).T.contiguous()
    ang = torch.rand(B, S, d // 2) * 6
    kw = {
        "fused_qkv_weights": ws,
        "output_layout": out_layout,
        "bias": rnd(1, I, dtype=dtype, scale=0.1),
        "fused_residual_add": True,
        "mlp_prev": rnd(B, S, H, dtype=dtype),
        "attention_prev": rnd(B, S, H, dtype=dtype),
        "fused_norm_type": NormType.RMS_NORM,
        "gamma_norm_weights": rnd(1, H, dtype=dtype),
        "fused_rope": True,
        "cos_cache": ang.cos(),
        "sin_cache": ang.sin(),
        "d_head": d,
        "num_q_heads": nq,
        "num_kv_heads": nkv,
        "weight_layout": layout,
    }
    ref = qkv_torch_ref(input=x, **kw)
    for out in twice(qkv, input=x, **kw):
        close(out, ref, dtype)


def test_qkv_plain_projection():
    x, w = rnd(2, 3, 128), rnd(128, 192)
    torch.testing.assert_close(qkv(input=x, fused_qkv_weights=w), x @ w, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Attention


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "B,Hq,Hkv,S,d,Sp,pos",
    [
        (1, 8, 8, 1, 64, 256, [9]),
        (1, 8, 8, 1, 64, 256, [0]),
        (2, 4, 2, 3, 32, 40, [5, 17]),
        (3, 2, 1, 2, 128, 300, [298, 0, 150]),
        (4, 8, 8, 1, 64, 256, [255, 1, 64, 200]),
    ],
)
def test_attention_decode_hf_with_cache_update(dtype, B, Hq, Hkv, S, d, Sp, pos):
    q, ka, va = rnd(B, Hq, S, d, dtype=dtype), rnd(B, Hkv, S, d, dtype=dtype), rnd(B, Hkv, S, d, dtype=dtype)
    kp, vp = rnd(B, Hkv, Sp, d, dtype=dtype), rnd(B, Hkv, Sp, d, dtype=dtype)
    pid = torch.tensor(pos, dtype=torch.int32).reshape(B, 1)
    pos_ok = all(p + S <= Sp for p in pos)
    ref, rk, rv = attention_decode_hf_torch(q, ka, va, kp, vp, pid, update_cache=pos_ok)
    for _ in range(2):
        kc, vc = kp.clone(), vp.clone()
        out = attention_decode_hf(
            q=q, k_active=ka, v_active=va, k_prior=kc, v_prior=vc, position_ids=pid, update_cache=pos_ok
        )
        close(out, ref, dtype)
        if pos_ok:
            torch.testing.assert_close(kc, rk, rtol=0, atol=0)
            torch.testing.assert_close(vc, rv, rtol=0, atol=0)


def test_attention_decode_hf_cache_write_out_of_bounds_is_a_runtime_error():
    q, ka, va = rnd(1, 2, 2, 32), rnd(1, 2, 2, 32), rnd(1, 2, 2, 32)
    kc, vc = rnd(1, 2, 16, 32), rnd(1, 2, 16, 32)
    with pytest.raises(AssertionError, match="outside the tensor"):
        attention_decode_hf(
            q=q,
            k_active=ka,
            v_active=va,
            k_prior=kc,
            v_prior=vc,
            position_ids=torch.tensor([[15]], dtype=torch.int32),
            update_cache=True,
        )


def test_attention_decode_hf_without_cache():
    q, k, v = rnd(2, 4, 3, 32), rnd(2, 4, 3, 32), rnd(2, 4, 3, 32)
    ref, _, _ = attention_decode_hf_torch(q, k, v)
    close(attention_decode_hf(q=q, k_active=k, v_active=v), ref, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "bs,bkv,sq,d,sp,used,causal,tpq,tpk,tpo",
    [
        (8, 8, 8, 64, 256, 0, True, True, True, False),
        (8, 8, 8, 64, 256, 5, True, True, True, False),
        (4, 2, 300, 32, 0, 0, True, True, False, False),
        (2, 1, 130, 64, 50, 17, True, False, True, True),
        (3, 3, 600, 16, 0, 0, False, True, True, False),
    ],
)
def test_attention_cte(dtype, bs, bkv, sq, d, sp, used, causal, tpq, tpk, tpo):
    q = rnd(bs, sq, d, dtype=dtype) if tpq else rnd(bs, d, sq, dtype=dtype)
    k = rnd(bkv, sq, d, dtype=dtype) if tpk else rnd(bkv, d, sq, dtype=dtype)
    v = rnd(bkv, sq, d, dtype=dtype)
    kw = {"scale": 1 / math.sqrt(d), "causal_mask": causal, "tp_q": tpq, "tp_k": tpk, "tp_out": tpo}
    if sp:
        kw.update(
            k_prior=rnd(bkv, sp, d, dtype=dtype) if tpk else rnd(bkv, d, sp, dtype=dtype),
            v_prior=rnd(bkv, sp, d, dtype=dtype),
            prior_used_len=torch.tensor([used], dtype=torch.int32),
        )
    ref = attention_cte_torch(q, k, v, **kw)
    for out in twice(attention_cte, q=q, k=k, v=v, **kw):
        close(out, ref, dtype)


def test_attention_cte_grid_and_neuron_device():
    q, k, v = rnd(4, 130, 32), rnd(2, 130, 32), rnd(2, 130, 32)
    ref = attention_cte_torch(q, k, v, 0.2, True, tp_k=True)
    close(attention_cte[2](q=q, k=k, v=v, scale=0.2, tp_k=True), ref, torch.float32)
    out = attention_cte(q=q.to("neuron"), k=k.to("neuron"), v=v.to("neuron"), scale=0.2, tp_k=True)
    assert out.device.type == "neuron"
    close(out, ref, torch.float32)


def test_update_kv_cache():
    k, v = rnd(2, 3, 4, 8), rnd(2, 3, 4, 8)
    kc, vc = torch.zeros(3, 3, 16, 8), torch.zeros(3, 3, 16, 8)
    update_kv_cache(
        k_cache=kc, v_cache=vc, k=k, v=v, position_ids=torch.tensor([[5], [12]], dtype=torch.int32)
    )
    ek, ev = torch.zeros_like(kc), torch.zeros_like(vc)
    ek[0, :, 5:9], ek[1, :, 12:16], ev[0, :, 5:9], ev[1, :, 12:16] = k[0], k[1], v[0], v[1]
    assert torch.equal(kc, ek) and torch.equal(vc, ev)


# ---------------------------------------------------------------------------------------------
# Output projection


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "D,B,N,S,H,tr",
    [
        (64, 1, 8, 1, 512, False),
        (32, 2, 3, 2, 256, True),
        (48, 1, 5, 3, 200, False),
    ],
)
def test_output_projection(dtype, D, B, N, S, H, tr):
    a = rnd(D, B, N, S, dtype=dtype)
    w = rnd(N * D, H, dtype=dtype, scale=(N * D) ** -0.5)
    bias = rnd(1, H, dtype=dtype)
    for out in twice(output_projection_tkg, attention=a, weight=w, bias=bias, TRANSPOSE_OUT=tr):
        close(out, output_projection_tkg_torch(a, w, bias, tr), dtype)
    a2 = rnd(B, N, D, 150, dtype=dtype)
    for out in twice(output_projection_cte, attention=a2, weight=w, bias=bias):
        close(out, output_projection_cte_torch(a2, w, bias), dtype)
