"""Model sizes: the same as the baseline's."""

from llama_base.config import SIZES, LlamaConfig

__all__ = ["SIZES", "LlamaConfig"]
