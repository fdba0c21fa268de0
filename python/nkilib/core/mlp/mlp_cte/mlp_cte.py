"""The context-encoding MLP: blocks of up to 512 tokens for gate/up (the matmul moving free
size), 128-token tiles for loads, normalization and the down projection."""

from __future__ import annotations

import nki.isa as nisa
import nki.language as nl

from ...utils.common_types import NormType
from ...utils.kernel_helpers import div_ceil, get_verified_program_sharding_info, shard_range
from ...utils.tile_ops import P, chunks, load_row_broadcast, rmsnorm_tok, tok_to_hT
from ..mlp_tkg.mlp_tkg import MlpIO, down_tok, gate_up_act

CTE_TOKEN_BLOCK = 512  # tokens per gate/up pass in CTE (the matmul moving free size)


def mlp_cte(mlp_params, output_tensor_hbm, output_stored_add_tensor_hbm) -> None:
    """[residual add] -> [RMSNorm] -> gate/up + activation -> down for any number of tokens.

    mlp_params: an MLPParameters; output_tensor_hbm [B, S, H]; output_stored_add_tensor_hbm
    [B, S, H] or None (receives the residual sum). A launch grid splits the 128-token tiles
    between the programs. Writes the outputs; returns None (as the library's mlp_cte).
    """
    params = mlp_params
    _, n_prgs, prg_id = get_verified_program_sharding_info("mlp", (0, 1), 2)
    io = MlpIO(params, output_tensor_hbm, output_stored_add_tensor_hbm)
    T, H, w, cdt, odt = io.T, io.H, io.w, io.cdt, io.odt
    x2, o2, a2, s2, gamma = io.x2, io.o2, io.a2, io.s2, io.gamma
    norm, down_bias, act_kwargs = io.norm_type != NormType.NO_NORM, io.down_bias, io.act_kwargs

    t_lo, t_hi = shard_range(T, n_prgs, prg_id, P)
    g_b = (
        load_row_broadcast(gamma, H, min(P, max(1, t_hi - t_lo)), nl.float32, name="gamma")
        if gamma is not None
        else None
    )
    for blk in chunks(t_hi - t_lo, CTE_TOKEN_BLOCK):
        b0 = t_lo + blk.start
        xT = nl.ndarray((P, div_ceil(H, P), blk.size), cdt, buffer=nl.sbuf, name="xT")
        for sub in chunks(blk.size):
            r0, ts = b0 + sub.start, sub.size
            xs = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="x")
            nisa.dma_copy(dst=xs, src=x2[r0 : r0 + ts, :])
            if a2 is not None:
                xa = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="x_add")
                nisa.dma_copy(dst=xa, src=a2[r0 : r0 + ts, :])
                nisa.tensor_tensor(dst=xs, data1=xs, data2=xa, op=nl.add)
                if s2 is not None:
                    nisa.dma_copy(dst=s2[r0 : r0 + ts, :], src=xs)
            if norm:
                xn = nl.ndarray((ts, H), cdt, buffer=nl.sbuf, name="xn")
                rmsnorm_tok(xs, ts, H, g_b[0:ts, :] if g_b is not None else None, params.eps, xn)
                xs = xn
            tok_to_hT(xs, ts, H, dst=xT, col0=sub.start)
        actT = gate_up_act(xT, blk.size, w, **act_kwargs)
        down_tok(actT, blk.size, w, o2[b0 : b0 + blk.size, :], 0, H, down_bias, odt)
