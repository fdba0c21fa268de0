"""RMSNorm (optional) followed by FP8 quantization along the last dimension.

Per 128-row tile: the rows in fp32, [RMSNorm (tile_ops.rmsnorm_tok)], then

* ROW: amax = max |x| per row (clipped to lower_bound when one is set, and x clipped to
  +-lower_bound), dequant scale = max(amax / 240, 1e-6), q = x / scale rounded to float8 (e4m3);
  the fp32 dequant scale is stored after the H values of the row as its 4 bytes (the output
  row is H + 4 float8 elements; ``out[..., H:].view(float32)`` reads it back);
* STATIC: q = clip(x / input_dequant_scale, -240, 240) rounded to float8 (e4m3).
"""

from __future__ import annotations

from dataclasses import dataclass

import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.common_types import NormType, QuantizationType
from ..utils.kernel_assert import kernel_assert
from ..utils.kernel_helpers import get_verified_program_sharding_info, shard_range
from ..utils.tile_ops import P, load_row_broadcast, rmsnorm_tok

FP8_RANGE = 240.0  # largest float8_e4m3 magnitude used by the quantization
MIN_DEQUANT_SCALE = 1e-6  # keeps an all-zero row finite
DEQUANT_SCALE_SIZE = 4  # float8 elements holding one fp32 scale
# The library's output dtype is float8_e4m3 (max 240). Every quantized value lies in
# [-240, 240], where float8_e4m3fn has the same bytes, and torch has only the fn type: the
# output is float8_e4m3fn, byte for byte the library's.
QUANT_DTYPE = nl.float8_e4m3fn


@dataclass(frozen=True)
class RmsNormQuantKernelArgs(nl.NKIObject):
    """lower_bound (>= 0; > 0 clips values and the row maximum, ROW only), norm_type (RMS_NORM
    or NO_NORM), quantization_type (ROW or STATIC), eps."""

    lower_bound: float = 0.0
    norm_type: NormType = NormType.RMS_NORM
    quantization_type: QuantizationType = QuantizationType.ROW
    eps: float = 1e-6

    def __post_init__(self):
        kernel_assert(
            self.quantization_type in (QuantizationType.ROW, QuantizationType.STATIC),
            f"rmsnorm_quant: {self.quantization_type} quantization is not supported (ROW, STATIC)",
        )
        kernel_assert(
            self.norm_type in (NormType.NO_NORM, NormType.RMS_NORM),
            f"rmsnorm_quant: {self.norm_type} normalization is not supported (RMS_NORM, NO_NORM)",
        )
        kernel_assert(self.lower_bound >= 0, f"rmsnorm_quant: lower_bound must be >= 0, got {self.lower_bound}")
        kernel_assert(self.eps >= 0, f"rmsnorm_quant: eps must be >= 0, got {self.eps}")

    def needs_rms_normalization(self) -> bool:
        return self.norm_type == NormType.RMS_NORM

    def has_lower_bound(self) -> bool:
        return self.lower_bound is not None and self.lower_bound > 1e-6

    def is_row_quant(self) -> bool:
        return self.quantization_type == QuantizationType.ROW

    def is_static_quant(self) -> bool:
        return self.quantization_type == QuantizationType.STATIC


