"""nkilib.experimental: the transformer_tkg decode megakernel and attention_block_tkg against
the PyTorch reference (transformer_tkg_torch), fp32 and bf16, at the Lab 2 "small" shapes and a
small GQA configuration; each runs twice (checked, then fast executor paths).

Tolerances: fp32 differs only in summation order (1e-4 of the output scale, through a few
layers). bf16 rounds the residual stream and every projection output like the reference does,
but attention probabilities, activations and normalized inputs are rounded at slightly
different points: up to a couple of bf16 ulps of the output (3e-2 of its scale).
"""

from __future__ import annotations

import math

import nki
import pytest
import torch
from nkilib.core.utils.common_types import QuantizationType, WeightLayout
from nkilib.experimental.transformer.attention_block_tkg import attention_block_tkg
from nkilib.experimental.transformer.transformer_tkg import transformer_tkg
from nkilib.experimental.transformer.transformer_tkg_torch import transformer_tkg_torch

megakernel = nki.jit(transformer_tkg)


def close(actual, expected, dtype):
    scale = max(1.0, expected.float().abs().max().item())
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(actual.float(), expected.float(), rtol=tol, atol=tol * scale)


def make_layers(L, H, Hq, Hkv, d, I, dtype, layout, fused_qkv=False):
    def w(out_f, in_f):
        t = torch.randn(out_f, in_f) / math.sqrt(in_f)  # nn.Linear layout [out, in]
        return (t if layout == WeightLayout.OUT_IN else t.T.contiguous()).to(dtype)

    if layout == WeightLayout.OUT_IN:
        qkv = [(w(Hq * d, H), w(Hkv * d, H), w(Hkv * d, H)) for _ in range(L)]
    elif fused_qkv:
        qkv = [w((Hq + 2 * Hkv) * d, H) for _ in range(L)]
    else:
        qkv = [(w(Hq * d, H), w(Hkv * d, H), w(Hkv * d, H)) for _ in range(L)]
    return {
        "W_qkvs": qkv,
        "W_outs": [w(H, Hq * d) for _ in range(L)],
        "W_gates": [w(I, H) for _ in range(L)],
        "W_ups": [w(I, H) for _ in range(L)],
        "W_downs": [w(H, I) for _ in range(L)],
        "W_gamma_qkvs": [(1 + 0.1 * torch.randn(1, H)).to(dtype) for _ in range(L)],
        "W_gamma_mlps": [(1 + 0.1 * torch.randn(1, H)).to(dtype) for _ in range(L)],
    }


