"""RoPE for the Hugging Face layout [batch, heads, seq, head_dim] (rotate-half convention)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import get_verified_program_sharding_info
from ..utils.tile_ops import chunks, rope_tok


@nki.jit
def rope_hf(q, k, q_out, k_out, cos=None, sin=None, rope_cache=None, backward: bool = False):
    """Applies rotary position embeddings to q and k: x * cos + rotate_half(x) * sin, with
    rotate_half([x1, x2]) = [-x2, x1] (fp32 math, one rounding to the output dtype).

    Args:
        q: [B, Hq, S, d] in HBM; k: [B, Hkv, S, d].
        q_out, k_out: HBM outputs of the same shapes (written and returned).
        cos, sin: [S_total, d] or [B, S_total, d] with S_total >= S (rows 0..S-1 are used).
            neuron-emu also takes half tables [.., d/2] (Llama's: both halves share them).
        rope_cache: [.., 2 * d] packed (cos | sin) instead of cos and sin.
        backward: apply the inverse rotation (the gradient of the forward pass).

    Any S (the library requires a multiple of 128). A launch grid splits (batch, 128-row
    sequence tiles) between the programs.

    Returns: (q_out, k_out).
    """
    kernel_assert(
        len(q.shape) == 4 and len(k.shape) == 4,
        f"rope_hf: q/k must be [B, H, S, d], got {q.shape}, {k.shape}",
    )
    B, Hq, S, d = q.shape
    Bk, Hkv, Sk, dk = k.shape
    kernel_assert((Bk, Sk, dk) == (B, S, d), f"rope_hf: k {k.shape} does not match q {q.shape}")
    kernel_assert(d % 2 == 0, f"rope_hf: head_dim {d} must be even")
    if rope_cache is not None:
        kernel_assert(cos is None and sin is None, "rope_hf: pass either rope_cache or cos/sin, not both")
        rd = rope_cache.shape[-1] // 2
        table_shape = rope_cache.shape
    else:
        kernel_assert(
            cos is not None and sin is not None, "rope_hf: cos and sin (or rope_cache) are required"
        )
        kernel_assert(
            tuple(cos.shape) == tuple(sin.shape), f"rope_hf: cos {cos.shape} and sin {sin.shape} differ"
        )
        rd = cos.shape[-1]
        table_shape = cos.shape
    kernel_assert(rd in (d, d // 2), f"rope_hf: cos/sin last dimension {rd} must be head_dim {d} or {d // 2}")
    kernel_assert(
        len(table_shape) == 2 or (len(table_shape) == 3 and table_shape[0] == B),
        f"rope_hf: cos/sin shape {table_shape} must be [S, d] or [B={B}, S, d]",
    )
    kernel_assert(table_shape[-2] >= S, f"rope_hf: cos/sin have {table_shape[-2]} positions, q has {S}")
    kernel_assert(
        q_out is not None
        and k_out is not None
        and tuple(q_out.shape) == tuple(q.shape)
        and tuple(k_out.shape) == tuple(k.shape),
        f"rope_hf: q_out/k_out must be given with the shapes of q {q.shape} and k {k.shape}",
    )
    _, n_prgs, prg_id = get_verified_program_sharding_info("rope_hf", (0, 1), 8)

    def table(which, b):
        if rope_cache is not None:
            t = rope_cache if len(table_shape) == 2 else rope_cache[b]
            return t[:, 0:rd] if which == 0 else t[:, rd : 2 * rd]
        t = cos if which == 0 else sin
        return t if len(table_shape) == 2 else t[b]

    work = [(b, st) for b in range(B) for st in chunks(S)]
    for idx, (b, st) in enumerate(work):
        if idx % n_prgs != prg_id:
            continue
        ss = st.size
        cs = nl.ndarray((ss, rd), nl.float32, buffer=nl.sbuf, name="cos")
        sn = nl.ndarray((ss, rd), nl.float32, buffer=nl.sbuf, name="sin")
        nisa.dma_copy(dst=cs, src=table(0, b)[st.start : st.stop, :])
        nisa.dma_copy(dst=sn, src=table(1, b)[st.start : st.stop, :])
        for x, xo, nh in ((q, q_out, Hq), (k, k_out, Hkv)):
            xt = nl.ndarray((ss, nh, d), x.dtype, buffer=nl.sbuf, name="x")
            nisa.dma_copy(dst=xt, src=x[b, :, st.start : st.stop, :].permute(1, 0, 2))
            yt = nl.ndarray((ss, nh, d), xo.dtype, buffer=nl.sbuf, name="y")
            rope_tok(yt, xt, cs, sn, ss, nh, d, backward=backward)
            nisa.dma_copy(dst=xo[b, :, st.start : st.stop, :].permute(1, 0, 2), src=yt)
    return q_out, k_out
