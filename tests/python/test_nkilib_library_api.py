"""nkilib has the real NKI Library's API: kernel signatures (names, order, defaults), module
layout, utils (kernel_assert, TiledRange, TensorView, SbufManager, MLPParameters), and the
kernels cumsum, rmsnorm_quant_kernel, cross_entropy_forward/backward and attention_cte's
sequence packing, each against a torch reference.

Tolerances: fp32 results differ from torch only in summation order (1e-5 relative); bf16
outputs are one rounding of an fp32 result (1 bf16 ulp, 2^-8 relative); float8 outputs are
compared exactly where the reference rounds the same fp32 value, else to one e4m3 step.
"""

from __future__ import annotations

import inspect
import math

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from nkilib.core.attention.attention_cte import attention_cte
from nkilib.core.attention.attention_cte_torch import attention_cte_torch
from nkilib.core.cumsum import cumsum
from nkilib.core.cumsum.cumsum_torch import cumsum_torch_ref
from nkilib.core.mlp.mlp_parameters import MLPParameters, is_mlp_tkg
from nkilib.core.rmsnorm.rmsnorm_quant import RmsNormQuantKernelArgs, rmsnorm_quant_kernel
from nkilib.core.rmsnorm.rmsnorm_quant_torch import rmsnorm_quant_torch_ref
from nkilib.core.utils.allocator import SbufManager, align_to, create_auto_alloc_manager
from nkilib.core.utils.common_types import NormType, QuantizationType
from nkilib.core.utils.kernel_assert import assert_shape, kernel_assert
from nkilib.core.utils.tensor_view import TensorView
from nkilib.core.utils.tiled_range import TiledRange
from nkilib.experimental.loss import cross_entropy_backward, cross_entropy_forward
from nkilib.experimental.loss.cross_entropy_torch import (
    cross_entropy_backward_torch_ref,
    cross_entropy_forward_torch_ref,
)

# ---------------------------------------------------------------------------------------------
# Signatures: the real library's parameter names in order, with their defaults where they
# have one (aws-neuron/nki-library, 2026-04 snapshot).

REAL_SIGNATURES = {
    "nkilib.core.attention.attention_cte:attention_cte": (
        "q k v scale=1.0 causal_mask=True k_prior=None v_prior=None prior_used_len=None sink=None "
        "sliding_window=None tp_q=True tp_k=False tp_out=False cache_softmax=False "
        "softmax_dtype=float32 mm_out_dtype=float32 cp_offset=None global_cp_deg=None cp_strided_q_slicing=False "
        "bound_min=None bound_max=None"
    ),
    "nkilib.core.embeddings.rope_hf:rope_hf": "q k q_out k_out cos=None sin=None rope_cache=None backward=False",
    "nkilib.core.output_projection.output_projection_tkg:output_projection_tkg": (
        "attention weight bias=None quantization_type weight_scale=None input_scale=None "
        "TRANSPOSE_OUT=False OUT_IN_SB=False sbm=None"
    ),
    "nkilib.core.output_projection.output_projection_cte:output_projection_cte": (
        "attention weight bias=None quantization_type input_scales=None weight_scales=None output_dtype=None"
    ),
    "nkilib.core.subkernels.rmsnorm_tkg:rmsnorm_tkg": (
        "input gamma output eps=1e-06 hidden_actual=None hidden_dim_tp=False single_core_forced=False "
        "shard_on_h=False use_heap_memory=False sbm=None"
    ),
    "nkilib.core.cumsum:cumsum": "x axis=-1",
    "nkilib.core.attention.attention_tkg:attention_tkg": (
        "q k_active v_active k_prior v_prior mask out cfg sbm inv_freqs=None "
        "rope_pos_ids=None start_pos_ids=None sink=None active_blocks_table=None k_out=None DBG_TENSORS=None"
    ),
    "nkilib.core.rmsnorm.rmsnorm_quant:rmsnorm_quant_kernel": "hidden ln_w kargs input_dequant_scale=None",
    "nkilib.experimental.loss:cross_entropy_forward": "logits_hbm targets_hbm positions_per_batch=32 chunk_size=32768 dtype=bfloat16",
    "nkilib.experimental.loss:cross_entropy_backward": (
        "logits_hbm targets_hbm lse_state_hbm reduction=mean positions_per_batch=32 chunk_size=32768 dtype=bfloat16 inplace=True"
    ),
}


def _positional(fn) -> str:
    fn = getattr(fn, "func", fn)  # an nki.jit kernel wraps the function
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind == p.KEYWORD_ONLY:
            break  # neuron-emu extensions are keyword-only, after every real parameter
        plain = isinstance(p.default, (bool, int, float, str, type(None)))
        out.append(f"{p.name}={p.default}" if p.default is not p.empty and plain else p.name)
    return " ".join(out)


