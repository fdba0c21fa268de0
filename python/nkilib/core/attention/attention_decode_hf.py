"""neuron-emu's own decode attention in Hugging Face layouts (``attention_decode_hf``; not a
kernel of the NKI Library, whose ``attention_tkg`` is the SBUF subkernel in attention_tkg.py):
a few active tokens per sequence against a static KV cache, all heads of a sequence in one pass.
Lab 2's wrapper and the fused attention block use it.

How it maps to the NeuronCore (per sequence b, n_q = Hq * S query rows (h, s)):

* Scores for all heads land in one PSUM tile [n_q, keys]: for every tile of packed kv heads
  (128 // d heads of d rows each) a block-diagonal stationary Qbd [(kv head, d), (h, s)] holds
  each query head's vector in the rows of its kv head, zero elsewhere; Qbd.T @ K^T summed over
  the kv tiles gives q_h . k_{kv(h)} for every row. GQA needs no replication of K.
* Prior keys (the cache, positions < position_ids[b]) and active keys (the new tokens, causal)
  are two segments of the score row, masked with range_select.
* Softmax along the free dimension in fp32 (max, exp with the 1/sqrt(d) scale fused, sum,
  reciprocal); the normalized probabilities are transposed on the Tensor Engine.
* PV is computed transposed (V as the stationary operand), so each head's output comes out
  with d on partitions: exactly the operand of the output projection.
"""

from __future__ import annotations

import math

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import div_ceil
from ..utils.tile_ops import FMAX, P, chunks, compute_dtype, load_positions, position_register

NEG_INF = -3.4028234663852886e38


