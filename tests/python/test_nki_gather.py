"""nisa.nc_n_gather against a numpy reference (take_along_axis per partition), and its rules."""

from __future__ import annotations

import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import NkiValidationError


@nki.jit
def _n_gather_kernel(x, idx):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    i = nl.ndarray(idx.shape, nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=idx)
    g = nisa.nc_n_gather(data=t, indices=i)
    out = nl.ndarray(g.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=g)
    return out


def _reference(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    flat = x.reshape(x.shape[0], -1)
    return np.take_along_axis(flat, idx.reshape(idx.shape[0], -1).astype(np.int64), axis=1).reshape(
        (x.shape[0], *idx.shape[1:])
    )


@pytest.mark.parametrize(
    "dtype", [np.float32, np.int32, np.uint16, ml_dtypes.bfloat16, np.float16, np.int8]
)
@pytest.mark.parametrize(
    "xshape,ishape", [((128, 64), (128, 8)), ((5, 3, 7), (5, 40)), ((3, 1000), (3, 4, 6)), ((1, 1), (1, 3))]
)
def test_n_gather_matches_numpy(dtype, xshape, ishape):
    rng = np.random.default_rng(sum(xshape) * 7 + sum(ishape))
    x = rng.integers(-100, 100, xshape).astype(dtype)
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        x = (rng.standard_normal(xshape) * 10).astype(dtype)
        x.reshape(-1)[0] = np.nan  # copied bit-exactly, never read as a number
    F = int(np.prod(xshape[1:]))
    idx = rng.integers(0, F, ishape).astype(np.uint32)
    idx.reshape(ishape[0], -1)[:, 0] = F - 1  # the last element is reachable
    got = np.asarray(_n_gather_kernel(x, idx))
    want = _reference(x, idx)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_n_gather_after_max8_gives_global_indices():
    """The top-k pattern of the public NKI library: local argmax8 mapped back through an index tile."""

    @nki.jit
    def k(x, ids):
        P, F = x.shape
        t = nl.ndarray((P, F), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        g = nl.ndarray((P, F), ids.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=g, src=ids)
        m = nisa.max8(src=t)
        loc = nisa.nc_find_index8(data=t, vals=m)
        glob = nl.ndarray((P, 8), ids.dtype, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=glob, data=g, indices=loc)
        out = nl.ndarray((P, 8), ids.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=glob)
        return out

    rng = np.random.default_rng(3)
    x = rng.permutation(16 * 50).reshape(16, 50).astype(np.float32)
    ids = (rng.permutation(16 * 50).reshape(16, 50) + 1000).astype(np.float32)
    want = np.take_along_axis(ids, np.argsort(-x, axis=1)[:, :8], axis=1)
    np.testing.assert_array_equal(np.asarray(k(x, ids)), want)


def test_n_gather_index_out_of_range_is_an_error():
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    idx = np.array([[0, 7], [3, 8]], np.uint32)
    with pytest.raises(NkiValidationError) as ei:
        _n_gather_kernel(x, idx)
    assert ei.value.kind == "runtime" and "indices[1, 1]" in str(ei.value), str(ei.value)


@pytest.mark.parametrize(
    "idx_dtype,dst_dtype,nd,buf,fragment",
    [
        (nl.int32, nl.float32, 4, nl.sbuf, "uint32"),
        (nl.uint32, nl.bfloat16, 4, nl.sbuf, "data's dtype"),
        (nl.uint32, nl.float32, 3, nl.sbuf, "one element per partition for each index"),
        (nl.uint32, nl.float32, 4, nl.psum, "SBUF"),
    ],
)
def test_n_gather_rules(idx_dtype, dst_dtype, nd, buf, fragment):
    @nki.jit
    def k(x):
        t = nl.ndarray((4, 16), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0)
        i = nl.ndarray((4, 4), idx_dtype, buffer=nl.sbuf)
        nisa.memset(dst=i, value=0)
        o = nl.ndarray((4, nd), dst_dtype, buffer=buf)
        nisa.nc_n_gather(dst=o, data=t, indices=i)
        return x

    with pytest.raises(NkiValidationError) as ei:
        k(np.zeros((1, 1), np.float32))
    assert fragment in str(ei.value), str(ei.value)
    assert ei.value.instruction.startswith("nki.isa.nc_n_gather"), ei.value.instruction



@pytest.mark.parametrize(
    "idx_dtype,dtype,want_dtype",
    [
        (np.uint32, None, np.float32),
        (np.int32, None, np.float32),
        (np.uint16, None, np.float32),
        (np.uint32, nl.bfloat16, ml_dtypes.bfloat16),
        (np.int32, nl.int32, np.int32),
    ],
)
def test_gather_flattened_matches_numpy(idx_dtype, dtype, want_dtype):
    """nl.gather_flattened, the public example's pattern: take_along_axis on each partition
    (values are small integers, so every dtype conversion is exact)."""

    @nki.jit
    def k(x, idx):
        t = nl.load(x)
        i = nl.load(idx)
        r = nl.gather_flattened(data=t, indices=i, dtype=dtype)
        out = nl.ndarray(r.shape, r.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=r)
        return out

    rng = np.random.default_rng(5)
    x = rng.integers(-120, 120, (32, 4, 16)).astype(np.float32)
    idx = rng.integers(0, 64, (32, 10)).astype(idx_dtype)
    idx[:, 0] = 63
    got = np.asarray(k(x, idx))
    want = _reference(x, idx).astype(want_dtype)
    assert got.dtype == want.dtype and got.shape == (32, 10)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_gather_flattened_rules():
    @nki.jit
    def k(x, axis):
        t = nl.load(x)
        nl.gather_flattened(t, nl.zeros((4, 2), nl.float32), axis=axis)
        return x

    with pytest.raises(TypeError, match="integers"):
        k(np.zeros((4, 8), np.float32), 0)
    with pytest.raises(NotImplementedError, match="axis=1"):
        k(np.zeros((4, 8), np.float32), 1)
