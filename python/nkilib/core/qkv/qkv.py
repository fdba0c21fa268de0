"""Fused QKV projection: [residual add] -> [RMSNorm] -> x @ W_qkv (+ bias) -> [RoPE on the Q
and K heads], token-major tiles of up to 128 tokens."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.common_types import NormType, QKVOutputLayout, QKVWeightLayout, QuantizationType, WeightLayout
from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import get_verified_program_sharding_info, shard_range
from ..utils.tile_ops import (
    FMAX,
    P,
    chunks,
    compute_dtype,
    load_row_broadcast,
    load_wT,
    proj_tok,
    rmsnorm_tok,
    rope_tok,
    tok_to_hT,
    weight_dims,
)


def _weight_parts(fused_qkv_weights, layout):
    parts = list(fused_qkv_weights) if isinstance(fused_qkv_weights, (tuple, list)) else [fused_qkv_weights]
    dims = [weight_dims(w, layout) for w in parts]
    return parts, dims


@nki.jit
def qkv(
    input,
    fused_qkv_weights,
    output_layout: QKVOutputLayout = QKVOutputLayout.BSD,
    bias=None,
    quantization_type: QuantizationType = QuantizationType.NONE,
    qkv_w_scale=None,
    qkv_in_scale=None,
    fused_residual_add: bool = False,
    mlp_prev=None,
    attention_prev=None,
    fused_norm_type: NormType = NormType.NO_NORM,
    gamma_norm_weights=None,
    layer_norm_bias=None,
    norm_eps: float = 1e-6,
    hidden_actual=None,
    fused_rope: bool = False,
    cos_cache=None,
    sin_cache=None,
    d_head=None,
    num_q_heads=None,
    num_kv_heads=None,
    k_cache=None,
    v_cache=None,
    k_scale=None,
    v_scale=None,
    fp8_max=None,
    fp8_min=None,
    kv_dtype=None,
    use_block_kv: bool = False,
    block_size=None,
    slot_mapping=None,
    store_output_in_sbuf: bool = False,
    sbm=None,
    use_auto_allocation: bool = False,
    load_input_with_DMA_transpose: bool = True,
    is_h_dim_4h_transposed: bool = False,
    weight_layout=QKVWeightLayout.CONTIGUOUS,
):
    """QKV projection with optional fused residual add, RMSNorm, bias and RoPE.

    Args (as in nkilib.core.qkv.qkv; pass them by keyword):
        input: [B, S, H] in HBM.
        fused_qkv_weights: [H, I], I = (num_q_heads + 2 * num_kv_heads) * d_head. neuron-emu
            also accepts a tuple (W_q, W_k, W_v), treated as their concatenation along the
            output dimension, and weight_layout=WeightLayout.OUT_IN for nn.Linear weights
            ([I_part, H] each, DMA-transposed on load).
        output_layout: BSD -> [B, S, I]; NBSd -> [num_heads, B, S, d_head]; NBdS ->
            [num_heads, B, d_head, S] (the NB* layouts need d_head).
        bias: [1, I].
        fused_residual_add: input + mlp_prev + attention_prev first.
        fused_norm_type: NO_NORM, RMS_NORM (gamma_norm_weights [1, H]) or RMS_NORM_SKIP_GAMMA.
        norm_eps, hidden_actual: normalization epsilon and the hidden size for the mean.
        fused_rope: rotate-half RoPE on the Q and K heads with cos_cache/sin_cache
            [B, S, d_head] ([S, d_head] or half-width tables also accepted); needs d_head,
            num_q_heads, num_kv_heads.
        quantization_type, k_cache/v_cache (FP8 KV quantization), block KV, store_output_in_sbuf,
        is_h_dim_4h_transposed (the MX-quantized 4-way H layout): not supported. sbm,
        use_auto_allocation, load_input_with_DMA_transpose: accepted (allocation is automatic).

    Returns: the projection in output_layout (dtype of input).
    """
    kernel_assert(
        quantization_type == QuantizationType.NONE, "qkv: quantization is not supported on neuron-emu"
    )
    for name, v in (
        ("qkv_w_scale", qkv_w_scale),
        ("qkv_in_scale", qkv_in_scale),
        ("k_cache", k_cache),
        ("v_cache", v_cache),
        ("k_scale", k_scale),
        ("v_scale", v_scale),
        ("slot_mapping", slot_mapping),
        ("layer_norm_bias", layer_norm_bias),
    ):
        kernel_assert(v is None, f"qkv: {name} is not supported on neuron-emu")
    kernel_assert(
        not use_block_kv and not store_output_in_sbuf and not is_h_dim_4h_transposed,
        "qkv: block KV, SBUF output and swizzled input are not supported on neuron-emu",
    )
    kernel_assert(
        fused_norm_type in (NormType.NO_NORM, NormType.RMS_NORM, NormType.RMS_NORM_SKIP_GAMMA),
        f"qkv: normalization {fused_norm_type} is not supported",
    )
    if weight_layout == QKVWeightLayout.CONTIGUOUS:
        weight_layout = WeightLayout.IN_OUT
    kernel_assert(
        isinstance(weight_layout, WeightLayout), f"qkv: weight_layout {weight_layout} is not supported"
    )
    B, S, H = input.shape
    parts, dims = _weight_parts(fused_qkv_weights, weight_layout)
    for i, (k_in, _) in enumerate(dims):
        kernel_assert(
            k_in == H, f"qkv: weight {i} {parts[i].shape} does not take H={H} inputs ({weight_layout})"
        )
    I = sum(n for _, n in dims)
    if bias is not None:
        kernel_assert(bias.shape[-1] == I, f"qkv: bias {bias.shape} must have I={I} elements")
    if fused_residual_add:
        kernel_assert(
            mlp_prev is not None and attention_prev is not None,
            "qkv: fused_residual_add needs mlp_prev and attention_prev",
        )
    if fused_norm_type == NormType.RMS_NORM:
        kernel_assert(gamma_norm_weights is not None, "qkv: RMS_NORM needs gamma_norm_weights")
    if fused_rope or output_layout != QKVOutputLayout.BSD:
        kernel_assert(d_head is not None and I % d_head == 0, f"qkv: d_head={d_head} must divide I={I}")
    nq = nkv = 0
    if fused_rope:
        kernel_assert(
            num_q_heads is not None
            and num_kv_heads is not None
            and cos_cache is not None
            and sin_cache is not None,
            "qkv: fused_rope needs cos_cache, sin_cache, num_q_heads and num_kv_heads",
        )
        nq, nkv = num_q_heads, num_kv_heads
        kernel_assert((nq + 2 * nkv) * d_head == I, f"qkv: ({nq} + 2 * {nkv}) * {d_head} != I={I}")
        kernel_assert(
            cos_cache.shape[-1] in (d_head, d_head // 2),
            f"qkv: cos_cache {cos_cache.shape} width must be d_head",
        )
    T = B * S
    cdt = compute_dtype(input.dtype)
    odt = input.dtype
    if output_layout == QKVOutputLayout.BSD:
        out = nl.ndarray((B, S, I), dtype=odt, buffer=nl.shared_hbm, name="qkv_out")
    elif output_layout == QKVOutputLayout.NBSd:
        out = nl.ndarray((I // d_head, B, S, d_head), dtype=odt, buffer=nl.shared_hbm, name="qkv_out")
    else:
        out = nl.ndarray((I // d_head, B, d_head, S), dtype=odt, buffer=nl.shared_hbm, name="qkv_out")
    _, n_prgs, prg_id = get_verified_program_sharding_info("qkv", (0, 1), 8)
    x2 = input.reshape((T, H))
    gamma_b = None
    if fused_norm_type == NormType.RMS_NORM:
        gamma_b = load_row_broadcast(gamma_norm_weights, H, min(P, T), nl.float32, name="gamma")
    bias_b = load_row_broadcast(bias, I, min(P, T), nl.float32, name="bias") if bias is not None else None
    # Columns of the fused output this program computes: all of them, each program taking its
    # own 128-token tiles; at LNC=2 with a single tile (decode) the two cores split the heads
    # instead, so that each reads half of the weights.
    c_lo, c_hi = 0, I
    split_heads = n_prgs > 1 and T <= P
    if split_heads:
        c_lo, c_hi = shard_range(I, n_prgs, prg_id, d_head or 1)
        if c_hi <= c_lo:
            return out
    C = c_hi - c_lo
    for tt in chunks(T):
        if not split_heads and tt.index % n_prgs != prg_id:
            continue
        t0, ts = tt.start, tt.size
        xs = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="x")
        nisa.dma_copy(dst=xs, src=x2[t0 : t0 + ts, :])
        if fused_residual_add:
            for prev in (mlp_prev, attention_prev):
                r = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="prev")
                nisa.dma_copy(dst=r, src=prev.reshape((T, H))[t0 : t0 + ts, :])
                nisa.tensor_tensor(dst=xs, data1=xs, data2=r, op=nl.add)
        if fused_norm_type != NormType.NO_NORM:
            xn = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="xn")
            rmsnorm_tok(
                xs, ts, H, gamma_b[0:ts] if gamma_b is not None else None, norm_eps, xn, hidden_actual
            )
            xs = xn
        xT = tok_to_hT(xs, ts, H)
        res = nl.ndarray((ts, C), nl.float32 if fused_rope else odt, buffer=nl.sbuf, name="qkv")
        col = 0  # first column of this weight in the fused output
        for w, (_, n) in zip(parts, dims):
            lo, hi = max(c_lo, col) - col, min(c_hi, col + n) - col  # its columns here
            for ct in chunks(max(0, hi - lo), FMAX):
                n0 = lo + ct.start
                wt = load_wT(w, weight_layout, H, n0, ct.size, cdt, name="w_qkv")
                ps = nl.ndarray((ts, FMAX), nl.float32, buffer=nl.psum, name="qkv_ps")
                proj_tok(ps[:, 0 : ct.size], xT, wt, H)
                c0 = col + n0 - c_lo  # in res
                if bias_b is not None:
                    nisa.tensor_tensor(
                        dst=res[:, c0 : c0 + ct.size],
                        data1=ps[:, 0 : ct.size],
                        data2=bias_b[0:ts, c_lo + c0 : c_lo + c0 + ct.size],
                        op=nl.add,
                    )
                else:
                    nisa.tensor_copy(dst=res[:, c0 : c0 + ct.size], src=ps[:, 0 : ct.size])
            col += n
        if fused_rope:
            cw = cos_cache.shape[-1]
            cs = nl.ndarray((ts, cw), nl.float32, buffer=nl.sbuf, name="cos")
            sn = nl.ndarray((ts, cw), nl.float32, buffer=nl.sbuf, name="sin")
            for tab, dst in ((cos_cache, cs), (sin_cache, sn)):
                if len(tab.shape) == 3:
                    nisa.dma_copy(dst=dst, src=tab.reshape((T, cw))[t0 : t0 + ts, :])
                else:  # [S, d]: the same positions for every sequence
                    for r0 in range(t0, t0 + ts):
                        nisa.dma_copy(dst=dst[r0 - t0 : r0 - t0 + 1, :], src=tab[r0 % S : r0 % S + 1, :])
            final = nl.ndarray((ts, C), odt, buffer=nl.sbuf, name="qkv_out_sb")
            r1 = max(0, min(c_hi, (nq + nkv) * d_head) - c_lo)  # the Q and K heads here
            if r1:
                rope_tok(final[:, 0:r1], res[:, 0:r1], cs, sn, ts, r1 // d_head, d_head)
            if r1 < C:
                nisa.tensor_copy(dst=final[:, r1:C], src=res[:, r1:C])
            res = final
        if output_layout == QKVOutputLayout.BSD:
            nisa.dma_copy(dst=out.reshape((T, I))[t0 : t0 + ts, c_lo:c_hi], src=res)
        else:
            nh = C // d_head
            h_lo, h_hi = c_lo // d_head, c_hi // d_head
            for b in range(t0 // S, (t0 + ts - 1) // S + 1):  # rows are (b, s), s fastest
                r0, r1 = max(t0, b * S), min(t0 + ts, (b + 1) * S)
                s0, s1 = r0 - b * S, r1 - b * S
                if output_layout == QKVOutputLayout.NBSd:
                    view = out[h_lo:h_hi, b, s0:s1, :].permute(1, 0, 2)
                else:
                    view = out[h_lo:h_hi, b, :, s0:s1].permute(2, 0, 1)
                nisa.dma_copy(dst=view, src=res[r0 - t0 : r1 - t0, :].reshape((r1 - r0, nh, d_head)))
    return out
