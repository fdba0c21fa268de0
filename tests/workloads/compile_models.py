"""Small models used by the torch.compile tests and benchmarks: an MLP, a CNN, a transformer
encoder and a Llama decoder with a static KV cache (the Lab 2 "small" configuration at full
size: vocab 32000, dim 512, 6 layers, 8 heads of 64, SwiGLU 2048, tied embeddings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc1(x))
        x = torch.tanh(self.fc2(x)) + x
        return self.fc3(x)


class SmallCNN(nn.Module):
    def __init__(self, channels: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=1, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


class TransformerEncoder(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 32, heads: int = 4, layers: int = 2, ff: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


@dataclass
class LlamaConfig:
    vocab: int = 32000
    dim: int = 512
    layers: int = 6
    heads: int = 8
    kv_heads: int = 8
    ffn: int = 2048
    max_seq: int = 128
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


LLAMA_SMALL = LlamaConfig()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads = cfg.heads, cfg.kv_heads
        self.head_dim = cfg.dim // cfg.heads
        self.wq = nn.Linear(cfg.dim, cfg.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.heads * self.head_dim, cfg.dim, bias=False)
        shape = (1, cfg.kv_heads, cfg.max_seq, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(shape), persistent=False)

    def forward(self, x, cos, sin, pos, mask, use_cache=True):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if use_cache:
            self.cache_k.index_copy_(2, pos, k)
            self.cache_v.index_copy_(2, pos, v)
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = k, v
        if self.kv_heads != self.heads:
            rep = self.heads // self.kv_heads
            keys = keys.repeat_interleave(rep, dim=1)
            values = values.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + mask
        probs = F.softmax(scores.float(), dim=-1).to(q.dtype)
        out = torch.matmul(probs, values)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = FeedForward(cfg)

    def forward(self, x, cos, sin, pos, mask, use_cache=True):
        x = x + self.attn(self.attn_norm(x), cos, sin, pos, mask, use_cache)
        return x + self.mlp(self.ffn_norm(x))


class Llama(nn.Module):
    """Decoder-only Llama with a static KV cache: forward(tokens [B, S], pos [S]) returns the
    logits of every position and writes K/V of those positions into the cache. With
    use_cache=False (training) attention runs causally over the given sequence only."""

    def __init__(self, cfg: LlamaConfig = LLAMA_SMALL) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied embeddings
        head_dim = cfg.dim // cfg.heads
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(cfg.max_seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("rope_cos", emb.cos(), persistent=False)
        self.register_buffer("rope_sin", emb.sin(), persistent=False)
        self.register_buffer("positions", torch.arange(cfg.max_seq), persistent=False)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, use_cache: bool = True) -> torch.Tensor:
        x = self.embed(tokens)
        cos = self.rope_cos[pos].to(x.dtype)
        sin = self.rope_sin[pos].to(x.dtype)
        # Causal mask: a query at position p sees keys at positions <= p (cache slots, or the
        # sequence itself without the cache).
        keys = self.positions if use_cache else pos
        allowed = keys[None, :] <= pos[:, None]
        mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed, float("-inf"))
        for block in self.blocks:
            x = block(x, cos, sin, pos, mask, use_cache)
        return self.lm_head(self.norm(x))

    def reset_cache(self) -> None:
        for block in self.blocks:
            block.attn.cache_k.zero_()
            block.attn.cache_v.zero_()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
