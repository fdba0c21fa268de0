"""Causal self-attention with RoPE and a static KV cache, in plain PyTorch ops."""

import torch
import torch.nn.functional as F
from torch import nn

from .config import LlamaConfig


def rope_tables(cfg: LlamaConfig, device, dtype=torch.float32):
    """cos/sin tables [max_seq_len, head_dim / 2]."""
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
    t = torch.arange(cfg.max_seq_len, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    return freqs.cos().to(device=device, dtype=dtype), freqs.sin().to(device=device, dtype=dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, S, D]; cos/sin: [S, D/2]. Rotates (even, odd) halves like Llama's reference."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    c, s = cos[None, None], sin[None, None]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)


class SelfAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin, k_cache, v_cache, pos: torch.Tensor):
        """x: [B, S, dim]; caches: [B, Hkv, max_seq, D]; pos: [S] absolute positions (int32)."""
        cfg = self.cfg
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        c, sn = cos[pos], sin[pos]
        q = apply_rope(q, c, sn)
        k = apply_rope(k, c, sn)
        # Static KV cache: write this step's keys/values at their positions (in place; int32
        # positions, as Neuron prefers).
        k_cache[:, :, pos] = k
        v_cache[:, :, pos] = v
        # Attend over the whole cache; future and unwritten slots are masked out.
        t = torch.arange(cfg.max_seq_len, device=x.device, dtype=pos.dtype)
        mask = t[None, :] <= pos[:, None]  # [S, max_seq]
        out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask[None, None],
                                             enable_gqa=cfg.n_heads != cfg.n_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, cfg.n_heads * cfg.head_dim))