CONFIGS = [
    # B, S, H, Hq, Hkv, d, I, L, max_seq, positions, layout, fused
    (1, 1, 512, 8, 8, 64, 2048, 2, 256, [9], WeightLayout.OUT_IN, False),
    (2, 2, 256, 4, 2, 32, 384, 2, 64, [3, 20], WeightLayout.IN_OUT, True),
    (3, 1, 128, 4, 4, 32, 256, 3, 128, [0, 127, 50], WeightLayout.IN_OUT, False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("gathered_rope", [False, True])
def test_transformer_tkg(dtype, cfg, gathered_rope):
    B, S, H, Hq, Hkv, d, I, L, Smax, pos, layout, fused = cfg
    torch.manual_seed(0)
    X = torch.randn(B, S, H).to(dtype)
    layers = make_layers(L, H, Hq, Hkv, d, I, dtype, layout, fused)
    Kc = [torch.randn(B, Hkv, Smax, d).to(dtype) for _ in range(L)]
    Vc = [torch.randn(B, Hkv, Smax, d).to(dtype) for _ in range(L)]
    ang = torch.outer(torch.arange(Smax).float(), torch.rand(d // 2))
    cos, sin = ang.cos(), ang.sin()
    pid = torch.tensor(pos, dtype=torch.int32).reshape(B, 1)
    ref, rk, rv = transformer_tkg_torch(
        X,
        K_caches=Kc,
        V_caches=Vc,
        RoPE_cos=cos,
        RoPE_sin=sin,
        position_ids=pid,
        num_layers=L,
        eps=1e-5,
        weight_layout=layout,
        **layers,
    )
    if gathered_rope:  # the library's layout: [d/2, B, S] values of the active tokens
        idx = pid.long() + torch.arange(S)
        cos, sin = cos[idx].permute(2, 0, 1).contiguous(), sin[idx].permute(2, 0, 1).contiguous()
    for _ in range(2):
        Kk, Vv = [k.clone() for k in Kc], [v.clone() for v in Vc]
        out = megakernel(
            X=X,
            K_caches=Kk,
            V_caches=Vv,
            RoPE_cos=cos,
            RoPE_sin=sin,
            mask_cache=None,
            mask_active=None,
            position_ids=pid,
            num_layers=L,
            eps=1e-5,
            weight_layout=layout,
            **layers,
        )
        assert out.shape == (B, S, H) and out.dtype == dtype
        close(out, ref, dtype)
        for a, b in zip(Kk + Vv, rk + rv):
            close(a, b, dtype)


def library_mask(pos, B, Hq, S, S_ctx, hole=None):
    """The library's attention mask [S_ctx, B, Hq, S] (uint8): prior keys j < pos[b] of the
    window's first S_ctx - S, the active tokens (its last S rows) causally; hole = (b, h, j):
    one more masked prior key."""
    n = S_ctx - S
    m = torch.zeros(S_ctx, B, Hq, S, dtype=torch.uint8)
    for b in range(B):
        m[: min(pos[b], n), b] = 1
        m[n:, b] = torch.tril(torch.ones(S, S, dtype=torch.uint8)).t()[:, None, :]  # [key, 1, query]
    if hole is not None:
        b, h, j = hole
        m[j, b, h] = 0
    return m


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transformer_tkg_with_the_librarys_mask(dtype):
    """mask_cache [S_ctx, B, Hq, S] (the library's semantics: a window of S_ctx - S cache
    positions, the active tokens in its last S rows) against the reference; mask_active is
    accepted and not read, as by the library."""
    B, S, H, Hq, Hkv, d, I, L, Smax, pos = 2, 2, 256, 4, 2, 32, 384, 2, 64, [3, 20]
    torch.manual_seed(3)
    X = torch.randn(B, S, H).to(dtype)
    layers = make_layers(L, H, Hq, Hkv, d, I, dtype, WeightLayout.IN_OUT, True)
    Kc = [torch.randn(B, Hkv, Smax, d).to(dtype) for _ in range(L)]
    Vc = [torch.randn(B, Hkv, Smax, d).to(dtype) for _ in range(L)]
    ang = torch.outer(torch.arange(Smax).float(), torch.rand(d // 2))
    pid = torch.tensor(pos, dtype=torch.int32).reshape(B, 1)
    mask = library_mask(pos, B, Hq, S, 24, hole=(1, 2, 7))
    common = dict(RoPE_cos=ang.cos(), RoPE_sin=ang.sin(), position_ids=pid, num_layers=L, eps=1e-5, **layers)
    ref, rk, _ = transformer_tkg_torch(X, K_caches=Kc, V_caches=Vc, mask_cache=mask, **common)
    ref_gen, _, _ = transformer_tkg_torch(X, K_caches=Kc, V_caches=Vc, **common)
    assert (ref - ref_gen).abs().max() > 1e-3  # the hole changes the result
    Kk, Vv = [k.clone() for k in Kc], [v.clone() for v in Vc]
    out = megakernel(X=X, K_caches=Kk, V_caches=Vv, mask_cache=mask, mask_active=torch.zeros(1), **common)
    close(out, ref, dtype)
    for a, b in zip(Kk, rk):
        close(a, b, dtype)


def test_attention_block_tkg_mask_equal_to_the_generated_one():
    """A supplied attention_mask that says what kv_cache_update_idx implies gives the same output
    (masked scores are exact either way; only zero terms differ)."""
    B, S, H, Hq, d, Smax = 2, 1, 256, 4, 32, 64
    torch.manual_seed(4)
    X = torch.randn(B, S, H)
    Wq, Wk, Wv = (torch.randn(H, n * d) / math.sqrt(H) for n in (Hq, 1, 1))
    Wo = torch.randn(Hq * d, H) / math.sqrt(Hq * d)
    Kc, Vc = torch.randn(B, Smax, d), torch.randn(B, Smax, d)
    ang = torch.outer(torch.arange(Smax).float(), torch.rand(d // 2))
    pos = [5, 30]
    pid = torch.tensor(pos, dtype=torch.int32).reshape(B, 1)
    common = {"X": X, "W_qkv": (Wq, Wk, Wv), "W_out": Wo, "cos": ang.cos(), "sin": ang.sin()}
    common["kv_cache_update_idx"] = pid
    outs = []
    for m in (None, library_mask(pos, B, Hq, S, 40)):
        k, v = Kc.clone(), Vc.clone()
        outs.append(attention_block_tkg(**block_args(K_cache=k, V_cache=v, attention_mask=m, **common))[0])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-6, atol=1e-6)


def test_transformer_tkg_is_not_decorated_and_checks_arguments():
    assert not isinstance(transformer_tkg, nki.Kernel)  # jit at the call site, as in the library
    with pytest.raises(AssertionError, match="position_ids is required"):
        megakernel(
            X=torch.randn(1, 1, 128),
            W_qkvs=[],
            W_outs=[],
            W_gates=[],
            W_ups=[],
            W_downs=[],
            W_gamma_qkvs=[],
            W_gamma_mlps=[],
            K_caches=[torch.zeros(1, 1, 8, 32)],
            V_caches=[],
            RoPE_cos=torch.zeros(8, 16),
            RoPE_sin=torch.zeros(8, 16),
            mask_cache=None,
            mask_active=None,
            position_ids=None,
            num_layers=0,
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_block_tkg_matches_one_layer(dtype):
    """attention_block_tkg is the first half of a layer: h + block(h) equals a one-layer
    transformer with a zero MLP."""
    B, S, H, Hq, Hkv, d, Smax = 1, 1, 512, 8, 8, 64, 256
    torch.manual_seed(1)
    X = torch.randn(B, S, H).to(dtype)
    layers = make_layers(1, H, Hq, Hkv, d, 256, dtype, WeightLayout.IN_OUT)
    layers["W_downs"] = [torch.zeros_like(layers["W_downs"][0])]
    Kc, Vc = torch.randn(B, Hkv, Smax, d).to(dtype), torch.randn(B, Hkv, Smax, d).to(dtype)
    ang = torch.outer(torch.arange(Smax).float(), torch.rand(d // 2))
    pid = torch.tensor([[40]], dtype=torch.int32)
    ref, rk, _ = transformer_tkg_torch(
        X,
        K_caches=[Kc],
        V_caches=[Vc],
        RoPE_cos=ang.cos(),
        RoPE_sin=ang.sin(),
        position_ids=pid,
        num_layers=1,
        eps=1e-6,
        weight_layout=WeightLayout.IN_OUT,
        **layers,
    )
    kc, vc = Kc.clone(), Vc.clone()
    out, k_ret, v_ret = attention_block_tkg(
        **block_args(
            X=X,
            W_qkv=layers["W_qkvs"][0],
            W_out=layers["W_outs"][0],
            K_cache=kc,
            V_cache=vc,
            cos=ang.cos(),
            sin=ang.sin(),
            kv_cache_update_idx=pid,
            rmsnorm_X_gamma=layers["W_gamma_qkvs"][0],
        )
    )
    assert out.shape == (B * S, H) and k_ret is kc and v_ret is vc
    close(X + out.reshape(B, S, H), ref, dtype)
    close(kc, rk[0], dtype)


def block_args(**kw):
    """attention_block_tkg's required arguments with their no-feature values, as a library
    caller passes them, updated with kw."""
    args = dict(
        X_hidden_dim_actual=None,
        rmsnorm_X_enabled=True,
        rmsnorm_X_eps=1e-6,
        rmsnorm_X_gamma=None,
        bias_qkv=None,
        quantization_type_qkv=QuantizationType.NONE,
        weight_dequant_scale_qkv=None,
        input_dequant_scale_qkv=None,
        rmsnorm_QK_pre_rope_enabled=False,
        rmsnorm_QK_pre_rope_eps=0.0,
        rmsnorm_QK_pre_rope_W_Q=None,
        rmsnorm_QK_pre_rope_W_K=None,
        rope_contiguous_layout=True,
        rmsnorm_QK_post_rope_enabled=False,
        rmsnorm_QK_post_rope_eps=0.0,
        rmsnorm_QK_post_rope_W_Q=None,
        rmsnorm_QK_post_rope_W_K=None,
        K_cache_transposed=False,
        active_blocks_table=None,
        attention_mask=None,
        sink=None,
        update_cache=True,
        bias_out=None,
        quantization_type_out=QuantizationType.NONE,
        weight_dequant_scale_out=None,
        input_dequant_scale_out=None,
        transposed_out=False,
        out_in_sb=False,
    )
    args.update(kw)
    return args


@pytest.mark.parametrize("dtype", [torch.float32])
def test_attention_block_tkg_library_cache_layout_and_scale(dtype):
    """The library's single-kv-head caches [B, S_max, d] and a softmax_scale: the same result as
    the [B, 1, S_max, d] Hugging Face layout with the scale folded into W_q."""
    B, S, H, Hq, d, Smax = 2, 1, 256, 4, 32, 64
    torch.manual_seed(2)
    X = torch.randn(B, S, H).to(dtype)
    Wq, Wk, Wv = (torch.randn(H, n * d) / math.sqrt(H) for n in (Hq, 1, 1))
    Wo = torch.randn(Hq * d, H) / math.sqrt(Hq * d)
    Kc, Vc = torch.randn(B, Smax, d), torch.randn(B, Smax, d)
    ang = torch.outer(torch.arange(Smax).float(), torch.rand(d // 2))
    pid = torch.tensor([[5], [30]], dtype=torch.int32)
    common = dict(X=X, W_out=Wo, cos=ang.cos(), sin=ang.sin(), kv_cache_update_idx=pid, rmsnorm_X_enabled=False)
    k3, v3 = Kc.clone(), Vc.clone()
    out3, _, _ = attention_block_tkg(
        **block_args(W_qkv=(Wq, Wk, Wv), K_cache=k3, V_cache=v3, softmax_scale=0.5, **common)
    )
    k4, v4 = Kc.clone().unsqueeze(1), Vc.clone().unsqueeze(1)
    q_fold = 0.5 * math.sqrt(d)  # scale 0.5 == default 1/sqrt(d) with q scaled by 0.5 * sqrt(d)
    out4, _, _ = attention_block_tkg(
        **block_args(W_qkv=(Wq * q_fold, Wk, Wv), K_cache=k4, V_cache=v4, **common)
    )
    torch.testing.assert_close(out3, out4, rtol=1e-4, atol=1e-4)  # fp32, rounding of the q fold
    torch.testing.assert_close(k3, k4.squeeze(1), rtol=0, atol=0)
    assert not torch.equal(k3, Kc)  # the cache was written


def test_attention_block_tkg_rejects_unsupported_features():
    args = block_args(X=torch.randn(1, 1, 128), W_qkv=torch.zeros(128, 3 * 32), W_out=torch.zeros(32, 128),
                      K_cache=torch.zeros(1, 8, 32), V_cache=torch.zeros(1, 8, 32), cos=torch.zeros(16, 1, 1),
                      sin=torch.zeros(16, 1, 1), kv_cache_update_idx=torch.zeros(1, 1, dtype=torch.int32))
    with pytest.raises(AssertionError, match=r"attention mask \(8, 1, 2, 1\) must be \[S_ctx, 1, 1, 1\]"):
        attention_block_tkg(**{**args, "attention_mask": torch.ones(8, 1, 2, 1, dtype=torch.uint8)})
    with pytest.raises(AssertionError, match="update_cache=True"):
        attention_block_tkg(**{**args, "update_cache": False})


def test_megakernel_estimate_beats_separate_kernels():
    """Cost model: one megakernel decode step of the small Lab 2 stack vs the same math as
    separate core kernels per layer (each paying its DMA latency and HBM round trips)."""
    from nkilib.core.attention.attention_decode_hf import attention_decode_hf
    from nkilib.core.mlp.mlp import mlp
    from nkilib.core.qkv.qkv import qkv

    B, S, H, Hq, Hkv, d, I, L, Smax = 1, 1, 512, 8, 8, 64, 2048, 2, 256
    dt = torch.bfloat16
    layers = make_layers(L, H, Hq, Hkv, d, I, dt, WeightLayout.OUT_IN)
    X = torch.randn(B, S, H).to(dt)
    caches = {
        "K_caches": [torch.zeros(B, Hkv, Smax, d, dtype=dt)] * L,
        "V_caches": [torch.zeros(B, Hkv, Smax, d, dtype=dt)] * L,
    }
    ang = torch.zeros(Smax, d // 2)
    pid = torch.tensor([[7]], dtype=torch.int32)
    mk = nki.estimate(
        megakernel,
        X=X,
        RoPE_cos=ang,
        RoPE_sin=ang,
        mask_cache=None,
        mask_active=None,
        position_ids=pid,
        num_layers=L,
        weight_layout=WeightLayout.OUT_IN,
        **caches,
        **layers,
    )
    q = torch.zeros(B, Hq, S, d, dtype=dt)
    sep = 0.0
    for i in range(L):
        sep += nki.estimate(
            qkv, input=X, fused_qkv_weights=layers["W_qkvs"][i], weight_layout=WeightLayout.OUT_IN
        ).total_us
        sep += nki.estimate(
            attention_decode_hf,
            q=q,
            k_active=q,
            v_active=q,
            k_prior=caches["K_caches"][0],
            v_prior=caches["V_caches"][0],
            position_ids=pid,
        ).total_us
        sep += nki.estimate(
            mlp,
            hidden_tensor=X,
            gate_proj_weights_tensor=layers["W_gates"][i],
            up_proj_weights_tensor=layers["W_ups"][i],
            down_proj_weights_tensor=layers["W_downs"][i],
            weight_layout=WeightLayout.OUT_IN,
        ).total_us
    assert mk.total_us < sep


def test_megakernel_norms_share_one_ones_matrix():
    """Every RMSNorm of the megakernel uses the one ones matrix it makes up front (no 64 KiB
    memset per norm), and a norm with a shared ones matrix gives the bits of one with its own."""
    import nki.language as nl
    from nkilib.core.utils.tile_ops import load_hT, load_vec_T, ones_matrix, rmsnorm_hT, store_hT

    B, S, H, Hq, Hkv, d, I, L, Smax = 1, 1, 256, 4, 2, 32, 384, 3, 64
    torch.manual_seed(0)
    layers = make_layers(L, H, Hq, Hkv, d, I, torch.bfloat16, WeightLayout.OUT_IN)
    traced = megakernel.specialize(
        X=torch.randn(B, S, H).to(torch.bfloat16),
        K_caches=[torch.randn(B, Hkv, Smax, d).to(torch.bfloat16) for _ in range(L)],
        V_caches=[torch.randn(B, Hkv, Smax, d).to(torch.bfloat16) for _ in range(L)],
        RoPE_cos=torch.rand(Smax, d // 2),
        RoPE_sin=torch.rand(Smax, d // 2),
        mask_cache=None,
        mask_active=None,
        position_ids=torch.tensor([[5]], dtype=torch.int32),
        num_layers=L,
        eps=1e-5,
        weight_layout=WeightLayout.OUT_IN,
        **layers,
    )
    ones_fills = [ln for ln in traced.dump().splitlines() if "nki.isa.memset" in ln and "ones@" in ln]
    assert len(ones_fills) == 1, ones_fills

    def norms(x, g, shared: bool):
        T, Hx = x.shape
        out = nl.ndarray((2, T, Hx), x.dtype, buffer=nl.shared_hbm)
        xT = load_hT(x, nl.bfloat16)
        gT = load_vec_T(g, Hx, nl.float32)
        ones = ones_matrix() if shared else None
        a = rmsnorm_hT(xT, Hx, T, gT, 1e-5, nl.bfloat16, name="a", ones=ones)
        b = rmsnorm_hT(a, Hx, T, gT, 1e-5, nl.bfloat16, name="b", ones=ones)
        store_hT(out[0], a)
        store_hT(out[1], b)
        return out

    x = torch.randn(3, 320).to(torch.bfloat16)  # 320 = 2.5 x 128: the partial-tile path too
    g = (1 + 0.1 * torch.randn(320)).to(torch.bfloat16)
    k = nki.jit(norms)
    for _ in range(2):  # checked run, then the plan
        own, shared = k(x, g, False), k(x, g, True)
        assert torch.equal(own.view(torch.int16), shared.view(torch.int16))