def heads_per_tile(d: int) -> int:
    return max(1, P // d)


def copy_rows(dst, src, p_dst: int, p_src: int, n: int) -> None:
    """Copies n partitions starting at p_src of `src` to p_dst of `dst` (same free shape).
    Compute engines cannot move data across partitions, so a shift goes through a DMA."""
    ok_start = (n > 64 and p_dst == 0) or (32 < n <= 64 and p_dst in (0, 64)) or (n <= 32 and p_dst % 32 == 0)
    if p_dst == p_src and ok_start:
        nisa.tensor_copy(dst=dst[p_dst : p_dst + n], src=src[p_src : p_src + n])
    else:
        nisa.dma_copy(dst=dst[p_dst : p_dst + n], src=src[p_src : p_src + n])


def heads_to_T(x_tok, NT: int, nh: int, d: int, name: str):
    """tok [NT, nh * d] -> head-packed transposed [128, ceil(nh / hp), NT]: head h in rows
    (h % hp) * d .. of tile h // hp (hp = 128 // d heads per tile)."""
    hp = heads_per_tile(d)
    nt = div_ceil(nh, hp)
    out = nl.ndarray((P, nt, NT), x_tok.dtype, buffer=nl.sbuf, name=name)
    for j in range(nt):
        rows = min(hp, nh - j * hp) * d
        ps = nl.ndarray((P, NT), x_tok.dtype, buffer=nl.psum, name=name + "_ps")
        c0 = j * hp * d
        nisa.nc_transpose(dst=ps[0:rows, :], data=x_tok[0:NT, c0 : c0 + rows], engine=nisa.tensor_engine)
        nisa.tensor_copy(dst=out[0:rows, j, :], src=ps[0:rows, :])
    return out


def T_to_heads(xT, NT: int, nh: int, d: int, dst):
    """Inverse of heads_to_T into tok `dst` [NT, nh * d]."""
    hp = heads_per_tile(d)
    for j in range(div_ceil(nh, hp)):
        rows = min(hp, nh - j * hp) * d
        ps = nl.ndarray((NT, P), xT.dtype, buffer=nl.psum, name="heads_ps")
        nisa.nc_transpose(dst=ps[0:NT, 0:rows], data=xT[0:rows, j, :], engine=nisa.tensor_engine)
        nisa.tensor_copy(dst=dst[0:NT, j * hp * d : j * hp * d + rows], src=ps[0:NT, 0:rows])


def mask_keep_bias(
    mask, b: int, H: int, s: int, k0: int, nk: int, ncols: int | None = None, c0: int = 0, name="mask"
):
    """Keys k0 .. k0+nk of sequence b of a library-layout mask [keys, B, H, s] (nonzero =
    attend) as a keep/bias pair [H*s, ncols] fp32 (rows (h, s), the keys at columns c0 ..;
    other columns masked): keep is 0/1 and bias (keep - 1) * FLT_MAX, so that score * keep +
    bias keeps a score bit-exact and sends a masked one to -FLT_MAX."""
    ncols = nk if ncols is None else ncols
    raw = nl.ndarray((H * s, ncols), mask.dtype, buffer=nl.sbuf, name=name + "_raw")
    if ncols != nk:
        nisa.memset(dst=raw, value=0)
    for h in range(H):
        src = mask[k0 : k0 + nk, b, h, :].permute(1, 0)
        nisa.dma_copy(dst=raw[h * s : (h + 1) * s, c0 : c0 + nk], src=src)
    keep = nl.ndarray((H * s, ncols), nl.float32, buffer=nl.sbuf, name=name + "_keep")
    nisa.tensor_scalar(dst=keep, data=raw, op0=nl.not_equal, operand0=0.0)
    bias = nl.ndarray((H * s, ncols), nl.float32, buffer=nl.sbuf, name=name + "_bias")
    nisa.tensor_scalar(dst=bias, data=keep, op0=nl.subtract, operand0=1.0, op1=nl.multiply, operand1=-NEG_INF)
    return keep, bias


def apply_mask(dst, scores, keep, bias) -> None:
    """dst = scores * keep + bias (see mask_keep_bias)."""
    nisa.tensor_tensor(dst=dst, data1=scores, data2=keep, op=nl.multiply)
    nisa.tensor_tensor(dst=dst, data1=dst, data2=bias, op=nl.add)


def row_softmax(sc, n_q: int, L: int, cdt, scale: float = 1.0, sink_rows=None):
    """softmax(scale * sc) along the free dimension of the fp32 scores [n_q, L], in fp32, as a
    [n_q, L] tile of cdt. sink_rows: [n_q, 1] fp32 attention-sink logits that join the max and
    the sum (and carry no value)."""
    mx = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="mx")
    nisa.tensor_reduce(dst=mx, op=nl.maximum, data=sc, axis=1)
    if sink_rows is not None:
        nisa.tensor_tensor(dst=mx, data1=mx, data2=sink_rows, op=nl.maximum)
    nmx = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="nmx")
    nisa.tensor_scalar(dst=nmx, data=mx, op0=nl.multiply, operand0=-float(scale))
    e = nl.ndarray((n_q, L), nl.float32, buffer=nl.sbuf, name="exp")
    ssum = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="ssum")
    nisa.activation(
        dst=e,
        op=nl.exp,
        data=sc,
        bias=nmx,
        scale=float(scale),
        reduce_op=nl.add,
        reduce_res=ssum,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
    )
    if sink_rows is not None:
        es = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="sink_exp")
        nisa.activation(dst=es, op=nl.exp, data=sink_rows, bias=nmx, scale=float(scale))
        nisa.tensor_tensor(dst=ssum, data1=ssum, data2=es, op=nl.add)
    rs = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="rsum")
    nisa.reciprocal(dst=rs, data=ssum)
    prob = nl.ndarray((n_q, L), cdt, buffer=nl.sbuf, name="prob")
    nisa.tensor_scalar(dst=prob, data=e, op0=nl.multiply, operand0=rs)
    return prob


def _bound_vector(n: int, value, name: str):
    v = nl.ndarray((n, 1), nl.float32, buffer=nl.sbuf, name=name)
    nisa.memset(dst=v, value=float(value))
    return v


