"""PSUM tensors the kernel places itself (``nki.compiler.psum.mod_alloc(base_bank=...)``,
``psum.alloc(func)``), with kernels written here: blocks of different tensors share banks
exactly as placed, so a kernel whose tensors together name more than the 8 banks fits when
their lifetimes on each bank do not overlap, computes the right result (a matmul accumulation
group on a bank another tensor used before starts afresh), and other PSUM tensors are placed
around the fixed banks; overlapping live placements and impossible places are errors."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import nki
import nki.compiler as ncc
import nki.isa as nisa
import nki.language as nl
from nki import NkiValidationError


def _bank_of(bank_map, idx, pdim_size, fdim_size):
    return (bank_map[idx], 0, 0)


@nki.jit
def shared_banks(x, w, b_bank: int = 0):
    """For 4 [128, 128] fp32 blocks: out[i] = 2 * x[i] + 3, staged through PSUM tensors `a`
    and `b` whose blocks sit on banks 0..3 and b_bank..b_bank + 3, plus acc = x[0].T @ w +
    x[1].T @ w accumulated (+=) on bank 1 after `a` (and `b`) used it, and `keep` (placed by
    the allocator) live the whole kernel: with b_bank 0, 4 + 4 + 1 + 1 banks named and 8 exist."""
    n = x.shape[0]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc_out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    keep = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum, name="keep")
    nisa.memset(dst=keep, value=3.0)
    a = nl.ndarray((n, nl.par_dim(128), 128), dtype=nl.float32, name="a",
                   buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(4,)))
    b = nl.ndarray((n, nl.par_dim(128), 128), dtype=nl.float32, name="b",
                   buffer=ncc.psum.mod_alloc(base_bank=b_bank, num_bank_tiles=(4,)))
    acc = nl.ndarray((1, nl.par_dim(128), 128), dtype=nl.float32, name="acc",
                     buffer=ncc.psum.alloc(functools.partial(_bank_of, bank_map={(0,): 1})))
    xs = nl.ndarray((n, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(n):
        xs[i] = nl.load(x[i])
        nisa.tensor_copy(dst=a[i], src=xs[i])
        t = nl.multiply(a[i], 2.0)
        nisa.tensor_copy(dst=b[i], src=t)
        nl.store(out[i], nl.add(b[i], keep))
    ws = nl.load(w)
    acc[0] += nisa.nc_matmul(xs[0], ws)
    acc[0] += nisa.nc_matmul(xs[1], ws)
    nl.store(acc_out, nl.copy(acc[0]))
    return out, acc_out


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 128, 128)).astype(np.float32)
    w = rng.standard_normal((128, 128)).astype(np.float32)
    return x, w


def test_blocks_of_several_tensors_share_banks():
    x, w = _inputs()
    out, acc = nki.simulate(shared_banks)(x, w)
    np.testing.assert_array_equal(out, 2 * x + 3)
    # fp32 matmul against a float64 reference: the accumulation group starts afresh on bank 1
    # (a, b and their data were there before), so the result is the two products only
    np.testing.assert_allclose(acc, x[0].T.astype(np.float64) @ w + x[1].T.astype(np.float64) @ w,
                               rtol=1e-4, atol=1e-3)


def test_other_psum_tensors_are_placed_around_the_fixed_banks():
    # b on banks 4..7: the kernel names all 8 banks while `keep` is live, so `keep` has none
    x, w = _inputs()
    with pytest.raises(NkiValidationError, match=r"PSUM capacity exceeded when tensor 'keep'"):
        nki.simulate(shared_banks)(x, w, 4)


@nki.jit
def overlapping(x):
    """Block 0 of `a` and block 0 of `b` on bank 0, both live: a[0] is read after b[0] was
    written."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((1, nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0), name="a")
    b = nl.ndarray((1, nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0), name="b")
    xs = nl.load(x)
    nisa.tensor_copy(dst=a[0], src=xs)
    nisa.tensor_copy(dst=b[0], src=xs)
    nl.store(out, nl.add(a[0], b[0]))
    return out


def test_live_tensors_on_the_same_place_are_an_error():
    x = np.ones((128, 128), np.float32)
    with pytest.raises(NkiValidationError, match=r"'b\[0\]'.*overlaps live tensor 'a\[0\]'"):
        nki.simulate(overlapping)(x)


def _at(bank, byte, idx, pdim_size, fdim_size):
    return (bank, 0, byte)


@nki.jit
def half_banks(x, bank: int, byte: int):
    """Two [128, 256] fp32 tiles (1 KiB per partition) in the two halves of one bank."""
    out = nl.ndarray((2, 128, 256), dtype=x.dtype, buffer=nl.shared_hbm)
    lo = nl.ndarray((nl.par_dim(128), 256), dtype=nl.float32, buffer=ncc.psum.alloc(functools.partial(_at, bank, 0)))
    hi = nl.ndarray((nl.par_dim(128), 256), dtype=nl.float32,
                    buffer=ncc.psum.alloc(functools.partial(_at, bank, byte)))
    xs = nl.load(x)
    nisa.tensor_copy(dst=lo, src=xs)
    nisa.tensor_scalar(dst=hi, data=xs, op0=nl.multiply, operand0=-1.0)
    nl.store(out[0], nl.copy(lo))
    nl.store(out[1], nl.copy(hi))
    return out


def test_tiles_at_byte_offsets_of_a_bank():
    x = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    out = nki.simulate(half_banks)(x, 5, 1024)
    np.testing.assert_array_equal(out[0], x)
    np.testing.assert_array_equal(out[1], -x)


def test_a_tile_crossing_a_bank_boundary_is_an_error():
    x = np.zeros((128, 256), np.float32)
    with pytest.raises(NkiValidationError, match="crosses a bank boundary"):
        nki.simulate(half_banks)(x, 5, 1536)


def test_a_bank_past_the_last_is_an_error():
    x = np.zeros((128, 256), np.float32)
    with pytest.raises(ValueError, match="PSUM bank 8"):
        nki.simulate(half_banks)(x, 8, 1024)


@nki.jit
def matmul_in_upper_half(x, w):
    """A matmul output placed at byte 1024 of bank 2 (it stays inside the bank)."""
    out = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.shared_hbm)
    ps = nl.ndarray((nl.par_dim(128), 256), dtype=nl.float32, buffer=ncc.psum.alloc(functools.partial(_at, 2, 1024)))
    nisa.nc_matmul(dst=ps, stationary=nl.load(x), moving=nl.load(w))
    nl.store(out, nl.copy(ps))
    return out


def test_matmul_into_a_tile_inside_a_bank():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((128, 128)).astype(np.float32)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    out = nki.simulate(matmul_in_upper_half)(x, w)
    np.testing.assert_allclose(out, x.T.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
