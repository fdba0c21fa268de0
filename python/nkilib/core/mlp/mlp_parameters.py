"""The MLP kernel's arguments as one object (the library's ``MLPParameters``), and the choice
between the token-generation and context-encoding paths (``is_mlp_tkg``).

The attributes have the library's names (``batch_size``, ``sequence_len``, ``hidden_size``,
``intermediate_size``, ``fused_add_params.fused_add_tensor``, ``norm_params.normalization_type``,
``bias_params.down_proj_bias_tensor``, ...), so code that inspects them reads the same fields;
``weight_layout`` is neuron-emu's (``WeightLayout.OUT_IN`` for nn.Linear weights).
"""

from __future__ import annotations

import nki.language as nl

from ..utils.common_types import ActFnType, NormType, QuantizationType, WeightLayout

TKG_BS_SEQLEN_THRESHOLD = 96  # B*S at or below this runs the TKG path


class MLPFusedAddParameters(nl.NKIObject):
    """The residual added to the input first; store_fused_add_result returns the sum too."""

    def __init__(self, fused_add_tensor=None, store_fused_add_result: bool = False):
        self.fused_add_tensor = fused_add_tensor
        self.store_fused_add_result = store_fused_add_result


class MLPNormalizationParameters(nl.NKIObject):
    """NO_NORM drops the weights and bias, as the library does."""

    def __init__(self, normalization_type: NormType, normalization_weights_tensor=None, normalization_bias_tensor=None):
        norm = normalization_type != NormType.NO_NORM
        self.normalization_type = normalization_type
        self.normalization_weights_tensor = normalization_weights_tensor if norm else None
        self.normalization_bias_tensor = normalization_bias_tensor if norm else None


class MLPBiasParameters(nl.NKIObject):
    def __init__(self, gate_proj_bias_tensor=None, up_proj_bias_tensor=None, down_proj_bias_tensor=None):
        self.gate_proj_bias_tensor = gate_proj_bias_tensor
        self.up_proj_bias_tensor = up_proj_bias_tensor
        self.down_proj_bias_tensor = down_proj_bias_tensor


class MLPParameters(nl.NKIObject):
    """Everything the MLP paths read. ``hidden_tensor`` is [B, S, H] or [T, H] in HBM; the
    weights are [H, I], [H, I], [I, H] (``weight_layout=WeightLayout.OUT_IN``: their nn.Linear
    transposes), so H and I are read from the down projection as the library does."""

    def __init__(
        self,
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
        output_dtype=None,
        store_output_in_sbuf: bool = False,
        eps: float = 1e-6,
        skip_gate_proj: bool = False,
        gate_clamp_lower_limit=None,
        gate_clamp_upper_limit=None,
        up_clamp_lower_limit=None,
        up_clamp_upper_limit=None,
        force_cte_mode: bool = False,
        weight_layout: WeightLayout = WeightLayout.IN_OUT,
    ):
        shape = tuple(hidden_tensor.shape)
        if len(shape) == 3:
            self.batch_size, self.sequence_len = shape[0], shape[1]
        else:
            self.batch_size, self.sequence_len = 1, shape[0]
        down = tuple(down_proj_weights_tensor.shape)
        I, H = (down[0], down[1]) if weight_layout == WeightLayout.IN_OUT else (down[1], down[0])
        self.hidden_size, self.intermediate_size = H, I
        self.hidden_tensor = hidden_tensor
        self.gate_proj_weights_tensor = gate_proj_weights_tensor
        self.up_proj_weights_tensor = up_proj_weights_tensor
        self.down_proj_weights_tensor = down_proj_weights_tensor
        self.activation_fn = activation_fn
        self.output_dtype = output_dtype if output_dtype is not None else hidden_tensor.dtype
        self.fused_add_params = MLPFusedAddParameters(fused_add_tensor, store_fused_add_result)
        self.norm_params = MLPNormalizationParameters(
            normalization_type, normalization_weights_tensor, normalization_bias_tensor
        )
        self.bias_params = MLPBiasParameters(gate_proj_bias_tensor, up_proj_bias_tensor, down_proj_bias_tensor)
        self.quantization_type = quantization_type
        self.eps = eps
        self.store_output_in_sbuf = store_output_in_sbuf
        self.skip_gate_proj = skip_gate_proj
        self.gate_clamp_lower_limit = gate_clamp_lower_limit
        self.gate_clamp_upper_limit = gate_clamp_upper_limit
        self.up_clamp_lower_limit = up_clamp_lower_limit
        self.up_clamp_upper_limit = up_clamp_upper_limit
        self.force_cte_mode = force_cte_mode
        self.weight_layout = weight_layout


def is_mlp_tkg(params: MLPParameters) -> bool:
    """Token generation: B*S <= 96 tokens fit one tile of the TKG path (unless forced to CTE)."""
    return params.batch_size * params.sequence_len <= TKG_BS_SEQLEN_THRESHOLD and not params.force_cte_mode


def mlpp_has_fused_add(params: MLPParameters) -> bool:
    return params.fused_add_params.fused_add_tensor is not None


def mlpp_store_fused_add(params: MLPParameters) -> bool:
    return params.fused_add_params.store_fused_add_result


def mlpp_has_normalization(params: MLPParameters) -> bool:
    return params.norm_params.normalization_type != NormType.NO_NORM


def mlpp_has_normalization_weights(params: MLPParameters) -> bool:
    return params.norm_params.normalization_weights_tensor is not None
