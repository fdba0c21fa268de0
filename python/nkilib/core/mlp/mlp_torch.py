"""PyTorch reference of nkilib.core.mlp.mlp.mlp (fp32 math)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..subkernels.rmsnorm_torch import rmsnorm_torch
from ..utils.common_types import ActFnType, NormType, WeightLayout


def _act(x, fn: ActFnType):
    if fn == ActFnType.SiLU:
        return F.silu(x)
    if fn == ActFnType.GELU:
        return F.gelu(x)
    if fn == ActFnType.GELU_Tanh_Approx:
        return F.gelu(x, approximate="tanh")
    raise ValueError(f"unsupported activation {fn}")


def _clamp(x, lower, upper):
    if upper is not None:
        x = torch.clamp(x, max=upper)
    if lower is not None:
        x = torch.clamp(x, min=lower)
    return x


def mlp_torch_ref(
    hidden_tensor,
    gate_proj_weights_tensor,
    up_proj_weights_tensor,
    down_proj_weights_tensor,
    normalization_weights_tensor=None,
    gate_proj_bias_tensor=None,
    up_proj_bias_tensor=None,
    down_proj_bias_tensor=None,
    fused_add_tensor=None,
    store_fused_add_result: bool = False,
    activation_fn: ActFnType = ActFnType.SiLU,
    normalization_type: NormType = NormType.NO_NORM,
    eps: float = 1e-6,
    skip_gate_proj: bool = False,
    gate_clamp_upper_limit=None,
    gate_clamp_lower_limit=None,
    up_clamp_upper_limit=None,
    up_clamp_lower_limit=None,
    weight_layout: WeightLayout = WeightLayout.IN_OUT,
    **ignored,
) -> dict:
    """{"out": [B, S, H] fp32, "add_out": the residual sum (when stored)}."""

    def w(t):
        t = t.float()
        return t if weight_layout == WeightLayout.IN_OUT else t.T

    x = hidden_tensor.float()
    res = {}
    if fused_add_tensor is not None:
        x = (hidden_tensor + fused_add_tensor).float()  # the sum is rounded to the input dtype
        if store_fused_add_result:
            res["add_out"] = x
    if normalization_type == NormType.RMS_NORM:
        x = rmsnorm_torch(x, normalization_weights_tensor, eps)
    elif normalization_type == NormType.RMS_NORM_SKIP_GAMMA:
        x = rmsnorm_torch(x, None, eps)
    up = x @ w(up_proj_weights_tensor)
    if up_proj_bias_tensor is not None:
        up = up + up_proj_bias_tensor.float().reshape(-1)
    up = _clamp(up, up_clamp_lower_limit, up_clamp_upper_limit)
    if skip_gate_proj:
        h = _act(up, activation_fn)
    else:
        gate = x @ w(gate_proj_weights_tensor)
        if gate_proj_bias_tensor is not None:
            gate = gate + gate_proj_bias_tensor.float().reshape(-1)
        gate = _clamp(gate, gate_clamp_lower_limit, gate_clamp_upper_limit)
        h = _act(gate, activation_fn) * up
    out = h @ w(down_proj_weights_tensor)
    if down_proj_bias_tensor is not None:
        out = out + down_proj_bias_tensor.float().reshape(-1)
    res["out"] = out
    return res
