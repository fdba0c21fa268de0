"""PyTorch reference of nkilib.core.attention.attention_tkg.attention_tkg (the library's SBUF
subkernel contract; fp32 math). ``attention_tkg_torch_ref[lnc](...)`` as in the library: the
result does not depend on lnc."""

from __future__ import annotations

import math

import torch

from .attention_tkg_utils import AttnTKGConfig


def _rope(x, inv_freqs, pos):
    """x [B, n, s, d]; inv_freqs [d/2, 1]; pos [B, s] -> rotate-half RoPE of x."""
    ang = pos.float()[:, None, :, None] * inv_freqs.float().reshape(1, 1, 1, -1)  # [B, 1, s, d/2]
    ang = torch.cat([ang, ang], -1)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * torch.cos(ang) + rot * torch.sin(ang)


def _impl(
    q,
    k_active,
    v_active,
    k_prior,
    v_prior,
    mask,
    out,
    cfg: AttnTKGConfig,
    sbm=None,
    inv_freqs=None,
    rope_pos_ids=None,
    start_pos_ids=None,
    sink=None,
    active_blocks_table=None,
    k_out=None,
    DBG_TENSORS=None,
):
    if start_pos_ids is not None or active_blocks_table is not None or DBG_TENSORS:
        raise NotImplementedError("attention_tkg_torch_ref: sliding window, block KV and debug taps")
    B, H, s, Sp, d = cfg.bs, cfg.q_head, cfg.s_active, cfg.curr_sprior, cfg.d_head
    if cfg.qk_in_sb:  # [d, B*H*s] / [d, B*s] -> [B, H, s, d] / [B, 1, s, d]
        qh = q.float().reshape(d, B, H, s).permute(1, 2, 3, 0)
        kh = k_active.float().reshape(d, B, 1, s).permute(1, 2, 3, 0)
    else:
        qh, kh = q.float(), k_active.float()
    if cfg.fuse_rope:
        qh = _rope(qh, inv_freqs, rope_pos_ids) / math.sqrt(d)
        kh = _rope(kh, inv_freqs, rope_pos_ids)
    kp = k_prior[:B].float()
    kp = kp[:, 0, :Sp, :] if cfg.tp_k_prior else kp[:, 0, :, :Sp].transpose(1, 2)  # [B, Sp, d]
    vp = v_prior[:B, 0, :Sp, :].float().clone()
    kp = kp.clone()
    kp[:, Sp - s :] = kh[:, 0]
    vp[:, Sp - s :] = v_active[:, 0].float()
    if cfg.use_pos_id:
        j = torch.arange(Sp)
        keep = (j[None, :] < rope_pos_ids[:, :1].long()).float()  # [B, Sp]
        keep = keep[:, None, None, :].expand(B, H, s, Sp).clone()
        keep[..., Sp - s :] = (mask != 0).float().permute(1, 2, 3, 0)
    else:
        keep = (mask != 0).float().permute(1, 2, 3, 0)  # [B, H, s(query), Sp]
    score = torch.einsum("bhsd,bkd->bhsk", qh, kp).masked_fill(keep == 0, float("-inf"))
    if sink is not None:
        score = torch.cat([score, sink.float().reshape(1, H, 1, 1).expand(B, H, s, 1)], -1)
    p = torch.softmax(score, -1)[..., :Sp]
    o = torch.einsum("bhsk,bkd->bhds", p, vp)  # [B, H, d, s]
    if cfg.out_in_sb:
        o = o.permute(2, 0, 1, 3).reshape(d, B * H * s)
    out.copy_(o)
    if k_out is not None:
        kt = kh.permute(0, 1, 3, 2)  # [B, 1, d, s]
        k_out.copy_(kt.permute(2, 0, 1, 3).reshape(d, B * s) if cfg.k_out_in_sb else kt)
    return out, k_out


class _LncRef:
    """``ref[lnc](...)`` and ``ref(...)``."""

    def __init__(self, fn, lnc: int = 1):
        self._fn, self.lnc = fn, lnc

    def __getitem__(self, lnc: int) -> _LncRef:
        return _LncRef(self._fn, int(lnc))

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


attention_tkg_torch_ref = _LncRef(_impl)
