"""Causal self-attention with RoPE and a static KV cache: the projections stay nn.Linear, RoPE
and attention (with the cache update) are NKI Library kernels."""

from llama_base.self_attention import rope_tables  # noqa: F401  (same tables as the baseline)
from nki_ops import nki_attn, nki_rope
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

    def forward(self, x, cos, sin, k_cache, v_cache, pos):
        """x: [B, S, dim]; caches: [B, Hkv, max_seq, D]; pos: [S] absolute positions (int32)."""
        cfg = self.cfg
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        # nkilib rope_hf: rotate-half RoPE on q and k in one kernel.
        q, k = nki_rope(q, k, cos[pos], sin[pos])
        # Static KV cache update + causal attention over it: attention_cte for the prefill
        # step, attention_decode_hf (cache write fused) for decode steps.
        out = nki_attn(q, k, v, k_cache, v_cache, pos)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, cfg.n_heads * cfg.head_dim))
