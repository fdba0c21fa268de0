"""The attention block of a decode step fused into one kernel, data kept in SBUF between
stages: RMSNorm -> QKV projection -> RoPE -> KV-cache update -> attention -> output projection.

Layouts: the residual stream is hidden-transposed (hT, [128, ceil(H/128), B*S]); Q/K/V come
out of the projection token-major ([B*S, heads * d], so RoPE is a free-dimension rotation and
the cache write is a contiguous row per head), Q and K are then transposed to the head-packed
layout the attention subkernel takes, and the attention output comes back with (head, d) on
partitions, which is the contraction layout of the output projection.
"""

from __future__ import annotations

import math

import nki
import nki.isa as nisa
import nki.language as nl

from ...core.attention.attention_decode_hf import attention_decode_sbuf, heads_to_T, write_kv_cache
from ...core.utils.common_types import QuantizationType, WeightLayout
from ...core.utils.kernel_assert import kernel_assert
from ...core.utils.tile_ops import (
    FMAX,
    P,
    chunks,
    compute_dtype,
    gather_rows,
    load_hT,
    load_positions,
    load_vec_T,
    load_wT,
    position_register,
    proj_T,
    proj_tok,
    rmsnorm_hT,
    rope_tok,
    row_chunks,
    store_hT,
    weight_dims,
)


class AttnBlockSpec:
    """Head geometry and weights of one attention block (trace-time helper)."""

    def __init__(self, W_qkv, W_out, H: int, n_kv_heads: int, d_head: int, layout: WeightLayout):
        parts = list(W_qkv) if isinstance(W_qkv, (tuple, list)) else [W_qkv]
        dims = [weight_dims(w, layout) for w in parts]
        for i, (k_in, _) in enumerate(dims):
            kernel_assert(
                k_in == H,
                f"attention block: QKV weight {i} {parts[i].shape} does not take H={H} inputs ({layout})",
            )
        I = sum(n for _, n in dims)
        kernel_assert(I % d_head == 0, f"attention block: QKV width {I} is not a multiple of d_head={d_head}")
        self.Hq = I // d_head - 2 * n_kv_heads
        kernel_assert(
            self.Hq > 0 and self.Hq % n_kv_heads == 0,
            f"attention block: QKV width {I} = (Hq + 2 * {n_kv_heads}) * {d_head} gives Hq={self.Hq}",
        )
        k_out, h_out = weight_dims(W_out, layout)
        kernel_assert(
            (k_out, h_out) == (self.Hq * d_head, H),
            f"attention block: W_out {W_out.shape} must map {self.Hq * d_head} -> {H} ({layout})",
        )
        self.parts, self.dims, self.I = parts, dims, I
        self.W_out, self.H, self.Hkv, self.d, self.layout = W_out, H, n_kv_heads, d_head, layout


def load_rope_tables(cos, sin, B: int, S: int, pos_sb, d: int):
    """cos/sin rows of the B*S active tokens as [B*S, d/2] fp32: from pre-gathered [d/2, B, S]
    tensors (the library's layout), or gathered in-kernel from [max_pos, d/2] tables at
    position_ids[b] + s (neuron-emu extension)."""
    T, h = B * S, d // 2
    out = []
    for tab, name in ((cos, "rope_cos"), (sin, "rope_sin")):
        t = nl.ndarray((T, h), nl.float32, buffer=nl.sbuf, name=name)
        if len(tab.shape) == 3:
            kernel_assert(tuple(tab.shape) == (h, B, S), f"RoPE table {tab.shape} must be [{h}, {B}, {S}]")
            nisa.dma_copy(dst=t, src=tab.permute(1, 2, 0))
        else:
            kernel_assert(
                len(tab.shape) == 2 and tab.shape[1] == h, f"RoPE table {tab.shape} must be [max_pos, {h}]"
            )
            kernel_assert(pos_sb is not None, "gathering RoPE tables needs position_ids")
            for b in range(B):
                gather_rows(t[b * S : (b + 1) * S, :], tab, position_register(pos_sb, b), S)
        out.append(t)
    return out


