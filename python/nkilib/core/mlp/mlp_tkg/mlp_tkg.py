"""The MLP body shared by the token-generation and context-encoding paths: gate/up projection
with the activation fused, then the down projection, on hidden-transposed (hT) activations.

For T tokens (T <= 128 per call) and weights W_gate/W_up [H, I], W_down [I, H]:

    actT[i, t]  = act(x @ W_gate)[t, i] * (x @ W_up)[t, i]        (I on partitions)
    out[t, h]   = (act @ W_down)[t, h]                           (token-major, HBM store)
    outT[h, t]  = ...                                            (hT, stays in SBUF)

Gate/up run with the weights as the stationary operand ([128 x 128] weight tiles against the
[128 x T] activations): at decode sizes a matmul costs max(64, T) cycles instead of 512, and
the activation comes out with I on partitions, which is exactly the stationary operand the
down projection needs (no transposes anywhere). Weights stream through SBUF in column blocks,
each element loaded once.
"""

from __future__ import annotations

import nki.isa as nisa
import nki.language as nl

from ...utils.common_types import ActFnType, NormType, WeightLayout
from ...utils.kernel_helpers import div_ceil, get_verified_program_sharding_info, shard_range
from ...utils.tile_ops import (
    FMAX,
    P,
    act_op,
    chunks,
    compute_dtype,
    load_hT,
    load_row_broadcast,
    load_vec_T,
    load_wT,
    proj_T,
    rmsnorm_hT,
    store_hT,
)

WEIGHT_TILE_BUDGET = 48 * 1024  # bytes per partition for one streamed weight block


def column_block(K: int, N: int, es: int, quantum: int = P, cap: int | None = None) -> int:
    """Columns per streamed weight block: as many as fit WEIGHT_TILE_BUDGET (multiple of quantum)."""
    kc = div_ceil(K, P)
    cols = max(quantum, (WEIGHT_TILE_BUDGET // (kc * es)) // quantum * quantum)
    if cap is not None:
        cols = min(cols, cap)
    return min(N, cols)


class MlpWeights:
    """The three projection weights of an MLP and how they are laid out in HBM."""

    def __init__(self, gate, up, down, layout: WeightLayout, H: int, I: int, dtype, skip_gate=False):
        self.gate, self.up, self.down = gate, up, down
        self.layout, self.H, self.I, self.dtype = layout, H, I, dtype
        self.skip_gate = skip_gate


def _clamp(t, lower, upper):
    if upper is not None and lower is not None:
        nisa.tensor_scalar(
            dst=t, data=t, op0=nl.minimum, operand0=float(upper), op1=nl.maximum, operand1=float(lower)
        )
    elif upper is not None:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.minimum, operand0=float(upper))
    elif lower is not None:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.maximum, operand0=float(lower))