@pytest.mark.parametrize("target", sorted(REAL_SIGNATURES))
def test_kernel_signature_is_the_librarys(target):
    import importlib

    mod, name = target.split(":")
    assert _positional(getattr(importlib.import_module(mod), name)) == REAL_SIGNATURES[target]


def test_mlp_and_block_signatures_end_with_the_librarys_last_parameters():
    from nkilib.core.mlp.mlp import mlp
    from nkilib.core.qkv.qkv import qkv
    from nkilib.experimental.transformer.attention_block_tkg import attention_block_tkg
    from nkilib.experimental.transformer.transformer_tkg import transformer_tkg

    assert _positional(mlp).split()[-2:] == ["force_cte_mode=False", "sbm=None"]
    assert _positional(qkv).split()[-2:] == ["is_h_dim_4h_transposed=False", "weight_layout"]
    blk = _positional(attention_block_tkg).split()
    assert len(blk) == 44 and blk[:3] == ["X", "X_hidden_dim_actual", "rmsnorm_X_enabled"]
    assert blk[-1] == "KVDP_replica_group=None"
    tkg = _positional(transformer_tkg).split()
    assert tkg[12:16] == ["mask_cache", "mask_active", "position_ids", "num_layers"]


def test_rope_hf_requires_its_outputs():
    from nkilib.core.embeddings.rope_hf import rope_hf

    q = torch.zeros(1, 1, 2, 8)
    with pytest.raises(TypeError, match="q_out"):
        rope_hf(q=q, k=q, cos=torch.zeros(2, 8), sin=torch.zeros(2, 8))


# ---------------------------------------------------------------------------------------------
# utils


def test_kernel_assert_and_assert_shape_messages():
    kernel_assert(True, "never")
    with pytest.raises(AssertionError, match="the reason"):
        kernel_assert(False, "the reason")
    t = np.zeros((2, 3))
    assert_shape(t, (2, 3), "t")
    with pytest.raises(AssertionError, match=r"w has shape \(2, 3\), expected \(3, 2\). transposed\?"):
        assert_shape(t, (3, 2), "w", "transposed?")


def test_tiled_range_offsets_and_nesting():
    tiles = TiledRange(300, 128)
    assert [(t.index, t.size, t.start_offset, t.end_offset) for t in tiles] == [
        (0, 128, 0, 128),
        (1, 128, 128, 256),
        (2, 44, 256, 300),
    ]
    inner = TiledRange(tiles[1], 48)
    assert [(t.size, t.start_offset, t.end_offset) for t in inner] == [(48, 128, 176), (48, 176, 224), (32, 224, 256)]
    assert TiledRange(0, 8) == ()
    with pytest.raises(ValueError):
        TiledRange(10, 0)


def test_align_to():
    assert [align_to(v, 32) for v in (0, 1, 32, 33)] == [0, 32, 32, 64]


@nki.jit
def _tensor_view_kernel(x):
    """Copies views of x ([4, 6, 8] HBM) through SBUF views into outputs."""
    v = TensorView(x)
    a = nl.ndarray((6, 4, 3), x.dtype, buffer=nl.shared_hbm)  # x[:, :, 1:7:2] permuted (1, 0, 2)
    t = nl.ndarray((6, 4, 3), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=v.slice(2, 1, 7, 2).permute((1, 0, 2)).get_view())
    nisa.dma_copy(dst=a, src=t)
    b = nl.ndarray((4, 2, 3, 8), x.dtype, buffer=nl.shared_hbm)  # x reshaped by splitting dim 1
    nisa.dma_copy(dst=b, src=v.reshape_dim(1, (2, -1)).get_view())
    c = nl.ndarray((5, 8), x.dtype, buffer=nl.shared_hbm)  # row 2 of x[3] broadcast 5 times
    s = TensorView(nl.ndarray((5, 8), x.dtype, buffer=nl.sbuf))
    nisa.dma_copy(dst=s.get_view(), src=v.select(0, 3).slice(0, 2, 3).broadcast(0, 5).get_view())
    nisa.dma_copy(dst=c, src=s.get_view())
    d = nl.ndarray((4, 48), x.dtype, buffer=nl.shared_hbm)  # flattened
    nisa.dma_copy(dst=d, src=v.flatten_dims(1, 2).get_view())
    return a, b, c, d


