"""PyTorch reference of the transformer_tkg megakernel (fp32 math, bf16 rounding of the
residual stream and the projection outputs like a bf16 model)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...core.subkernels.rmsnorm_torch import rmsnorm_torch
from ...core.utils.common_types import WeightLayout


def _w(t, layout):
    return t.float() if layout == WeightLayout.IN_OUT else t.float().T


def _qkv_w(w, layout):
    if isinstance(w, (tuple, list)):
        return torch.cat([_w(p, layout) for p in w], 1)
    return _w(w, layout)


def _rope(x, c, s):  # x [B, S, n, d]; c, s [B, S, d/2]
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = c[:, :, None], s[:, :, None]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def transformer_tkg_torch(
    X,
    W_qkvs,
    W_outs,
    W_gates,
    W_ups,
    W_downs,
    W_gamma_qkvs,
    W_gamma_mlps,
    K_caches,
    V_caches,
    RoPE_cos,
    RoPE_sin,
    position_ids,
    num_layers,
    eps=1e-6,
    weight_layout=WeightLayout.IN_OUT,
    mask_cache=None,
    **ignored,
):
    """Returns (out [B, S, H] in X.dtype, updated copies of the caches). mask_cache: None (cache
    positions < position_ids[b] and the active tokens causally) or the library's mask
    [S_ctx, B, Hq, S] over the first S_ctx - S cache positions (before this step's write) and
    the S active tokens."""
    dt = X.dtype
    B, S, _H = X.shape
    Hkv, d = K_caches[0].shape[1], K_caches[0].shape[3]
    pos = position_ids.reshape(-1).long()
    pos = pos.expand(B) if pos.numel() == 1 else pos
    if RoPE_cos.dim() == 3:
        c, s = RoPE_cos.float().permute(1, 2, 0), RoPE_sin.float().permute(1, 2, 0)
    else:
        idx = pos[:, None] + torch.arange(S)
        c, s = RoPE_cos.float()[idx], RoPE_sin.float()[idx]
    kcs = [k.clone() for k in K_caches[:num_layers]]
    vcs = [v.clone() for v in V_caches[:num_layers]]
    h = X
    for layer in range(num_layers):
        x = rmsnorm_torch(h, W_gamma_qkvs[layer], eps).to(dt)
        qkv = (x.float() @ _qkv_w(W_qkvs[layer], weight_layout)).to(dt)
        Hq = qkv.shape[-1] // d - 2 * Hkv
        q = qkv[..., : Hq * d].reshape(B, S, Hq, d).float()
        k = qkv[..., Hq * d : (Hq + Hkv) * d].reshape(B, S, Hkv, d).float()
        v = qkv[..., (Hq + Hkv) * d :].reshape(B, S, Hkv, d)
        q, k = _rope(q, c, s).to(dt), _rope(k, c, s).to(dt)
        outs = []
        for b in range(B):
            p = int(pos[b])
            if mask_cache is not None:
                n = mask_cache.shape[0] - S
                kw = torch.cat([kcs[layer][b, :, :n], k[b].transpose(0, 1).to(kcs[layer].dtype)], 1)
                vw = torch.cat([vcs[layer][b, :, :n], v[b].transpose(0, 1).to(vcs[layer].dtype)], 1)
                keep = (mask_cache[:, b] != 0).permute(1, 2, 0)  # [Hq, S, S_ctx]
            kcs[layer][b, :, p : p + S] = k[b].transpose(0, 1)
            vcs[layer][b, :, p : p + S] = v[b].transpose(0, 1)
            if mask_cache is None:
                kw, vw = kcs[layer][b, :, : p + S], vcs[layer][b, :, : p + S]
                keep = torch.ones(S, p + S, dtype=torch.bool).tril(p)
            keys = kw.float().repeat_interleave(Hq // Hkv, 0)
            vals = vw.float().repeat_interleave(Hq // Hkv, 0)
            sc = q[b].float().transpose(0, 1) @ keys.transpose(1, 2) / math.sqrt(d)
            sc = sc.masked_fill(~keep, float("-inf"))
            outs.append((torch.softmax(sc, -1) @ vals).transpose(0, 1).reshape(S, Hq * d))
        attn = torch.stack(outs).to(dt)
        o = (attn.float() @ _w(W_outs[layer], weight_layout)).to(dt)
        h = h + o
        x = rmsnorm_torch(h, W_gamma_mlps[layer], eps).to(dt)
        gate = x.float() @ _w(W_gates[layer], weight_layout)
        up = x.float() @ _w(W_ups[layer], weight_layout)
        m = ((F.silu(gate) * up).to(dt).float() @ _w(W_downs[layer], weight_layout)).to(dt)
        h = h + m
    return h, kcs, vcs
