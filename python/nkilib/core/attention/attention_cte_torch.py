"""PyTorch reference of nkilib.core.attention.attention_cte.attention_cte (fp32 math)."""

from __future__ import annotations

import torch


def attention_cte_torch(
    q,
    k,
    v,
    scale: float = 1.0,
    causal_mask: bool = True,
    k_prior=None,
    v_prior=None,
    prior_used_len=None,
    tp_q: bool = True,
    tp_k: bool = False,
    tp_out: bool = False,
    bound_min=None,
    bound_max=None,
):
    qf = q.float() if tp_q else q.float().transpose(1, 2)  # [bs, sq, d]
    kf = k.float() if tp_k else k.float().transpose(1, 2)  # [bs_kv, skv, d]
    vf = v.float()
    n = 0
    if k_prior is not None:
        n = int(prior_used_len.reshape(-1)[0])
        kp = (k_prior.float() if tp_k else k_prior.float().transpose(1, 2))[:, :n]
        kf = torch.cat([kp, kf], 1)
        vf = torch.cat([v_prior.float()[:, :n], vf], 1)
    group = qf.shape[0] // kf.shape[0]
    kf, vf = kf.repeat_interleave(group, 0), vf.repeat_interleave(group, 0)
    s = (qf @ kf.transpose(1, 2)) * scale
    sq, sk = s.shape[1], s.shape[2]
    if causal_mask:
        keep = torch.ones(sq, sk - n, dtype=torch.bool).tril()
        keep = torch.cat([torch.ones(sq, n, dtype=torch.bool), keep], 1)
        s = s.masked_fill(~keep, float("-inf"))
    if bound_min is not None:  # sequence packing: query i sees keys j in [bound_min[i], bound_max[i])
        j = torch.arange(sk)
        lo, hi = bound_min.reshape(sq, 1).long(), bound_max.reshape(sq, 1).long()
        s = s.masked_fill((j < lo) | (j >= hi), float("-inf"))
    o = torch.softmax(s, -1) @ vf
    return o.transpose(1, 2) if tp_out else o
