"""nisa.local_gather against a numpy reference written from the public docs' semantics (each
GpSimd core flattens its 16-partition index slice partition-first and every partition of the
core takes num_elem_per_idx contiguous elements at each index), and its rules."""

from __future__ import annotations

import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import NkiValidationError


def _kernel(ne, nv, legacy=False):
    @nki.jit
    def k(x, idx):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        i = nl.ndarray(idx.shape, nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=i, src=idx)
        if legacy:
            g = nisa.local_gather(t, i, ne, nv)
        else:
            g = nisa.local_gather(src_buffer=t, index=i, num_elem_per_idx=ne, num_valid_indices=nv)
        out = nl.ndarray(g.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=g)
        return out

    return k


def _reference(x: np.ndarray, idx: np.ndarray, ne: int, nv: int | None) -> np.ndarray:
    P = x.shape[0]
    flat = x.reshape(P, -1)
    per_core = idx.reshape(16, -1).size if P >= 16 else 0
    nv = per_core if nv is None else nv
    out = np.empty((P, nv, ne), x.dtype)
    for g in range(P // 16):
        rows = idx[16 * g : 16 * g + 16].reshape(16, -1)
        k = rows.T.reshape(-1)[:nv].astype(np.int64)  # partition dimension first
        for p in range(16 * g, 16 * g + 16):
            out[p] = flat[p][k[:, None] + np.arange(ne)[None, :]]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.int32, ml_dtypes.bfloat16, np.float16, np.int8, np.uint16])
@pytest.mark.parametrize(
    "xshape,ishape,ne,nv",
    [
        ((128, 512, 4), (128, 4), 4, 64),  # the public example
        ((16, 40), (16, 3), 1, None),
        ((32, 8, 8), (32, 2, 2), 2, 50),
        ((48, 300), (48, 5), 32, 80),
        ((16, 64), (16, 1), 8, 1),
    ],
)
def test_local_gather_matches_numpy(dtype, xshape, ishape, ne, nv):
    rng = np.random.default_rng(sum(xshape) * 5 + sum(ishape) + ne)
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        x = (rng.standard_normal(xshape) * 10).astype(dtype)
        x.reshape(-1)[1] = np.nan  # copied bit-exactly, never read as a number
    else:
        x = rng.integers(-100, 100, xshape).astype(dtype)
    F = int(np.prod(xshape[1:]))
    idx = (rng.integers(0, F // ne, ishape) * ne).astype(np.uint16)
    idx.reshape(-1)[0] = F - ne  # the last elements are reachable
    got = np.asarray(_kernel(ne, nv)(x, idx))
    want = _reference(x, idx, ne, nv)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_local_gather_cores_use_their_own_indices():
    """Partitions 0-15 and 16-31 gather with different index slices; unaligned starts are fine."""
    x = np.arange(32 * 20, dtype=np.float32).reshape(32, 20)
    idx = np.zeros((32, 2), np.uint16)
    idx[:16, 0] = np.arange(16)
    idx[16:, 0] = 19 - np.arange(16) // 2
    idx[:, 1] = 3
    got = np.asarray(_kernel(1, 17)(x, idx))
    assert got.shape == (32, 17, 1)
    np.testing.assert_array_equal(got[:16, :16, 0], x[:16, :16])
    np.testing.assert_array_equal(got[16:, :16, 0], x[16:][:, 19 - np.arange(16) // 2])
    np.testing.assert_array_equal(got[:, 16, 0], x[:, 3])


def test_local_gather_legacy_returning_form():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    idx = (rng.integers(0, 16, (16, 2)) * 2).astype(np.uint16)
    np.testing.assert_array_equal(np.asarray(_kernel(2, 20, legacy=True)(x, idx)), _reference(x, idx, 2, 20))


def test_local_gather_index_past_the_data_is_an_error():
    x = np.zeros((16, 8), np.float32)
    idx = np.zeros((16, 1), np.uint16)
    idx[5, 0] = 6  # 6 + 4 > 8
    with pytest.raises(NkiValidationError) as ei:
        _kernel(4, None)(x, idx)
    assert ei.value.kind == "runtime" and "index[5, 0]" in str(ei.value), str(ei.value)


@pytest.mark.parametrize(
    "P,idx_dtype,dst_dtype,ne,nv,nd,buf,fragment",
    [
        (16, nl.int32, nl.float32, 1, 16, 16, nl.sbuf, "uint16"),
        (16, nl.uint16, nl.bfloat16, 1, 16, 16, nl.sbuf, "src_buffer's dtype"),
        (8, nl.uint16, nl.float32, 1, 8, 8, nl.sbuf, "multiple of 16 partitions"),
        (16, nl.uint16, nl.float32, 3, 4, 12, nl.sbuf, "1, 2, 4, 8, 16 or 32"),
        (16, nl.uint16, nl.float32, 1, 17, 17, nl.sbuf, "indices per core"),
        (16, nl.uint16, nl.float32, 2, 8, 8, nl.sbuf, "num_valid_indices * num_elem_per_idx"),
        (16, nl.uint16, nl.float32, 1, 16, 16, nl.psum, "SBUF"),
    ],
)
def test_local_gather_rules(P, idx_dtype, dst_dtype, ne, nv, nd, buf, fragment):
    @nki.jit
    def k(x):
        t = nl.ndarray((P, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0)
        i = nl.ndarray((P, 1), idx_dtype, buffer=nl.sbuf)
        nisa.memset(dst=i, value=0)
        o = nl.ndarray((P, nd), dst_dtype, buffer=buf)
        nisa.local_gather(dst=o, src_buffer=t, index=i, num_elem_per_idx=ne, num_valid_indices=nv)
        return x

    with pytest.raises(NkiValidationError) as ei:
        k(np.zeros((1, 1), np.float32))
    assert fragment in str(ei.value), str(ei.value)
    assert ei.value.instruction.startswith("nki.isa.local_gather"), ei.value.instruction
