"""The fused MLP kernel: [residual add] -> [RMSNorm] -> gate/up projection -> act(gate) * up ->
down projection, with a token-generation (TKG) and a context-encoding (CTE) path."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.common_types import ActFnType, NormType, QuantizationType, WeightLayout
from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import div_ceil, get_verified_program_sharding_info, shard_range
from ..utils.tile_ops import (
    P,
    chunks,
    compute_dtype,
    load_hT,
    load_row_broadcast,
    load_vec_T,
    rmsnorm_hT,
    rmsnorm_tok,
    store_hT,
    tok_to_hT,
    weight_dims,
)
from .mlp_tkg import MlpWeights, down_tok, down_tok_lnc2, gate_up_act

TKG_BS_SEQLEN_THRESHOLD = 96  # B*S at or below this runs the TKG path
CTE_TOKEN_BLOCK = 512  # tokens per gate/up pass in CTE (the matmul moving free size)


def is_mlp_tkg(bxs: int, force_cte_mode: bool) -> bool:
    return bxs <= TKG_BS_SEQLEN_THRESHOLD and not force_cte_mode


@nki.jit
def mlp(
    hidden_tensor,
    gate_proj_weights_tensor,
    up_proj_weights_tensor,
    down_proj_weights_tensor,
    normalization_weights_tensor=None,
    gate_proj_bias_tensor=None,
    up_proj_bias_tensor=None,
    down_proj_bias_tensor=None,
    normalization_bias_tensor=None,
    fused_add_tensor=None,
    store_fused_add_result: bool = False,
    activation_fn: ActFnType = ActFnType.SiLU,
    normalization_type: NormType = NormType.NO_NORM,
    quantization_type: QuantizationType = QuantizationType.NONE,
    gate_w_scale=None,
    up_w_scale=None,
    down_w_scale=None,
    gate_up_in_scale=None,
    down_in_scale=None,
    quant_clipping_bound: float = 0.0,
    output_dtype=None,
    store_output_in_sbuf: bool = False,
    eps: float = 1e-6,
    skip_gate_proj: bool = False,
    use_tkg_gate_up_proj_column_tiling: bool = True,
    use_tkg_down_proj_column_tiling: bool = True,
    use_tkg_down_proj_optimized_layout: bool = False,
    gate_clamp_upper_limit=None,
    gate_clamp_lower_limit=None,
    up_clamp_upper_limit=None,
    up_clamp_lower_limit=None,
    force_cte_mode: bool = False,
    weight_layout: WeightLayout = WeightLayout.IN_OUT,
) -> list:
    """MLP: out = down(act(gate(x')) * up(x')) with x' = norm(x [+ fused_add]).

    Args (as in nkilib.core.mlp.mlp.mlp; pass them by keyword):
        hidden_tensor: [B, S, H] in HBM (bf16, fp16 or fp32).
        gate_proj_weights_tensor, up_proj_weights_tensor: [H, I]; down_proj_weights_tensor:
            [I, H]. With weight_layout=WeightLayout.OUT_IN (neuron-emu extension) they are the
            nn.Linear weights instead ([I, H], [I, H], [H, I]) and are DMA-transposed on load.
        normalization_weights_tensor: RMSNorm gamma [1, H] (normalization_type=RMS_NORM).
        gate/up/down_proj_bias_tensor: [1, I], [1, I], [1, H].
        fused_add_tensor: [B, S, H] added to the input first (residual); with
            store_fused_add_result the sum is returned as a second output.
        activation_fn: SiLU, GELU or GELU_Tanh_Approx.
        normalization_type: NO_NORM, RMS_NORM or RMS_NORM_SKIP_GAMMA.
        eps: normalization epsilon.
        skip_gate_proj: out = down(act(up(x'))).
        gate/up_clamp_upper/lower_limit: clamp the projections before the activation.
        output_dtype: defaults to the input dtype.
        force_cte_mode: use the CTE path even for B*S <= 96.
        quantization_type: only QuantizationType.NONE on neuron-emu.
        store_output_in_sbuf: only False for a kernel launch (the SBUF form is the subkernel
            nkilib.core.mlp.mlp_tkg).
        use_tkg_*: tiling hints, accepted for compatibility.

    Paths: TKG (B*S <= 96) keeps the whole token batch in one tile; CTE processes blocks of
    512 tokens. With a launch grid (``mlp[2](...)``, LNC=2) the TKG path splits the
    intermediate dimension between the two cores (gate/up on their half of the columns, the
    down projection on its half of the rows, partial sums exchanged with nisa.sendrecv: each
    core reads half of every weight) and the CTE path the token blocks.

    Returns: [out] or [out, fused_add_out], HBM tensors [B, S, H].
    """
    kernel_assert(
        quantization_type == QuantizationType.NONE,
        f"mlp: quantization {quantization_type} is not supported on neuron-emu",
    )
    for name, v in (
        ("gate_w_scale", gate_w_scale),
        ("up_w_scale", up_w_scale),
        ("down_w_scale", down_w_scale),
        ("gate_up_in_scale", gate_up_in_scale),
        ("down_in_scale", down_in_scale),
    ):
        kernel_assert(v is None, f"mlp: {name} is only used with quantization, which is not supported")
    kernel_assert(
        not store_output_in_sbuf,
        "mlp: store_output_in_sbuf=True is for subkernel use (nkilib.core.mlp.mlp_tkg)",
    )
    kernel_assert(
        not use_tkg_down_proj_optimized_layout, "mlp: use_tkg_down_proj_optimized_layout is not supported"
    )
    kernel_assert(
        normalization_type in (NormType.NO_NORM, NormType.RMS_NORM, NormType.RMS_NORM_SKIP_GAMMA),
        f"mlp: normalization {normalization_type} is not supported (NO_NORM, RMS_NORM, RMS_NORM_SKIP_GAMMA)",
    )
    kernel_assert(
        normalization_bias_tensor is None,
        "mlp: normalization_bias_tensor is for LAYER_NORM, which is not supported",
    )
    kernel_assert(
        len(hidden_tensor.shape) == 3, f"mlp: hidden_tensor must be [B, S, H], got {hidden_tensor.shape}"
    )
    B, S, H = hidden_tensor.shape
    Hg, I = weight_dims(up_proj_weights_tensor, weight_layout)
    kernel_assert(
        Hg == H,
        f"mlp: up_proj_weights_tensor {up_proj_weights_tensor.shape} does not match H={H} ({weight_layout})",
    )
    if not skip_gate_proj:
        kernel_assert(
            weight_dims(gate_proj_weights_tensor, weight_layout) == (H, I),
            f"mlp: gate_proj_weights_tensor {gate_proj_weights_tensor.shape} does not match [H={H}, I={I}] ({weight_layout})",
        )
    kernel_assert(
        weight_dims(down_proj_weights_tensor, weight_layout) == (I, H),
        f"mlp: down_proj_weights_tensor {down_proj_weights_tensor.shape} does not match [I={I}, H={H}] ({weight_layout})",
    )
    if normalization_type == NormType.RMS_NORM:
        kernel_assert(
            normalization_weights_tensor is not None, "mlp: RMS_NORM needs normalization_weights_tensor"
        )
    if fused_add_tensor is not None:
        kernel_assert(
            tuple(fused_add_tensor.shape) == (B, S, H),
            f"mlp: fused_add_tensor shape {fused_add_tensor.shape} != {(B, S, H)}",
        )
    kernel_assert(
        not store_fused_add_result or fused_add_tensor is not None,
        "mlp: store_fused_add_result needs fused_add_tensor",
    )

    _, n_prgs, prg_id = get_verified_program_sharding_info("mlp", (0, 1), 2)
    T = B * S
    cdt = compute_dtype(hidden_tensor.dtype)
    odt = output_dtype or hidden_tensor.dtype
    out = nl.ndarray((B, S, H), dtype=odt, buffer=nl.shared_hbm, name="output_tensor_hbm")
    outputs = [out]
    add_out = None
    if store_fused_add_result:
        add_out = nl.ndarray(
            (B, S, H), dtype=hidden_tensor.dtype, buffer=nl.shared_hbm, name="output_stored_add_tensor_hbm"
        )
        outputs.append(add_out)
    w = MlpWeights(
        gate_proj_weights_tensor,
        up_proj_weights_tensor,
        down_proj_weights_tensor,
        weight_layout,
        H,
        I,
        cdt,
        skip_gate=skip_gate_proj,
    )
    gamma = normalization_weights_tensor if normalization_type == NormType.RMS_NORM else None
    act_kwargs = {
        "activation_fn": activation_fn,
        "gate_bias": gate_proj_bias_tensor,
        "up_bias": up_proj_bias_tensor,
        "gate_clamp": (gate_clamp_lower_limit, gate_clamp_upper_limit),
        "up_clamp": (up_clamp_lower_limit, up_clamp_upper_limit),
    }
    x2 = hidden_tensor.reshape((T, H))
    o2 = out.reshape((T, H))
    a2 = fused_add_tensor.reshape((T, H)) if fused_add_tensor is not None else None
    s2 = add_out.reshape((T, H)) if add_out is not None else None
    norm = normalization_type != NormType.NO_NORM

    if is_mlp_tkg(T, force_cte_mode):
        xT = load_hT(x2, cdt, name="xT")
        if a2 is not None:
            aT = load_hT(a2, cdt, name="addT")
            nisa.tensor_tensor(dst=xT, data1=xT, data2=aT, op=nl.add)
            if s2 is not None and prg_id == 0:
                store_hT(s2, xT)
        if norm:
            gT = load_vec_T(gamma, H, nl.float32, name="gammaT") if gamma is not None else None
            xT = rmsnorm_hT(xT, H, T, gT, eps, cdt)
        if n_prgs == 1:
            actT = gate_up_act(xT, T, w, **act_kwargs)
            down_tok(actT, T, w, o2, 0, H, down_proj_bias_tensor, odt)
            return outputs
        # LNC=2: each core computes gate/up for its half of the intermediate columns and the
        # down projection's partial sums over that half (reading half of every weight); the
        # partial sums are combined across the cores.
        i0, i1 = shard_range(I, n_prgs, prg_id, P)
        actT = gate_up_act(xT, T, w, i0=i0, i1=i1, **act_kwargs)
        down_tok_lnc2(actT, T, w, o2, i0, i1, prg_id, down_proj_bias_tensor, odt)
        return outputs

    # CTE: blocks of up to 512 tokens for gate/up (the moving free size), 128-token tiles for
    # loads, normalization and the down projection.
    t_lo, t_hi = shard_range(T, n_prgs, prg_id, P)
    g_b = (
        load_row_broadcast(gamma, H, min(P, max(1, t_hi - t_lo)), nl.float32, name="gamma")
        if gamma is not None
        else None
    )
    for blk in chunks(t_hi - t_lo, CTE_TOKEN_BLOCK):
        b0 = t_lo + blk.start
        xT = nl.ndarray((P, div_ceil(H, P), blk.size), cdt, buffer=nl.sbuf, name="xT")
        for sub in chunks(blk.size):
            r0, ts = b0 + sub.start, sub.size
            xs = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="x")
            nisa.dma_copy(dst=xs, src=x2[r0 : r0 + ts, :])
            if a2 is not None:
                xa = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="x_add")
                nisa.dma_copy(dst=xa, src=a2[r0 : r0 + ts, :])
                nisa.tensor_tensor(dst=xs, data1=xs, data2=xa, op=nl.add)
                if s2 is not None:
                    nisa.dma_copy(dst=s2[r0 : r0 + ts, :], src=xs)
            if norm:
                xn = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="xn")
                rmsnorm_tok(xs, ts, H, g_b[0:ts, :] if g_b is not None else None, eps, xn)
                xs = xn
            tok_to_hT(xs, ts, H, dst=xT, col0=sub.start)
        actT = gate_up_act(xT, blk.size, w, **act_kwargs)
        down_tok(actT, blk.size, w, o2[b0 : b0 + blk.size, :], 0, H, down_proj_bias_tensor, odt)
    return outputs
