"""RMSNorm over the last dimension of an HBM tensor (any number of rows, token-major tiles)."""

from __future__ import annotations

import math

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import get_verified_program_sharding_info, shard_range
from ..utils.tile_ops import P, load_row_broadcast, rmsnorm_tok


@nki.jit
def rmsnorm(input, gamma=None, eps: float = 1e-6, hidden_actual=None, output_dtype=None):
    """out = input / sqrt(mean(input^2, -1) + eps) * gamma, statistics in fp32.

    Args:
        input: [..., H] in HBM (bf16/fp16/fp32).
        gamma: [H] or [1, H], or None.
        eps: epsilon.
        hidden_actual: hidden size for the mean when H is padded.
        output_dtype: defaults to input.dtype.

    Launch with a grid (``rmsnorm[2](...)``) to split the rows over the programs.
    Returns: [..., H] in HBM.
    """
    H = input.shape[-1]
    R = math.prod(input.shape[:-1])
    kernel_assert(H * 4 * 3 <= nl.tile_size.sbuf_fmax_bytes, f"rmsnorm: H={H} does not fit one SBUF row")
    _, n, pid = get_verified_program_sharding_info("rmsnorm", (0, 1), 8)
    out_dt = output_dtype or input.dtype
    out = nl.ndarray(input.shape, dtype=out_dt, buffer=nl.shared_hbm)
    x2 = input.reshape((R, H))
    o2 = out.reshape((R, H))
    r0, r1 = shard_range(R, n, pid, P)
    rows = min(P, max(1, r1 - r0))
    g = load_row_broadcast(gamma, H, rows, nl.float32, name="gamma") if gamma is not None else None
    for t0 in range(r0, r1, P):
        ts = min(P, r1 - t0)
        xs = nl.ndarray((ts, H), input.dtype, buffer=nl.sbuf, name="x")
        nisa.dma_copy(dst=xs, src=x2[t0 : t0 + ts, :])
        ys = nl.ndarray((ts, H), out_dt, buffer=nl.sbuf, name="y")
        rmsnorm_tok(xs, ts, H, g[0:ts, :] if g is not None else None, eps, ys, hidden_actual)
        nisa.dma_copy(dst=o2[t0 : t0 + ts, :], src=ys)
    return out
