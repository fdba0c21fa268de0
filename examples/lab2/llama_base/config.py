"""Model sizes of the Lab 2 Llama (the "small" one has 41,556,480 parameters)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 32000
    dim: int = 512
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 8
    head_dim: int = 64
    ffn_dim: int = 2048
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5


SIZES = {
    "tiny": LlamaConfig(vocab_size=1024, dim=128, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=32, ffn_dim=256,
                        max_seq_len=128),
    "small": LlamaConfig(),
}
