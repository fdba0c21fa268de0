"""PyTorch references of the output projection kernels (fp32 math)."""

from __future__ import annotations

from ..utils.common_types import WeightLayout


def _w(weight, layout):
    return weight.float() if layout == WeightLayout.IN_OUT else weight.float().T


def output_projection_tkg_torch(
    attention, weight, bias=None, TRANSPOSE_OUT=False, lnc=1, weight_layout=WeightLayout.IN_OUT
):
    D, B, N, S = attention.shape
    a = attention.float().permute(1, 3, 2, 0).reshape(B * S, N * D)
    o = a @ _w(weight, weight_layout)
    if bias is not None:
        o = o + bias.float().reshape(-1)
    if not TRANSPOSE_OUT:
        return o
    H = o.shape[1]
    H2 = H // (128 * lnc)
    return o.T.reshape(lnc, 128, H2, B * S).permute(1, 0, 2, 3)


def output_projection_cte_torch(attention, weight, bias=None, weight_layout=WeightLayout.IN_OUT):
    B, N, D, S = attention.shape
    a = attention.float().permute(0, 3, 1, 2).reshape(B, S, N * D)
    o = a @ _w(weight, weight_layout)
    if bias is not None:
        o = o + bias.float().reshape(-1)
    return o
