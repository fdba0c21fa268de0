"""On-chip building blocks the kernels are made of (called while a kernel is traced).

Layouts used throughout the library:

``tok``  token-major: SBUF [T, F], one token per partition (T <= 128), features on the free
         dimension. What HBM activations look like after a contiguous load.
``hT``   hidden-transposed: SBUF [128, KC, T], element (p, j, t) = x[t, j * 128 + p] with
         KC = ceil(H / 128); the last chunk may be ragged (only its first H % 128 partitions
         are meaningful). Chunk j is the [<=128, T] moving/stationary operand of a matmul
         that contracts over the hidden dimension, so projections need no transposes.
``wT``   a weight as its [in, out] matrix in SBUF: [128, KC, N], element (p, j, n) =
         W[k = j * 128 + p, n] (contraction rows on partitions).

Matmuls accumulate in fp32 PSUM; one matmul output stays inside one 2 KiB PSUM bank.
"""

from __future__ import annotations

import nki.isa as nisa
import nki.language as nl

from .common_types import ActFnType, WeightLayout
from .kernel_assert import kernel_assert
from .kernel_helpers import PSUM_BANK_SIZE, div_ceil
from .tiled_range import TiledRange

P = 128  # partitions
FMAX = 512  # matmul moving free size / fp32 elements per PSUM bank


def chunks(n: int, size: int = P) -> list:
    return list(TiledRange(n, size))


def compute_dtype(dt):
    """Matmul operand dtype for activations of dtype `dt` (fp32 stays fp32: exact but 4x slower
    on the Tensor Engine)."""
    return dt if dt in (nl.bfloat16, nl.float16, nl.float32) else nl.bfloat16


def bank_elems(dtype) -> int:
    return PSUM_BANK_SIZE // dtype.itemsize


def act_op(fn: ActFnType):
    ops = {ActFnType.SiLU: nl.silu, ActFnType.GELU: nl.gelu, ActFnType.GELU_Tanh_Approx: nl.gelu_apprx_tanh}
    kernel_assert(fn in ops, f"activation {fn} is not supported (SiLU, GELU, GELU_Tanh_Approx)")
    return ops[fn]


# ---------------------------------------------------------------------------------------------
# Layout changes


def load_hT(x2d, dtype=None, name: str = "xT"):
    """[T, H] HBM -> hT [128, KC, T] with transposing DMAs (decode-size T)."""
    T, H = x2d.shape
    dt = dtype or x2d.dtype
    KF, rem = divmod(H, P)
    t = nl.ndarray((P, div_ceil(H, P), T), dt, buffer=nl.sbuf, name=name)
    if KF:
        nisa.dma_transpose(dst=t[:, 0:KF, :], src=x2d[:, 0 : KF * P].reshape((T, KF, P)), axes=(2, 1, 0))
    if rem:
        nisa.dma_transpose(dst=t[0:rem, KF, :], src=x2d[:, KF * P : H], axes=(1, 0))
    return t


