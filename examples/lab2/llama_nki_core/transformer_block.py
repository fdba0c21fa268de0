"""One decoder layer: RMSNorm -> attention -> residual -> RMSNorm -> SwiGLU MLP -> residual."""

from nki_ops import nki_mlp
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
        return nki_mlp(
            x,
            self.gate_proj.weight,
            self.up_proj.weight,
            self.down_proj.weight
        )


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
