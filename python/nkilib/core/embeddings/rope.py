"""RoPE for the head-dim-major layout [d_head, B, H, S] (d on SBUF partitions)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import get_verified_program_sharding_info
from ..utils.tile_ops import FMAX, chunks


def rotation_matrix(d: int, dtype, contiguous_layout: bool = True, name: str = "rot"):
    """R [d, d] in SBUF with R.T @ x = rotate_half(x) along the partition dimension:
    contiguous layout: [x1, x2] -> [-x2, x1]; interleaved: (x_2i, x_2i+1) -> (-x_2i+1, x_2i).
    Built with memset + affine_select on the GpSimd Engine."""
    h = d // 2
    r = nl.ndarray((d, d), dtype, buffer=nl.sbuf, name=name)
    nisa.memset(dst=r, value=0.0)
    pos = nl.ndarray((d, h), dtype, buffer=nl.sbuf, name=name + "_pos")
    neg = nl.ndarray((d, h), dtype, buffer=nl.sbuf, name=name + "_neg")
    nisa.memset(dst=pos, value=1.0)
    nisa.memset(dst=neg, value=-1.0)
    if contiguous_layout:
        # column m < h: -1 at row m + h; column h + m: +1 at row m.
        nisa.affine_select(
            dst=r[:, 0:h],
            pattern=[[-1, h]],
            offset=-h,
            channel_multiplier=1,
            on_true_tile=neg,
            on_false_value=0.0,
            cmp_op=nl.equal,
        )
        nisa.affine_select(
            dst=r[:, h:d],
            pattern=[[-1, h]],
            offset=0,
            channel_multiplier=1,
            on_true_tile=pos,
            on_false_value=0.0,
            cmp_op=nl.equal,
        )
    else:
        rv = r.reshape((d, h, 2))
        # column 2i: -1 at row 2i + 1; column 2i + 1: +1 at row 2i.
        nisa.affine_select(
            dst=rv[:, :, 0],
            pattern=[[-2, h]],
            offset=-1,
            channel_multiplier=1,
            on_true_tile=neg,
            on_false_value=0.0,
            cmp_op=nl.equal,
        )
        nisa.affine_select(
            dst=rv[:, :, 1],
            pattern=[[-2, h]],
            offset=0,
            channel_multiplier=1,
            on_true_tile=pos,
            on_false_value=0.0,
            cmp_op=nl.equal,
        )
    return r


@nki.jit
def RoPE(
    x_in, cos, sin, lnc_shard: bool = False, contiguous_layout: bool = True, relayout_in_sbuf: bool = False
):
    """Rotary position embedding in the [d_head, B, H, S] layout.

    out = x * cos + rotate_half(x) * sin, where cos/sin [d_head / 2, B, S] hold one value per
    frequency (applied to both elements of each rotated pair). contiguous_layout=True rotates
    the halves [x1, x2] -> [-x2, x1]; False rotates interleaved pairs. The rotation is a matmul
    with a +-1 matrix on the Tensor Engine (d stays on partitions; no cross-partition copies).

    Args:
        x_in: [d_head, B, H, S] in HBM, d_head <= 128 and even.
        cos, sin: [d_head // 2, B, S].
        lnc_shard: accepted for compatibility (a launch grid always splits the batch).
        relayout_in_sbuf: accepted for compatibility.

    Returns: [d_head, B, H, S].
    """
    kernel_assert(len(x_in.shape) == 4, f"RoPE: x_in must be [d_head, B, H, S], got {x_in.shape}")
    d, B, H, S = x_in.shape
    h = d // 2
    kernel_assert(d % 2 == 0 and d <= 128, f"RoPE: d_head={d} must be even and <= 128")
    kernel_assert(
        tuple(cos.shape) == (h, B, S) and tuple(sin.shape) == (h, B, S),
        f"RoPE: cos/sin must be [{h}, {B}, {S}], got {cos.shape}, {sin.shape}",
    )
    _, n_prgs, prg_id = get_verified_program_sharding_info("RoPE", (0, 1), 8)
    out = nl.ndarray(x_in.shape, dtype=x_in.dtype, buffer=nl.shared_hbm, name="rope_out")
    mdt = x_in.dtype if x_in.dtype in (nl.bfloat16, nl.float16, nl.float32) else nl.float32
    rot = rotation_matrix(d, mdt, contiguous_layout)
    bs = [b for b in range(B) if b % n_prgs == prg_id]  # a grid always splits the batch

    def full_rows(t, b):  # [h, S] table of batch b -> [d, S] (each frequency on both rows of its pair)
        v = t[:, b, :]
        if contiguous_layout:
            return v.reshape((1, h, S)).broadcast(0, 2)
        return v.reshape((h, 1, S)).broadcast(1, 2)

    for b in bs:
        cd = nl.ndarray((d, S), nl.float32, buffer=nl.sbuf, name="cos")
        sd = nl.ndarray((d, S), nl.float32, buffer=nl.sbuf, name="sin")
        nisa.dma_copy(dst=cd, src=full_rows(cos, b))
        nisa.dma_copy(dst=sd, src=full_rows(sin, b))
        x = nl.ndarray((d, H, S), mdt, buffer=nl.sbuf, name="x")
        nisa.dma_copy(dst=x, src=x_in[:, b, :, :])
        y = nl.ndarray((d, H, S), x_in.dtype, buffer=nl.sbuf, name="y")
        # columns (h, s) in blocks of at most 512 (one PSUM bank of fp32)
        for hc in chunks(H, max(1, FMAX // S) if S <= FMAX else 1):
            for sc in chunks(S, FMAX):
                n = hc.size * sc.size
                ps = nl.ndarray((d, FMAX), nl.float32, buffer=nl.psum, name="rot_ps")
                xs = x[:, hc.start : hc.stop, sc.start : sc.stop]
                nisa.nc_matmul(dst=ps[:, 0:n], stationary=rot, moving=xs, accumulate=False)
                a = nl.ndarray((d, hc.size, sc.size), nl.float32, buffer=nl.sbuf, name="a")
                c = cd[:, sc.start : sc.stop].expand_dim(1).broadcast(1, hc.size)
                s_ = sd[:, sc.start : sc.stop].expand_dim(1).broadcast(1, hc.size)
                nisa.tensor_tensor(dst=a, data1=xs, data2=c, op=nl.multiply)
                bb = nl.ndarray((d, hc.size, sc.size), nl.float32, buffer=nl.sbuf, name="b")
                nisa.tensor_tensor(
                    dst=bb, data1=ps[:, 0:n].reshape((d, hc.size, sc.size)), data2=s_, op=nl.multiply
                )
                nisa.tensor_tensor(
                    dst=y[:, hc.start : hc.stop, sc.start : sc.stop], data1=a, data2=bb, op=nl.add
                )
        nisa.dma_copy(dst=out[:, b, :, :], src=y)
    return out
