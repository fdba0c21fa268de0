"""nc_matmul with accumulate=None (the default): the first matmul into a PSUM location
overwrites it, later ones add (the documented auto-detection). A location is an element the
access pattern touches, not the span between its first and last element: matmuls that each
write one column of a PSUM tile are separate accumulation groups.

The kernels follow the score computation of a decode-attention kernel: per batch, one
[d, 128] key tile per column of a [128, n] PSUM tile times a [d, 1] query, the PSUM tile of
every batch placed at the same address (as kernels that manage PSUM by hand do)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest


@nki.jit
def column_scores(k, q):
    """k [B, d, n * 128], q [d, B] -> out [B, 128, n]: out[b, p, j] = k[b, :, j*128 + p] . q[:, b]."""
    B, d, S = k.shape
    n = S // 128
    out = nl.ndarray((B, 128, n), nl.float32, buffer=nl.shared_hbm)
    q_sb = nl.ndarray((d, B), q.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=q_sb, src=q)
    for b in range(B):
        k_sb = nl.ndarray((d, S), k.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k[b])
        ps = nl.ndarray((128, n), nl.float32, buffer=nl.psum, address=(0, 0))
        for j in range(n):
            keys = k_sb[:, j * 128 : (j + 1) * 128]
            nisa.nc_matmul(dst=ps[:, j : j + 1], stationary=keys, moving=q_sb[:, b : b + 1])
        r = nl.ndarray((128, n), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        nisa.dma_copy(dst=out[b], src=r)
    return out


@nki.jit
def strided_column_scores(k, q):
    """Like column_scores with the strided key read and an [128, n, s] PSUM view: column j of
    batch b takes the keys j, j + n, j + 2n, ... and q has s query columns per batch."""
    B, d, S = k.shape
    s = q.shape[1] // B
    n = S // 128
    out = nl.ndarray((B, 128, n, s), nl.float32, buffer=nl.shared_hbm)
    q_sb = nl.ndarray((d, B * s), q.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=q_sb, src=q)
    for b in range(B):
        k_sb = nl.ndarray((d, S), k.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k[b])
        ps = nl.ndarray((128, n * s), nl.float32, buffer=nl.psum, address=(0, 0))
        ps3 = ps.reshape((128, n, s))
        for j in range(n):
            nisa.nc_matmul(dst=ps3[:, j, :], stationary=k_sb[:, j::n], moving=q_sb[:, b * s : (b + 1) * s])
        r = nl.ndarray((128, n * s), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        nisa.dma_copy(dst=out[b].reshape((128, n * s)), src=r)
    return out


@nki.jit
def rewrites(a, b):
    """Two matmuls into the columns [0, 2) of one PSUM tile, a third into [2, 3): the second
    accumulates onto the first, the third starts its own group."""
    out = nl.ndarray((128, 3), nl.float32, buffer=nl.shared_hbm)
    a_sb = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    b_sb = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_sb, src=a)
    nisa.dma_copy(dst=b_sb, src=b)
    ps = nl.ndarray((128, 3), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps[:, 0:2], stationary=a_sb, moving=b_sb[:, 0:2])
    nisa.nc_matmul(dst=ps[:, 0:2], stationary=a_sb, moving=b_sb[:, 2:4])
    nisa.nc_matmul(dst=ps[:, 2:3], stationary=a_sb, moving=b_sb[:, 4:5])
    r = nl.ndarray((128, 3), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


def _runs(kernel, run, *args):
    """simulate: one run with every check; jit: the checked first run and an unchecked one."""
    if run == "simulate":
        return [nki.simulate(kernel)(*args)]
    kernel.cache_clear()
    return [kernel(*args), kernel(*args)]


def _column_ref(k, q):
    B, d, S = k.shape
    n = S // 128
    return np.stack([(k[b].T @ q[:, b]).reshape(n, 128).T for b in range(B)])


@pytest.mark.parametrize("run", ["simulate", "jit"])
def test_column_matmuls_are_separate_accumulation_groups(run):
    # Before: the second column's matmul was taken for an accumulation (its span overlapped the
    # first column's), so batch 0 accumulated onto never-written PSUM (nki.simulate: an
    # uninitialized-memory error) and batch 1 onto batch 0's scores (wrong values).
    rng = np.random.default_rng(0)
    k = rng.standard_normal((2, 64, 384)).astype(np.float32)
    q = rng.standard_normal((64, 2)).astype(np.float32)
    # fp32 operands, fp32 PSUM: only the summation order differs from numpy.
    for got in _runs(column_scores, run, k, q):
        np.testing.assert_allclose(got, _column_ref(k, q), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", ["simulate", "jit"])
def test_strided_column_matmuls_into_a_3d_psum_view(run):
    rng = np.random.default_rng(1)
    B, d, n, s = 3, 32, 4, 5
    k = rng.standard_normal((B, d, n * 128)).astype(np.float32)
    q = rng.standard_normal((d, B * s)).astype(np.float32)
    ref = np.empty((B, 128, n, s), np.float32)
    for b in range(B):
        for j in range(n):
            ref[b, :, j, :] = k[b][:, j::n].T @ q[:, b * s : (b + 1) * s]
    for got in _runs(strided_column_scores, run, k, q):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_a_location_written_again_accumulates():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 128)).astype(np.float32)
    b = rng.standard_normal((16, 5)).astype(np.float32)
    ref = np.concatenate([a.T @ b[:, 0:2] + a.T @ b[:, 2:4], a.T @ b[:, 4:5]], axis=1)
    np.testing.assert_allclose(nki.simulate(rewrites)(a, b), ref, rtol=1e-5, atol=1e-5)
