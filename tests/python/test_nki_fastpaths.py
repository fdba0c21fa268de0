"""The executor's fast paths give the same results as its checked (first-run) paths.

The first run of a program tracks uninitialized memory and takes the generic code paths (the
element-by-element DMA walker, gathered matmul operands through the GEMM); later runs take the
fast ones (structural DMA copies with register-blocked transposes, thin-operand matmuls as
AXPYs). Every kernel here runs twice and both results are compared with numpy.
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch


def _twice(kernel, *args):
    first = kernel(*args)
    second = kernel(*args)
    return first, second


@nki.jit
def transpose_load(w, rows, cols):
    """w [N, K] -> SBUF [rows, K // rows, N] holding w.T in row blocks, stored back as [K, N]."""
    N, K = w.shape
    kb = K // rows
    t = nl.ndarray((rows, kb, N), w.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=w.reshape((N, kb, rows)), axes=(2, 1, 0))
    out = nl.ndarray((K, N), w.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out.reshape((kb, rows, N)).permute(1, 0, 2), src=t)
    return out


@pytest.mark.parametrize(
    "N,K,rows", [(2048, 512, 128), (37, 96, 32), (130, 128, 128), (8, 24, 8), (513, 256, 64)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dma_transposes_match_numpy(N, K, rows, dtype):
    w = np.random.default_rng(N + K).standard_normal((N, K)).astype(dtype)
    for out in _twice(transpose_load, w, rows, 0):
        np.testing.assert_array_equal(out, w.T)


@nki.jit
def strided_copies(x):
    """Assorted DMA patterns HBM -> SBUF -> HBM: permuted, broadcast, sliced, reshaped."""
    A, B, C = x.shape
    t1 = nl.ndarray((B, A, C), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t1, src=x.permute(1, 0, 2))
    o1 = nl.ndarray((B, A, C), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o1, src=t1)
    t2 = nl.ndarray((C, B, A), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t2, src=x.permute(2, 1, 0))
    o2 = nl.ndarray((C, B, A), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o2, src=t2)
    t3 = nl.ndarray((B, 4, C), x.dtype, buffer=nl.sbuf)  # a row broadcast 4 times
    nisa.dma_copy(dst=t3, src=x[0:1, :, :].permute(1, 0, 2).broadcast(1, 4))
    o3 = nl.ndarray((B, 4, C), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o3, src=t3)
    o4 = nl.ndarray((A, C // 2), x.dtype, buffer=nl.shared_hbm)  # every other element, HBM -> HBM
    nisa.dma_copy(dst=o4, src=x[:, 1, 0:C:2])
    return o1, o2, o3, o4


@pytest.mark.parametrize("shape", [(3, 40, 64), (8, 128, 6), (5, 7, 30)])
def test_dma_patterns_match_numpy(shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for o1, o2, o3, o4 in _twice(strided_copies, x):
        np.testing.assert_array_equal(o1, x.transpose(1, 0, 2))
        np.testing.assert_array_equal(o2, x.transpose(2, 1, 0))
        np.testing.assert_array_equal(o3, np.repeat(x[0][:, None, :], 4, axis=1))
        np.testing.assert_array_equal(o4, x[:, 1, 0::2])


@nki.jit
def thin_matmuls(a, b):
    """a [K, M] and b [K, N] with M or N small: stationary.T @ moving, accumulated twice."""
    K, M = a.shape
    _, N = b.shape
    ta = nl.ndarray((K, M), a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray((K, N), b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    ps = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=ta, moving=tb, accumulate=False)
    nisa.nc_matmul(dst=ps, stationary=ta, moving=tb, accumulate=True)
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=ps)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize(
    "K,M,N", [(128, 128, 1), (128, 1, 512), (64, 128, 16), (100, 16, 200), (128, 17, 17)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_thin_matmul_matches_gemm_path(K, M, N, dtype):
    a = torch.randn(K, M, dtype=dtype)
    b = torch.randn(K, N, dtype=dtype)
    ref = 2 * (a.double().T @ b.double())
    for out in _twice(thin_matmuls, a, b):
        # fp32 accumulation over K <= 128 terms of O(1) products: error ~ sqrt(K) * 2^-24 * |sum|.
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-4)


@nki.jit
def register_offsets(x, pos, into_sbuf):
    """Reads row pos[0] of x with a register offset (HBM input), optionally also writing an
    SBUF tile at a register-selected column."""
    out = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    p = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=p, src=pos)
    r = nisa.register_alloc()
    nisa.register_load(r, p)
    row = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=x.ap(pattern=[[x.shape[1], 1], [1, x.shape[1]]], offset=0, scalar_offset=r))
    if into_sbuf:
        t = nl.ndarray((1, 2 * x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        nisa.tensor_copy(
            dst=t.ap(
                pattern=[[2 * x.shape[1], 1], [1, x.shape[1]]], offset=0, scalar_offset=r, indirect_dim=1
            ),
            src=row,
        )
        nisa.tensor_copy(dst=row, src=t[:, 0 : x.shape[1]])
    nisa.dma_copy(dst=out, src=row)
    return out


def test_uninitialized_memory_recheck_only_for_on_chip_register_offsets():
    """Register offsets into kernel inputs (a KV-cache row) touch memory whose definedness is
    the same on every run: checked on the first run only. Into SBUF they are checked every run."""
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    pos = np.array([[2]], np.int32)
    hbm_only = register_offsets.specialize(x, pos, False).programs[0]
    on_chip = register_offsets.specialize(x, pos, True).programs[0]
    assert hbm_only.dynamic and not hbm_only.needs_recheck
    assert on_chip.dynamic and on_chip.needs_recheck
    for _ in range(2):
        np.testing.assert_array_equal(register_offsets(x, pos, False), x[2:3])
        np.testing.assert_array_equal(
            register_offsets(x, np.array([[1]], np.int32), True)[0], _shifted(x[1], 1)
        )


def _shifted(row, k):
    out = np.zeros_like(row)
    out[k:] = row[: len(row) - k]
    return out
