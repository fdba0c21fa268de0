"""RMSNorm for token generation, producing the hidden-transposed SBUF layout the projections
of a decode step consume (a subkernel: call it from inside a kernel)."""

from __future__ import annotations

import nki.isa as nisa
import nki.language as nl

from ..utils.kernel_assert import kernel_assert
from ..utils.tensor_view import TensorView
from ..utils.tile_ops import P, rmsnorm_hT


def rmsnorm_tkg(
    input,
    gamma,
    output,
    eps: float = 1e-6,
    hidden_actual=None,
    hidden_dim_tp: bool = False,
    single_core_forced: bool = False,
    shard_on_h: bool = False,
    use_heap_memory: bool = False,
    sbm=None,
):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * gamma over the hidden dimension, fp32 statistics.

    Args:
        input: [B, S, H] in HBM, or [128, B*S, H // 128] in SBUF (input, gamma and output may
            also be TensorViews, as in the library).
        gamma: [1, H] (or [H]) in HBM, or None for no scale.
        output: [128, B*S, H // 128] (SBUF or HBM).
        eps: epsilon.
        hidden_actual: the hidden size used for the mean (when H is padded).
        hidden_dim_tp: False: hidden index h = p * (H // 128) + f (the library's default
            "(128, H/128)" view); True: h = f * 128 + p.
        single_core_forced, use_heap_memory, sbm: accepted for compatibility (allocation is
            automatic on neuron-emu).
        shard_on_h: not supported.

    Returns: output.
    """
    kernel_assert(not shard_on_h, "rmsnorm_tkg: shard_on_h is not supported on neuron-emu")
    # the library passes TensorViews or tensors: a view is its access pattern
    input, gamma, output = (t.get_view() if isinstance(t, TensorView) else t for t in (input, gamma, output))
    if input.buffer == nl.sbuf:
        _, T, H1 = input.shape
        H = H1 * P
    else:
        B, S, H = input.shape
        T = B * S
        kernel_assert(H % P == 0, f"rmsnorm_tkg: H={H} must be a multiple of 128")
        H1 = H // P
    kernel_assert(T <= 512, f"rmsnorm_tkg: B*S={T} tokens exceed 512")
    kernel_assert(
        tuple(output.shape) == (P, T, H1),
        f"rmsnorm_tkg: output shape {tuple(output.shape)}, expected {(P, T, H1)}",
    )
    dt = input.dtype
    # x in [128, H1, T] with the requested hidden-index mapping.
    xT = nl.ndarray((P, H1, T), dt, buffer=nl.sbuf, name="rms_x")
    if input.buffer == nl.sbuf:
        nisa.tensor_copy(dst=xT, src=input.permute(0, 2, 1))
    else:
        x2 = input.reshape((T, H))
        src = (
            x2.reshape((T, H1, P)).permute(2, 1, 0)
            if hidden_dim_tp
            else x2.reshape((T, P, H1)).permute(1, 2, 0)
        )
        nisa.dma_copy(dst=xT, src=src)
    gT = None
    if gamma is not None:
        g = gamma.reshape((H,))
        gT = nl.ndarray((P, H1), nl.float32, buffer=nl.sbuf, name="rms_gamma")
        nisa.dma_copy(dst=gT, src=g.reshape((H1, P)).permute(1, 0) if hidden_dim_tp else g.reshape((P, H1)))
    out_dt = output.dtype
    res = rmsnorm_hT(xT, H, T, gT, eps, out_dt, hidden_actual, name="rms")
    if output.buffer == nl.sbuf:
        nisa.tensor_copy(dst=output.permute(0, 2, 1), src=res)
    else:
        nisa.dma_copy(dst=output.permute(0, 2, 1), src=res)
    return output
