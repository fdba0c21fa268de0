"""Attention for token generation (decode) as the NKI Library defines it: an SBUF subkernel for
one KV head, called from inside a kernel, configured by ``AttnTKGConfig``.

Per sequence b the n_q = H * s_active query columns (h, s) of ``q`` [d, B*H*s] (SBUF) attend to
the window of ``curr_sprior`` keys of the cache whose last ``s_active`` slots are taken by the
active keys/values (the caller's cache content there is ignored), masked by ``mask``:

* Scores [n_q, s_prior] land in PSUM with q as the stationary operand and K^T [d, keys] moving
  (k_prior is DMA-transposed when ``tp_k_prior``, else loaded as it is).
* The mask is applied exactly (kept scores are not rounded): score * m + (m - 1) * FLT_MAX; with
  ``use_pos_id`` the prior keys are cut by range_select at rope_pos_ids[b, 0] and only the
  active tail reads the [s_active, B, H, s_active] mask.
* Softmax along the free dimension in fp32 (an attention sink joins the max and the sum); the
  probabilities are transposed on the Tensor Engine and PV comes out transposed, [d, n_q],
  which is the ``out`` layout ([d, B*H*s] in SBUF or [B, H, d, s] in HBM).
* ``fuse_rope``: q [B, H, s, d] and k_active [B, 1, s, d] come from HBM, rotate-half RoPE
  with cos/sin of rope_pos_ids * inv_freqs is applied on d partitions, q is scaled by
  1/sqrt(d), and the rotated keys are returned in ``k_out``.

LNC=2: with outputs in HBM the two programs take alternate sequences; with an output in SBUF
every program computes all of them (each core's SBUF gets the whole result).
"""

from __future__ import annotations

import math

import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.tile_ops import FMAX, P, chunks
from .attention_decode_hf import apply_mask, copy_rows, mask_keep_bias, row_softmax
from .attention_tkg_utils import AttnTKGConfig

_FLT_MAX = 3.4028234663852886e38
_MAX_D_HEAD = 128


def _is_sbuf(t) -> bool:
    return getattr(t, "buffer", None) == nl.sbuf


def _check_shape(name: str, t, shape) -> None:
    kernel_assert(t is not None, f"attention_tkg: {name} is required")
    kernel_assert(
        tuple(t.shape) == tuple(shape),
        f"attention_tkg: {name} has shape {tuple(t.shape)}; expected {tuple(shape)}",
    )


