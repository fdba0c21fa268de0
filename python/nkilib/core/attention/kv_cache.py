"""Writes new keys/values into a static KV cache at runtime positions (neuron-emu addition:
the library leaves prefill cache writes to the framework)."""

from __future__ import annotations

import nki
import nki.isa as nisa

from ..utils.kernel_assert import kernel_assert
from ..utils.tile_ops import load_positions, position_register


@nki.jit
def update_kv_cache(k_cache, v_cache, k, v, position_ids):
    """k_cache[b, :, p_b : p_b + S, :] = k[b] (same for v), p_b = position_ids[b] (or [0] for
    every b), in place.

    Args:
        k_cache, v_cache: [B+, Hkv, S_max, d] in HBM (updated in place and returned).
        k, v: [B, Hkv, S, d].
        position_ids: [B, 1] or [1, 1] int32 start positions (bounds-checked when the kernel runs:
            p_b + S <= S_max).

    Returns: (k_cache, v_cache).
    """
    B, Hkv, S, d = k.shape
    kernel_assert(tuple(v.shape) == tuple(k.shape), f"update_kv_cache: k {k.shape} and v {v.shape} differ")
    kernel_assert(
        k_cache.shape[0] >= B
        and tuple(k_cache.shape[1:2]) == (Hkv,)
        and k_cache.shape[3] == d
        and tuple(v_cache.shape) == tuple(k_cache.shape),
        f"update_kv_cache: caches {k_cache.shape} / {v_cache.shape} do not match k {k.shape}",
    )
    kernel_assert(
        S <= k_cache.shape[2],
        f"update_kv_cache: {S} new positions exceed the cache length {k_cache.shape[2]}",
    )
    Sc = k_cache.shape[2]
    pos = load_positions(position_ids, B)
    for b in range(B):
        r = position_register(pos, b)
        for cache, x in ((k_cache, k), (v_cache, v)):
            dst = cache.ap(
                pattern=[[Sc * d, Hkv], [d, S], [1, d]],
                offset=b * Hkv * Sc * d,
                scalar_offset=r,
                indirect_dim=2,  # the cache's sequence dimension: the offset counts positions
            )
            nisa.dma_copy(dst=dst, src=x[b])
    return k_cache, v_cache
