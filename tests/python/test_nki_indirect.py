"""Indirect DMA: ``tensor.ap(pattern, vector_offset=idx, indirect_dim=d)`` with ``nisa.dma_copy``
gathers (indirect src) or scatters (indirect dst) one entry per index: entry i of the pattern's
first dimension starts ``idx[i] * stride(d)`` elements from the base. Bad indices raise, or
are skipped with ``oob_mode=skip``. Kernels are written here and compared with numpy (copies:
exact)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@nki.jit
def gather_rows(table, indices):
    P, F = indices.shape[0], table.shape[1]
    out = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray(indices.shape, dtype=nl.int32, buffer=nl.sbuf)  # (P, 1), or (P, 1, 1)
    nisa.dma_copy(dst=idx, src=indices)
    rows = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap(pattern=[[F, P], [1, F]], offset=0, vector_offset=idx, indirect_dim=0))
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_gather_rows_by_index():
    table = _rand(300, 64)
    idx = np.random.default_rng(1).integers(0, 300, size=(128, 1)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate(gather_rows)(table, idx), table[idx[:, 0]])
    # planned runs after the checked first run
    np.testing.assert_array_equal(gather_rows(table, idx), table[idx[:, 0]])
    idx2 = idx[::-1].copy()
    np.testing.assert_array_equal(gather_rows(table, idx2), table[idx2[:, 0]])


def test_index_tile_with_trailing_unit_dims():
    """The index tile as the public router top-k allocates it: (P, 1, 1)."""
    table = _rand(50, 16)
    idx = np.random.default_rng(2).integers(0, 50, size=(4, 1, 1)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate(gather_rows)(table, idx), table[idx[:, 0, 0]])


@nki.jit
def scatter_tokens(cache, new, positions):
    """A KV-cache update: row b of `new` goes to row positions[b] of the flattened cache, with
    the cache reshaped so each row has stride d (the index is scaled by the reshaped stride)."""
    B, D = new.shape
    t = nl.ndarray((B, D), dtype=new.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=new)
    pos = nl.ndarray((B, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=pos, src=positions)
    flat = cache.reshape((cache.shape[0] * cache.shape[1], D))
    nisa.dma_copy(dst=flat.ap(pattern=[[1, B], [1, D]], offset=0, vector_offset=pos, indirect_dim=0), src=t)
    return cache


def test_scatter_rows_into_a_reshaped_cache_scales_by_the_reshaped_stride():
    cache = _rand(4, 16, 32)
    new = _rand(8, 32, seed=2)
    pos = np.array([[3], [17], [18], [40], [63], [0], [25], [50]], dtype=np.uint32)
    want = cache.copy().reshape(64, 32)
    want[pos[:, 0]] = new
    got = nki.simulate(scatter_tokens)(cache.copy(), new, pos)
    np.testing.assert_array_equal(np.asarray(got).reshape(64, 32), want)


@nki.jit
def gather_skip(table, indices):
    P, F = indices.shape[0], table.shape[1]
    out = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    rows = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=rows, value=-1.0)
    nisa.dma_copy(
        dst=rows,
        src=table.ap(pattern=[[F, P], [1, F]], offset=0, vector_offset=idx, indirect_dim=0),
        oob_mode=nisa.oob_mode.skip,
    )
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_out_of_bounds_indices_raise_or_are_skipped():
    table = _rand(10, 16)
    idx = np.array([[1], [9], [10], [-1]] * 8, dtype=np.int32)
    # an IndexError worded as the NKI simulator words it (flattened element 10 * 16 of 160),
    # with the instruction, the entry and the index value in its note
    with pytest.raises(IndexError) as info:
        nki.simulate(gather_rows)(table, idx)
    assert type(info.value) is IndexError
    assert str(info.value) == "index 160 is out of bounds for axis 0 with size 160"
    assert "index 10 (entry 2) moves the access of 'table' outside the tensor" in info.value.__notes__[0]
    assert "nki.isa.dma_copy" in info.value.__notes__[0]
    got = nki.simulate(gather_skip)(table, idx)
    want = np.full((32, 16), -1.0, np.float32)
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < 10)
    want[ok] = table[idx[ok, 0]]
    np.testing.assert_array_equal(got, want)


def test_vector_select_is_a_gather_on_dim_0():
    @nki.jit
    def k(table, indices):
        P = indices.shape[0]
        idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        rows = nl.ndarray((P, table.shape[1], table.shape[2]), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.vector_select(0, idx))
        out = nl.ndarray(rows.shape, dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=rows)
        return out

    table = _rand(20, 4, 8)
    idx = np.random.default_rng(3).integers(0, 20, size=(16, 1)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate(k)(table, idx), table[idx[:, 0]])


def test_indirect_views_are_refused_where_they_would_be_ignored():
    @nki.jit
    def k(table, indices):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        v = table.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=idx, indirect_dim=0)
        v[:, 0:4]  # slicing an indirect view
        return table

    with pytest.raises(NotImplementedError, match="indexing of an indirect view"):
        nki.simulate(k)(_rand(10, 8), np.zeros((4, 1), np.int32))

    @nki.jit
    def k2(table, indices):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        sb = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sb, src=sb.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=idx))
        return table

    with pytest.raises(ValueError, match="must be in HBM"):
        nki.simulate(k2)(_rand(10, 8), np.zeros((4, 1), np.int32))

    @nki.jit
    def k3(table, indices):
        idx = nl.ndarray((2, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        table.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=idx)
        return table

    with pytest.raises(ValueError, match=r"one index per entry of the pattern's first dimension: \(4, 1\)"):
        nki.simulate(k3)(_rand(10, 8), np.zeros((2, 1), np.int32))


def test_indices_from_never_written_memory_are_reported():
    @nki.jit
    def k(table):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)  # never written
        rows = nl.ndarray((4, 8), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.ap(pattern=[[8, 4], [1, 8]], offset=0, vector_offset=idx, indirect_dim=0))
        out = nl.ndarray((4, 8), dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=rows)
        return out

    with pytest.raises(Exception, match="never-written memory"):
        nki.simulate(k)(_rand(10, 8))


@nki.jit
def gather_blocks_transposed(cache, table):
    """A block KV cache read as decode attention's K operand: cache [blocks, bl, d], table [P, 1]
    block ids; out [d, bl, P] with out[x, j, p] = cache[table[p], j, x] (one indirect
    dma_transpose: the gathered dimension lands last)."""
    nb, bl, d = cache.shape
    P = table.shape[0]
    idx = nl.ndarray((P, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=table)
    t = nl.ndarray((d, 1, bl, P), dtype=cache.dtype, buffer=nl.sbuf)
    src = cache.reshape((nb, 1, bl, d)).ap(
        [[bl * d, P], [1, 1], [d, bl], [1, d]], offset=0, vector_offset=idx, indirect_dim=0
    )
    nisa.dma_transpose(dst=t, src=src, axes=(3, 1, 2, 0))
    out = nl.ndarray((d, bl, P), dtype=cache.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t.reshape((d, bl, P)))
    return out


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
def test_indirect_dma_transpose_gathers_blocks(dtype):
    dt = nl.bfloat16 if dtype == "bfloat16" else dtype
    cache = _rand(40, 16, 32).astype(dt)
    table = np.random.default_rng(3).permutation(40)[:24].reshape(24, 1).astype(np.uint32)
    want = cache[table[:, 0]].transpose(2, 1, 0)
    # Copies: bit-exact.
    np.testing.assert_array_equal(nki.simulate(gather_blocks_transposed)(cache, table), want)
    np.testing.assert_array_equal(gather_blocks_transposed(cache, table), want)


def test_indirect_dma_transpose_index_out_of_range():
    cache = _rand(4, 8, 16)
    table = np.array([[0], [9]], np.uint32)
    with pytest.raises(IndexError, match="is out of bounds for axis 0 with size 512") as info:
        nki.simulate(gather_blocks_transposed)(cache, table)
    assert "index 9 (entry 1) moves the access of 'cache' outside the tensor" in info.value.__notes__[0]