def gate_up_act(
    xT,
    T: int,
    w: MlpWeights,
    activation_fn: ActFnType = ActFnType.SiLU,
    gate_bias=None,
    up_bias=None,
    gate_clamp=(None, None),
    up_clamp=(None, None),
    i0: int = 0,
    i1: int | None = None,
):
    """actT [128, KI, T] (w.dtype) = act(x @ W_gate + b_g) * (x @ W_up + b_u), transposed.
    xT: hT [128, KH, T]. gate_clamp/up_clamp: (lower, upper) applied before the activation.
    [i0, i1) (i0 a multiple of 128): only these intermediate columns (one core's share at
    LNC=2), in actT's tiles 0.. (only their weight columns are read)."""
    H, I, cdt = w.H, w.I, w.dtype
    i1 = I if i1 is None else i1
    KI = div_ceil(i1 - i0, P)
    op = act_op(activation_fn)
    actT = nl.ndarray((P, KI, T), cdt, buffer=nl.sbuf, name="actT")
    gbT = load_vec_T(gate_bias, I, nl.float32, name="gate_bias") if gate_bias is not None else None
    ubT = load_vec_T(up_bias, I, nl.float32, name="up_bias") if up_bias is not None else None
    plain_up = ubT is None and up_clamp == (None, None)
    for blk in chunks(i1 - i0, column_block(H, i1 - i0, cdt.itemsize)):
        b0 = i0 + blk.start
        uw = load_wT(w.up, w.layout, H, b0, blk.size, cdt, name="w_up")
        gw = None if w.skip_gate else load_wT(w.gate, w.layout, H, b0, blk.size, cdt, name="w_gate")
        for it in chunks(blk.size):
            c = (blk.start + it.start) // P  # tile of actT
            cb = (b0 + it.start) // P  # column tile of the biases
            sz = it.size
            pu = nl.ndarray((P, T), nl.float32, buffer=nl.psum, name="up_ps")
            proj_T(pu[0:sz, :], uw, it.start, sz, xT, H)
            up = pu
            if not plain_up:
                up = nl.ndarray((P, T), nl.float32, buffer=nl.sbuf, name="up")
                if ubT is not None:
                    nisa.tensor_scalar(dst=up[0:sz], data=pu[0:sz], op0=nl.add, operand0=ubT[0:sz, cb : cb + 1])
                else:
                    nisa.tensor_copy(dst=up[0:sz], src=pu[0:sz])
                _clamp(up[0:sz], *up_clamp)
            if w.skip_gate:
                nisa.activation(dst=actT[0:sz, c, :], op=op, data=up[0:sz])
                continue
            pg = nl.ndarray((P, T), nl.float32, buffer=nl.psum, name="gate_ps")
            proj_T(pg[0:sz, :], gw, it.start, sz, xT, H)
            a = nl.ndarray((P, T), nl.float32, buffer=nl.sbuf, name="act")
            if gate_clamp != (None, None):
                g = nl.ndarray((P, T), nl.float32, buffer=nl.sbuf, name="gate")
                if gbT is not None:
                    nisa.tensor_scalar(dst=g[0:sz], data=pg[0:sz], op0=nl.add, operand0=gbT[0:sz, cb : cb + 1])
                else:
                    nisa.tensor_copy(dst=g[0:sz], src=pg[0:sz])
                _clamp(g[0:sz], *gate_clamp)
                nisa.activation(dst=a[0:sz], op=op, data=g[0:sz])
            else:
                bias = gbT[0:sz, cb : cb + 1] if gbT is not None else None
                nisa.activation(dst=a[0:sz], op=op, data=pg[0:sz], bias=bias)
            nisa.tensor_tensor(dst=actT[0:sz, c, :], data1=a[0:sz], data2=up[0:sz], op=nl.multiply)
    return actT


def down_tok(
    actT,
    T: int,
    w: MlpWeights,
    out2d,
    h0: int = 0,
    h1: int | None = None,
    down_bias=None,
    out_dtype=None,
    i0: int = 0,
    i1: int | None = None,
    partial=None,
):
    """out2d[:, h0:h1] (HBM [T, H]) = act @ W_down[:, h0:h1] (+ bias), token-major. T may exceed
    128: every loaded weight block serves all 128-token sub-blocks.
    [i0, i1) (i0 a multiple of 128): only these rows of W_down (the intermediate columns in
    actT's tiles 0..); with `partial` (SBUF fp32 [T, h1 - h0], T <= 128) the fp32 sums go
    there instead (one core's partial sums at LNC=2; bias and store after the combine)."""
    H, I, cdt = w.H, w.I, w.dtype
    h1 = H if h1 is None else h1
    i1 = I if i1 is None else i1
    rows = None if (i0, i1) == (0, I) else [(i0 + k.start, k.size) for k in chunks(i1 - i0)]
    odt = out_dtype or (out2d.dtype if out2d is not None else nl.float32)
    tp = min(T, P)
    bias_b = (
        load_row_broadcast(down_bias, H, tp, nl.float32, name="down_bias")
        if down_bias is not None and partial is None
        else None
    )
    for blk in chunks(h1 - h0, column_block(i1 - i0, h1 - h0, cdt.itemsize, cap=4 * FMAX)):
        b0 = h0 + blk.start
        dw = load_wT(w.down, w.layout, I, b0, blk.size, cdt, name="w_down", rows=rows)
        for tb in chunks(T):
            ts = tb.size
            for ct in chunks(blk.size, FMAX):
                ps = nl.ndarray((tp, FMAX), nl.float32, buffer=nl.psum, name="down_ps")
                pairs = [
                    (
                        actT[0 : k.size, k.index, tb.start : tb.stop],
                        dw[0 : k.size, k.index, ct.start : ct.stop],
                    )
                    for k in chunks(i1 - i0)
                ]
                for i, (s, m) in enumerate(pairs):
                    nisa.nc_matmul(dst=ps[0:ts, 0 : ct.size], stationary=s, moving=m, accumulate=i > 0)
                c0 = b0 + ct.start
                if partial is not None:
                    nisa.tensor_copy(dst=partial[0:ts, c0 - h0 : c0 - h0 + ct.size], src=ps[0:ts, 0 : ct.size])
                    continue
                o = nl.ndarray((tp, FMAX), odt, buffer=nl.sbuf, name="down_out")
                if bias_b is not None:
                    nisa.tensor_tensor(
                        dst=o[0:ts, 0 : ct.size],
                        data1=ps[0:ts, 0 : ct.size],
                        data2=bias_b[0:ts, c0 : c0 + ct.size],
                        op=nl.add,
                    )
                else:
                    nisa.tensor_copy(dst=o[0:ts, 0 : ct.size], src=ps[0:ts, 0 : ct.size])
                nisa.dma_copy(dst=out2d[tb.start : tb.stop, c0 : c0 + ct.size], src=o[0:ts, 0 : ct.size])