def test_tensor_view_patterns_match_numpy():
    x = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)
    a, b, c, d = _tensor_view_kernel(x)
    np.testing.assert_array_equal(a, x[:, :, 1:7:2].transpose(1, 0, 2))
    np.testing.assert_array_equal(b, x.reshape(4, 2, 3, 8))
    np.testing.assert_array_equal(c, np.broadcast_to(x[3, 2:3], (5, 8)))
    np.testing.assert_array_equal(d, x.reshape(4, 48))

    @nki.jit
    def bad_view(x, which):
        v = TensorView(x)
        if which == 0:
            v.slice(2, 0, 4).flatten_dims(1, 2)
        elif which == 1:
            v.permute((0, 0, 1))
        else:
            TensorView(nl.ndarray((4, 6, 8), x.dtype, buffer=nl.sbuf)).permute((1, 0, 2))
        return x

    for which, msg in ((0, "not contiguous"), (1, "not a permutation"), (2, "partition dimension")):
        with pytest.raises(AssertionError, match=msg):
            bad_view(x, which)


@nki.jit
def _sbm_kernel(x):
    """Two stack tensors in a scope, then one heap tensor: out = (x + 1) * 2 via SBUF."""
    sbm = SbufManager(0, 4096)
    sbm.open_scope()
    a = sbm.alloc_stack((128, 64), nl.float32, name="a")
    b = sbm.alloc((128, 64), nl.float32, name="b")
    assert sbm.get_stack_curr_addr() == 2 * 64 * 4
    nisa.dma_copy(dst=a, src=x)
    nisa.tensor_scalar(dst=b, data=a, op0=nl.add, operand0=1.0)
    sbm.close_scope()
    assert sbm.get_stack_curr_addr() == 0
    h = sbm.alloc_heap((128, 64), nl.float32, name="h")
    assert sbm.get_heap_curr_addr() == 4096 - 256 and sbm.get_used_space() == 256
    nisa.tensor_scalar(dst=h, data=b, op0=nl.multiply, operand0=2.0)
    out = sbm.alloc((128, 64), nl.float32, buffer=nl.shared_hbm, name="out")
    nisa.dma_copy(dst=out, src=h)
    sbm.pop_heap()
    assert sbm.get_free_space() == 4096
    return out


def test_sbuf_manager_places_tensors_and_frees_scopes():
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(_sbm_kernel(x), (x + 1) * 2, rtol=0, atol=0)


def test_sbuf_manager_reports_overflow():
    @nki.jit
    def too_big(x):
        sbm = SbufManager(0, 1024)
        sbm.alloc_stack((128, 512), nl.float32, name="big")
        return x

    with pytest.raises(AssertionError, match="does not fit"):
        too_big(np.zeros((1, 1), np.float32))
    assert create_auto_alloc_manager().is_auto_alloc()


def test_mlp_parameters_and_is_mlp_tkg():
    w = np.zeros((256, 512), np.float32)
    p = MLPParameters(np.zeros((2, 48, 256), np.float32), w, w, np.zeros((512, 256), np.float32))
    assert (p.batch_size, p.sequence_len, p.hidden_size, p.intermediate_size) == (2, 48, 256, 512)
    assert is_mlp_tkg(p)  # 96 tokens
    p2 = MLPParameters(np.zeros((1, 97, 256), np.float32), w, w, np.zeros((512, 256), np.float32))
    assert not is_mlp_tkg(p2)
    p3 = MLPParameters(np.zeros((1, 1, 256), np.float32), w, w, np.zeros((512, 256), np.float32), force_cte_mode=True)
    assert not is_mlp_tkg(p3)
    assert p.norm_params.normalization_weights_tensor is None and p.fused_add_params.fused_add_tensor is None


# ---------------------------------------------------------------------------------------------
# cumsum