def attention_block_hT(
    resT,
    spec: AttnBlockSpec,
    B: int,
    S: int,
    gammaT,
    eps: float,
    rope,
    K_cache,
    V_cache,
    pos_sb,
    update_cache: bool,
    cdt,
    ones=None,
    scale=None,
    mask=None,
):
    """One attention block on the hT residual [128, KH, B*S]; returns the block output in hT
    layout (rounded to cdt, as a bf16 nn.Linear output would be). ones: the RMSNorm's ones
    matrix when the caller shares one (tile_ops.ones_matrix), else None. scale: the softmax
    scale (None: 1/sqrt(d)). mask: the library's attention mask [S_ctx, B, Hq, S] or None
    (generated from pos_sb)."""
    H, Hq, Hkv, d = spec.H, spec.Hq, spec.Hkv, spec.d
    T = B * S
    xn = rmsnorm_hT(resT, H, T, gammaT, eps, cdt, name="attn_norm", ones=ones) if gammaT is not None else resT
    # QKV, token-major [T, I] (rounded to cdt like a bf16 projection output)
    qkv = nl.ndarray((T, spec.I), cdt, buffer=nl.sbuf, name="qkv")
    col = 0
    for w, (_, n) in zip(spec.parts, spec.dims):
        for ct in chunks(n, FMAX):
            wt = load_wT(w, spec.layout, H, ct.start, ct.size, cdt, name="w_qkv")
            ps = nl.ndarray((T, FMAX), nl.float32, buffer=nl.psum, name="qkv_ps")
            proj_tok(ps[:, 0 : ct.size], xn, wt, H)
            nisa.tensor_copy(dst=qkv[:, col + ct.start : col + ct.stop], src=ps[:, 0 : ct.size])
        col += n
    nqk = (Hq + Hkv) * d
    qk = nl.ndarray((T, nqk), cdt, buffer=nl.sbuf, name="qk_rope")
    rope_tok(qk, qkv[:, 0:nqk], rope[0], rope[1], T, Hq + Hkv, d)
    k_tok, v_tok = qk[:, Hq * d : nqk], qkv[:, nqk : spec.I]
    qT = heads_to_T(qk[:, 0 : Hq * d], T, Hq, d, "qT")
    kT = heads_to_T(k_tok, T, Hkv, d, "kT")
    attnT = attention_decode_sbuf(
        qT, kT, v_tok, B, S, Hq, Hkv, d, 1.0 / math.sqrt(d) if scale is None else float(scale),
        K_cache, V_cache, pos_sb, mask=mask,
    )
    if update_cache:
        write_kv_cache(K_cache, k_tok, B, S, Hkv, d, pos_sb)
        write_kv_cache(V_cache, v_tok, B, S, Hkv, d, pos_sb)
    # output projection, transposed: outT[h, t] = sum over (head, d) rows
    K = Hq * d
    rows = row_chunks(K, d)
    outT = nl.ndarray((P, len(chunks(H)), T), cdt, buffer=nl.sbuf, name="attn_outT")
    for blk in chunks(H, FMAX):
        wo = load_wT(spec.W_out, spec.layout, K, blk.start, blk.size, cdt, name="w_out", rows=rows)
        for ht in chunks(blk.size):
            j = (blk.start + ht.start) // P
            ps = nl.ndarray((P, T), nl.float32, buffer=nl.psum, name="o_ps")
            proj_T(ps[0 : ht.size, :], wo, ht.start, ht.size, attnT, K, rows=rows)
            nisa.tensor_copy(dst=outT[0 : ht.size, j, :], src=ps[0 : ht.size, :])
    return outT