def down_tok_lnc2(actT, T: int, w: MlpWeights, out2d, i0: int, i1: int, prg_id: int, down_bias=None, out_dtype=None):
    """The down projection at LNC=2, each core holding actT for its intermediate columns
    [i0, i1): its partial sums over those rows of W_down for all H columns (so each core reads
    half of W_down), exchanged with the other core (sendrecv), added in rank order on both
    cores (identical sums), and core r stores its half of the H columns."""
    H = w.H
    odt = out_dtype or out2d.dtype
    part = nl.ndarray((T, H), nl.float32, buffer=nl.sbuf, name="down_partial")
    if i1 > i0:
        down_tok(actT, T, w, None, 0, H, i0=i0, i1=i1, partial=part)
    else:
        nisa.memset(dst=part, value=0.0)
    h0, h1 = shard_range(H, 2, prg_id, P)
    p0, p1 = shard_range(H, 2, 1 - prg_id, P)
    other = nl.ndarray((T, H), nl.float32, buffer=nl.sbuf, name="down_partial_peer")
    if h1 - h0 == p1 - p0:  # send the peer only the columns it stores
        nisa.sendrecv(src=part[:, p0:p1], dst=other[:, h0:h1], send_to_rank=1 - prg_id, recv_from_rank=1 - prg_id,
                      pipe_id=0)
    else:
        nisa.sendrecv(src=part, dst=other, send_to_rank=1 - prg_id, recv_from_rank=1 - prg_id, pipe_id=0)
    if h1 <= h0:
        return
    lo, hi = (part, other) if prg_id == 0 else (other, part)
    tot = nl.ndarray((T, h1 - h0), nl.float32, buffer=nl.sbuf, name="down_sum")
    nisa.tensor_tensor(dst=tot, data1=lo[:, h0:h1], data2=hi[:, h0:h1], op=nl.add)
    if down_bias is not None:
        bias_b = load_row_broadcast(down_bias, H, T, nl.float32, name="down_bias")
        nisa.tensor_tensor(dst=tot, data1=tot, data2=bias_b[:, h0:h1], op=nl.add)
    o = nl.ndarray((T, h1 - h0), odt, buffer=nl.sbuf, name="down_out")
    nisa.tensor_copy(dst=o, src=tot)
    nisa.dma_copy(dst=out2d[:, h0:h1], src=o)


def down_T(actT, T: int, w: MlpWeights, out_dtype, down_bias=None, name: str = "mlp_outT"):
    """outT: hT [128, KH, T] (SBUF) = (act @ W_down (+ bias)).T."""
    H, I, cdt = w.H, w.I, w.dtype
    KH = div_ceil(H, P)
    outT = nl.ndarray((P, KH, T), out_dtype, buffer=nl.sbuf, name=name)
    bT = load_vec_T(down_bias, H, nl.float32, name="down_biasT") if down_bias is not None else None
    for blk in chunks(H, column_block(I, H, cdt.itemsize)):
        dw = load_wT(w.down, w.layout, I, blk.start, blk.size, cdt, name="w_down")
        for ht in chunks(blk.size):
            j = (blk.start + ht.start) // P
            ps = nl.ndarray((P, T), nl.float32, buffer=nl.psum, name="downT_ps")
            proj_T(ps[0 : ht.size, :], dw, ht.start, ht.size, actT, I)
            if bT is not None:
                nisa.tensor_scalar(
                    dst=outT[0 : ht.size, j, :],
                    data=ps[0 : ht.size],
                    op0=nl.add,
                    operand0=bT[0 : ht.size, j : j + 1],
                )
            else:
                nisa.tensor_copy(dst=outT[0 : ht.size, j, :], src=ps[0 : ht.size])
    return outT


