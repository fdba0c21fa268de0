"""PyTorch reference implementations of the RMSNorm kernels (fp32 math)."""

from __future__ import annotations

import torch


def rmsnorm_torch(
    x: torch.Tensor, gamma: torch.Tensor | None, eps: float = 1e-6, hidden_actual: int | None = None
):
    """x / sqrt(mean(x^2) + eps) * gamma over the last dimension, in fp32; returns fp32."""
    xf = x.float()
    n = hidden_actual or x.shape[-1]
    ms = (xf * xf).sum(-1, keepdim=True) / n
    y = xf * torch.rsqrt(ms + eps)
    if gamma is not None:
        y = y * gamma.float().reshape(-1)
    return y


def rmsnorm_tkg_torch(
    x: torch.Tensor, gamma, eps: float = 1e-6, hidden_dim_tp: bool = False, hidden_actual=None
):
    """rmsnorm_tkg's output layout: [128, B*S, H // 128]."""
    B, S, H = x.shape
    y = rmsnorm_torch(x.reshape(B * S, H), gamma, eps, hidden_actual)
    if hidden_dim_tp:
        return y.reshape(B * S, H // 128, 128).permute(2, 0, 1).contiguous()
    return y.reshape(B * S, 128, H // 128).permute(1, 0, 2).contiguous()
