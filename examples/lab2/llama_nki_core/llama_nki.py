"""The Lab 2 Llama with NKI Library core kernels: MLP (nkilib mlp), RoPE (rope_hf) and
attention (attention_cte for prefill, neuron-emu's attention_decode_hf for decode). Same weights and inputs as
the baseline; only the forward paths differ."""

from llama_base.llama import Llama as _BaseLlama

from .transformer_block import TransformerBlock

DESCRIPTION = "NKI core (CTE prefill + TKG decode, static KV cache)"


class Llama(_BaseLlama):
    block_cls = TransformerBlock