@pytest.mark.parametrize("shape", [(5, 300), (130, 7), (2, 3, 2500), (1000,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cumsum(shape, dtype):
    x = torch.randn(*shape).to(dtype)
    y = cumsum[2](x, axis=-1) if shape[0] == 130 else cumsum(x)
    ref = cumsum_torch_ref(x)["output_0"]
    assert y.shape == x.shape and y.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2**-8
    scale = ref.float().abs().amax(-1, keepdim=True).clamp_min(1.0)
    assert ((y.float() - ref.float()).abs() / scale).max().item() <= tol


def test_cumsum_only_last_dim():
    with pytest.raises(AssertionError, match="only the last dimension"):
        cumsum(torch.zeros(4, 4), axis=0)


# ---------------------------------------------------------------------------------------------
# rmsnorm_quant


def _split_row_output(out, H):
    """(fp32 values of the H quantized elements, the fp32 scale stored in the last 4 bytes)."""
    q = out[..., :H].float()
    scale = out[..., H:].contiguous().view(torch.uint8).view(torch.float32)
    return q, scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm,lower_bound", [(NormType.RMS_NORM, 0.0), (NormType.NO_NORM, 0.0), (NormType.RMS_NORM, 1.5)])
def test_rmsnorm_quant_row(dtype, norm, lower_bound):
    B, S, H = 2, 70, 384
    h = (torch.randn(B, S, H) * 2).to(dtype)
    h[0, 3] = 0.0  # an all-zero row: the scale is clamped, the values stay 0
    g = (torch.rand(H) + 0.5).to(dtype)
    kargs = RmsNormQuantKernelArgs(lower_bound=lower_bound, norm_type=norm, quantization_type=QuantizationType.ROW)
    out = rmsnorm_quant_kernel(hidden=h, ln_w=g, kargs=kargs)
    assert out.shape == (B, S, H + 4) and out.dtype == torch.float8_e4m3fn
    q, scale = _split_row_output(out, H)
    rq, rscale = rmsnorm_quant_torch_ref(h, g, kargs)
    torch.testing.assert_close(scale, rscale, rtol=1e-5, atol=0)
    assert q.abs().max().item() <= 240.0
    # one e4m3 step (3 mantissa bits) where the fp32 inputs to the rounding differ slightly
    assert ((q - rq).abs() <= rq.abs() / 8 + 1e-6).all()
    assert (q[0, 3] == 0).all() and scale[0, 3].item() == pytest.approx(1e-6)
    # dequantized values reproduce the normalized input to float8 precision
    ref_x = rq * rscale
    assert ((q * scale - ref_x).abs() <= ref_x.abs() / 8 + 1e-6).all()


def test_rmsnorm_quant_static_with_grid():
    h = torch.randn(3, 100, 256)
    g = torch.rand(1, 256) + 0.5
    s = torch.full((128, 1), 0.01)
    kargs = RmsNormQuantKernelArgs(quantization_type=QuantizationType.STATIC)
    out = rmsnorm_quant_kernel[2](hidden=h, ln_w=g, kargs=kargs, input_dequant_scale=s)
    rq, _ = rmsnorm_quant_torch_ref(h, g, kargs, s)
    assert out.shape == h.shape
    assert (out.float().abs() == 240).any()  # values beyond the range were clipped
    assert ((out.float() - rq).abs() <= rq.abs() / 8 + 1e-6).all()


def test_rmsnorm_quant_args_are_validated():
    with pytest.raises(AssertionError, match="MX quantization is not supported"):
        RmsNormQuantKernelArgs(quantization_type=QuantizationType.MX)
    with pytest.raises(AssertionError, match="lower_bound must be >= 0"):
        RmsNormQuantKernelArgs(lower_bound=-1.0)


# ---------------------------------------------------------------------------------------------
# cross entropy


@pytest.mark.parametrize(
    "N,V,ppb,chunk,dtype",
    [(40, 10000, 16, 4096, torch.float32), (130, 3000, 128, 3000, torch.bfloat16), (7, 20000, 32, 20000, torch.float32)],
)
def test_cross_entropy_forward_backward(N, V, ppb, chunk, dtype):
    torch.manual_seed(N)
    x = (torch.randn(N, V) * 4).to(dtype)
    t = torch.randint(0, V, (N,), dtype=torch.int32)
    t[0] = V - 1  # the last column of the last chunk
    ndt = nl.float32 if dtype == torch.float32 else nl.bfloat16
    loss, lse = cross_entropy_forward(x, t, positions_per_batch=ppb, chunk_size=chunk, dtype=ndt)
    rl, rlse = cross_entropy_forward_torch_ref(x, t)
    tol = 1e-5 if dtype == torch.float32 else 2**-8
    torch.testing.assert_close(loss.float(), rl, rtol=tol, atol=tol * rlse.abs().max().item())
    torch.testing.assert_close(lse.float(), rlse, rtol=tol, atol=0)
    for reduction in ("mean", "sum"):
        xg = x.clone()
        g = cross_entropy_backward[2](
            xg, t, lse, reduction=reduction, positions_per_batch=ppb, chunk_size=chunk, dtype=ndt
        )
        scale = 1.0 / N if reduction == "mean" else 1.0
        onehot = torch.nn.functional.one_hot(t.long(), V).float()
        # the formula with the kernel's own (bf16-rounded for bf16) saved lse: one rounding apart
        same_lse = scale * (torch.exp(x.float() - lse.float()[:, None]) - onehot)
        gscale = same_lse.abs().max().item()
        torch.testing.assert_close(g.float(), same_lse, rtol=tol, atol=tol * 1e-3 * gscale)
        if dtype == torch.float32:
            rg = cross_entropy_backward_torch_ref(x, t, reduction)
            torch.testing.assert_close(g, rg, rtol=1e-5, atol=1e-5 * gscale)
        assert torch.equal(g, xg)  # inplace: the gradient overwrote the logits


def test_cross_entropy_backward_out_of_place_and_checks():
    x = torch.randn(4, 64)
    t = torch.tensor([0, 5, 63, 9], dtype=torch.int32)
    _, lse = cross_entropy_forward(x, t, chunk_size=64, dtype=nl.float32)
    g = cross_entropy_backward(x, t, lse, chunk_size=64, dtype=nl.float32, inplace=False)
    torch.testing.assert_close(g, cross_entropy_backward_torch_ref(x, t), rtol=1e-5, atol=1e-7)
    assert not torch.equal(g, x)
    with pytest.raises(AssertionError, match="chunk_size 32768 must be in"):
        cross_entropy_forward(x, t)  # the library's default chunk exceeds this vocabulary
    with pytest.raises(AssertionError, match="targets_hbm must be int32"):
        cross_entropy_forward(x, t.float(), chunk_size=64)
    with pytest.raises(AssertionError, match="reduction must be"):
        cross_entropy_backward(x, t, lse, reduction="none", chunk_size=64)


# ---------------------------------------------------------------------------------------------
# attention_cte sequence packing


@pytest.mark.parametrize("causal", [True, False])
def test_attention_cte_sequence_packing(causal):
    """Three packed sequences in one batch row: each query sees only its own sequence."""
    bs, sq, d = 2, 600, 32
    torch.manual_seed(3)
    q, k, v = torch.randn(bs, sq, d), torch.randn(bs, d, sq), torch.randn(bs, sq, d)
    starts = [0, 130, 520]
    lo = torch.zeros(sq, 1, dtype=torch.int32)
    hi = torch.zeros(sq, 1, dtype=torch.int32)
    for i, s0 in enumerate(starts):
        s1 = starts[i + 1] if i + 1 < len(starts) else sq
        lo[s0:s1], hi[s0:s1] = s0, s1
    out = attention_cte(q, k, v, scale=0.2, causal_mask=causal, bound_min=lo, bound_max=hi)
    ref = attention_cte_torch(q, k, v, scale=0.2, causal_mask=causal, bound_min=lo, bound_max=hi)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)  # fp32, online-softmax order
    one = attention_cte(q[:, 130:520], k[:, :, 130:520], v[:, 130:520], scale=0.2, causal_mask=causal)
    torch.testing.assert_close(out[:, 130:520], one, rtol=1e-4, atol=1e-4)
    with pytest.raises(AssertionError, match="bound_min and bound_max go together"):
        attention_cte(q, k, v, bound_min=lo)
    with pytest.raises(AssertionError, match="mm_out_dtype"):
        attention_cte(q, k, v, mm_out_dtype=nl.bfloat16)


def test_torch_reference_semantics():
    """The references used above agree with plain torch (guards the tests themselves)."""
    x = torch.randn(3, 11)
    t = torch.tensor([1, 0, 10])
    loss, lse = cross_entropy_forward_torch_ref(x, t)
    assert torch.allclose(loss, lse - x[torch.arange(3), t])
    assert math.isclose(cumsum_torch_ref(x)["output_0"][1, -1].item(), x[1].sum().item(), rel_tol=1e-5)


def test_rmsnorm_tkg_takes_tensor_views():
    """The library passes TensorViews to rmsnorm_tkg: a view of the middle rows of a larger
    input normalizes exactly as the same rows passed as a tensor."""
    from nkilib.core.subkernels.rmsnorm_tkg import rmsnorm_tkg
    from nkilib.core.subkernels.rmsnorm_torch import rmsnorm_tkg_torch

    @nki.jit
    def k(x, g):
        out = nl.ndarray((128, 3, 2), x.dtype, buffer=nl.shared_hbm)
        view = TensorView(x).slice(1, 2, 5)  # [1, 3, 256] of [1, 8, 256]
        rmsnorm_tkg(input=view, gamma=TensorView(g), output=TensorView(out), eps=1e-6)
        return out

    x, g = torch.randn(1, 8, 256), torch.rand(1, 256) + 0.5
    torch.testing.assert_close(k(x, g), rmsnorm_tkg_torch(x[:, 2:5].contiguous(), g, 1e-6, False), rtol=1e-5, atol=1e-5)
