"""PyTorch reference of nkilib.core.attention.attention_decode_hf.attention_decode_hf (fp32 math)."""

from __future__ import annotations

import math

import torch


def attention_decode_hf_torch(
    q,
    k_active,
    v_active,
    k_prior=None,
    v_prior=None,
    position_ids=None,
    scale=None,
    update_cache: bool = False,
):
    """Returns (out [B, Hq, S, d] fp32, k_cache, v_cache) with the caches updated (copies) when
    update_cache."""
    B, Hq, S, d = q.shape
    Hkv = k_active.shape[1]
    G = Hq // Hkv
    sc = scale if scale is not None else 1.0 / math.sqrt(d)
    outs = []
    kc = k_prior.clone() if k_prior is not None else None
    vc = v_prior.clone() if v_prior is not None else None
    for b in range(B):
        if k_prior is not None:
            n = (
                int(position_ids.reshape(-1)[b if position_ids.numel() > 1 else 0])
                if position_ids is not None
                else k_prior.shape[2]
            )
            kp, vp = k_prior[b, :, :n].float(), v_prior[b, :, :n].float()
        else:
            n = 0
            kp = vp = q.new_zeros(Hkv, 0, d).float()
        keys = torch.cat([kp, k_active[b].float()], 1).repeat_interleave(G, 0)  # [Hq, n + S, d]
        vals = torch.cat([vp, v_active[b].float()], 1).repeat_interleave(G, 0)
        s = (q[b].float() @ keys.transpose(1, 2)) * sc  # [Hq, S, n + S]
        causal = torch.ones(S, n + S, dtype=torch.bool).tril(n)
        s = s.masked_fill(~causal, float("-inf"))
        outs.append(torch.softmax(s, -1) @ vals)
        if update_cache:
            kc[b, :, n : n + S] = k_active[b]
            vc[b, :, n : n + S] = v_active[b]
    return torch.stack(outs), kc, vc
