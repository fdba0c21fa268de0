"""PyTorch reference of rmsnorm_quant_kernel, in fp32: returns (q [..., H] as fp32 values of
the float8 result, dequant_scale [..., 1] fp32 or None)."""

import torch

from ..utils.common_types import NormType, QuantizationType

FP8_RANGE = 240.0


def rmsnorm_quant_torch_ref(hidden, ln_w, kargs, input_dequant_scale=None):
    x = hidden.float()
    if kargs.norm_type == NormType.RMS_NORM:
        x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + kargs.eps)
        if ln_w is not None:
            x = x * ln_w.float().reshape(-1)
    if kargs.quantization_type == QuantizationType.ROW:
        lb = kargs.lower_bound
        if lb > 1e-6:
            x = x.clamp(-lb, lb)
        deq = (x.abs().amax(-1, keepdim=True) / FP8_RANGE).clamp_min(1e-6)
        q = (x * (1.0 / deq)).to(torch.float8_e4m3fn).float()
        return q, deq
    q = (x * (1.0 / input_dequant_scale.float()[0, 0])).clamp(-FP8_RANGE, FP8_RANGE)
    return q.to(torch.float8_e4m3fn).float(), None
