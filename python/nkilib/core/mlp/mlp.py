"""The fused MLP kernel: [residual add] -> [RMSNorm] -> gate/up projection -> act(gate) * up ->
down projection, with a token-generation (TKG) and a context-encoding (CTE) path."""

from __future__ import annotations

import nki
import nki.language as nl

from ..utils.common_types import ActFnType, NormType, QuantizationType, WeightLayout
from ..utils.kernel_assert import kernel_assert
from ..utils.tile_ops import weight_dims
from .mlp_cte.mlp_cte import mlp_cte
from .mlp_parameters import MLPParameters, is_mlp_tkg
from .mlp_tkg.mlp_tkg import mlp_tkg


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
    sbm=None,
    *,
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
        sbm: the library's SBUF manager (accepted; neuron-emu's allocator places the tiles).
        weight_layout (keyword only, neuron-emu extension): WeightLayout.OUT_IN for nn.Linear
            weights.

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

    params = MLPParameters(
        hidden_tensor=hidden_tensor,
        gate_proj_weights_tensor=gate_proj_weights_tensor,
        up_proj_weights_tensor=up_proj_weights_tensor,
        down_proj_weights_tensor=down_proj_weights_tensor,
        normalization_weights_tensor=normalization_weights_tensor,
        gate_proj_bias_tensor=gate_proj_bias_tensor,
        up_proj_bias_tensor=up_proj_bias_tensor,
        down_proj_bias_tensor=down_proj_bias_tensor,
        normalization_bias_tensor=normalization_bias_tensor,
        fused_add_tensor=fused_add_tensor,
        store_fused_add_result=store_fused_add_result,
        activation_fn=activation_fn,
        normalization_type=normalization_type,
        quantization_type=quantization_type,
        output_dtype=output_dtype,
        store_output_in_sbuf=store_output_in_sbuf,
        eps=eps,
        skip_gate_proj=skip_gate_proj,
        gate_clamp_lower_limit=gate_clamp_lower_limit,
        gate_clamp_upper_limit=gate_clamp_upper_limit,
        up_clamp_lower_limit=up_clamp_lower_limit,
        up_clamp_upper_limit=up_clamp_upper_limit,
        force_cte_mode=force_cte_mode,
        weight_layout=weight_layout,
    )
    out = nl.ndarray((B, S, H), dtype=params.output_dtype, buffer=nl.shared_hbm, name="output_tensor_hbm")
    add_out = None
    if store_fused_add_result:
        add_out = nl.ndarray(
            (B, S, H), dtype=hidden_tensor.dtype, buffer=nl.shared_hbm, name="output_stored_add_tensor_hbm"
        )
    if is_mlp_tkg(params):
        return mlp_tkg(params, out, add_out, sbm=sbm)
    mlp_cte(params, out, add_out)
    return [out] + ([add_out] if add_out is not None else [])
