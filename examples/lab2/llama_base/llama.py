"""The Lab 2 baseline Llama: pure PyTorch ops, RoPE, static KV cache, tied embeddings."""

import torch
from torch import nn

from .config import LlamaConfig
from .self_attention import rope_tables
from .transformer_block import TransformerBlock

DESCRIPTION = "Baseline (pure PyTorch ops, RoPE, static KV cache)"

# Random weights, drawn N(0, INIT_STD) for the embedding and every projection (RMSNorm gains
# stay 1). PyTorch's default init makes this tied-embedding model degenerate: the N(0, 1)
# embedding of the input token dominates the residual stream, so the model repeats its input
# and sampling returns the greedy token. At 0.1 the layers drive the residual stream and the
# next-token distribution is neither flat nor one-hot (~2000 tokens hold 90% of the mass at the
# lab's temperature 0.8), so greedy ids vary and top-p sampling differs from greedy.
INIT_STD = 0.1


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
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, std: float = INIT_STD) -> None:
        """Draws every embedding and projection weight from N(0, std), in module order."""
        seen = set()
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)) and id(m.weight) not in seen:
                seen.add(id(m.weight))
                m.weight.normal_(0.0, std)

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
