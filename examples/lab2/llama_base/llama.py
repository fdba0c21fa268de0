"""The Lab 2 baseline Llama: pure PyTorch ops, RoPE, static KV cache, tied embeddings."""

import torch
from torch import nn

from .config import LlamaConfig
from .self_attention import rope_tables
from .transformer_block import TransformerBlock

DESCRIPTION = "Baseline (pure PyTorch ops, RoPE, static KV cache)"


class Llama(nn.Module):
    block_cls = TransformerBlock

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(self.block_cls(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied embeddings

    def new_cache(self, batch: int, device, dtype):
        cfg = self.cfg
        shape = (cfg.n_layers, batch, cfg.n_kv_heads, cfg.max_seq_len, cfg.head_dim)
        return torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)

    def rope(self, device, dtype):
        return rope_tables(self.cfg, device, dtype)

    def forward(self, tokens, pos, cos, sin, k_cache, v_cache):
        """tokens: [B, S] int; pos: [S] positions; caches: [L, B, Hkv, max_seq, D] (updated in place).
        Returns logits of the last position: [B, vocab]."""
        h = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, k_cache[i], v_cache[i], pos)
        return self.lm_head(self.norm(h[:, -1, :]))
