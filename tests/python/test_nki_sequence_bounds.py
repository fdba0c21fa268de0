"""nisa.sequence_bounds against a numpy reference of the documented semantics (runs of equal
segment ids; id 0 is padding with bounds (n, -1)), and its rules."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import NkiValidationError


@nki.jit
def _bounds_kernel(ids):
    t = nl.ndarray(ids.shape, ids.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=ids)
    b = nisa.sequence_bounds(segment_ids=t)
    out = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=b)
    return out


def _reference(ids: np.ndarray) -> np.ndarray:
    """Each run [a, b) of one nonzero id: start a, end b; padding: n and -1."""
    row = ids.reshape(-1)
    n = row.size
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    a = 0
    while a < n:
        b = a
        while b < n and row[b] == row[a]:
            b += 1
        start[a:b], end[a:b] = (n, -1) if row[a] == 0 else (a, b)
        a = b
    return np.stack([start, end]).reshape(1, 2, n).astype(ids.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("n,seed", [(9, 0), (32, 1), (512, 2), (1, 3), (700, 4)])
def test_sequence_bounds_matches_numpy(dtype, n, seed):
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.integers(0, max(2, n // 3), n)).reshape(1, n).astype(dtype)
    if n > 4:
        ids[0, n // 2 : n // 2 + 2] = 0  # padding in the middle splits a run
    got = np.asarray(_bounds_kernel(ids))
    want = _reference(ids)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_sequence_bounds_documented_example():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.int32)
    want = np.array([[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]], np.int32)
    np.testing.assert_array_equal(np.asarray(_bounds_kernel(ids)), want)


def test_sequence_bounds_large_int_ids_compare_exactly():
    ids = np.array([[2**24, 2**24 + 1, 2**24 + 1]], np.int32)  # equal as fp32, distinct as int32
    np.testing.assert_array_equal(np.asarray(_bounds_kernel(ids)), np.array([[[0, 1, 1], [1, 3, 3]]], np.int32))


def test_sequence_bounds_into_a_float_dst_assigned_through_a_grid():
    """The public example's form: out_tile[ix, iy, iz] = nisa.sequence_bounds(...)."""

    @nki.jit
    def k(ids):
        m, n = ids.shape
        ix, iy, iz = nl.mgrid[0:m, 0:2, 0:n]
        out_tile = nl.ndarray([m, 2, n], dtype=nl.float32, buffer=nl.sbuf)
        seq = nl.load(ids)
        out_tile[ix, iy, iz] = nisa.sequence_bounds(segment_ids=seq)
        out = nl.ndarray([m, 2, n], dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=out_tile)
        return out

    ids = np.array([[3, 3, 0, 5, 5, 5, 7]], np.int32)
    np.testing.assert_array_equal(np.asarray(k(ids)), _reference(ids).astype(np.float32))


def test_sequence_bounds_negative_id_is_an_error():
    with pytest.raises(NkiValidationError) as ei:
        _bounds_kernel(np.array([[1, 1, -2, 3]], np.int32))
    assert ei.value.kind == "runtime" and "index 2" in str(ei.value), str(ei.value)


@pytest.mark.parametrize(
    "P,src_dt,dst_dt,nd,fragment",
    [
        (2, nl.int32, nl.int32, 16, "one partition"),
        (1, nl.bfloat16, nl.int32, 16, "float32 or int32"),
        (1, nl.int32, nl.uint32, 16, "float32 or int32"),
        (1, nl.int32, nl.int32, 8, "a start and an end index"),
    ],
)
def test_sequence_bounds_rules(P, src_dt, dst_dt, nd, fragment):
    @nki.jit
    def k(x):
        s = nl.ndarray((P, 8), src_dt, buffer=nl.sbuf)
        nisa.memset(dst=s, value=0)
        o = nl.ndarray((P, nd), dst_dt, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=o, segment_ids=s)
        return x

    with pytest.raises(NkiValidationError) as ei:
        k(np.zeros((1, 1), np.float32))
    assert fragment in str(ei.value), str(ei.value)
    assert ei.value.instruction.startswith("nki.isa.sequence_bounds"), ei.value.instruction
