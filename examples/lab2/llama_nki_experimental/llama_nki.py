"""The Lab 2 Llama with the NKI Library megakernel: decode steps run every decoder layer in
one kernel (nkilib.experimental transformer_tkg: residual stream in SBUF, KV caches updated
in place); the prefill step runs fused CTE kernels layer by layer. Same weights and inputs as
the baseline."""

from llama_base.llama import Llama as _BaseLlama
from nki_ops import nki_transformer

from .transformer_block import TransformerBlock

DESCRIPTION = "NKI experimental (CTE prefill + megakernel decode, static KV cache)"


class Llama(_BaseLlama):
    block_cls = TransformerBlock

    def _stack(self):
        ls = self.layers
        return (
            [b.attn.q_proj.weight for b in ls],
            [b.attn.k_proj.weight for b in ls],
            [b.attn.v_proj.weight for b in ls],
            [b.attn.o_proj.weight for b in ls],
            [b.mlp.gate_proj.weight for b in ls],
            [b.mlp.up_proj.weight for b in ls],
            [b.mlp.down_proj.weight for b in ls],
            [b.attn_norm.weight for b in ls],
            [b.mlp_norm.weight for b in ls],
        )

    def forward(self, tokens, pos, cos, sin, k_cache, v_cache):
        h = self.embed(tokens)
        if tokens.shape[1] == 1:  # decode: all layers in one megakernel
            h = nki_transformer(h, pos, cos, sin, k_cache, v_cache, *self._stack(), self.cfg.norm_eps)
        else:  # prefill: CTE kernels, layer by layer
            for i, layer in enumerate(self.layers):
                h = layer(h, cos, sin, k_cache[i], v_cache[i], pos)
        return self.lm_head(self.norm(h[:, -1, :]))