def mlp_weights(params) -> MlpWeights:
    """The MlpWeights of an MLPParameters (computing in the input's compute dtype)."""
    return MlpWeights(
        params.gate_proj_weights_tensor,
        params.up_proj_weights_tensor,
        params.down_proj_weights_tensor,
        params.weight_layout,
        params.hidden_size,
        params.intermediate_size,
        compute_dtype(params.hidden_tensor.dtype),
        skip_gate=params.skip_gate_proj,
    )


def mlp_act_kwargs(params) -> dict:
    """gate_up_act's activation, bias and clamp arguments of an MLPParameters."""
    return {
        "activation_fn": params.activation_fn,
        "gate_bias": params.bias_params.gate_proj_bias_tensor,
        "up_bias": params.bias_params.up_proj_bias_tensor,
        "gate_clamp": (params.gate_clamp_lower_limit, params.gate_clamp_upper_limit),
        "up_clamp": (params.up_clamp_lower_limit, params.up_clamp_upper_limit),
    }


class MlpIO:
    """What both MLP paths read off an MLPParameters and their outputs: the weights, dtypes,
    and the [T, H] views of the input, the output, the residual and its stored sum."""

    def __init__(self, params, output_tensor_hbm, output_stored_add_tensor_hbm):
        self.T = params.batch_size * params.sequence_len
        self.H = params.hidden_size
        self.w = mlp_weights(params)
        self.cdt, self.odt = self.w.dtype, params.output_dtype
        fused_add = params.fused_add_params.fused_add_tensor
        T, H = self.T, self.H
        self.x2 = params.hidden_tensor.reshape((T, H))
        self.o2 = output_tensor_hbm.reshape((T, H))
        self.a2 = fused_add.reshape((T, H)) if fused_add is not None else None
        s = output_stored_add_tensor_hbm
        self.s2 = s.reshape((T, H)) if s is not None else None
        self.norm_type = params.norm_params.normalization_type
        self.gamma = params.norm_params.normalization_weights_tensor if self.norm_type == NormType.RMS_NORM else None
        self.down_bias = params.bias_params.down_proj_bias_tensor
        self.act_kwargs = mlp_act_kwargs(params)


def mlp_tkg(params, output_tensor_hbm, output_stored_add_tensor_hbm, sbm=None) -> list:
    """The token-generation MLP (B*S <= 96 tokens in one tile): [residual add] -> [RMSNorm]
    -> gate/up + activation -> down, on hidden-transposed SBUF activations.

    params: an MLPParameters (nkilib.core.mlp.mlp_parameters); output_tensor_hbm [B, S, H];
    output_stored_add_tensor_hbm [B, S, H] or None (the residual sum, when stored). sbm: the
    library's SBUF manager; neuron-emu's allocator places the tiles, so it is not used.
    With a launch grid of 2 (LNC=2) the cores split the intermediate dimension: gate/up on
    their half of the columns, the down projection on its half of the rows, the fp32 partial
    sums exchanged with nisa.sendrecv and added in rank order on both cores.

    Returns [out] or [out, fused_add_out].
    """
    _, n_prgs, prg_id = get_verified_program_sharding_info("mlp", (0, 1), 2)
    io = MlpIO(params, output_tensor_hbm, output_stored_add_tensor_hbm)
    T, H, I, w, cdt, odt = io.T, io.H, params.intermediate_size, io.w, io.cdt, io.odt
    x2, o2, a2, s2, gamma = io.x2, io.o2, io.a2, io.s2, io.gamma
    norm_type, down_bias, act_kwargs = io.norm_type, io.down_bias, io.act_kwargs
    outputs = [output_tensor_hbm] + ([output_stored_add_tensor_hbm] if s2 is not None else [])

    xT = load_hT(x2, cdt, name="xT")
    if a2 is not None:
        aT = load_hT(a2, cdt, name="addT")
        nisa.tensor_tensor(dst=xT, data1=xT, data2=aT, op=nl.add)
        if s2 is not None and prg_id == 0:
            store_hT(s2, xT)
    if norm_type != NormType.NO_NORM:
        gT = load_vec_T(gamma, H, nl.float32, name="gammaT") if gamma is not None else None
        xT = rmsnorm_hT(xT, H, T, gT, params.eps, cdt)
    if n_prgs == 1:
        actT = gate_up_act(xT, T, w, **act_kwargs)
        down_tok(actT, T, w, o2, 0, H, down_bias, odt)
        return outputs
    i0, i1 = shard_range(I, n_prgs, prg_id, P)
    actT = gate_up_act(xT, T, w, i0=i0, i1=i1, **act_kwargs)
    down_tok_lnc2(actT, T, w, o2, i0, i1, prg_id, down_bias, odt)
    return outputs