def _check_args(
    q, k_active, v_active, k_prior, v_prior, mask, out, cfg, k_out, rope_pos_ids, inv_freqs, sink
):
    B, H, s, Sp, Sf, d = cfg.bs, cfg.q_head, cfg.s_active, cfg.curr_sprior, cfg.full_sprior, cfg.d_head
    kernel_assert(min(B, H, s, d) > 0, f"attention_tkg: cfg needs bs, q_head, s_active, d_head > 0 ({cfg})")
    kernel_assert(s <= Sp <= Sf, f"attention_tkg: need s_active {s} <= curr_sprior {Sp} <= full_sprior {Sf}")
    kernel_assert(d <= _MAX_D_HEAD, f"attention_tkg: d_head {d} exceeds {_MAX_D_HEAD}")
    kernel_assert(H * s <= P, f"attention_tkg: q_head x s_active = {H} x {s} exceeds {P}")
    if cfg.qk_in_sb:
        _check_shape("q", q, (d, B * H * s))
        _check_shape("k_active", k_active, (d, B * s))
    else:
        _check_shape("q", q, (B, H, s, d))
        _check_shape("k_active", k_active, (B, 1, s, d))
    _check_shape("v_active", v_active, (B, 1, s, d))
    kp_tail = (Sf, d) if cfg.tp_k_prior else (d, Sf)
    for name, t, tail in (("k_prior", k_prior, kp_tail), ("v_prior", v_prior, (Sf, d))):
        kernel_assert(t is not None, f"attention_tkg: {name} is required")
        kernel_assert(
            len(t.shape) == 4 and t.shape[0] >= B and t.shape[1] == 1 and tuple(t.shape[2:]) == tail,
            f"attention_tkg: {name} has shape {tuple(t.shape)}; "
            f"expected [B+ >= {B}, 1, {tail[0]}, {tail[1]}] (tp_k_prior={cfg.tp_k_prior})",
        )
    _check_shape("mask", mask, (s if cfg.use_pos_id else Sp, B, H, s))
    _check_shape("out", out, (d, B * H * s) if cfg.out_in_sb else (B, H, d, s))
    kernel_assert(
        _is_sbuf(out) == bool(cfg.out_in_sb),
        f"attention_tkg: out_in_sb={cfg.out_in_sb} but out is in {out.buffer}",
    )
    if cfg.fuse_rope:
        _check_shape("inv_freqs", inv_freqs, (d // 2, 1))
        kernel_assert(d % 2 == 0, f"attention_tkg: RoPE needs an even d_head ({d})")
        if k_out is not None:
            _check_shape("k_out", k_out, (d, B * s) if cfg.k_out_in_sb else (B, 1, d, s))
            kernel_assert(
                _is_sbuf(k_out) == bool(cfg.k_out_in_sb),
                f"attention_tkg: k_out_in_sb={cfg.k_out_in_sb} but k_out is in {k_out.buffer}",
            )
        kernel_assert(k_out is not None or not cfg.k_out_in_sb, "attention_tkg: k_out_in_sb needs k_out")
    if cfg.fuse_rope or cfg.use_pos_id:
        _check_shape("rope_pos_ids", rope_pos_ids, (B, s))
    if sink is not None:
        _check_shape("sink", sink, (H, 1))


def _rope_coefficients(inv_freqs, rope_pos_ids, B: int, s: int, d: int):
    """cos, sin [d, B*s] fp32 of angle rope_pos_ids[b, s] * inv_freqs[i % (d/2)]: inv_freqs is
    loaded into both halves of the partitions, so no cross-partition copy is needed."""
    half = d // 2
    inv = nl.ndarray((d, 1), nl.float32, buffer=nl.sbuf, name="rope_inv_freqs")
    nisa.dma_copy(dst=inv[0:half], src=inv_freqs)
    nisa.dma_copy(dst=inv[half:d], src=inv_freqs)
    pos_i = nl.ndarray((d, B * s), rope_pos_ids.dtype, buffer=nl.sbuf, name="rope_pos")
    nisa.dma_copy(dst=pos_i, src=rope_pos_ids.reshape((1, B * s)).broadcast(0, d))
    ang = nl.ndarray((d, B * s), nl.float32, buffer=nl.sbuf, name="rope_angle")
    nisa.tensor_copy(dst=ang, src=pos_i)
    nisa.tensor_scalar(dst=ang, data=ang, op0=nl.multiply, operand0=inv)
    cos = nl.ndarray((d, B * s), nl.float32, buffer=nl.sbuf, name="rope_cos")
    sin = nl.ndarray((d, B * s), nl.float32, buffer=nl.sbuf, name="rope_sin")
    nisa.activation(dst=cos, op=nl.cos, data=ang)
    nisa.activation(dst=sin, op=nl.sin, data=ang)
    return cos, sin


def _rope_T(x_hbm, cos, sin, B: int, n: int, s: int, d: int, scale: float, dst, name: str) -> None:
    """dst [d, B*n*s] <- RoPE(x) * scale, x [B, n, s, d] in HBM loaded transposed (columns
    (b, h, s)); cos/sin [d, B*s] are read once per head."""
    N = B * n * s
    half = d // 2
    x = nl.ndarray((d, B, n, s), nl.float32, buffer=nl.sbuf, name=name + "_x")
    nisa.dma_copy(dst=x, src=x_hbm.permute(3, 0, 1, 2))
    rot = nl.ndarray((d, B, n, s), nl.float32, buffer=nl.sbuf, name=name + "_rot")
    copy_rows(rot, x, 0, half, half)
    copy_rows(rot, x, half, 0, half)
    nisa.tensor_scalar(dst=rot[0:half], data=rot[0:half], op0=nl.multiply, operand0=-1.0)
    c3, s3 = cos.reshape((d, B, s)), sin.reshape((d, B, s))
    for h in range(n):
        nisa.tensor_tensor(dst=x[:, :, h, :], data1=x[:, :, h, :], data2=c3, op=nl.multiply)
        nisa.tensor_tensor(dst=rot[:, :, h, :], data1=rot[:, :, h, :], data2=s3, op=nl.multiply)
    nisa.tensor_tensor(dst=x, data1=x, data2=rot, op=nl.add)
    flat = x.reshape((d, N))
    if scale != 1.0:
        nisa.tensor_scalar(dst=dst, data=flat, op0=nl.multiply, operand0=float(scale))
    else:
        nisa.tensor_copy(dst=dst, src=flat)


def _load_sink(sink, H: int, s: int):
    """[H*s, 1] fp32: sink[h] on the s rows of head h."""
    t = nl.ndarray((H * s, 1), sink.dtype, buffer=nl.sbuf, name="sink_rows")
    for h in range(H):
        nisa.dma_copy(dst=t[h * s : (h + 1) * s], src=sink[h : h + 1, :].broadcast(0, s))
    f = nl.ndarray((H * s, 1), nl.float32, buffer=nl.sbuf, name="sink_f32")
    nisa.tensor_copy(dst=f, src=t)
    return f


def _attend_one(b, q_sb, k_active_sb, v_active, k_prior, v_prior, mask, pos_rows, sink_rows, cfg, out_tile):
    """out_tile [d, H*s] (PSUM, fp32) <- attention of sequence b."""
    H, s, Sp, d = cfg.q_head, cfg.s_active, cfg.curr_sprior, cfg.d_head
    n_q = H * s
    cdt = q_sb.dtype
    t0 = Sp - s  # first slot of the active keys in the window
    qb = q_sb[:, b * n_q : (b + 1) * n_q]
    # K^T of the window, the active keys in its last s columns
    kT = nl.ndarray((d, Sp), k_prior.dtype, buffer=nl.sbuf, name="kT")
    if t0 > 0:
        if cfg.tp_k_prior:
            nisa.dma_transpose(dst=kT[:, 0:t0], src=k_prior[b, 0:1, 0:t0, :], axes=(0, 2, 1))
        else:
            nisa.dma_copy(dst=kT[:, 0:t0], src=k_prior[b, 0, :, 0:t0])
    nisa.tensor_copy(dst=kT[:, t0:Sp], src=k_active_sb[:, b * s : (b + 1) * s])
    sc = nl.ndarray((n_q, Sp), nl.float32, buffer=nl.sbuf, name="scores")
    for ct in chunks(Sp, FMAX):
        ps = nl.ndarray((n_q, FMAX), nl.float32, buffer=nl.psum, name="scores_ps")
        nisa.nc_matmul(dst=ps[:, 0 : ct.size], stationary=qb, moving=kT[:, ct.start : ct.stop])
        if pos_rows is None:
            nisa.tensor_copy(dst=sc[:, ct.start : ct.stop], src=ps[:, 0 : ct.size])
        else:  # in-kernel mask of the prior keys: key j kept iff j < rope_pos_ids[b, 0]
            zero = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="zero")
            nisa.memset(dst=zero, value=0.0)
            nisa.range_select(
                dst=sc[:, ct.start : ct.stop],
                on_true_tile=ps[:, 0 : ct.size],
                comp_op0=nl.greater_equal,
                comp_op1=nl.less,
                bound0=zero,
                bound1=pos_rows[b],
                range_start=ct.start,
                on_false_value=-_FLT_MAX,
            )
    if pos_rows is None:
        keep, bias = mask_keep_bias(mask, b, H, s, 0, Sp, name="mask")
        apply_mask(sc, sc, keep, bias)
    else:  # the active tail: the [s_active, B, H, s_active] mask decides
        keep, bias = mask_keep_bias(mask, b, H, s, 0, s, name="active_mask")
        ps = nl.ndarray((n_q, s), nl.float32, buffer=nl.psum, name="tail_ps")
        nisa.nc_matmul(dst=ps, stationary=qb, moving=kT[:, t0:Sp])
        apply_mask(sc[:, t0:Sp], ps, keep, bias)
    # softmax over the window (and the sink)
    prob = row_softmax(sc, n_q, Sp, cdt, sink_rows=sink_rows)
    # PV transposed: out[d, (h, s)] = sum over key chunks V[keys, d]^T P^T[keys, (h, s)]
    segs = chunks(Sp)
    for i, c in enumerate(segs):
        tp = nl.ndarray((P, n_q), cdt, buffer=nl.psum, name="probT_ps")
        nisa.nc_transpose(dst=tp[0 : c.size], data=prob[:, c.start : c.stop], engine=nisa.tensor_engine)
        pT = nl.ndarray((P, n_q), cdt, buffer=nl.sbuf, name="probT")
        nisa.tensor_copy(dst=pT[0 : c.size], src=tp[0 : c.size])
        vt = nl.ndarray((P, d), v_prior.dtype, buffer=nl.sbuf, name="v")
        lo, hi = max(c.start, t0), c.stop  # active rows of this chunk: [lo, hi) when lo < hi
        if c.start < min(t0, c.stop):
            n_prior = min(t0, c.stop) - c.start
            nisa.dma_copy(dst=vt[0:n_prior], src=v_prior[b, 0, c.start : c.start + n_prior, :])
        if lo < hi:
            nisa.dma_copy(dst=vt[lo - c.start : hi - c.start], src=v_active[b, 0, lo - t0 : hi - t0, :])
        nisa.nc_matmul(dst=out_tile, stationary=vt[0 : c.size], moving=pT[0 : c.size], accumulate=i > 0)


def attention_tkg(
    q,
    k_active,
    v_active,
    k_prior,
    v_prior,
    mask,
    out,
    cfg: AttnTKGConfig,
    sbm,
    inv_freqs=None,
    rope_pos_ids=None,
    start_pos_ids=None,
    sink=None,
    active_blocks_table=None,
    k_out=None,
    DBG_TENSORS=None,
):
    """Token-generation attention for one KV head (GQA/MQA: all q_head query heads read it), the
    NKI Library's SBUF subkernel; call it from inside an ``nki.jit`` kernel.

    Shapes (B = cfg.bs, H = cfg.q_head, s = cfg.s_active, d = cfg.d_head, s_prior =
    cfg.curr_sprior <= cfg.full_sprior = S):
        q: [d, B*H*s] SBUF (column b*H*s + h*s + i) if cfg.qk_in_sb, else [B, H, s, d] HBM
            (fuse_rope only). Scaled by 1/sqrt(d) by the kernel iff cfg.fuse_rope.
        k_active: [d, B*s] SBUF if cfg.qk_in_sb, else [B, 1, s, d] HBM. v_active: [B, 1, s, d].
        k_prior: [B+, 1, S, d] if cfg.tp_k_prior else [B+, 1, d, S]; v_prior: [B+, 1, S, d].
            The window is the first s_prior positions; its last s slots hold the active tokens.
        mask: [s_prior, B, H, s] (key, batch, head, query; nonzero = attend), or with
            cfg.use_pos_id [s, B, H, s] for the active tail only, prior keys j < rope_pos_ids[b, 0]
            being attended.
        out: [d, B*H*s] SBUF if cfg.out_in_sb, else [B, H, d, s] HBM; written in place.
        sbm: the caller's SbufManager (accepted; buffers here are allocated by nl.ndarray).
        inv_freqs [d/2, 1], rope_pos_ids [B, s]: RoPE (cfg.fuse_rope) and the in-kernel mask.
        sink: [H, 1] attention-sink logits (join the softmax, carry no value).
        k_out: the rotated keys (cfg.fuse_rope): [d, B*s] SBUF if cfg.k_out_in_sb, else
            [B, 1, d, s] HBM.
        start_pos_ids, active_blocks_table, DBG_TENSORS (sliding window, block KV cache, debug
            taps) are not supported here and raise.

    Returns (out, k_out).
    """
    kernel_assert(
        isinstance(cfg, AttnTKGConfig), f"attention_tkg: cfg must be an AttnTKGConfig, got {type(cfg)}"
    )
    kernel_assert(
        cfg.block_len == 0 and active_blocks_table is None,
        "attention_tkg: the block KV cache (block_len, active_blocks_table) is not supported by neuron-emu's "
        "attention_tkg; use a flat cache [B, 1, S, d]",
    )
    kernel_assert(
        start_pos_ids is None, "attention_tkg: sliding-window masks (start_pos_ids) are not supported"
    )
    kernel_assert(not DBG_TENSORS, "attention_tkg: DBG_TENSORS (debug taps) are not supported")
    kernel_assert(
        cfg.qk_in_sb or cfg.fuse_rope,
        "attention_tkg: without fuse_rope, q and k_active must be in SBUF (cfg.qk_in_sb=True), "
        "as in the library",
    )
    _check_args(q, k_active, v_active, k_prior, v_prior, mask, out, cfg, k_out, rope_pos_ids, inv_freqs, sink)
    B, H, s, d = cfg.bs, cfg.q_head, cfg.s_active, cfg.d_head
    n_q = H * s
    n_prgs, prg = nl.num_programs(0), nl.program_id(0)
    kernel_assert(n_prgs <= 2, f"attention_tkg: runs unsharded or on LNC=2, not a grid of {n_prgs}")
    in_sb = cfg.out_in_sb or (cfg.fuse_rope and cfg.k_out_in_sb)
    mine = range(B) if in_sb or n_prgs == 1 else range(prg, B, n_prgs)

    if cfg.fuse_rope:
        cos, sin = _rope_coefficients(inv_freqs, rope_pos_ids, B, s, d)
        q_sb = nl.ndarray((d, B * n_q), q.dtype, buffer=nl.sbuf, name="q_rope")
        _rope_T(q, cos, sin, B, H, s, d, 1.0 / math.sqrt(d), q_sb, "q")
        k_sb = (
            k_out
            if cfg.k_out_in_sb
            else nl.ndarray((d, B * s), k_active.dtype, buffer=nl.sbuf, name="k_rope")
        )
        _rope_T(k_active, cos, sin, B, 1, s, d, 1.0, k_sb, "k")
        if k_out is not None and not cfg.k_out_in_sb:
            k3 = k_sb.reshape((d, B, s))
            for b in range(prg, B, n_prgs):  # each sequence's keys stored once
                nisa.dma_copy(dst=k_out[b, 0], src=k3[:, b, :])
    else:
        q_sb, k_sb = q, k_active

    pos_rows = None
    if cfg.use_pos_id:
        pos_rows = {}
        for b in mine:
            pi = nl.ndarray((n_q, 1), rope_pos_ids.dtype, buffer=nl.sbuf, name="pos_rows_i")
            nisa.dma_copy(dst=pi, src=rope_pos_ids[b : b + 1, 0:1].broadcast(0, n_q))
            pf = nl.ndarray((n_q, 1), nl.float32, buffer=nl.sbuf, name="pos_rows")
            nisa.tensor_copy(dst=pf, src=pi)
            pos_rows[b] = pf
    sink_rows = _load_sink(sink, H, s) if sink is not None else None

    for b in mine:
        ps = nl.ndarray((d, n_q), nl.float32, buffer=nl.psum, name="out_ps")
        _attend_one(b, q_sb, k_sb, v_active, k_prior, v_prior, mask, pos_rows, sink_rows, cfg, ps)
        if cfg.out_in_sb:
            nisa.tensor_copy(dst=out[:, b * n_q : (b + 1) * n_q], src=ps)
        else:
            o = nl.ndarray((d, H, s), out.dtype, buffer=nl.sbuf, name="out_sb")
            nisa.tensor_copy(dst=o.reshape((d, n_q)), src=ps)
            nisa.dma_copy(dst=out[b].permute(1, 0, 2), src=o)
    return out, k_out
