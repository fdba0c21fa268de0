"""Modulo allocation (``nki.compiler.sbuf/psum.mod_alloc(num_*_tiles=...)``), with kernels
written here: the blocks of a tensor share a few physical tiles round-robin, so a kernel that
double-buffers eight PSUM blocks in two banks fits where eight separate banks plus its other
PSUM tensors would not, and computes the right result; a kernel that reads a block after
another block reused its tile is reported, never given the other block's data."""

from __future__ import annotations

import numpy as np
import pytest

import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki
from neuronxcc.nki import simulate_kernel
from nki import NkiValidationError


@nki.jit
def blockwise_scale(x, ntiles: int, reuse_early: bool):
    """out[i] = 2 * x[i] for 8 [128, 512] fp32 blocks, each staged in a PSUM block of a tensor
    whose 8 blocks share `ntiles` banks; with `reuse_early` every block is first written and
    only then read back (the read of block 0 finds its bank reused when ntiles < 8)."""
    n = x.shape[0]
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    # one other PSUM bank in use for the whole kernel: 8 separate banks would not fit too
    keep = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=keep, value=1.0)
    stage = nl.ndarray((n, nl.par_dim(128), 512), dtype=nl.float32,
                       buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(ntiles,)))
    res = nl.ndarray((n, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
    if reuse_early:
        for i in nl.affine_range(n):
            nisa.tensor_copy(dst=stage[i], src=nl.load(x[i]))
        for i in nl.affine_range(n):
            res[i] = nl.multiply(stage[i], 2.0)
    else:
        for i in nl.affine_range(n):
            nisa.tensor_copy(dst=stage[i], src=nl.load(x[i]))
            res[i] = nl.multiply(stage[i], 2.0)
    for i in nl.affine_range(n):
        nl.store(out[i], nl.add(res[i], nl.multiply(keep, 0.0)))
    return out


def _x():
    return np.random.default_rng(0).standard_normal((8, 128, 512)).astype(np.float32)


@pytest.mark.parametrize("ntiles", [1, 2, 7])
def test_psum_mod_alloc_round_robin_fits_and_computes(ntiles):
    x = _x()
    np.testing.assert_array_equal(simulate_kernel(blockwise_scale, x, ntiles, False), 2 * x)


def test_psum_without_mod_alloc_is_over_capacity():
    @nki.jit
    def eight_banks_plus_seven(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        keep = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=keep, value=0.0)
        stage = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(8):
            nisa.tensor_copy(dst=stage[i], src=nl.load(x[i]))
            nl.store(out[i], nl.add(stage[i], keep))
        return out

    with pytest.raises(Exception, match="(?i)psum"):
        simulate_kernel(eight_banks_plus_seven, _x())


@pytest.mark.parametrize("ntiles, last", [(2, 6), (7, 7)])
def test_read_of_reused_tile_is_a_hazard(ntiles, last):
    # all 8 blocks written first: block 0's bank was last written by block `last`
    with pytest.raises(NkiValidationError, match=rf"reads block \(0,\).*overwritten by block \({last},\)"):
        simulate_kernel(blockwise_scale, _x(), ntiles, True)


@nki.jit
def sbuf_ring(x):
    """SBUF blocks on 3 tiles ([i % 3]); block i and block i + 3 are the same physical tile."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ring = nl.ndarray((x.shape[0], nl.par_dim(128), x.shape[2]), dtype=x.dtype,
                      buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(3,)))
    for i in nl.affine_range(x.shape[0]):
        ring[i] = nl.load(x[i])
        nl.store(out[i], ring[i])
    return out


def test_sbuf_mod_alloc_ring():
    x = np.random.default_rng(1).standard_normal((7, 128, 64)).astype(np.float32)
    np.testing.assert_array_equal(simulate_kernel(sbuf_ring, x), x)
    dump = sbuf_ring.specialize(x).dump()
    assert "192x128" in dump and "448x128" not in dump  # 3 tiles of 64 per partition, not 7