def add_residual(resT, xT, H: int) -> None:
    KF, rem = divmod(H, P)
    if KF:
        nisa.tensor_tensor(dst=resT[:, 0:KF, :], data1=resT[:, 0:KF, :], data2=xT[:, 0:KF, :], op=nl.add)
    if rem:
        nisa.tensor_tensor(
            dst=resT[0:rem, KF, :], data1=resT[0:rem, KF, :], data2=xT[0:rem, KF, :], op=nl.add
        )


def _norm_gamma(gamma, H: int):
    return load_vec_T(gamma, H, nl.float32, name="gammaT") if gamma is not None else None


@nki.jit
def attention_block_tkg(
    X,
    X_hidden_dim_actual,
    rmsnorm_X_enabled: bool,
    rmsnorm_X_eps,
    rmsnorm_X_gamma,
    W_qkv,
    bias_qkv,
    quantization_type_qkv: QuantizationType,
    weight_dequant_scale_qkv,
    input_dequant_scale_qkv,
    rmsnorm_QK_pre_rope_enabled: bool,
    rmsnorm_QK_pre_rope_eps: float,
    rmsnorm_QK_pre_rope_W_Q,
    rmsnorm_QK_pre_rope_W_K,
    cos,
    sin,
    rope_contiguous_layout: bool,
    rmsnorm_QK_post_rope_enabled: bool,
    rmsnorm_QK_post_rope_eps: float,
    rmsnorm_QK_post_rope_W_Q,
    rmsnorm_QK_post_rope_W_K,
    K_cache_transposed: bool,
    active_blocks_table,
    K_cache,
    V_cache,
    attention_mask,
    sink,
    update_cache: bool,
    kv_cache_update_idx,
    W_out,
    bias_out,
    quantization_type_out: QuantizationType,
    weight_dequant_scale_out,
    input_dequant_scale_out,
    transposed_out: bool,
    out_in_sb: bool,
    softmax_scale=None,
    enable_fa_s_prior_tiling: bool = True,
    k_scale=None,
    v_scale=None,
    sbm=None,
    skip_attention: bool = False,
    KVDP: int = 1,
    KVDP_replica_group=None,
):
    """out = W_out(attention(RoPE(QKV(RMSNorm(X))), cache)) for a decode step, in one kernel.

    The library's signature (every parameter up to out_in_sb is required; pass them by keyword).
    What neuron-emu computes:
        X: [B, S, H] hidden states (HBM). X_hidden_dim_actual: None or H.
        rmsnorm_X_enabled / rmsnorm_X_eps (None: 1e-6) / rmsnorm_X_gamma ([1, H] or None): the
            input RMSNorm.
        W_qkv: fused [H, (Hq + 2 Hkv) d], or a tuple (W_q, W_k, W_v) of [H, heads * d].
        cos, sin: [d/2, B, S] RoPE values of the active tokens (the library's layout), or
            [max_pos, d/2] tables gathered in-kernel at kv_cache_update_idx + s.
        K_cache, V_cache: [B+, S_max, d] (the library's single kv head) or [B+, Hkv, S_max, d]
            (Hugging Face layout); K_cache_transposed must be False.
        attention_mask: the library's mask [S_ctx, B, Hq, S] (key, batch, query head, query;
            nonzero = attend): the first S_ctx - S cache positions are the prior keys and its
            last S rows the active tokens. None: generated from kv_cache_update_idx (cache
            positions < kv_cache_update_idx[b] and the active tokens causally are visible).
        update_cache: must be True: the new keys/values are written into the caches at
            kv_cache_update_idx ([B, 1] int32, also the number of valid cache entries).
        W_out: [Hq d, H]. softmax_scale: None (1/sqrt(d)) or a float.
        enable_fa_s_prior_tiling, sbm: accepted (tiling and allocation are automatic).
        Not supported (must be None / False / NONE / 1): biases, quantization and its scales,
        the Q/K RMSNorms, rope_contiguous_layout=False, block KV (active_blocks_table), sink,
        transposed_out, out_in_sb, k_scale/v_scale, skip_attention, KVDP.

    Returns: (out [B*S, H], K_cache, V_cache), as the library with update_cache=True.
    """
    for name, v in (
        ("bias_qkv", bias_qkv),
        ("bias_out", bias_out),
        ("sink", sink),
        ("weight_dequant_scale_qkv", weight_dequant_scale_qkv),
        ("input_dequant_scale_qkv", input_dequant_scale_qkv),
        ("weight_dequant_scale_out", weight_dequant_scale_out),
        ("input_dequant_scale_out", input_dequant_scale_out),
        ("active_blocks_table", active_blocks_table),
        ("k_scale", k_scale),
        ("v_scale", v_scale),
        ("KVDP_replica_group", KVDP_replica_group),
    ):
        kernel_assert(v is None, f"attention_block_tkg: {name} is not supported on neuron-emu (pass None)")
    kernel_assert(
        quantization_type_qkv == QuantizationType.NONE and quantization_type_out == QuantizationType.NONE,
        "attention_block_tkg: quantization is not supported on neuron-emu",
    )
    kernel_assert(
        not rmsnorm_QK_pre_rope_enabled and not rmsnorm_QK_post_rope_enabled,
        "attention_block_tkg: the Q/K RMSNorms are not supported on neuron-emu",
    )
    kernel_assert(
        rope_contiguous_layout and not K_cache_transposed and not out_in_sb and not transposed_out,
        "attention_block_tkg: only rope_contiguous_layout=True, K_cache_transposed=False, HBM output",
    )
    kernel_assert(
        update_cache and not skip_attention and KVDP == 1,
        "attention_block_tkg: needs update_cache=True, skip_attention=False, KVDP=1 on neuron-emu",
    )
    kernel_assert(W_out is not None, "attention_block_tkg: W_out=None (no output projection) is not supported")
    kernel_assert(
        X_hidden_dim_actual is None or X_hidden_dim_actual == X.shape[-1],
        f"attention_block_tkg: X_hidden_dim_actual={X_hidden_dim_actual} (padded H) is not supported",
    )
    kernel_assert(cos is not None and sin is not None, "attention_block_tkg: cos and sin are required")
    K_in, V_in = K_cache, V_cache
    if len(K_cache.shape) == 3:  # the library's single kv head [B+, S_max, d]
        K_cache = K_cache.reshape((K_cache.shape[0], 1, K_cache.shape[1], K_cache.shape[2]))
        V_cache = V_cache.reshape((V_cache.shape[0], 1, V_cache.shape[1], V_cache.shape[2]))
    if rmsnorm_X_eps is None:
        rmsnorm_X_eps = 1e-6
    B, S, H = X.shape
    Hkv, d = K_cache.shape[1], K_cache.shape[3]
    spec = AttnBlockSpec(W_qkv, W_out, H, Hkv, d, WeightLayout.IN_OUT)
    cdt = compute_dtype(X.dtype)
    out = nl.ndarray((B * S, H), dtype=X.dtype, buffer=nl.shared_hbm, name="attn_block_out")
    pos_sb = load_positions(kv_cache_update_idx, B)
    rope = load_rope_tables(cos, sin, B, S, pos_sb, d)
    resT = load_hT(X.reshape((B * S, H)), cdt, name="x")
    gT = _norm_gamma(rmsnorm_X_gamma, H) if rmsnorm_X_enabled else None
    if rmsnorm_X_enabled and gT is None:  # RMSNorm without a scale
        resT = rmsnorm_hT(resT, H, B * S, None, rmsnorm_X_eps, cdt, name="attn_norm")
    outT = attention_block_hT(
        resT, spec, B, S, gT, rmsnorm_X_eps, rope, K_cache, V_cache, pos_sb, update_cache, cdt,
        scale=softmax_scale, mask=attention_mask,
    )
    store_hT(out, outT)
    return out, K_in, V_in
