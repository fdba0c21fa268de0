"""Output projection for context encoding: out = attention @ W_o (+ bias), attention in the
library's prefill layout [B, N, D, S] (sequence last)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ...utils.common_types import QuantizationType, WeightLayout
from ...utils.kernel_assert import kernel_assert
from ...utils.kernel_helpers import get_verified_program_sharding_info
from ...utils.tile_ops import (
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


@nki.jit
def output_projection_cte(
    attention,
    weight,
    bias=None,
    quantization_type: QuantizationType = QuantizationType.NONE,
    input_scales=None,
    weight_scales=None,
    output_dtype=None,
):
    """out [B, S, H] = attention @ weight (+ bias).

    Args:
        attention: [B, N, D, S] in HBM (row (n, d) of each sequence is contiguous in S).
        weight: [N * D, H].
        bias: [1, H].
        output_dtype: defaults to attention.dtype.
        quantization_type: NONE only.

    Token tiles of 128; a launch grid splits (sequence, token tile) work items.
    """
    weight_layout = WeightLayout.IN_OUT
    kernel_assert(
        quantization_type == QuantizationType.NONE and input_scales is None and weight_scales is None,
        "output_projection_cte: quantization is not supported on neuron-emu",
    )
    B, N, D, S = attention.shape
    K, H = weight_dims(weight, weight_layout)
    kernel_assert(
        K == N * D,
        f"output_projection_cte: weight {weight.shape} must have N*D={N * D} inputs ({weight_layout})",
    )
    odt = output_dtype or attention.dtype
    out = nl.ndarray((B, S, H), dtype=odt, buffer=nl.shared_hbm, name="out")
    cdt = compute_dtype(attention.dtype)
    _, n_prgs, prg_id = get_verified_program_sharding_info("output_projection_cte", (0, 1), 8)
    rows = row_chunks(K)
    bias_b = load_row_broadcast(bias, H, min(P, S), nl.float32, name="bias") if bias is not None else None
    work = [(b, t) for b in range(B) for t in chunks(S)]
    weights = {}
    keep = len(rows) * H * cdt.itemsize <= 96 * 1024  # all of W_o fits: load it once
    for idx, (b, tt) in enumerate(work):
        if idx % n_prgs != prg_id:
            continue
        a2 = attention[b].reshape((K, S))
        aT = nl.ndarray((P, len(rows), tt.size), cdt, buffer=nl.sbuf, name="attnT")
        for j, (k0, ks) in enumerate(rows):
            nisa.dma_copy(dst=aT[0:ks, j, :], src=a2[k0 : k0 + ks, tt.start : tt.stop])
        for ct in chunks(H, FMAX):
            if not keep or ct.index not in weights:
                weights[ct.index] = load_wT(weight, weight_layout, K, ct.start, ct.size, cdt, name="w_o")
            ps = nl.ndarray((tt.size, FMAX), nl.float32, buffer=nl.psum, name="o_ps")
            proj_tok(ps[:, 0 : ct.size], aT, weights[ct.index], K)
            o = nl.ndarray((tt.size, FMAX), odt, buffer=nl.sbuf, name="o")
            if bias_b is not None:
                nisa.tensor_tensor(
                    dst=o[:, 0 : ct.size],
                    data1=ps[:, 0 : ct.size],
                    data2=bias_b[0 : tt.size, ct.start : ct.stop],
                    op=nl.add,
                )
            else:
                nisa.tensor_copy(dst=o[:, 0 : ct.size], src=ps[:, 0 : ct.size])
            nisa.dma_copy(dst=out[b, tt.start : tt.stop, ct.start : ct.stop], src=o[:, 0 : ct.size])
    return out
