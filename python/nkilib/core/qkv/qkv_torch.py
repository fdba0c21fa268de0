"""PyTorch reference of nkilib.core.qkv.qkv.qkv (fp32 math)."""

from __future__ import annotations

import torch

from ..embeddings.rope_torch import rotate_half
from ..subkernels.rmsnorm_torch import rmsnorm_torch
from ..utils.common_types import NormType, QKVOutputLayout, WeightLayout


def qkv_torch_ref(
    input,
    fused_qkv_weights,
    output_layout=QKVOutputLayout.BSD,
    bias=None,
    fused_residual_add=False,
    mlp_prev=None,
    attention_prev=None,
    fused_norm_type=NormType.NO_NORM,
    gamma_norm_weights=None,
    norm_eps=1e-6,
    fused_rope=False,
    cos_cache=None,
    sin_cache=None,
    d_head=None,
    num_q_heads=None,
    num_kv_heads=None,
    weight_layout=WeightLayout.IN_OUT,
    **ignored,
):
    parts = list(fused_qkv_weights) if isinstance(fused_qkv_weights, (tuple, list)) else [fused_qkv_weights]
    w = torch.cat([p.float() if weight_layout != WeightLayout.OUT_IN else p.float().T for p in parts], 1)
    x = input
    if fused_residual_add:
        x = x + mlp_prev + attention_prev
    x = x.float()
    if fused_norm_type == NormType.RMS_NORM:
        x = rmsnorm_torch(x, gamma_norm_weights, norm_eps)
    elif fused_norm_type == NormType.RMS_NORM_SKIP_GAMMA:
        x = rmsnorm_torch(x, None, norm_eps)
    y = x @ w
    if bias is not None:
        y = y + bias.float().reshape(-1)
    B, S, I = y.shape
    if fused_rope:
        d = d_head
        c, s = cos_cache.float(), sin_cache.float()
        if c.shape[-1] == d // 2:
            c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
        if c.dim() == 2:
            c, s = c[None], s[None]
        n = num_q_heads + num_kv_heads
        qk = y[..., : n * d].reshape(B, S, n, d)
        qk = qk * c[:, :, None] + rotate_half(qk) * s[:, :, None]
        y = torch.cat([qk.reshape(B, S, n * d), y[..., n * d :]], -1)
    if output_layout == QKVOutputLayout.BSD:
        return y
    y = y.reshape(B, S, I // d_head, d_head).permute(2, 0, 1, 3)
    return y if output_layout == QKVOutputLayout.NBSd else y.transpose(2, 3)
