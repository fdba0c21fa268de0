"""Attention for context encoding (prefill): flash attention over 512-key tiles with an online
softmax, causal masking, GQA, and prefix caching (prior keys/values of a runtime length)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import get_verified_program_sharding_info
from ..utils.tile_ops import FMAX, P, chunks, compute_dtype

NEG = -3.4028234663852886e38


def _shape_qkv(q, k, v, tp_q, tp_k):
    bs, a, b = q.shape
    sq, d = (a, b) if tp_q else (b, a)
    bs_kv, c, e = k.shape
    skv, dk = (c, e) if tp_k else (e, c)
    return bs, sq, d, bs_kv, skv, dk


def _load_bound(bound, q0: int, qs: int, name: str):
    """Rows q0 .. q0 + qs of an int32 [seqlen_q, 1] bound, as fp32 [qs, 1] (range_select's bounds)."""
    bi = nl.ndarray((qs, 1), nl.int32, buffer=nl.sbuf, name=name + "_i")
    nisa.dma_copy(dst=bi, src=bound[q0 : q0 + qs, :])
    bf = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name=name)
    nisa.tensor_copy(dst=bf, src=bi)
    return bf


@nki.jit
def attention_cte(
    q,
    k,
    v,
    scale: float = 1.0,
    causal_mask: bool = True,
    k_prior=None,
    v_prior=None,
    prior_used_len=None,
    sink=None,
    sliding_window=None,
    tp_q: bool = True,
    tp_k: bool = False,
    tp_out: bool = False,
    cache_softmax: bool = False,
    softmax_dtype=nl.float32,
    mm_out_dtype=nl.float32,
    cp_offset=None,
    global_cp_deg=None,
    cp_strided_q_slicing: bool = False,
    bound_min=None,
    bound_max=None,
):
    """softmax(scale * q @ k^T [masked]) @ v for each of `batch_size` sequences (heads are part
    of the batch dimension).

    Args (as in nkilib.core.attention.attention_cte):
        q: [batch_size, seqlen_q, d] (tp_q=True) or [batch_size, d, seqlen_q].
        k: [batch_size_kv, d, seqlen_kv] (tp_k=False) or [batch_size_kv, seqlen_kv, d] (tp_k=True).
        v: [batch_size_kv, seqlen_kv, d]. GQA: batch_size % batch_size_kv == 0, query sequence
            b uses kv sequence b // (batch_size // batch_size_kv) (like repeat_interleave).
        scale: applied to the scores.
        causal_mask: active key j is visible to query i iff j <= i.
        k_prior, v_prior, prior_used_len: prefix caching. The first prior_used_len[0] (a
            runtime int32 value) positions of the prior are prepended to the active keys,
            visible to every query. Layouts as k and v.
        tp_out: output [batch_size, d, seqlen_q] instead of [batch_size, seqlen_q, d].
        sink, sliding_window, cache_softmax, cp_offset, global_cp_deg: not supported.
        softmax_dtype: float32 only.
        mm_out_dtype: the matmul (PSUM) dtype: float32 (bfloat16 needs NeuronCore-v4).
        bound_min, bound_max: sequence packing: int32 [seqlen_q, 1]; query i sees only keys j
            with bound_min[i] <= j < bound_max[i] (and j <= i with causal_mask). Not with
            prefix caching.

    A launch grid splits the (sequence, 128-query tile) work items between the programs.

    Returns: the attention output (dtype of q).
    """
    kernel_assert(sink is None, "attention_cte: sink is not supported on neuron-emu")
    kernel_assert(not sliding_window, "attention_cte: sliding_window is not supported on neuron-emu")
    kernel_assert(not cache_softmax, "attention_cte: cache_softmax is not supported on neuron-emu")
    kernel_assert(
        cp_offset is None and global_cp_deg is None, "attention_cte: context parallelism is not supported"
    )
    kernel_assert(softmax_dtype == nl.float32, "attention_cte: softmax_dtype must be float32")
    kernel_assert(
        mm_out_dtype == nl.float32,
        f"attention_cte: mm_out_dtype {mm_out_dtype} must be float32 (bfloat16 PSUM needs NeuronCore-v4)",
    )
    kernel_assert(
        (bound_min is None) == (bound_max is None), "attention_cte: bound_min and bound_max go together"
    )
    packed = bound_min is not None
    bs, sq, d, bs_kv, skv, dk = _shape_qkv(q, k, v, tp_q, tp_k)
    kernel_assert(
        d == dk and tuple(v.shape) == (bs_kv, skv, d),
        f"attention_cte: shapes q {q.shape}, k {k.shape}, v {v.shape} do not agree (tp_q={tp_q}, tp_k={tp_k})",
    )
    kernel_assert(d <= P, f"attention_cte: head dim {d} exceeds 128")
    kernel_assert(bs % bs_kv == 0, f"attention_cte: batch {bs} is not a multiple of kv batch {bs_kv}")
    prefix = k_prior is not None
    kernel_assert(
        prefix == (v_prior is not None) == (prior_used_len is not None),
        "attention_cte: prefix caching needs k_prior, v_prior and prior_used_len",
    )
    sp = 0
    if prefix:
        _, _, _, bpk, sp, dpk = _shape_qkv(q, k_prior, v_prior, tp_q, tp_k)
        kernel_assert(
            bpk == bs_kv and dpk == d and tuple(v_prior.shape) == (bs_kv, sp, d),
            f"attention_cte: k_prior {k_prior.shape} / v_prior {v_prior.shape} do not match k/v",
        )
    if packed:
        kernel_assert(
            tuple(bound_min.shape) == (sq, 1) and tuple(bound_max.shape) == (sq, 1),
            f"attention_cte: bound_min {bound_min.shape} / bound_max {bound_max.shape} must be ({sq}, 1)",
        )
        kernel_assert(not prefix, "attention_cte: sequence packing (bound_min/max) is not supported with prefix caching")
    group = bs // bs_kv
    cdt = compute_dtype(q.dtype)
    out = nl.ndarray(
        (bs, d, sq) if tp_out else (bs, sq, d), dtype=q.dtype, buffer=nl.shared_hbm, name="attn_out"
    )
    _, n_prgs, prg_id = get_verified_program_sharding_info("attention_cte", (0, 1), 8)
    sc = float(scale)

    work = [(b, qt) for b in range(bs) for qt in chunks(sq)]
    for idx, (b, qt) in enumerate(work):
        if idx % n_prgs != prg_id:
            continue
        kb = b // group
        q0, qs = qt.start, qt.size
        qT = nl.ndarray((d, qs), cdt, buffer=nl.sbuf, name="qT")
        if tp_q:
            nisa.dma_transpose(dst=qT, src=q[b, q0 : q0 + qs, :], axes=(1, 0))
        else:
            nisa.dma_copy(dst=qT, src=q[b, :, q0 : q0 + qs])
        m = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="m")
        nisa.memset(dst=m, value=NEG)
        lsum = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="l")
        nisa.memset(dst=lsum, value=0.0)
        acc = nl.ndarray((qs, d), nl.float32, buffer=nl.sbuf, name="acc")
        nisa.memset(dst=acc, value=0.0)
        zero = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="zero")
        nisa.memset(dst=zero, value=0.0)
        if packed:
            # per-row key range [bound_min, bound_max), intersected with the causal bound
            zero = _load_bound(bound_min, q0, qs, "bound_lo")
            pk_hi = _load_bound(bound_max, q0, qs, "bound_hi")
        tiles = []
        if prefix:
            plen_i = nl.ndarray((qs, 1), nl.int32, buffer=nl.sbuf, name="plen_i")
            nisa.dma_copy(
                dst=plen_i,
                src=prior_used_len.reshape((1, 1)).broadcast(0, qs)
                if qs > 1
                else prior_used_len.reshape((1, 1)),
            )
            plen = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="plen")
            nisa.tensor_copy(dst=plen, src=plen_i)
            tiles += [("prior", kt, plen) for kt in chunks(sp, FMAX)]
        if causal_mask:
            # query row p sees active keys < q0 + p + 1
            rowi = nl.ndarray((qs, 1), nl.int32, buffer=nl.sbuf, name="rowi")
            nisa.iota(dst=rowi, pattern=[[0, 1]], offset=q0 + 1, channel_multiplier=1)
            chi = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="causal_hi")
            nisa.tensor_copy(dst=chi, src=rowi)
            if packed:
                nisa.tensor_tensor(dst=chi, data1=chi, data2=pk_hi, op=nl.minimum)
            tiles += [("active", kt, chi) for kt in chunks(skv, FMAX) if kt.start <= q0 + qs - 1]
        else:
            tiles += [("active", kt, pk_hi if packed else None) for kt in chunks(skv, FMAX)]
        for seg, kt, hi in tiles:
            kk, vv = (k_prior, v_prior) if seg == "prior" else (k, v)
            k0, ks = kt.start, kt.size
            kT = nl.ndarray((d, FMAX), cdt, buffer=nl.sbuf, name="kT")
            if tp_k:
                nisa.dma_transpose(dst=kT[:, 0:ks], src=kk[kb, k0 : k0 + ks, :], axes=(1, 0))
            else:
                nisa.dma_copy(dst=kT[:, 0:ks], src=kk[kb, :, k0 : k0 + ks])
            s_ps = nl.ndarray((qs, FMAX), nl.float32, buffer=nl.psum, name="s_ps")
            nisa.nc_matmul(dst=s_ps[:, 0:ks], stationary=qT, moving=kT[:, 0:ks], accumulate=False)
            s = nl.ndarray((qs, FMAX), nl.float32, buffer=nl.sbuf, name="s")
            full_visible = hi is None or (seg == "active" and k0 + ks - 1 <= q0 and not packed)
            if full_visible:
                nisa.tensor_copy(dst=s[:, 0:ks], src=s_ps[:, 0:ks])
            else:
                nisa.range_select(
                    dst=s[:, 0:ks],
                    on_true_tile=s_ps[:, 0:ks],
                    comp_op0=nl.greater_equal,
                    comp_op1=nl.less,
                    bound0=zero,
                    bound1=hi,
                    range_start=k0,
                    on_false_value=NEG,
                )
            mx = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="mx")
            nisa.tensor_reduce(dst=mx, op=nl.maximum, data=s[:, 0:ks], axis=1)
            m_new = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="m_new")
            nisa.tensor_tensor(dst=m_new, data1=m, data2=mx, op=nl.maximum)
            nb = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="nb")
            nisa.tensor_scalar(dst=nb, data=m_new, op0=nl.multiply, operand0=-sc)
            p = nl.ndarray((qs, FMAX), cdt, buffer=nl.sbuf, name="p")
            rs = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="rs")
            nisa.activation(
                dst=p[:, 0:ks],
                op=nl.exp,
                data=s[:, 0:ks],
                bias=nb,
                scale=sc,
                reduce_op=nl.add,
                reduce_res=rs,
                reduce_cmd=nisa.reduce_cmd.reset_reduce,
            )
            corr = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="corr")
            nisa.activation(dst=corr, op=nl.exp, data=m, bias=nb, scale=sc)
            nisa.scalar_tensor_tensor(
                dst=lsum, data=lsum, op0=nl.multiply, operand0=corr, op1=nl.add, operand1=rs
            )
            vt = nl.ndarray((P, FMAX // P, d), cdt, buffer=nl.sbuf, name="v")
            pv = nl.ndarray((qs, d), nl.float32, buffer=nl.psum, name="pv_ps")
            cks = chunks(ks)
            for c in cks:
                nisa.dma_copy(dst=vt[0 : c.size, c.index, :], src=vv[kb, k0 + c.start : k0 + c.stop, :])
                tp = nl.ndarray((P, qs), cdt, buffer=nl.psum, name="pT_ps")
                nisa.nc_transpose(
                    dst=tp[0 : c.size, :], data=p[:, c.start : c.stop], engine=nisa.tensor_engine
                )
                pT = nl.ndarray((P, qs), cdt, buffer=nl.sbuf, name="pT")
                nisa.tensor_copy(dst=pT[0 : c.size], src=tp[0 : c.size])
                nisa.nc_matmul(
                    dst=pv,
                    stationary=pT[0 : c.size],
                    moving=vt[0 : c.size, c.index, :],
                    accumulate=c.index > 0,
                )
            nisa.scalar_tensor_tensor(
                dst=acc, data=acc, op0=nl.multiply, operand0=corr, op1=nl.add, operand1=pv
            )
            nisa.tensor_copy(dst=m, src=m_new)
        rl = nl.ndarray((qs, 1), nl.float32, buffer=nl.sbuf, name="rl")
        nisa.reciprocal(dst=rl, data=lsum)
        o = nl.ndarray((qs, d), q.dtype, buffer=nl.sbuf, name="o")
        nisa.tensor_scalar(dst=o, data=acc, op0=nl.multiply, operand0=rl)
        if tp_out:
            nisa.dma_copy(dst=out[b, :, q0 : q0 + qs].permute(1, 0), src=o)
        else:
            nisa.dma_copy(dst=out[b, q0 : q0 + qs, :], src=o)
    return out
