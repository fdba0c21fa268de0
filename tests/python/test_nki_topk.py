"""nisa.topk (GpSimd): per 16-partition core, the K largest of an n-element bf16 "snake" (element s
at partition s % 16, column s // 16), written ascending to output snake positions 0..K-1 with
their snake positions as uint32 indices; compared with a numpy reference written from the
public docs' semantics, and its rules."""

from __future__ import annotations

import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import NkiValidationError

BF16 = ml_dtypes.bfloat16
SENTINEL = -7.0  # what the kernel leaves in output elements topk does not write


def _kernel(k, n):
    @nki.jit
    def kern(x):
        P, F = x.shape
        src = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        val = nl.ndarray((P, k), dtype=nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((P, k), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.memset(dst=val, value=SENTINEL)
        nisa.memset(dst=idx, value=99999)
        nisa.topk(val_dst=val, idx_dst=idx, src=src, n=n)
        vo = nl.ndarray((P, k), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        io = nl.ndarray((P, k), dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=vo, src=val)
        nisa.dma_copy(dst=io, src=idx)
        return vo, io

    return kern


def _reference(x, k, n):
    P, F = x.shape
    vo = np.full((P, k), SENTINEL, BF16)
    io = np.full((P, k), 99999, np.uint32)
    for g in range(P // 16):
        block = x[16 * g : 16 * g + 16].astype(np.float32)
        snake = np.array([block[s % 16, s // 16] for s in range(n)], np.float32)
        top = sorted(range(n), key=lambda s: (-snake[s], s))[:k]
        top = sorted(top, key=lambda s: (snake[s], s))  # ascending values, ties by index
        for j, s in enumerate(top):
            vo[16 * g + j % 16, j // 16] = snake[s]
            io[16 * g + j % 16, j // 16] = s
    return vo, io


@pytest.mark.parametrize(
    "P,F,k,n",
    [
        (16, 3, 8, 42),  # the docs' example: n = 42 in a 3-column snake
        (128, 40, 32, 640),
        (32, 64, 100, 1000),  # K not a multiple of 16: a partial last output column
        (16, 8, 1, 8),
        (48, 16, 256, 256),  # K = n: every element, sorted
    ],
)
def test_topk_matches_numpy(P, F, k, n):
    x = np.random.default_rng(P + F + k + n).standard_normal((P, F)).astype(BF16)
    want_v, want_i = _reference(x, k, n)
    got_v, got_i = nki.simulate(_kernel(k, n))(x)
    np.testing.assert_array_equal(np.asarray(got_v).view(np.uint16), want_v.view(np.uint16))
    np.testing.assert_array_equal(np.asarray(got_i), want_i)


def test_ties_and_elements_past_n_are_ignored():
    x = np.zeros((16, 4), BF16)
    x[:, 3] = 100.0  # snake positions 48..63 are past n = 40: never selected
    x[5, 0] = 2.0
    x[9, 1] = 2.0  # a tie at positions 5 and 25
    got_v, got_i = nki.simulate(_kernel(8, 40))(x)
    got_v = np.asarray(got_v).astype(np.float32)
    got_i = np.asarray(got_i)
    # output snake positions 0..7 are partitions 0..7 of column 0
    assert list(got_v[:8, 0]) == [0.0] * 6 + [2.0, 2.0]
    assert list(got_i[6:8, 0]) == [5, 25]
    assert (got_i[:6, 0] < 40).all()


def test_uninitialized_snake_is_reported():
    @nki.jit
    def kern(x):
        src = nl.ndarray((16, 4), dtype=nl.bfloat16, buffer=nl.sbuf)  # never written
        val = nl.ndarray((16, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val, idx_dst=idx, src=src, n=64)
        out = nl.ndarray((16, 8), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=val)
        return out

    with pytest.raises(NkiValidationError, match="uninitialized"):
        nki.simulate(kern)(np.zeros((16, 4), BF16))


@pytest.mark.parametrize(
    "P,F,k,n,rule",
    [
        (8, 4, 4, 32, "multiple of 16 partitions"),
        (16, 4, 4, 4, "8 <= n < 65536"),
        (16, 4, 80, 64, "K <= n"),
        (16, 2, 4, 64, "at least ceil"),
    ],
)
def test_rules(P, F, k, n, rule):
    with pytest.raises(NkiValidationError, match=rule):
        nki.simulate(_kernel(k, n))(np.zeros((P, F), BF16))


def test_dtypes_are_checked():
    @nki.jit
    def kern(x):
        src = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        val = nl.ndarray((16, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val, idx_dst=idx, src=src, n=64)
        return x

    with pytest.raises(NkiValidationError, match="bfloat16"):
        nki.simulate(kern)(np.zeros((16, 4), np.float32))


def test_estimate_follows_the_documented_cycles():
    """4 n + K GpSimd cycles: the kernel's time grows linearly with n."""
    x = np.zeros((128, 64), BF16)
    t = {n: nki.estimate(_kernel(8, n), x).total_ns for n in (256, 512, 1024)}
    assert t[1024] - t[512] == pytest.approx(2 * (t[512] - t[256]), rel=0.01)
    assert t[512] - t[256] > 0
