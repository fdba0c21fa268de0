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

from ..utils.common_types import ActFnType, WeightLayout
from ..utils.kernel_helpers import div_ceil
from ..utils.tile_ops import (
    FMAX,
    P,
    act_op,
    chunks,
    load_row_broadcast,
    load_vec_T,
    load_wT,
    proj_T,
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
):
    """actT [128, KI, T] (w.dtype) = act(x @ W_gate + b_g) * (x @ W_up + b_u), transposed.
    xT: hT [128, KH, T]. gate_clamp/up_clamp: (lower, upper) applied before the activation."""
    H, I, cdt = w.H, w.I, w.dtype
    KI = div_ceil(I, P)
    op = act_op(activation_fn)
    actT = nl.ndarray((P, KI, T), cdt, buffer=nl.sbuf, name="actT")
    gbT = load_vec_T(gate_bias, I, nl.float32, name="gate_bias") if gate_bias is not None else None
    ubT = load_vec_T(up_bias, I, nl.float32, name="up_bias") if up_bias is not None else None
    plain_up = ubT is None and up_clamp == (None, None)
    for blk in chunks(I, column_block(H, I, cdt.itemsize)):
        uw = load_wT(w.up, w.layout, H, blk.start, blk.size, cdt, name="w_up")
        gw = None if w.skip_gate else load_wT(w.gate, w.layout, H, blk.start, blk.size, cdt, name="w_gate")
        for it in chunks(blk.size):
            c = (blk.start + it.start) // P
            sz = it.size
            pu = nl.ndarray((P, T), nl.float32, buffer=nl.psum, name="up_ps")
            proj_T(pu[0:sz, :], uw, it.start, sz, xT, H)
            up = pu
            if not plain_up:
                up = nl.ndarray((P, T), nl.float32, buffer=nl.sbuf, name="up")
                if ubT is not None:
                    nisa.tensor_scalar(dst=up[0:sz], data=pu[0:sz], op0=nl.add, operand0=ubT[0:sz, c : c + 1])
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
                    nisa.tensor_scalar(dst=g[0:sz], data=pg[0:sz], op0=nl.add, operand0=gbT[0:sz, c : c + 1])
                else:
                    nisa.tensor_copy(dst=g[0:sz], src=pg[0:sz])
                _clamp(g[0:sz], *gate_clamp)
                nisa.activation(dst=a[0:sz], op=op, data=g[0:sz])
            else:
                bias = gbT[0:sz, c : c + 1] if gbT is not None else None
                nisa.activation(dst=a[0:sz], op=op, data=pg[0:sz], bias=bias)
            nisa.tensor_tensor(dst=actT[0:sz, c, :], data1=a[0:sz], data2=up[0:sz], op=nl.multiply)
    return actT


def down_tok(
    actT, T: int, w: MlpWeights, out2d, h0: int = 0, h1: int | None = None, down_bias=None, out_dtype=None
):
    """out2d[:, h0:h1] (HBM [T, H]) = act @ W_down[:, h0:h1] (+ bias), token-major. T may exceed
    128: every loaded weight block serves all 128-token sub-blocks."""
    H, I, cdt = w.H, w.I, w.dtype
    h1 = H if h1 is None else h1
    odt = out_dtype or out2d.dtype
    tp = min(T, P)
    bias_b = (
        load_row_broadcast(down_bias, H, tp, nl.float32, name="down_bias") if down_bias is not None else None
    )
    for blk in chunks(h1 - h0, column_block(I, h1 - h0, cdt.itemsize, cap=4 * FMAX)):
        b0 = h0 + blk.start
        dw = load_wT(w.down, w.layout, I, b0, blk.size, cdt, name="w_down")
        for tb in chunks(T):
            ts = tb.size
            for ct in chunks(blk.size, FMAX):
                ps = nl.ndarray((tp, FMAX), nl.float32, buffer=nl.psum, name="down_ps")
                pairs = [
                    (
                        actT[0 : k.size, k.index, tb.start : tb.stop],
                        dw[0 : k.size, k.index, ct.start : ct.stop],
                    )
                    for k in chunks(I)
                ]
                for i, (s, m) in enumerate(pairs):
                    nisa.nc_matmul(dst=ps[0:ts, 0 : ct.size], stationary=s, moving=m, accumulate=i > 0)
                o = nl.ndarray((tp, FMAX), odt, buffer=nl.sbuf, name="down_out")
                c0 = b0 + ct.start
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
