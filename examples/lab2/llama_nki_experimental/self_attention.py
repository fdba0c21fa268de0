"""Self-attention of the experimental variant for the prefill step: RMSNorm, the QKV
projection and RoPE are one nkilib kernel (qkv), attention with the cache update another.
(Decode steps do not use this module: the whole layer stack is one megakernel.)"""

from llama_base.self_attention import rope_tables  # noqa: F401
from nki_ops import nki_attn, nki_qkv_rope
from torch import nn

from .config import LlamaConfig


class SelfAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x, norm, cos, sin, k_cache, v_cache, pos):
        """x: [B, S, dim] (not normalized: `norm` is fused into the QKV kernel)."""
        cfg = self.cfg
        b, s, _ = x.shape
        qkv = nki_qkv_rope(x, norm.weight, self.q_proj.weight, self.k_proj.weight, self.v_proj.weight,
                           cos[pos], sin[pos], cfg.n_heads, cfg.n_kv_heads, norm.eps)
        # [heads, B, S, D] -> q/k/v [B, heads, S, D]
        q = qkv[: cfg.n_heads].transpose(0, 1)
        k = qkv[cfg.n_heads : cfg.n_heads + cfg.n_kv_heads].transpose(0, 1)
        v = qkv[cfg.n_heads + cfg.n_kv_heads :].transpose(0, 1)
        out = nki_attn(q, k, v, k_cache, v_cache, pos)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, cfg.n_heads * cfg.head_dim))
