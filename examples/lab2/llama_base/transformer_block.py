"""One decoder layer: RMSNorm -> attention -> residual -> RMSNorm -> SwiGLU MLP -> residual."""

import torch.nn.functional as F
from torch import nn

from .config import LlamaConfig
from .self_attention import SelfAttention


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x):
        gate = F.silu(self.gate_proj(x))
        up = self.up_proj(x)
        down = self.down_proj(gate * up)
        return down


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attn = SelfAttention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.mlp = FeedForward(cfg)

    def forward(self, x, cos, sin, k_cache, v_cache, pos):
        x = x + self.attn(self.attn_norm(x), cos, sin, k_cache, v_cache, pos)
        return x + self.mlp(self.mlp_norm(x))
