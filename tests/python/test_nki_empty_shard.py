"""``nl.ds(start, 0)``: an empty view, as a kernel sharding rows over more programs than rows
builds for the program that gets none (it then issues nothing on it); an instruction given an
empty view is refused with a clear error. Kernels written here."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def shard_rows(x):
    """Each of the programs copies its contiguous share of x's rows (the last one the rest)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, cores, core = x.shape[0], nl.num_programs(0), nl.program_id(0)
    per = n // cores
    mine = n - core * per if core == cores - 1 else per
    rows = nl.ds(core * per, mine)
    src, dst = x[rows], out[rows]
    if mine > 0:
        t = nl.ndarray((mine, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src)
        nisa.dma_copy(dst=dst, src=t)
    return out


@pytest.mark.parametrize("rows", [1, 3])
def test_a_program_with_no_rows(rows):
    x = np.arange(rows * 8, dtype=np.float32).reshape(rows, 8)
    np.testing.assert_array_equal(nki.simulate(shard_rows[2])(x), x)


def test_an_empty_view_is_no_operand():
    @nki.jit
    def copy_nothing(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[nl.ds(0, 0)], src=x[nl.ds(0, 0)])
        return out

    with pytest.raises(ValueError, match=r"empty view of .* cannot be an instruction operand"):
        nki.simulate(copy_nothing)(np.zeros((4, 8), np.float32))


def test_a_negative_size_is_an_error():
    with pytest.raises(ValueError, match="non-negative"):
        nl.ds(0, -1)
