"""Cumulative sum along the last dimension: one Vector Engine scan per [128 rows x 2048
columns] tile, r[i] = r[i-1] + x[i] in fp32 (tensor_tensor_scan with a ones operand), the
last column of a tile carried into the next tile of the same rows."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import get_verified_program_sharding_info
from ..utils.tile_ops import P, chunks

FREE_TILE = 2048  # fp32 columns per scan (8 KiB per partition)


@nki.jit
def cumsum(x, axis: int = -1):
    """out = cumsum(x, axis) for axis = the last dimension of an HBM tensor of any rank.

    Args:
        x: [..., H] in HBM, any float dtype (accumulation in fp32, one rounding to x.dtype).
        axis: -1 or rank - 1 (only the last dimension, as in the library).

    A launch grid splits the 128-row tiles between the programs.
    Returns: an HBM tensor of x's shape and dtype.
    """
    rank = len(x.shape)
    kernel_assert(rank >= 1, "cumsum: x must have at least one dimension")
    ax = axis + rank if axis < 0 else axis
    kernel_assert(ax == rank - 1, f"cumsum: only the last dimension is supported, got axis={axis} for rank {rank}")
    H = x.shape[-1]
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    out = nl.ndarray(tuple(x.shape), dtype=x.dtype, buffer=nl.shared_hbm, name="cumsum_out")
    x2, o2 = x.reshape((rows, H)), out.reshape((rows, H))
    _, n_prgs, prg_id = get_verified_program_sharding_info("cumsum", (0, 1))
    F = min(H, FREE_TILE)
    ones = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf, name="ones")
    nisa.memset(dst=ones, value=1.0)
    for pt in chunks(rows, P):
        if pt.index % n_prgs != prg_id:
            continue
        ps = pt.size
        carry = 0.0
        for ft in chunks(H, F):
            fs = ft.size
            xt = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf, name="x")
            nisa.dma_copy(dst=xt[0:ps, 0:fs], src=x2[pt.start : pt.stop, ft.start : ft.stop])
            r = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf, name="scan")
            nisa.tensor_tensor_scan(
                dst=r[0:ps, 0:fs],
                data0=ones[0:ps, 0:fs],
                data1=xt[0:ps, 0:fs],
                initial=carry,
                op0=nl.multiply,
                op1=nl.add,
            )
            res = r
            if x.dtype != nl.float32:
                res = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf, name="scan_out")
                nisa.tensor_copy(dst=res[0:ps, 0:fs], src=r[0:ps, 0:fs])
            nisa.dma_copy(dst=o2[pt.start : pt.stop, ft.start : ft.stop], src=res[0:ps, 0:fs])
            carry = r[0:ps, fs - 1 : fs]
    return out
