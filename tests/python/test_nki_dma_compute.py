"""nisa.dma_compute: the DMA engines' elementwise sum (each source cast to fp32, summed in order in
fp32, cast to dst's dtype; equal element counts, shapes may differ) and its read-modify-write
forms through an indirect operand (scatter-add into HBM, gather-add into SBUF). Kernels are
written here and compared with numpy references computed the same way (fp32 sums in order)."""

from __future__ import annotations

import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import NkiValidationError

BF16 = ml_dtypes.bfloat16


def _rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _fp32_sum(arrays, dtype):
    acc = arrays[0].astype(np.float32).reshape(-1)
    for a in arrays[1:]:
        acc = (acc + a.astype(np.float32).reshape(-1)).astype(np.float32)
    return acc.astype(dtype)


def _hbm_sum_kernel(n, out_dtype):
    """out = x0 + ... + x{n-1}, all in HBM, as the fused residual add of a decode layer does it."""

    @nki.jit
    def k(*xs):
        out = nl.ndarray(xs[0].shape, dtype=out_dtype, buffer=nl.shared_hbm)
        nisa.dma_compute(out, tuple(xs), scales=(1.0,) * n, reduce_op=nl.add)
        return out

    return k


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9, 16])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_sum_of_hbm_tensors_matches_an_fp32_sum_in_order(n, dtype):
    xs = [_rand(4, 96, seed=i, dtype=dtype) for i in range(n)]
    want = _fp32_sum(xs, dtype).reshape(4, 96)
    got = np.asarray(nki.simulate(_hbm_sum_kernel(n, dtype))(*xs))
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_mixed_dtypes_cast_through_fp32_and_round_once():
    a = _rand(2, 64, seed=1, dtype=BF16)
    b = _rand(2, 64, seed=2, dtype=np.float16)
    c = _rand(2, 64, seed=3)
    want = _fp32_sum([a, b, c], BF16).reshape(2, 64)
    got = np.asarray(nki.simulate(_hbm_sum_kernel(3, nl.bfloat16))(a, b, c))
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@nki.jit
def sharded_residual(h, attn, mlp):
    """Each shard (program_id) adds its half of the hidden dimension, through reshaped views."""
    B, H = h.shape
    out = nl.ndarray((B, H), dtype=h.dtype, buffer=nl.shared_hbm)
    s = nl.program_id(0)
    v = [t.reshape((B, 2, H // 2)) for t in (h, attn, mlp, out)]
    nisa.dma_compute(
        dst=v[3][0:B, s, 0 : H // 2],
        srcs=[v[0][0:B, s, 0 : H // 2], v[1][0:B, s, 0 : H // 2], v[2][0:B, s, 0 : H // 2]],
        reduce_op=nl.add,
    )
    return out


@pytest.mark.parametrize("lnc", [1, 2])
def test_sharded_views_at_lnc1_and_lnc2(lnc):
    h, a, m = (_rand(6, 256, seed=i, dtype=BF16) for i in range(3))
    want = _fp32_sum([h, a, m], BF16).reshape(6, 256)
    if lnc == 1:  # one core: two launches of the grid cover both halves
        got = np.asarray(nki.simulate(sharded_residual[2])(h, a, m))
    else:
        got = np.asarray(nki.simulate(sharded_residual[nl.nc(2)])(h, a, m))
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@nki.jit
def in_place_pairwise(out, T, D):
    """out[0:T] += out[T:2T], tile by tile, with .ap() patterns: dst is also a source."""
    for t in nl.affine_range(T // 4):
        lo = out.ap(pattern=[[D, 4], [1, D]], offset=t * 4 * D)
        hi = out.ap(pattern=[[D, 4], [1, D]], offset=T * D + t * 4 * D)
        nisa.dma_compute(dst=lo, srcs=[lo, hi], scales=[1.0, 1.0], reduce_op=nl.add)
    return out


def test_in_place_accumulation_through_access_patterns():
    T, D = 8, 48
    x = _rand(2 * T, D, seed=4)
    want = x.copy()
    want[:T] = (x[:T] + x[T:]).astype(np.float32)
    got = np.asarray(nki.simulate(in_place_pairwise)(x.copy(), T, D))
    np.testing.assert_array_equal(got, want)


@nki.jit
def sbuf_and_shape_change(x, y):
    """An SBUF tile plus a differently shaped HBM view with the same element count."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_compute(dst=r, srcs=[t, y.reshape((P, F))], reduce_op=nl.add)
    out = nl.ndarray((1, P * F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_compute(dst=out, srcs=[r], reduce_op=nl.add)  # one source: a cast copy, flat order
    return out


def test_sbuf_sources_and_flat_order_across_shapes():
    x = _rand(16, 12, seed=5, dtype=BF16)
    y = _rand(192, seed=6)
    want = _fp32_sum([x, y], np.float32).reshape(1, -1)
    np.testing.assert_array_equal(np.asarray(nki.simulate(sbuf_and_shape_change)(x, y)), want)


@nki.jit
def scatter_add_rows(table, new, positions):
    """table[positions[i]] += new[i] (a block-sparse accumulation into HBM)."""
    B, D = new.shape
    t = nl.ndarray((B, D), dtype=new.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=new)
    pos = nl.ndarray((B, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=pos, src=positions)
    view = table.ap(pattern=[[D, B], [1, D]], offset=0, vector_offset=pos, indirect_dim=0)
    nisa.dma_compute(dst=view, srcs=[view, t], reduce_op=nl.add, unique_indices=True)
    return table


def test_scatter_add_into_hbm():
    table = _rand(40, 32, seed=7, dtype=BF16)
    new = _rand(6, 32, seed=8)
    pos = np.array([[3], [39], [0], [17], [18], [5]], dtype=np.int32)
    want = table.copy()
    for i, p in enumerate(pos[:, 0]):
        want[p] = (table[p].astype(np.float32) + new[i]).astype(BF16)
    got = np.asarray(nki.simulate(scatter_add_rows)(table.copy(), new, pos))
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@nki.jit
def gather_add_experts(table, indices, k):
    """acc = sum over j < k of table[indices[:, j]] (the top-k reduce pattern: the first slice is a
    gather copy, the rest gather-add into the SBUF accumulator)."""
    P, D = indices.shape[0], table.shape[1]
    idx = nl.ndarray((P, k), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    acc = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
    for j in range(k):
        src = table.ap(pattern=[[D, P], [1, D]], offset=0, vector_offset=idx[:, j : j + 1], indirect_dim=0)
        if j == 0:
            nisa.dma_copy(dst=acc[:, :], src=src)
        else:
            nisa.dma_compute(dst=acc[:, :], srcs=[src, acc[:, :]], reduce_op=nl.add)
    out = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_gather_add_into_sbuf():
    table = _rand(64, 24, seed=9, dtype=BF16)
    idx = np.random.default_rng(10).integers(0, 64, size=(32, 3)).astype(np.int32)
    want = table[idx[:, 0]].astype(np.float32)
    for j in (1, 2):
        want = (table[idx[:, j]].astype(np.float32) + want).astype(np.float32)
    got = gather_add_experts(table, idx, 3)  # first run checked, later runs planned
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(gather_add_experts(table, idx, 3)), want)


def test_dump_names_it_and_the_estimate_charges_every_source():
    a, b = _rand(128, 512, seed=1), _rand(128, 512, seed=2)
    kern2, kern4 = _hbm_sum_kernel(2, nl.float32), _hbm_sum_kernel(4, nl.float32)
    assert kern2.specialize(a, b).dump().count("nki.isa.dma_compute") == 1
    assert kern4.specialize(a, b, a, b).dump().count("nki.isa.dma_compute") == 1
    # nine sources: three instructions chained through a private fp32 accumulator
    assert _hbm_sum_kernel(9, nl.float32).specialize(*[a] * 9).dump().count("nki.isa.dma_compute") == 3
    two, four = nki.estimate(kern2, a, b), nki.estimate(kern4, a, b, a, b)
    assert four.total_ns > 1.5 * two.total_ns - 2000  # reads twice the bytes (fixed latency aside)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(reduce_op=nl.maximum), "nl.add only"),
        (dict(reduce_op=nl.add, scales=(1.0, 2.0)), "scales must all be 1.0"),
    ],
)
def test_hardware_restrictions_raise(kwargs, match):
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_compute(out, [a, b], **kwargs)
        return out

    with pytest.raises(NkiValidationError, match=match):
        nki.simulate(k)(_rand(2, 8), _rand(2, 8, seed=1))


def test_element_count_mismatch_is_a_rule_violation():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_compute(out, [a, b], reduce_op=nl.add)
        return out

    with pytest.raises(NkiValidationError, match="same element count"):
        nki.simulate(k)(_rand(2, 8), _rand(2, 9, seed=1))


def test_psum_operand_is_refused():
    @nki.jit
    def k(a):
        p = nl.ndarray((2, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=1.0)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_compute(out, [a, p], reduce_op=nl.add)
        return out

    with pytest.raises(NkiValidationError, match="PSUM"):
        nki.simulate(k)(_rand(2, 8))


def test_uninitialized_source_reaching_hbm_is_reported():
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)  # never written
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_compute(out, [a, t], reduce_op=nl.add)
        return out

    with pytest.raises(NkiValidationError, match="uninitialized"):
        nki.simulate(k)(_rand(4, 8))


def test_scatter_add_needs_dst_among_the_sources():
    @nki.jit
    def k(table, new, positions):
        B, D = new.shape
        t = nl.ndarray((B, D), dtype=new.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=new)
        pos = nl.ndarray((B, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=pos, src=positions)
        view = table.ap(pattern=[[D, B], [1, D]], offset=0, vector_offset=pos, indirect_dim=0)
        nisa.dma_compute(dst=view, srcs=[t, t], reduce_op=nl.add)
        return table

    with pytest.raises(NkiValidationError, match="one source is dst itself"):
        nki.simulate(k)(_rand(8, 4), _rand(2, 4, seed=1), np.array([[1], [2]], dtype=np.int32))
