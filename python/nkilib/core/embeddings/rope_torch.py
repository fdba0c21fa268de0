"""PyTorch references of the RoPE kernels (fp32 math)."""

from __future__ import annotations

import torch


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def rope_hf_torch(q, k, cos, sin, backward: bool = False):
    """HF rotate-half RoPE on q [B, Hq, S, d], k [B, Hkv, S, d]; cos/sin [S_total, d | d/2] or
    [B, S_total, d | d/2]. Returns fp32 (q_out, k_out)."""
    S, d = q.shape[2], q.shape[3]
    c, s = cos.float(), sin.float()
    if c.shape[-1] == d // 2:
        c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
    c, s = c[..., :S, :], s[..., :S, :]
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]
    if backward:

        def f(x):
            x = x.float()
            h = d // 2
            x1, x2 = x[..., :h], x[..., h:]
            return torch.cat([x1 * c[..., :h] + x2 * s[..., h:], x2 * c[..., h:] - x1 * s[..., :h]], -1)
    else:

        def f(x):
            x = x.float()
            return x * c + rotate_half(x) * s

    return f(q), f(k)


def rope_torch(x_in, cos, sin, contiguous_layout: bool = True):
    """RoPE on x_in [d, B, H, S] with cos/sin [d/2, B, S]; returns fp32."""
    x = x_in.float()
    d = x.shape[0]
    h = d // 2
    c, s = cos.float()[:, :, None, :], sin.float()[:, :, None, :]
    if contiguous_layout:
        x1, x2 = x[:h], x[h:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], 0)
    xe, xo = x[0::2], x[1::2]
    out = torch.empty_like(x)
    out[0::2] = xe * c - xo * s
    out[1::2] = xo * c + xe * s
    return out
