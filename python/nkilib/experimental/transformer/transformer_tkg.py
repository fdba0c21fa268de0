"""A multi-layer decode "megakernel": every transformer layer of a token-generation step in
one kernel, the residual stream kept in SBUF from the first layer to the last."""

from __future__ import annotations

import nki.language as nl

from ...core.mlp.mlp_tkg.mlp_tkg import MlpWeights, down_T, gate_up_act
from ...core.utils.common_types import ActFnType, QKVWeightLayout, WeightLayout
from ...core.utils.kernel_assert import kernel_assert
from ...core.utils.tile_ops import (
    compute_dtype,
    load_hT,
    load_positions,
    load_vec_T,
    ones_matrix,
    rmsnorm_hT,
    store_hT,
    weight_dims,
)
from .attention_block_tkg import AttnBlockSpec, add_residual, attention_block_hT, load_rope_tables


# Not decorated, as in the library: apply nki.jit at the call site,
#     out = nki.jit(transformer_tkg)(X=..., W_qkvs=[...], ..., num_layers=L)
def transformer_tkg(
    X,
    W_qkvs,
    W_outs,
    W_gates,
    W_ups,
    W_downs,
    W_gamma_qkvs,
    W_gamma_mlps,
    K_caches,
    V_caches,
    RoPE_cos,
    RoPE_sin,
    mask_cache,
    mask_active,
    position_ids,
    num_layers: int,
    eps: float = 1e-6,
    replica_groups=None,
    sbuf_residual_and_cc: bool = False,
    clamp_bound: float = 0.0,
    W_gate_scales=None,
    W_up_scales=None,
    W_down_scales=None,
    *,
    weight_layout: WeightLayout = WeightLayout.IN_OUT,
    activation_fn: ActFnType = ActFnType.SiLU,
):
    """`num_layers` decoder layers of a token-generation step:

        for each layer l:
            h = h + W_out(attention(RoPE(QKV(RMSNorm(h, gamma_qkv[l]))), cache[l]))   (cache updated)
            h = h + W_down(act(W_gate(x)) * W_up(x)),  x = RMSNorm(h, gamma_mlp[l])

    Args:
        X: [B, S_tkg, H] input hidden states (HBM), B * S_tkg <= 128.
        W_qkvs: per layer, the fused QKV weight [H, (Hq + 2 Hkv) d] or a tuple (W_q, W_k, W_v).
        W_outs: per layer [Hq d, H]. W_gates, W_ups: [H, I]; W_downs: [I, H]. With
            weight_layout=WeightLayout.OUT_IN every weight is an nn.Linear weight ([out, in])
            and is DMA-transposed while loading (neuron-emu extension).
        W_gamma_qkvs, W_gamma_mlps: per layer RMSNorm gammas [1, H] (or [H]).
        K_caches, V_caches: per layer [B+, Hkv, S_max, d] static caches (Hugging Face layout),
            updated in place at position_ids.
        RoPE_cos, RoPE_sin: [d/2, B, S_tkg] values of the active tokens, or [max_pos, d/2]
            tables gathered in-kernel at position_ids[b] + s (neuron-emu extension).
        position_ids: [B, 1] int32: each sequence's first active position = the number of valid
            cache entries and the cache write position.
        mask_cache: None (masks generated from position_ids) or the library's attention mask
            [S_ctx, B, Hq, S_tkg] of every layer (nonzero = attend; the first S_ctx - S_tkg cache
            positions are the prior keys, its last S_tkg rows the active tokens).
        mask_active: accepted and not read, as by the library's kernel (mask_cache holds the
            active tokens' mask).
        num_layers: layers to run (the lists may be longer).
        eps: RMSNorm epsilon.
        replica_groups: None only (no collectives on neuron-emu); W_*_scales: None only.
        sbuf_residual_and_cc: accepted; the residual always stays in SBUF here.

    Returns: [B, S_tkg, H] hidden states after the last layer.
    """
    kernel_assert(
        replica_groups is None,
        "transformer_tkg: collectives (replica_groups) are not supported on neuron-emu",
    )
    kernel_assert(position_ids is not None, "transformer_tkg: position_ids is required")
    kernel_assert(
        not W_gate_scales and not W_up_scales and not W_down_scales,
        "transformer_tkg: FP8 scales are not supported",
    )
    kernel_assert(
        clamp_bound == 0.0, "transformer_tkg: clamp_bound is for FP8 quantization, which is not supported"
    )
    if weight_layout == QKVWeightLayout.CONTIGUOUS:
        weight_layout = WeightLayout.IN_OUT
    lists = (W_qkvs, W_outs, W_gates, W_ups, W_downs, W_gamma_qkvs, W_gamma_mlps, K_caches, V_caches)
    for lst in lists:
        kernel_assert(
            len(lst) >= num_layers, f"transformer_tkg: {num_layers} layers but a weight list has {len(lst)}"
        )
    B, S, H = X.shape
    T = B * S
    kernel_assert(T <= 128, f"transformer_tkg: B*S_tkg={T} exceeds 128 (use the CTE kernels for prefill)")
    cdt = compute_dtype(X.dtype)
    Hkv, d = K_caches[0].shape[1], K_caches[0].shape[3]
    out = nl.ndarray((B, S, H), dtype=X.dtype, buffer=nl.shared_hbm, name="transformer_out")
    pos_sb = load_positions(position_ids, B)
    rope = load_rope_tables(RoPE_cos, RoPE_sin, B, S, pos_sb, d)
    resT = load_hT(X.reshape((T, H)), cdt, name="residual")
    ones = ones_matrix("norm_ones")  # every layer's two RMSNorms share one ones matrix
    for layer in range(num_layers):
        spec = AttnBlockSpec(W_qkvs[layer], W_outs[layer], H, Hkv, d, weight_layout)
        g_attn = load_vec_T(W_gamma_qkvs[layer], H, nl.float32, name="gamma_attn")
        attn = attention_block_hT(
            resT, spec, B, S, g_attn, eps, rope, K_caches[layer], V_caches[layer], pos_sb, True, cdt, ones,
            mask=mask_cache,
        )
        add_residual(resT, attn, H)
        _, I = weight_dims(W_ups[layer], weight_layout)
        w = MlpWeights(W_gates[layer], W_ups[layer], W_downs[layer], weight_layout, H, I, cdt)
        g_mlp = load_vec_T(W_gamma_mlps[layer], H, nl.float32, name="gamma_mlp")
        xn = rmsnorm_hT(resT, H, T, g_mlp, eps, cdt, name="mlp_norm", ones=ones)
        actT = gate_up_act(xn, T, w, activation_fn=activation_fn)
        mlp_out = down_T(actT, T, w, cdt)
        add_residual(resT, mlp_out, H)
    store_hT(out.reshape((T, H)), resT)
    return out