@nki.jit
def rmsnorm_quant_kernel(hidden, ln_w, kargs: RmsNormQuantKernelArgs, input_dequant_scale=None):
    """FP8 quantization of [RMSNorm(]hidden[)] along its last dimension.

    Args:
        hidden: [..., H] in HBM (at least 2 dimensions; bf16, fp16 or fp32).
        ln_w: RMSNorm gamma [H] or [1, H] (used with norm_type=RMS_NORM; may be None).
        kargs: RmsNormQuantKernelArgs.
        input_dequant_scale: STATIC only: [128, 1] (or [1, 1]) fp32, element [0, 0] is the scale.

    A launch grid splits the rows between the programs.
    Returns: float8_e4m3fn HBM tensor (the bytes of the library's float8_e4m3 output),
        [..., H + 4] (ROW: the last 4 elements of a row are its fp32 dequant scale) or
        [..., H] (STATIC).
    """
    kernel_assert(len(hidden.shape) >= 2, f"rmsnorm_quant: hidden must have >= 2 dimensions, got {hidden.shape}")
    H = hidden.shape[-1]
    R = 1
    for s in hidden.shape[:-1]:
        R *= s
    kernel_assert(H * 4 * 3 <= nl.tile_size.sbuf_fmax_bytes, f"rmsnorm_quant: H={H} does not fit one SBUF row")
    row = kargs.is_row_quant()
    if kargs.needs_rms_normalization() and ln_w is not None:
        kernel_assert(
            tuple(ln_w.shape) in ((H,), (1, H)), f"rmsnorm_quant: ln_w {ln_w.shape} must be [{H}] or [1, {H}]"
        )
    if kargs.is_static_quant():
        kernel_assert(
            input_dequant_scale is not None and len(input_dequant_scale.shape) == 2,
            "rmsnorm_quant: STATIC quantization needs input_dequant_scale [128, 1]",
        )
    _, n, pid = get_verified_program_sharding_info("rmsnorm_quant", (0, 1))
    Ho = H + DEQUANT_SCALE_SIZE if row else H
    out = nl.ndarray(tuple(hidden.shape[:-1]) + (Ho,), dtype=QUANT_DTYPE, buffer=nl.shared_hbm, name="rmsnorm_quant_out")
    x2, o2 = hidden.reshape((R, H)), out.reshape((R, Ho))
    r0, r1 = shard_range(R, n, pid, P)
    rows = min(P, max(1, r1 - r0))
    f32 = nl.float32
    gamma = None
    if kargs.needs_rms_normalization() and ln_w is not None:
        gamma = load_row_broadcast(ln_w, H, rows, f32, name="gamma")
    qscale = None
    if kargs.is_static_quant():
        sc = nl.ndarray((rows, 1), f32, buffer=nl.sbuf, name="static_scale")
        src = input_dequant_scale[0:1, 0:1]
        nisa.dma_copy(dst=sc, src=src.broadcast(0, rows) if rows > 1 else src)
        qscale = nl.ndarray((rows, 1), f32, buffer=nl.sbuf, name="static_qscale")
        nisa.reciprocal(dst=qscale, data=sc)
    lb = float(kargs.lower_bound) if kargs.has_lower_bound() else None
    for t0 in range(r0, r1, P):
        ts = min(P, r1 - t0)
        xs = nl.ndarray((ts, H), hidden.dtype, buffer=nl.sbuf, name="x")
        nisa.dma_copy(dst=xs, src=x2[t0 : t0 + ts, :])
        xn = nl.ndarray((ts, H), f32, buffer=nl.sbuf, name="xn")
        if kargs.needs_rms_normalization():
            rmsnorm_tok(xs, ts, H, gamma[0:ts, :] if gamma is not None else None, kargs.eps, xn)
        else:
            nisa.tensor_copy(dst=xn, src=xs)
        q = nl.ndarray((ts, H), QUANT_DTYPE, buffer=nl.sbuf, name="q")
        if row:
            if lb is not None:
                nisa.tensor_scalar(dst=xn, data=xn, op0=nl.minimum, operand0=lb, op1=nl.maximum, operand1=-lb)
            ax = nl.ndarray((ts, H), f32, buffer=nl.sbuf, name="absx")
            amax = nl.ndarray((ts, 1), f32, buffer=nl.sbuf, name="amax")
            nisa.activation(dst=ax, op=nl.abs, data=xn)
            nisa.tensor_reduce(dst=amax, op=nl.maximum, data=ax, axis=1)
            deq = nl.ndarray((ts, 1), f32, buffer=nl.sbuf, name="dequant_scale")
            nisa.tensor_scalar(
                dst=deq, data=amax, op0=nl.divide, operand0=FP8_RANGE, op1=nl.maximum, operand1=MIN_DEQUANT_SCALE
            )
            qs = nl.ndarray((ts, 1), f32, buffer=nl.sbuf, name="quant_scale")
            nisa.reciprocal(dst=qs, data=deq)
            nisa.tensor_scalar(dst=q, data=xn, op0=nl.multiply, operand0=qs)
            nisa.dma_copy(dst=o2[t0 : t0 + ts, 0:H], src=q)
            # the fp32 scale's 4 bytes, as float8 elements, after the row's values
            deq_bytes = deq.ap(pattern=[[DEQUANT_SCALE_SIZE, ts], [1, DEQUANT_SCALE_SIZE]], offset=0, dtype=QUANT_DTYPE)
            nisa.dma_copy(dst=o2[t0 : t0 + ts, H:Ho], src=deq_bytes)
        else:
            nisa.tensor_scalar(
                dst=xn, data=xn, op0=nl.multiply, operand0=qscale[0:ts, :], op1=nl.minimum, operand1=FP8_RANGE
            )
            nisa.tensor_scalar(dst=q, data=xn, op0=nl.maximum, operand0=-FP8_RANGE)
            nisa.dma_copy(dst=o2[t0 : t0 + ts, :], src=q)
    return out
