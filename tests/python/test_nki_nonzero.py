"""nisa.nonzero_with_count against a numpy reference, and its rules broken once each."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import NkiValidationError


def _reference(x: np.ndarray, offset: int, pad: int, before: np.ndarray) -> np.ndarray:
    """Rows 0, 16, ..., 112 compacted; every other row keeps its previous contents."""
    P, T = x.shape
    out = before.copy()
    for p in range(0, P, 16):
        idx = np.flatnonzero(x[p]) + offset
        row = np.full(T + 1, pad, np.int64)
        row[: idx.size] = idx
        row[T] = idx.size
        out[p] = row.astype(np.int32)
    return out


@nki.jit
def _nonzero_kernel(x, before, offset, pad):
    P, T = x.shape
    t = nl.ndarray((P, T), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    o = nl.ndarray((P, T + 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=o, src=before)
    nisa.nonzero_with_count(dst=o, src=t, index_offset=offset, padding_val=pad)
    out = nl.ndarray((P, T + 1), nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("P,T,offset,pad", [(128, 64, 0, -1), (48, 37, 16, 7), (1, 8, 5, -3)])
def test_nonzero_with_count_matches_numpy(dtype, P, T, offset, pad):
    rng = np.random.default_rng(P * 1000 + T)
    x = (rng.random((P, T)) < 0.3) * rng.integers(-5, 6, (P, T))
    x[0, :] = 0  # an all-zero row: only padding and a count of 0
    if P > 16:
        x[16, :] = 1  # an all-nonzero row: no padding
    x = x.astype(dtype)
    if dtype == np.float32 and T > 3:
        x[P - 1 - (P - 1) % 16, 3] = -0.0  # negative zero is zero
    before = rng.integers(-100, 100, (P, T + 1)).astype(np.int32)
    got = np.asarray(_nonzero_kernel(x, before, offset, pad))
    np.testing.assert_array_equal(got, _reference(x, offset, pad, before))


def test_nonzero_with_count_docs_example():
    x = np.zeros((1, 8), np.float32)
    x[0, [1, 2, 5]] = 1
    got = np.asarray(_nonzero_kernel(x, np.zeros((1, 9), np.int32), 16, -1))
    np.testing.assert_array_equal(got[0], [17, 18, 21, -1, -1, -1, -1, -1, 3])


def test_nonzero_with_count_allocates_dst():
    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        o = nisa.nonzero_with_count(src=t)
        out = nl.ndarray(o.shape, nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0:1, :], src=o[0:1, :])
        return out

    x = np.array([[0, 3, 0, 4]], np.int32)
    np.testing.assert_array_equal(np.asarray(k(x))[0], [1, 3, -1, -1, 2])


def _bad_kernel(src_dtype, dst_dtype, extra, src_buffer=nl.sbuf):
    @nki.jit
    def k(x):
        t = nl.ndarray((16, 8), src_dtype, buffer=src_buffer)
        nisa.memset(dst=t, value=0)
        o = nl.ndarray((16, 8 + extra), dst_dtype, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=o, src=t)
        return x

    return k


@pytest.mark.parametrize(
    "src_dtype,dst_dtype,extra,src_buffer,fragment",
    [
        (nl.float32, nl.int32, 0, nl.sbuf, "one more element per partition"),
        (nl.float32, nl.int32, 2, nl.sbuf, "one more element per partition"),
        (nl.bfloat16, nl.int32, 1, nl.sbuf, "float32 or int32"),
        (nl.float32, nl.float32, 1, nl.sbuf, "int32 indices"),
        (nl.float32, nl.int32, 1, nl.psum, "GpSimd Engine cannot access"),
    ],
)
def test_nonzero_with_count_rules(src_dtype, dst_dtype, extra, src_buffer, fragment):
    k = _bad_kernel(src_dtype, dst_dtype, extra, src_buffer)
    with pytest.raises(NkiValidationError) as ei:
        k(np.zeros((1, 1), np.float32))
    assert fragment in str(ei.value), str(ei.value)
    assert ei.value.instruction.startswith("nki.isa.nonzero_with_count"), ei.value.instruction


def test_nonzero_with_count_needs_v3():
    @nki.jit(platform_target="trn1")
    def k(x):
        t = nl.ndarray((16, 8), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0)
        o = nl.ndarray((16, 9), nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=o, src=t)
        return x

    with pytest.raises(NkiValidationError, match="NeuronCore-v3"):
        k(np.zeros((1, 1), np.float32))


# ---------------------------------------------------------------------------------------------
# nisa.nc_find_index8


@nki.jit
def _find_index8_kernel(x, v, out_dtype):
    P, F = x.shape
    t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    vals = nl.ndarray((P, 8), v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=vals, src=v)
    idx = nl.ndarray((P, 8), out_dtype, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=idx, data=t, vals=vals)
    out = nl.ndarray((P, 8), out_dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=idx)
    return out


@pytest.mark.parametrize("out_dtype,np_out", [(nl.uint32, np.uint32), (nl.uint16, np.uint16)])
@pytest.mark.parametrize("P,F", [(128, 64), (5, 8), (3, 1000)])
def test_find_index8_first_occurrence(out_dtype, np_out, P, F):
    rng = np.random.default_rng(P + F)
    x = rng.integers(0, max(8, F // 4), (P, F)).astype(np.float32)  # many repeated values
    pick = rng.integers(0, F, (P, 8))
    v = np.take_along_axis(x, pick, axis=1)
    expected = np.array([[np.flatnonzero(x[p] == v[p, k])[0] for k in range(8)] for p in range(P)])
    got = np.asarray(_find_index8_kernel(x, v, out_dtype))
    assert got.dtype == np_out
    np.testing.assert_array_equal(got, expected)


def test_find_index8_after_max8_is_argmax8():
    @nki.jit
    def k(x):
        P, F = x.shape
        t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        m = nisa.max8(src=t)
        idx = nisa.nc_find_index8(data=t, vals=m)
        out = nl.ndarray((P, 8), nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=idx)
        return out

    x = np.random.default_rng(0).permutation(64 * 100).reshape(64, 100).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(k(x)), np.argsort(-x, axis=1)[:, :8])


def test_find_index8_missing_value_is_an_error():
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    v = np.array([[0, 1, 2, 3, 4, 5, 6, 99]], np.float32)
    with pytest.raises(NkiValidationError) as ei:
        _find_index8_kernel(x, v, nl.uint32)
    assert ei.value.kind == "runtime" and "99" in str(ei.value) and "vals[0, 7]" in str(ei.value)


@pytest.mark.parametrize(
    "F,nv,nd,out_dtype,fragment",
    [
        (7, 8, 8, nl.uint32, "8 to 16384 elements"),
        (16, 4, 8, nl.uint32, "8 values per partition"),
        (16, 8, 4, nl.uint32, "8 indices per partition"),
        (16, 8, 8, nl.int32, "uint16 or uint32"),
    ],
)
def test_find_index8_rules(F, nv, nd, out_dtype, fragment):
    @nki.jit
    def k(x):
        t = nl.ndarray((4, F), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0)
        v = nl.ndarray((4, nv), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=v, value=0)
        o = nl.ndarray((4, nd), out_dtype, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=o, data=t, vals=v)
        return x

    with pytest.raises(NkiValidationError) as ei:
        k(np.zeros((1, 1), np.float32))
    assert fragment in str(ei.value), str(ei.value)
    assert ei.value.instruction.startswith("nki.isa.nc_find_index8"), ei.value.instruction


# ---------------------------------------------------------------------------------------------
# nisa.nc_match_replace8


def _match_replace_reference(x, v, imm):
    out = x.copy()
    idx = np.zeros(v.shape, np.int64)
    for p in range(x.shape[0]):
        for k in range(8):
            hit = np.flatnonzero(out[p] == v[p, k])[0]
            idx[p, k] = hit
            out[p, hit] = imm
    return out, idx


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("P,F", [(128, 40), (7, 8), (2, 3000)])
def test_match_replace8_matches_numpy(in_place, P, F):
    @nki.jit
    def k(x, v):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        vals = nl.ndarray((x.shape[0], 8), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=vals, src=v)
        idx = nl.ndarray((x.shape[0], 8), nl.uint32, buffer=nl.sbuf)
        r = t if in_place else nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=r, data=t, vals=vals, imm=-7.5, dst_idx=idx)
        o1 = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray((x.shape[0], 8), nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=r)
        nisa.dma_copy(dst=o2, src=idx)
        return o1, o2

    rng = np.random.default_rng(P * F)
    x = rng.integers(0, 5, (P, F)).astype(np.float32)  # repeated values: replaced in order
    v = np.stack([x[p, rng.permutation(F)[:8] if F >= 8 else np.arange(8) % F] for p in range(P)])
    exp_out, exp_idx = _match_replace_reference(x, v, -7.5)
    got_out, got_idx = k(x, v)
    np.testing.assert_array_equal(np.asarray(got_out), exp_out)
    np.testing.assert_array_equal(np.asarray(got_idx), exp_idx)


def test_match_replace8_topk_loop():
    """max8 + match_replace8 repeated: the top 16 of each row (the rotational top-k pattern)."""

    @nki.jit
    def k(x):
        P, F = x.shape
        t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        top = nl.ndarray((P, 16), x.dtype, buffer=nl.sbuf)
        for r in range(2):
            nisa.max8(dst=top[:, r * 8 : (r + 1) * 8], src=t)
            nisa.nc_match_replace8(dst=t, data=t, vals=top[:, r * 8 : (r + 1) * 8], imm=-1e30)
        out = nl.ndarray((P, 16), x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=top)
        return out

    x = np.random.default_rng(3).standard_normal((32, 200)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(k(x)), -np.sort(-x, axis=1)[:, :16])


def test_match_replace8_rules():
    @nki.jit
    def k(x):
        t = nl.ndarray((4, 16), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0)
        v = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=v, value=0)
        nisa.nc_match_replace8(dst=t, data=t, vals=v, imm=1.0)
        return x

    with pytest.raises(NkiValidationError, match="8 values per partition"):
        k(np.zeros((1, 1), np.float32))
