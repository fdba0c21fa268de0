"""Output projection for token generation: out = attention @ W_o (+ bias), attention in the
library's decode layout [D, B, N, S] (head dim first)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.common_types import QuantizationType, WeightLayout
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
    row_chunks,
    weight_dims,
)


def load_attention_T(attention, D: int, B: int, N: int, S: int, cdt, rows):
    """attention [D, B, N, S] (HBM) -> [128, KC, B*S] with contraction row k = n * D + d."""
    t = nl.ndarray((P, len(rows), B * S), cdt, buffer=nl.sbuf, name="attnT")
    for j, (k0, ks) in enumerate(rows):
        for n in range(k0 // D, (k0 + ks) // D):
            r = n * D - k0
            nisa.dma_copy(dst=t[r : r + D, j, :], src=attention[:, :, n, :])
    return t


@nki.jit
def output_projection_tkg(
    attention,
    weight,
    bias=None,
    quantization_type: QuantizationType = QuantizationType.NONE,
    weight_scale=None,
    input_scale=None,
    TRANSPOSE_OUT: bool = False,
    OUT_IN_SB: bool = False,
    sbm=None,
):
    """out = attention @ weight (+ bias) for decode-size token counts.

    Args:
        attention: [D, B, N, S] (indexing [d, b, n, s]), D <= 128, B * S <= 128.
        weight: [N * D, H] (row n * D + d).
        bias: [1, H].
        TRANSPOSE_OUT: output [128, LNC, H // (128 * LNC), B * S] with
            h = h0 * 128 * H2 + h1 * H2 + h2 (indexing [h1, h0, h2, b * S + s]) instead of
            [B * S, H].
        quantization_type: NONE only; OUT_IN_SB: False only (kernel outputs are HBM tensors).
        sbm: the library's SBUF manager (accepted; neuron-emu's allocator places the tiles).

    A launch grid splits H between the programs.
    Returns: the output in HBM.
    """
    weight_layout = WeightLayout.IN_OUT
    kernel_assert(
        quantization_type == QuantizationType.NONE and weight_scale is None and input_scale is None,
        "output_projection_tkg: quantization is not supported on neuron-emu",
    )
    kernel_assert(not OUT_IN_SB, "output_projection_tkg: OUT_IN_SB is for subkernel use")
    D, B, N, S = attention.shape
    K, H = weight_dims(weight, weight_layout)
    kernel_assert(
        K == N * D,
        f"output_projection_tkg: weight {weight.shape} must have N*D={N * D} inputs ({weight_layout})",
    )
    kernel_assert(D <= P and B * S <= P, f"output_projection_tkg: D={D} and B*S={B * S} must be <= 128")
    _, n_prgs, prg_id = get_verified_program_sharding_info("output_projection_tkg", (0, 1), 2)
    if TRANSPOSE_OUT:
        kernel_assert(
            H % (P * n_prgs) == 0, f"output_projection_tkg: TRANSPOSE_OUT needs H={H} divisible by 128 * LNC"
        )
        out = nl.ndarray(
            (P, n_prgs, H // (P * n_prgs), B * S), dtype=attention.dtype, buffer=nl.shared_hbm, name="out"
        )
    else:
        out = nl.ndarray((B * S, H), dtype=attention.dtype, buffer=nl.shared_hbm, name="out")
    T = B * S
    cdt = compute_dtype(attention.dtype)
    rows = row_chunks(K, D)
    aT = load_attention_T(attention, D, B, N, S, cdt, rows)
    h0, h1 = shard_range(H, n_prgs, prg_id, P)
    bias_b = load_row_broadcast(bias, H, T, nl.float32, name="bias") if bias is not None else None
    o_all = nl.ndarray((T, max(1, h1 - h0)), attention.dtype, buffer=nl.sbuf, name="o")
    for ct in chunks(h1 - h0, FMAX):
        c0 = h0 + ct.start
        wt = load_wT(weight, weight_layout, K, c0, ct.size, cdt, name="w_o", rows=rows)
        ps = nl.ndarray((T, FMAX), nl.float32, buffer=nl.psum, name="o_ps")
        proj_tok(ps[:, 0 : ct.size], aT, wt, K, rows=rows)
        o = o_all[:, ct.start : ct.stop]
        if bias_b is not None:
            nisa.tensor_tensor(dst=o, data1=ps[:, 0 : ct.size], data2=bias_b[:, c0 : c0 + ct.size], op=nl.add)
        else:
            nisa.tensor_copy(dst=o, src=ps[:, 0 : ct.size])
    if h1 > h0:
        if TRANSPOSE_OUT:  # this program's columns are exactly h0 = prg_id: out[:, prg_id] as [T, h1, h2]
            nisa.dma_copy(dst=out[:, prg_id, :, :].permute(2, 0, 1), src=o_all)
        else:
            nisa.dma_copy(dst=out[:, h0:h1], src=o_all)
    return out