def tok_to_hT(xs, T: int, H: int, name: str = "xT", dst=None, col0: int = 0):
    """tok [T, H] SBUF -> hT [128, KC, T] with Tensor Engine transposes (T <= 128). With `dst`
    (an hT tile of more tokens), writes its columns col0 .. col0 + T."""
    dt = xs.dtype
    KC = div_ceil(H, P)
    out = dst if dst is not None else nl.ndarray((P, KC, T), dt, buffer=nl.sbuf, name=name)
    G = max(1, min(KC, PSUM_BANK_SIZE // (T * dt.itemsize)))
    for g0 in range(0, KC, G):
        gs = min(G, KC - g0)
        ps = nl.ndarray((P, G, T), dt, buffer=nl.psum, name=name + "_ps")
        nfull = 0
        for g in range(gs):
            k0 = (g0 + g) * P
            ks = min(P, H - k0)
            nisa.nc_transpose(dst=ps[0:ks, g, :], data=xs[0:T, k0 : k0 + ks], engine=nisa.tensor_engine)
            nfull += ks == P
        if nfull:
            nisa.tensor_copy(dst=out[:, g0 : g0 + nfull, col0 : col0 + T], src=ps[:, 0:nfull, :])
        if nfull < gs:
            rem = H - (g0 + nfull) * P
            nisa.tensor_copy(dst=out[0:rem, g0 + nfull, col0 : col0 + T], src=ps[0:rem, nfull, :])
    return out


def hT_to_tok(xT, T: int, H: int, dst):
    """hT [128, KC, T] -> tok `dst` [T, H] (SBUF) with Tensor Engine transposes."""
    dt = xT.dtype
    cols = bank_elems(dt)
    for c0 in range(0, H, cols):
        cw = min(cols, H - c0)
        ps = nl.ndarray((T, cols), dt, buffer=nl.psum, name="tok_ps")
        for k0 in range(c0, c0 + cw, P):
            ks = min(P, H - k0)
            nisa.nc_transpose(
                dst=ps[0:T, k0 - c0 : k0 - c0 + ks], data=xT[0:ks, k0 // P, :], engine=nisa.tensor_engine
            )
        nisa.tensor_copy(dst=dst[0:T, c0 : c0 + cw], src=ps[0:T, 0:cw])
    return dst


def store_hT(out2d, xT):
    """hT [128, KC, T] -> [T, H] HBM with transposing DMAs (decode-size T)."""
    T, H = out2d.shape
    KF, rem = divmod(H, P)
    if KF:
        nisa.dma_copy(dst=out2d[:, 0 : KF * P].reshape((T, KF, P)).permute(2, 1, 0), src=xT[:, 0:KF, :])
    if rem:
        nisa.dma_copy(dst=out2d[:, KF * P : H].permute(1, 0), src=xT[0:rem, KF, :])


# ---------------------------------------------------------------------------------------------
# Weights


def row_chunks(K: int, unit: int | None = None) -> list:
    """Contraction chunks of K rows: 128-row blocks, or whole `unit`-row groups packed into
    <= 128 rows when a chunk must not split a group (e.g. attention heads of d rows)."""
    if unit is None or P % unit == 0:
        return [(t.start, t.size) for t in chunks(K)]
    per = max(1, P // unit)
    return [(s, min(per * unit, K - s)) for s in range(0, K, per * unit)]


def load_wT(w, layout: WeightLayout, K: int, n0: int, nsz: int, dtype, name: str = "wT", rows=None):
    """Columns [n0, n0 + nsz) of the [K, N] (in, out) matrix of weight `w` as wT [128, KC, nsz].
    `w` is [K, N] (IN_OUT) or [N, K] (OUT_IN, e.g. nn.Linear.weight: DMA transpose).
    `rows`: contraction chunks [(k0, size), ...] (default: 128-row blocks)."""
    if rows is None or rows == row_chunks(K):
        KF, rem = divmod(K, P)
        t = nl.ndarray((P, div_ceil(K, P), nsz), dtype, buffer=nl.sbuf, name=name)
        if layout == WeightLayout.IN_OUT:
            if KF:
                nisa.dma_copy(
                    dst=t[:, 0:KF, :], src=w[0 : KF * P, n0 : n0 + nsz].reshape((KF, P, nsz)).permute(1, 0, 2)
                )
            if rem:
                nisa.dma_copy(dst=t[0:rem, KF, :], src=w[KF * P : K, n0 : n0 + nsz])
        else:
            if KF:
                nisa.dma_transpose(
                    dst=t[:, 0:KF, :], src=w[n0 : n0 + nsz, 0 : KF * P].reshape((nsz, KF, P)), axes=(2, 1, 0)
                )
            if rem:
                nisa.dma_transpose(dst=t[0:rem, KF, :], src=w[n0 : n0 + nsz, KF * P : K], axes=(1, 0))
        return t
    t = nl.ndarray((P, len(rows), nsz), dtype, buffer=nl.sbuf, name=name)
    for j, (k0, ks) in enumerate(rows):
        if layout == WeightLayout.IN_OUT:
            nisa.dma_copy(dst=t[0:ks, j, :], src=w[k0 : k0 + ks, n0 : n0 + nsz])
        else:
            nisa.dma_transpose(dst=t[0:ks, j, :], src=w[n0 : n0 + nsz, k0 : k0 + ks], axes=(1, 0))
    return t


def weight_dims(w, layout: WeightLayout) -> tuple[int, int]:
    """(in_features, out_features) of a weight stored in `layout`."""
    a, b = w.shape
    return (a, b) if layout == WeightLayout.IN_OUT else (b, a)


def load_row_broadcast(v, n: int, parts: int, dtype, name: str = "row"):
    """A [n] / [1, n] HBM vector replicated on `parts` partitions: SBUF [parts, n]."""
    t = nl.ndarray((parts, n), dtype, buffer=nl.sbuf, name=name)
    flat = v.reshape((1, n))
    nisa.dma_copy(dst=t, src=flat.broadcast(0, parts) if parts > 1 else flat)
    return t


def load_vec_T(v, n: int, dtype, name: str = "vecT"):
    """A [n] / [1, n] HBM vector in hT layout: SBUF [128, KC], element (p, j) = v[j * 128 + p]."""
    KF, rem = divmod(n, P)
    flat = v.reshape((n,))
    t = nl.ndarray((P, div_ceil(n, P)), dtype, buffer=nl.sbuf, name=name)
    if KF:
        nisa.dma_copy(dst=t[:, 0:KF], src=flat[0 : KF * P].reshape((KF, P)).permute(1, 0))
    if rem:
        nisa.dma_copy(dst=t[0:rem, KF : KF + 1], src=flat[KF * P : n].reshape((rem, 1)))
    return t


# ---------------------------------------------------------------------------------------------
# Matmuls


def matmul_chain(ps, pairs) -> None:
    """ps (PSUM) = sum of stationary.T @ moving over `pairs` [(stationary, moving), ...]."""
    for i, (s, m) in enumerate(pairs):
        nisa.nc_matmul(dst=ps, stationary=s, moving=m, accumulate=i > 0)


def proj_tok(ps, xT, wT, K: int, c0: int = 0, csz: int | None = None, rows=None) -> None:
    """Token-major projection: ps [T, csz] = x @ W[:, c0:c0+csz] (x as hT, W as wT), csz <= 512."""
    n = csz if csz is not None else wT.shape[2]
    rc = rows if rows is not None else row_chunks(K)
    matmul_chain(ps, [(xT[0:ks, j, :], wT[0:ks, j, c0 : c0 + n]) for j, (_, ks) in enumerate(rc)])


def proj_T(ps, wT, c0: int, msz: int, xT, K: int, rows=None) -> None:
    """Transposed projection: ps [msz, T] = (x @ W[:, c0:c0+msz]).T, msz <= 128."""
    rc = rows if rows is not None else row_chunks(K)
    matmul_chain(ps, [(wT[0:ks, j, c0 : c0 + msz], xT[0:ks, j, :]) for j, (_, ks) in enumerate(rc)])


# ---------------------------------------------------------------------------------------------
# Normalization


def ones_matrix(name="ones"):
    """A [128, 128] fp32 SBUF tile of ones: rmsnorm_hT's cross-partition sum (a kernel with
    several norms makes it once)."""
    ones = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf, name=name)
    nisa.memset(dst=ones, value=1.0)
    return ones


def rmsnorm_hT(
    xT,
    H: int,
    T: int,
    gamma_T,
    eps: float,
    out_dtype,
    hidden_actual: int | None = None,
    name="xn",
    ones=None,
):
    """RMSNorm over the hidden dimension of an hT tile: x * rsqrt(mean(x^2) + eps) * gamma.
    Statistics in fp32; the cross-partition sum of squares is a matmul with a ones matrix,
    which also broadcasts it to every partition. gamma_T: hT-layout [128, KC] (or None).
    ones: a [128, 128] fp32 tile of ones (ones_matrix()) shared by several norms, or None to
    make one here."""
    KF, rem = divmod(H, P)
    KC = div_ceil(H, P)
    f32 = nl.float32
    sq = nl.ndarray((P, KC, T), f32, buffer=nl.sbuf, name=name + "_sq")
    if KF:
        nisa.activation(dst=sq[:, 0:KF, :], op=nl.square, data=xT[:, 0:KF, :])
    if rem:
        nisa.activation(dst=sq[0:rem, KF, :], op=nl.square, data=xT[0:rem, KF, :])
    if ones is None:
        ones = ones_matrix(name + "_ones")
    ss = nl.ndarray((P, T), f32, buffer=nl.psum, name=name + "_ss")
    pairs = []
    if KF:
        part = nl.ndarray((P, T), f32, buffer=nl.sbuf, name=name + "_part")
        if KF > 1:
            nisa.tensor_reduce(dst=part, op=nl.add, data=sq[:, 0:KF, :].permute(0, 2, 1), axis=2)
        else:
            nisa.tensor_copy(dst=part, src=sq[:, 0, :])
        pairs.append((ones, part))
    if rem:
        pairs.append((ones[0:rem, :], sq[0:rem, KF, :]))
    matmul_chain(ss, pairs)
    rstd = nl.ndarray((P, T), f32, buffer=nl.sbuf, name=name + "_rstd")
    n = hidden_actual or H
    nisa.tensor_scalar(dst=rstd, data=ss, op0=nl.multiply, operand0=1.0 / n, op1=nl.add, operand1=float(eps))
    nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
    out = nl.ndarray((P, KC, T), out_dtype, buffer=nl.sbuf, name=name)
    tmp = nl.ndarray((P, KC, T), f32, buffer=nl.sbuf, name=name + "_tmp") if gamma_T is not None else out
    rb = rstd.expand_dim(1)
    for lo, hi, parts in ((0, KF, P), (KF, KC, rem)):
        if hi <= lo or parts == 0:
            continue
        nisa.tensor_tensor(
            dst=tmp[0:parts, lo:hi, :],
            data1=xT[0:parts, lo:hi, :],
            data2=rb[0:parts].broadcast(1, hi - lo),
            op=nl.multiply,
        )
        if gamma_T is not None:
            g = gamma_T[0:parts, lo:hi].expand_dim(2).broadcast(2, T)
            nisa.tensor_tensor(
                dst=out[0:parts, lo:hi, :], data1=tmp[0:parts, lo:hi, :], data2=g, op=nl.multiply
            )
    return out


def rmsnorm_tok(xs, T: int, H: int, gamma_b, eps: float, out, hidden_actual: int | None = None, name="xn"):
    """RMSNorm of a tok tile [T, H] into `out` [T, H]; gamma_b: gamma replicated on T
    partitions ([T, H]) or None."""
    f32 = nl.float32
    sq = nl.ndarray((T, H), f32, buffer=nl.sbuf, name=name + "_sq")
    ss = nl.ndarray((T, 1), f32, buffer=nl.sbuf, name=name + "_ss")
    nisa.activation(
        dst=sq,
        op=nl.square,
        data=xs,
        reduce_op=nl.add,
        reduce_res=ss,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
    )
    n = hidden_actual or H
    nisa.tensor_scalar(dst=ss, data=ss, op0=nl.multiply, operand0=1.0 / n, op1=nl.add, operand1=float(eps))
    nisa.activation(dst=ss, op=nl.rsqrt, data=ss)
    if gamma_b is None:
        nisa.tensor_scalar(dst=out, data=xs, op0=nl.multiply, operand0=ss)
        return out
    nisa.tensor_scalar(dst=sq, data=xs, op0=nl.multiply, operand0=ss)
    nisa.tensor_tensor(dst=out, data1=sq, data2=gamma_b, op=nl.multiply)
    return out


# ---------------------------------------------------------------------------------------------
# RoPE


def rope_tok(dst, x, cos, sin, T: int, nh: int, d: int, name: str = "rope", backward: bool = False) -> None:
    """Rotate-half RoPE on a tok tile: x, dst [T, nh * d] (views), cos/sin [T, d/2] (the same
    table for both halves, Llama style) or [T, d] (Hugging Face style). Math in fp32:
    out1 = x1 * c1 - x2 * s1, out2 = x2 * c2 + x1 * s2 (backward: the inverse rotation,
    out1 = x1 * c1 + x2 * s2, out2 = x2 * c2 - x1 * s1)."""
    h = d // 2
    x3 = x.reshape((T, nh, d))
    o3 = dst.reshape((T, nh, d))
    full = cos.shape[-1] == d
    c1 = cos[0:T, 0:h].expand_dim(1).broadcast(1, nh)
    s1 = sin[0:T, 0:h].expand_dim(1).broadcast(1, nh)
    c2 = cos[0:T, h:d].expand_dim(1).broadcast(1, nh) if full else c1
    s2 = sin[0:T, h:d].expand_dim(1).broadcast(1, nh) if full else s1
    a = nl.ndarray((T, nh, h), nl.float32, buffer=nl.sbuf, name=name + "_a")
    b = nl.ndarray((T, nh, h), nl.float32, buffer=nl.sbuf, name=name + "_b")
    x1, x2 = x3[0:T, :, 0:h], x3[0:T, :, h:d]
    if backward:
        s1, s2 = s2, s1
    nisa.tensor_tensor(dst=a, data1=x1, data2=c1, op=nl.multiply)
    nisa.tensor_tensor(dst=b, data1=x2, data2=s1, op=nl.multiply)
    o1 = nl.ndarray((T, nh, h), o3.dtype, buffer=nl.sbuf, name=name + "_o1") if x3._b is o3._b else None
    nisa.tensor_tensor(
        dst=o1 if o1 is not None else o3[0:T, :, 0:h],
        data1=a,
        data2=b,
        op=nl.add if backward else nl.subtract,
    )
    nisa.tensor_tensor(dst=a, data1=x2, data2=c2, op=nl.multiply)
    nisa.tensor_tensor(dst=b, data1=x1, data2=s2, op=nl.multiply)
    nisa.tensor_tensor(dst=o3[0:T, :, h:d], data1=a, data2=b, op=nl.subtract if backward else nl.add)
    if o1 is not None:  # in place: the first half could only be written after x1 was consumed
        nisa.tensor_copy(dst=o3[0:T, :, 0:h], src=o1)


def load_positions(position_ids, B: int, name: str = "pos"):
    """position_ids [B or 1, 1] int32 HBM -> SBUF [1, B] int32 (one partition, so that every
    register load reads partition 0)."""
    nb = position_ids.shape[0]
    kernel_assert(nb in (1, B), f"position_ids has {nb} rows; expected 1 or B={B}")
    t = nl.ndarray((1, B), nl.int32, buffer=nl.sbuf, name=name)
    src = position_ids.reshape((1, nb))
    nisa.dma_copy(dst=t, src=src if nb == B else src.broadcast(1, B))
    return t


def position_register(pos_sb, b: int):
    """A register holding position_ids[b] (read from the [1, B] SBUF tile)."""
    r = nisa.register_alloc()
    nisa.register_load(r, pos_sb[0:1, b : b + 1])
    return r


def gather_rows(dst, table, reg, n: int) -> None:
    """dst [n, F] <- table[reg : reg + n, :] (a dynamic-offset DMA; the offset is bounds-checked
    when the kernel runs)."""
    F = table.shape[1]
    nisa.dma_copy(
        dst=dst, src=table.ap(pattern=[[F, n], [1, F]], offset=0, scalar_offset=reg, indirect_dim=0)
    )
