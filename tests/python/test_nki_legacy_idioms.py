"""Idioms of the older (``neuronxcc.nki``) kernels, with kernels written here: PSUM accumulation
with ``+=`` of old-style nc_matmul results, dense ``nl.mgrid`` grids (``.p``/``.x``, iota over the
whole grid), masks combined with trace-time bools, numpy scalars as operands, the keyword form
of ``reshape``, ``nl.finfo``, launchers given to launchers; and the checker's rule that a
tensor becomes live uninitialized even where a dead tensor was written."""

from __future__ import annotations

import numpy as np
import pytest

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki
from neuronxcc.nki import baremetal, simulate_kernel
from nki import NkiValidationError


@nki.jit
def rows_times_weights(a_t, w):
    """out = a_t.T @ w with K split into 128-row chunks accumulated by `+=` into a PSUM tile,
    after another kernel-allocated PSUM tile was written and died (its bytes are stale)."""
    K, M = a_t.shape
    N = w.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:128, 0:N]
    scratch = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    scratch[...] = nisa.nc_matmul(nl.load(a_t[0:128, :]), nl.load(w[0:128, :]))
    junk = nl.copy(scratch)
    res = nl.ndarray((1, nl.par_dim(M), N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        at = nl.load(a_t[k * 128 : (k + 1) * 128, :])
        wt = nl.load(w[k * 128 + g.p, g.x])
        res[0] += nisa.nc_matmul(at, wt)
    nl.store(out, nl.copy(res[0]))
    del junk
    return out


def test_psum_plus_equals_old_style_matmul_accumulates_in_place():
    rng = np.random.default_rng(0)
    a_t = rng.standard_normal((384, 64)).astype(np.float32)
    w = rng.standard_normal((384, 96)).astype(np.float32)
    got = simulate_kernel(baremetal(rows_times_weights), a_t, w)
    np.testing.assert_allclose(got, a_t.T @ w, rtol=1e-4, atol=1e-3)
    dump = rows_times_weights.specialize(a_t, w).dump()
    # three matmuls accumulate into the PSUM tile: no separate add
    assert "nki.isa.tensor_tensor" not in dump
    assert dump.count("accumulate=true") == 2


@nki.jit
def dense_iota(x):
    grid = nl.mgrid[0:x.shape[0], 0:2, 0:3]
    pos = nisa.iota(3 * grid.x + grid.y, dtype=nl.int32)  # no partition term: every partition
    out = nl.ndarray((x.shape[0], 6), dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, pos.reshape(shape=(x.shape[0], 6)))
    return out


def test_mgrid_is_dense_and_named():
    got = simulate_kernel(dense_iota, np.zeros((8, 1), np.float32))
    np.testing.assert_array_equal(got, np.tile(np.arange(6, dtype=np.int32), (8, 1)))
    g = nl.mgrid[0:4, 0:8]
    i_p, i_f = g
    assert g.p is i_p and g.x is i_f
    with pytest.raises(AttributeError, match="no .y grid"):
        g.y


@nki.jit
def masked_store(x, n_valid: int, tile: int):
    out = nl.zeros(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.mgrid[0 : x.shape[0], 0 : x.shape[1]]
    t = nl.load(x)
    scaled = nisa.tensor_scalar(t, np.multiply, np.float32(2.0), op1=np.add, operand1=np.int32(1))
    nl.store(out[g.p, g.x], value=scaled, mask=(g.x < n_valid) & (tile * 128 < 256))
    return out


@pytest.mark.parametrize("tile", [0, 3])
def test_masks_combine_with_trace_time_bools_and_numpy_scalars(tile):
    x = np.arange(4 * 10, dtype=np.float32).reshape(4, 10)
    got = simulate_kernel(masked_store, x, 6, tile)
    want = np.zeros_like(x)
    if tile * 128 < 256:
        want[:, :6] = x[:, :6] * 2 + 1
    np.testing.assert_array_equal(got, want)


def test_finfo_and_iinfo():
    assert nl.finfo(nl.bfloat16).min == pytest.approx(-3.3895314e38, rel=1e-6)
    assert nl.finfo(nl.float16).max == 65504.0
    assert nl.iinfo(nl.int8).min == -128 and nl.iinfo(nl.uint16).max == 65535


@nki.jit
def stale_read(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(2):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)  # a new tile each iteration
        if i == 0:
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=out, src=t)
        else:
            nisa.dma_copy(dst=out, src=t)  # never written: may sit where the first one was
    return out


def test_a_new_tensor_is_uninitialized_where_a_dead_one_was_written():
    with pytest.raises(NkiValidationError, match="uninitialized"):
        simulate_kernel(stale_read, np.ones((128, 64), np.float32))


@nki.jit
def hbm_output_and_per_partition_scalars(x):
    """The docs' style: an nl.hbm output, and scalars assigned element by element (partition i)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
    t = nl.zeros((x.shape[0], 4), dtype=nl.float32)
    for i in nl.static_range(x.shape[0]):
        for j in nl.static_range(4):
            t[i, j] = i * 10 + j
    nl.store(out, nl.add(nl.load(x), t))
    return out


def test_nl_hbm_outputs_and_scalar_assignment_on_any_partition():
    x = np.ones((8, 4), np.float32)
    want = x + (np.arange(8)[:, None] * 10 + np.arange(4)[None, :])
    np.testing.assert_array_equal(simulate_kernel(hbm_output_and_per_partition_scalars, x), want)
    np.testing.assert_array_equal(hbm_output_and_per_partition_scalars(x), want)


@nki.jit
def add_row_to_every_partition(a, row):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(row)))  # [128, 64] + [1, 64]
    return out


def test_language_ops_broadcast_the_partition_dimension():
    a = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    row = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_array_equal(simulate_kernel(add_row_to_every_partition, a, row), a + row)
    assert "nki.isa.dma_copy" in add_row_to_every_partition.specialize(a, row).dump()


@nki.jit
def gather_and_scatter_rows_by_tile(data, idx):
    """data[idx_tile[i_p, 0], i_f]: rows chosen by an SBUF tile of indices (an indirect DMA)."""
    out = nl.ndarray((idx.shape[0], data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    back = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    idx_tile = nl.load(idx[i_p])
    rows = nl.load(data[idx_tile[i_p, 0], i_f])
    nl.store(out, value=rows)
    nl.store(back, value=nl.zeros(data.shape, dtype=data.dtype))
    nl.store(back[idx_tile[i_p, 0], i_f], value=rows)
    return out, back


def test_hbm_rows_indexed_by_a_tile_of_indices():
    data = np.random.default_rng(3).standard_normal((128, 32)).astype(np.float32)
    idx = (3 * np.arange(40, dtype=np.int32)) % 128
    out, back = simulate_kernel(gather_and_scatter_rows_by_tile, data, idx)
    np.testing.assert_array_equal(out, data[idx])
    want = np.zeros_like(data)
    want[idx] = data[idx]
    np.testing.assert_array_equal(back, want)


@nki.jit
def causal_scores(q_t, k_t, upper_rows: int):
    """Scores q_t.T @ k_t left in PSUM, causally masked by the old-style affine_select straight
    from PSUM (the older compiler moved the tile to SBUF for the GpSimd Engine); with a mask=
    restricting the select to the first `upper_rows` rows (the rest keep the plain scores), and
    a second select masked off at trace time (it must write nothing)."""
    n = q_t.shape[1]
    out = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((nl.par_dim(n), n), dtype=nl.float32, buffer=nl.psum)
    s[...] = nl.matmul(nl.load(q_t), nl.load(k_t), transpose_x=True)
    i_p, i_f = nl.mgrid[0:n, 0:n]
    res = nl.ndarray((nl.par_dim(n), n), dtype=nl.float32, buffer=nl.sbuf)
    res[...] = nl.copy(s)
    res[...] = nisa.affine_select(pred=(i_p + 3 >= i_f), on_true_tile=s, on_false_value=-1e4,
                                  dtype=nl.float32, mask=(i_p < upper_rows))
    res[...] = nisa.affine_select(pred=(i_p >= i_f), on_true_tile=s, on_false_value=7.0,
                                  dtype=nl.float32, mask=upper_rows < 0)
    nl.store(out, res)
    return out


@pytest.mark.parametrize("upper_rows", [128, 40])
def test_old_affine_select_reads_psum_and_honours_mask(upper_rows):
    rng = np.random.default_rng(1)
    q_t = rng.standard_normal((64, 128)).astype(np.float32)
    k_t = rng.standard_normal((64, 128)).astype(np.float32)
    got = simulate_kernel(causal_scores, q_t, k_t, upper_rows)
    s = q_t.T @ k_t
    p, f = np.mgrid[0:128, 0:128]
    want = np.where((p + 3 >= f) | (p >= upper_rows), s, np.float32(-1e4))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)  # fp32 matmul, summation order


@nki.jit
def new_affine_select_psum(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=s, src=nl.load(x))
    d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=d, pattern=[[-1, x.shape[1]]], channel_multiplier=1, on_true_tile=s,
                       on_false_value=0.0, cmp_op=nl.greater_equal)
    nl.store(out, d)
    return out


def test_new_affine_select_still_requires_sbuf():
    x = np.ones((8, 8), np.float32)
    with pytest.raises(NkiValidationError, match="GpSimd Engine cannot access"):
        simulate_kernel(new_affine_select_psum, x)


@nki.jit
def column_stats(x):
    """t[:, j] of an on-chip [P, F] tile is a [P, 1] tile (older releases' tiles are 2-D), so a
    column can be indexed again with [:, 0]."""
    p, f = x.shape
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    acc = nl.ndarray((nl.par_dim(p), f), dtype=x.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(f):
        col = t[:, j]
        assert tuple(col.shape) == (p, 1)
        acc[:, j] = nl.multiply(col[:, 0], 2.0)
    nl.store(out, acc)
    return out


def test_int_index_of_tile_free_dim_keeps_a_column():
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(simulate_kernel(column_stats, x), 2 * x)


@nki.jit
def rows_in_tiles(a):
    """Copies a [R, F] tensor through 128-row SBUF tiles; the last tile's slice runs past the
    end of `a` and the mask= of the copies clips it (the older releases' idiom)."""
    r, f = a.shape
    out = nl.ndarray((r, f), dtype=a.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((r + 127) // 128):
        i_p = nl.arange(128)[:, None] + t * 128
        buf = nl.ndarray((nl.par_dim(128), f), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=buf, src=a[t * 128:(t + 1) * 128, :], mask=(i_p < r))
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=buf, mask=(i_p < r))
    return out


def test_slice_past_the_end_clipped_by_the_mask():
    a = np.random.default_rng(2).standard_normal((300, 40)).astype(np.float32)
    np.testing.assert_array_equal(simulate_kernel(rows_in_tiles, a), a)


@nki.jit
def rows_past_the_end_unmasked(a):
    buf = nl.ndarray((nl.par_dim(128), a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=buf, src=a[128:256, :])
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, buf)
    return out


def test_slice_past_the_end_without_mask_raises():
    a = np.zeros((200, 8), np.float32)
    with pytest.raises(IndexError, match=r"covers 128\.\.255 on dimension 0 of size 200"):
        simulate_kernel(rows_past_the_end_unmasked, a)


@nki.jit
def add_rows_into(base, rows, where):
    """out = base; out[where[i]] += rows[i] through dma_copy(dst_rmw_op=np.add) (a scatter-add
    of the older releases), then out[0:8] += rows[0:8] directly."""
    n, f = rows.shape
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(base))
    idx = nl.load(where)
    i_f = nl.arange(f)[None, :]
    r = nl.load(rows)
    nisa.dma_copy(dst=out[idx, i_f], src=r, dst_rmw_op=np.add)
    nisa.dma_copy(dst=out[0:8, :], src=r[0:8, :], dst_rmw_op=np.add)
    return out


def test_dma_copy_dst_rmw_op_adds_into_dst():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((40, 24)).astype(np.float32)
    rows = rng.standard_normal((16, 24)).astype(np.float32)
    where = rng.permutation(40)[:16].astype(np.int32).reshape(16, 1)
    want = base.copy()
    want[where[:, 0]] += rows
    want[0:8] += rows[0:8]
    np.testing.assert_allclose(simulate_kernel(add_rows_into, base, rows, where), want, rtol=1e-6, atol=1e-6)


def test_dma_copy_dst_rmw_op_other_than_add_is_refused():
    @nki.jit
    def mul_into(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        nisa.dma_copy(dst=out, src=nl.load(a), dst_rmw_op=np.multiply)
        return out

    with pytest.raises(NkiValidationError, match="add only"):
        simulate_kernel(mul_into, np.ones((4, 4), np.float32))


@nki.jit
def fp8_double_row(a, b, mode):
    """c = sum over (k, l) of a[k, l, i] * b[k, l, j]: the double-row FP8 matmul, two rows of
    the contraction packed per partition."""
    c = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a)
    bt = nl.load(b)
    nl.store(c, nisa.nc_matmul(at, bt, perf_mode=mode))
    return c


@pytest.mark.parametrize("mode", ["double_row_gen3", "double_row", nisa.matmul_perf_mode.double_row])
def test_double_row_perf_mode_names(mode):
    rng = np.random.default_rng(4)
    a = rng.integers(-3, 4, (128, 2, 16)).astype(nl.float8_e5m2)
    b = rng.integers(-3, 4, (128, 2, 64)).astype(nl.float8_e5m2)
    want = np.einsum("kli,klj->ij", a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_array_equal(simulate_kernel(fp8_double_row, a, b, mode), want)  # small ints: exact


def test_unknown_perf_mode_string_is_refused():
    a = np.ones((128, 2, 4), nl.float8_e5m2)
    with pytest.raises(ValueError, match="perf_mode='double_col'"):
        simulate_kernel(fp8_double_row, a, a, "double_col")


@nki.jit
def tile_and_hbm_outputs(x):
    """Returns (an SBUF tile, an nl.hbm tensor allocated before it): the simulator hands back
    the tile's final contents; each output keeps its place in the returned tuple."""
    early = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.hbm)
    t = nl.multiply(nl.load(x), 3.0)
    nl.store(early, nl.max(t, axis=1, keepdims=True))
    return t, early


def test_returned_sbuf_tile_and_hbm_tensor_keep_their_order():
    x = np.random.default_rng(5).standard_normal((16, 32)).astype(np.float32)
    tile, mx = simulate_kernel(tile_and_hbm_outputs, x)
    np.testing.assert_array_equal(tile, x * np.float32(3.0))
    np.testing.assert_array_equal(mx, (x * np.float32(3.0)).max(axis=1, keepdims=True))


@nki.jit
def gather_pixels(img, where, n_valid: int):
    """out[b, p] = img[b, where[p]] for p < n_valid: the HBM tensor indexed by an int, then a
    [P, 1] tile of row indices (a gather), masked to the first n_valid entries."""
    nb, rows, c = img.shape
    out = nl.ndarray((nb, 128, c), dtype=img.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(c)[None, :]
    idx = nl.load(where)
    for b in nl.affine_range(nb):
        got = nl.load(img[b, idx, i_f], mask=(i_p < n_valid))
        nl.store(out[b, i_p, i_f], value=got, mask=(i_p < n_valid))
    return out


def test_int_then_tile_index_gather_with_mask():
    rng = np.random.default_rng(6)
    img = rng.standard_normal((2, 50, 8)).astype(np.float32)
    where = np.concatenate([rng.integers(0, 50, 100), np.full(28, 1000)]).astype(np.int32).reshape(128, 1)
    got = simulate_kernel(gather_pixels, img, where, 100)  # entries past 100 would be out of bounds
    np.testing.assert_array_equal(got[:, :100], img[:, where[:100, 0]])


@nki.jit
def top8_of_left_half(x):
    """max8 and nc_match_replace8 with the older mask= on their data: the left half's columns."""
    p, f = x.shape
    vals = nl.ndarray((p, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    rep = nl.ndarray((p, f // 2), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:p, 0:f]
    t = nl.load(x)
    m = nisa.max8(src=t[ix, iy], mask=(iy < f // 2))
    r = nisa.nc_match_replace8(data=t[ix, iy], vals=m, imm=-5.0, mask=(iy < f // 2))
    nl.store(vals, m)
    nl.store(rep, r[:, 0:f // 2])
    return vals, rep


def test_max8_and_match_replace8_honour_mask():
    x = np.random.default_rng(7).permutation(32 * 64).reshape(32, 64).astype(np.float32)
    vals, rep = simulate_kernel(top8_of_left_half, x)
    left = x[:, :32]
    want_vals = -np.sort(-left, axis=1)[:, :8]
    np.testing.assert_array_equal(vals, want_vals)
    want_rep = left.copy()
    want_rep[left >= want_vals[:, 7:8]] = -5.0
    np.testing.assert_array_equal(rep, want_rep)


def test_mask_on_an_instruction_without_it_raises():
    @nki.jit
    def masked_memset(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(x.shape[0])[:, None]
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0, mask=(i_p < 2))
        nl.store(out, t)
        return out

    with pytest.raises(NotImplementedError, match="memset: mask= is not supported"):
        simulate_kernel(masked_memset, np.zeros((4, 4), np.float32))


@nki.jit
def transpose_in_sbuf(a):
    """dma_transpose of an SBUF tile (SBUF -> SBUF), the older returning call."""
    t = nisa.dma_transpose(nl.load(a))
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


def test_dma_transpose_of_an_sbuf_tile():
    a = np.random.default_rng(8).standard_normal((16, 96)).astype(np.float16)
    np.testing.assert_array_equal(simulate_kernel(transpose_in_sbuf, a), a.T)
