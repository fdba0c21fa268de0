"""One decoder layer for the prefill step of the experimental variant: fused kernels around
the residual stream (RMSNorm+QKV+RoPE, attention+cache, residual add+RMSNorm+MLP)."""

from nki_ops import nki_mlp_fused
from torch import nn

from .config import LlamaConfig
from .self_attention import SelfAttention


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attn = SelfAttention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.mlp = FeedForward(cfg)

    def forward(self, x, cos, sin, k_cache, v_cache, pos):
        attn = self.attn(x, self.attn_norm, cos, sin, k_cache, v_cache, pos)
        # h = x + attn; out = h + mlp(rmsnorm(h)): the residual add and the norm are fused
        # into the MLP kernel, which also returns h.
        m = self.mlp
        out, h = nki_mlp_fused(attn, x, self.mlp_norm.weight, m.gate_proj.weight, m.up_proj.weight,
                               m.down_proj.weight, self.mlp_norm.eps)
        return h + out