def attention_decode_sbuf(
    qT,
    kT_act,
    v_act,
    B: int,
    S: int,
    Hq: int,
    Hkv: int,
    d: int,
    scale: float,
    k_prior=None,
    v_prior=None,
    pos_sb=None,
    prior_len: int | None = None,
    mask=None,
):
    """The decode attention subkernel (everything already in SBUF).

    qT: head-packed [128, QT, B*S] queries (columns (b, s)); kT_act: head-packed [128, KT, B*S]
    active keys; v_act: tok [B*S, Hkv * d] active values. k_prior/v_prior: HBM caches
    [B+, Hkv, S_prior, d] or None; pos_sb: [1, B] int32 SBUF with the number of valid prior
    positions per sequence (None: all `prior_len` are valid). mask: the library's attention
    mask [S_ctx, B, Hq, S] (HBM, nonzero = attend) instead of pos_sb: the first S_ctx - S cache
    positions are the prior keys and mask rows S_ctx - S .. S_ctx are the active tokens.
    Returns attnT [128, QT, B*S] (qT's layout) in qT's dtype.
    """
    NT = B * S
    n_q = Hq * S
    G = Hq // Hkv
    hp = heads_per_tile(d)
    QT, KT = div_ceil(Hq, hp), div_ceil(Hkv, hp)
    cdt = qT.dtype
    kernel_assert(n_q <= P, f"attention_decode_hf: heads x active tokens = {Hq} x {S} = {n_q} exceeds 128")
    kernel_assert(NT <= P, f"attention_decode_hf: batch x active tokens = {NT} exceeds 128")
    Sp = 0 if k_prior is None else (prior_len if prior_len is not None else k_prior.shape[2])
    if mask is not None:
        S_ctx = mask.shape[0]
        S_cache = 0 if k_prior is None else k_prior.shape[2]
        kernel_assert(
            tuple(mask.shape[1:]) == (B, Hq, S) and S <= S_ctx <= S + S_cache,
            f"attention mask {tuple(mask.shape)} must be [S_ctx, {B}, {Hq}, {S}] with {S} <= S_ctx <= "
            f"S + cache length",
        )
        Sp = S_ctx - S
    L = Sp + NT
    attnT = nl.ndarray((P, QT, NT), cdt, buffer=nl.sbuf, name="attnT")

    # Per-row causal bounds of the active segment: row (h, s) sees active columns
    # [b*S, b*S + s + 1) of its own sequence.
    srow = nl.ndarray((n_q, 1), nl.int32, buffer=nl.sbuf, name="row_idx")
    nisa.iota(dst=srow, pattern=[[0, 1]], offset=0, channel_multiplier=1)
    zero = _bound_vector(n_q, 0.0, "zero")
    for b in range(B):
        # -- block-diagonal queries, one stationary per kv tile
        qbd = []
        for jk in range(KT):
            t = nl.ndarray((P, n_q), cdt, buffer=nl.sbuf, name="qbd")
            nisa.memset(dst=t, value=0.0)
            for g in range(jk * hp, min(Hkv, (jk + 1) * hp)):
                for h in range(g * G, (g + 1) * G):
                    copy_rows(
                        t[:, h * S : (h + 1) * S],
                        qT[:, h // hp, b * S : (b + 1) * S],
                        (g % hp) * d,
                        (h % hp) * d,
                        d,
                    )
            qbd.append(t)
        sc = nl.ndarray((n_q, L), nl.float32, buffer=nl.sbuf, name="scores")
        # -- prior segment (the cache)
        kpT = []
        if Sp:
            if mask is not None:
                plen = None
            elif pos_sb is not None:
                pi = nl.broadcast_to(pos_sb[0:1, b : b + 1], (n_q, 1))  # DMA across partitions
                plen = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="prior_len")
                nisa.tensor_copy(dst=plen, src=pi)
            else:
                plen = _bound_vector(n_q, Sp, "prior_len")
            for jk in range(KT):
                g0 = jk * hp
                nk = min(hp, Hkv - g0)
                t = nl.ndarray((P, Sp), cdt, buffer=nl.sbuf, name="kpT")
                nisa.dma_transpose(
                    dst=t[0 : nk * d, :], src=k_prior[b, g0 : g0 + nk, 0:Sp, :], axes=(0, 2, 1)
                )
                kpT.append(t)
            for ct in chunks(Sp, FMAX):
                ps = nl.ndarray((n_q, FMAX), nl.float32, buffer=nl.psum, name="sc_ps")
                rows = [min(hp, Hkv - jk * hp) * d for jk in range(KT)]
                for jk in range(KT):
                    nisa.nc_matmul(
                        dst=ps[:, 0 : ct.size],
                        stationary=qbd[jk][0 : rows[jk], :],
                        moving=kpT[jk][0 : rows[jk], ct.start : ct.stop],
                        accumulate=jk > 0,
                    )
                if mask is not None:
                    nisa.tensor_copy(dst=sc[:, ct.start : ct.stop], src=ps[:, 0 : ct.size])
                    continue
                nisa.range_select(
                    dst=sc[:, ct.start : ct.stop],
                    on_true_tile=ps[:, 0 : ct.size],
                    comp_op0=nl.greater_equal,
                    comp_op1=nl.less,
                    bound0=zero,
                    bound1=plen,
                    range_start=ct.start,
                    on_false_value=NEG_INF,
                )
            if mask is not None:
                keep, bias = mask_keep_bias(mask, b, Hq, S, 0, Sp, name="mask_prior")
                apply_mask(sc[:, 0:Sp], sc[:, 0:Sp], keep, bias)
        # -- active segment (the new tokens of every sequence, masked to this one, causal)
        ps = nl.ndarray((n_q, NT), nl.float32, buffer=nl.psum, name="sca_ps")
        for jk in range(KT):
            rows = min(hp, Hkv - jk * hp) * d
            nisa.nc_matmul(
                dst=ps, stationary=qbd[jk][0:rows, :], moving=kT_act[0:rows, jk, :], accumulate=jk > 0
            )
        if mask is not None:  # this sequence's active columns as the mask says, the others masked
            keep, bias = mask_keep_bias(mask, b, Hq, S, Sp, S, ncols=NT, c0=b * S, name="mask_active")
            apply_mask(sc[:, Sp:L], ps, keep, bias)
        else:
            lo = _bound_vector(n_q, b * S, "act_lo")
            hi = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="act_hi")
            nisa.tensor_scalar(
                dst=hi, data=srow, op0=nl.mod, operand0=float(S), op1=nl.add, operand1=float(b * S + 1)
            )
            nisa.range_select(
                dst=sc[:, Sp:L],
                on_true_tile=ps,
                comp_op0=nl.greater_equal,
                comp_op1=nl.less,
                bound0=lo,
                bound1=hi,
                range_start=0,
                on_false_value=NEG_INF,
            )
        # -- softmax over the whole row
        prob = row_softmax(sc, n_q, L, cdt, scale)
        # -- probabilities transposed: key chunks of <= 128 on partitions
        segs = [(c.start, c.size) for c in chunks(Sp)] + [(Sp, NT)]
        pT = nl.ndarray((P, len(segs), n_q), cdt, buffer=nl.sbuf, name="probT")
        for i, (c0, cs) in enumerate(segs):
            tp = nl.ndarray((P, n_q), cdt, buffer=nl.psum, name="probT_ps")
            nisa.nc_transpose(dst=tp[0:cs, :], data=prob[:, c0 : c0 + cs], engine=nisa.tensor_engine)
            nisa.tensor_copy(dst=pT[0:cs, i, :], src=tp[0:cs, :])
        # -- PV, transposed: R[(kv head, d), (h, s)] = sum_keys V[key, (kv head, d)] P[(h, s), key]
        for jk in range(KT):
            g0 = jk * hp
            nk = min(hp, Hkv - g0)
            rows = nk * d
            pairs = []
            for i, (c0, cs) in enumerate(segs[:-1]):
                vt = nl.ndarray((P, nk, d), cdt, buffer=nl.sbuf, name="vp")
                nisa.dma_copy(dst=vt[0:cs], src=v_prior[b, g0 : g0 + nk, c0 : c0 + cs, :].permute(1, 0, 2))
                pairs.append((vt[0:cs].reshape((cs, rows)), pT[0:cs, i, :]))
            pairs.append((v_act[0:NT, g0 * d : g0 * d + rows], pT[0:NT, len(segs) - 1, :]))
            r = nl.ndarray((P, n_q), nl.float32, buffer=nl.psum, name="pv_ps")
            for i, (s_, m_) in enumerate(pairs):
                nisa.nc_matmul(dst=r[0:rows, :], stationary=s_, moving=m_, accumulate=i > 0)
            # diagonal blocks: query head h reads the rows of its kv head
            rs_sb = None
            for g in range(g0, g0 + nk):
                for h in range(g * G, (g + 1) * G):
                    pd, psrc = (h % hp) * d, (g % hp) * d
                    dst = attnT[:, h // hp, b * S : (b + 1) * S]
                    if pd == psrc:
                        copy_rows(dst, r[:, h * S : (h + 1) * S], pd, psrc, d)
                    else:
                        if rs_sb is None:
                            rs_sb = nl.ndarray((P, n_q), cdt, buffer=nl.sbuf, name="pv_sb")
                            nisa.tensor_copy(dst=rs_sb[0:rows], src=r[0:rows])
                        copy_rows(dst, rs_sb[:, h * S : (h + 1) * S], pd, psrc, d)
    return attnT


def write_kv_cache(cache, x_tok, B: int, S: int, Hkv: int, d: int, pos_sb) -> None:
    """cache[b, :, pos_b : pos_b + S, :] = x_tok rows of sequence b ([B*S, Hkv * d] SBUF);
    pos_b from the [1, B] position tile (a register offset, bounds-checked when it runs)."""
    Sc = cache.shape[2]
    for b in range(B):
        r = position_register(pos_sb, b)
        dst = cache.ap(
            pattern=[[d, S], [Sc * d, Hkv], [1, d]], offset=b * Hkv * Sc * d, scalar_offset=r, indirect_dim=2
        )
        nisa.dma_copy(dst=dst, src=x_tok[b * S : (b + 1) * S, :])


@nki.jit
def attention_decode_hf(
    q,
    k_active,
    v_active,
    k_prior=None,
    v_prior=None,
    position_ids=None,
    scale=None,
    update_cache: bool = False,
    out=None,
):
    """Decode attention of S_active new tokens per sequence against a KV cache, in the Hugging
    Face layouts (neuron-emu's kernel; its core is ``attention_decode_sbuf``). The library's
    attention_tkg is the SBUF subkernel nkilib.core.attention.attention_tkg.attention_tkg.

    Args:
        q: [B, Hq, S_active, d] queries (RoPE already applied).
        k_active, v_active: [B, Hkv, S_active, d] keys/values of the new tokens.
        k_prior, v_prior: [B+, Hkv, S_prior, d] the static KV cache (or None).
        position_ids: [B, 1] (or [1, 1]) int32: how many cache positions are valid for each
            sequence, i.e. the position of its first active token. None: all S_prior.
        scale: softmax scale, default 1/sqrt(d).
        update_cache: also write k_active/v_active into the caches at position_ids (in place).
        out: optional output [B, Hq, S_active, d].

    Key j of the prior is visible iff j < position_ids[b]; active token j' of the same
    sequence is visible to active query s iff j' <= s. Requires Hq * S_active <= 128,
    B * S_active <= 128, d <= 128, Hq % Hkv == 0.

    Returns: out [B, Hq, S_active, d].
    """
    B, Hq, S, d = q.shape
    _, Hkv, Sa, dk = k_active.shape
    kernel_assert(
        (Sa, dk) == (S, d) and tuple(v_active.shape) == tuple(k_active.shape),
        f"attention_decode_hf: k_active {k_active.shape} / v_active {v_active.shape} "
        f"do not match q {q.shape}",
    )
    kernel_assert(
        Hq % Hkv == 0, f"attention_decode_hf: {Hq} query heads are not a multiple of {Hkv} kv heads"
    )
    kernel_assert(d <= P, f"attention_decode_hf: head_dim {d} exceeds 128")
    kernel_assert(
        (k_prior is None) == (v_prior is None), "attention_decode_hf: pass both k_prior and v_prior"
    )
    if k_prior is not None:
        kernel_assert(
            k_prior.shape[0] >= B
            and tuple(k_prior.shape[1:2]) == (Hkv,)
            and k_prior.shape[3] == d
            and tuple(v_prior.shape) == tuple(k_prior.shape),
            f"attention_decode_hf: caches {k_prior.shape} / {v_prior.shape} "
            f"must be [B+, {Hkv}, S_prior, {d}]",
        )
    kernel_assert(
        not update_cache or (k_prior is not None and position_ids is not None),
        "attention_decode_hf: update_cache needs the caches and position_ids",
    )
    NT = B * S
    cdt = compute_dtype(q.dtype)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    if out is None:
        out = nl.ndarray((B, Hq, S, d), dtype=q.dtype, buffer=nl.shared_hbm, name="attn_out")
    q_tok = nl.ndarray((NT, Hq, d), cdt, buffer=nl.sbuf, name="q_tok")
    nisa.dma_copy(dst=q_tok, src=q.permute(0, 2, 1, 3))
    k_tok = nl.ndarray((NT, Hkv, d), cdt, buffer=nl.sbuf, name="k_tok")
    nisa.dma_copy(dst=k_tok, src=k_active.permute(0, 2, 1, 3))
    v_tok = nl.ndarray((NT, Hkv, d), cdt, buffer=nl.sbuf, name="v_tok")
    nisa.dma_copy(dst=v_tok, src=v_active.permute(0, 2, 1, 3))
    q2, k2, v2 = q_tok.reshape((NT, Hq * d)), k_tok.reshape((NT, Hkv * d)), v_tok.reshape((NT, Hkv * d))
    qT = heads_to_T(q2, NT, Hq, d, "qT")
    kT = heads_to_T(k2, NT, Hkv, d, "kT")
    pos_sb = load_positions(position_ids, B) if position_ids is not None else None
    attnT = attention_decode_sbuf(qT, kT, v2, B, S, Hq, Hkv, d, sc, k_prior, v_prior, pos_sb)
    o_tok = nl.ndarray((NT, Hq, d), q.dtype, buffer=nl.sbuf, name="o_tok")
    if q.dtype == cdt:
        T_to_heads(attnT, NT, Hq, d, o_tok.reshape((NT, Hq * d)))
    else:
        tmp = nl.ndarray((NT, Hq * d), cdt, buffer=nl.sbuf, name="o_tmp")
        T_to_heads(attnT, NT, Hq, d, tmp)
        nisa.tensor_copy(dst=o_tok.reshape((NT, Hq * d)), src=tmp)
    nisa.dma_copy(dst=out.permute(0, 2, 1, 3), src=o_tok)
    if update_cache:
        write_kv_cache(k_prior, k2, B, S, Hkv, d, pos_sb)
        write_kv_cache(v_prior, v2, B, S, Hkv, d, pos_sb)
    return out
