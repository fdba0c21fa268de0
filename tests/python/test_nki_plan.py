"""Execution plans (csrc/nki/plan.cpp): DMA elision.

After the first (checked) run, an HBM->SBUF copy of a read-only input whose tile only feeds
thin-operand matmuls is skipped and the matmuls read HBM in place. The results must be the very
bits the unelided program computes, and every case the analysis cannot prove safe (another
reader, a partial overwrite, an input aliased with an output) must keep the copy.
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

P = 128


def _decode_kernel(copy_weight: bool):
    @nki.jit
    def gemv(x, w):
        """out[1, N] = x[1, K] @ w[N, K].T with w DMA-transposed into SBUF (nn.Linear layout).
        copy_weight: the weight tile is also read by a tensor_copy, which keeps the DMA."""
        N, K = w.shape
        KT = K // P
        xT = nl.ndarray((P, KT, 1), x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=xT, src=x.reshape((1, KT, P)), axes=(2, 1, 0))
        wT = nl.ndarray((P, KT, N), w.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=wT, src=w.reshape((N, KT, P)), axes=(2, 1, 0))
        if copy_weight:
            keep = nl.ndarray((P, KT, N), w.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=keep, src=wT)
        out = nl.ndarray((1, N), nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((1, N), nl.float32, buffer=nl.psum)
        for k in range(KT):
            nisa.nc_matmul(dst=ps, stationary=xT[:, k, :], moving=wT[:, k, :], accumulate=k > 0)
        o = nl.ndarray((1, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        nisa.dma_copy(dst=out, src=o)
        return out

    return gemv


@pytest.mark.parametrize("N,K", [(512, 256), (200, 384), (64, 128)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_elided_weight_load_gives_the_same_bits(N, K, dtype):
    g = torch.Generator().manual_seed(N + K)
    x = torch.randn(1, K, generator=g).to(dtype)
    w = (torch.randn(N, K, generator=g) / K**0.5).to(dtype)
    elided, kept = _decode_kernel(False), _decode_kernel(True)
    plan = elided.specialize(x, w).programs[0].plan
    assert plan["elided_dmas"] == 2 and plan["in_place_operands"] == 2 * (K // P)
    assert kept.specialize(x, w).programs[0].plan["elided_dmas"] == 1  # x only: w has a copy reader
    ref = x.float() @ w.float().T
    elided(x, w)  # first runs: checked, the full program
    kept(x, w)
    a, b = elided(x, w), kept(x, w)  # planned runs
    assert torch.equal(a, b)
    torch.testing.assert_close(a, ref, rtol=1e-4, atol=1e-4)


def _load_xT_wT(x, w):
    """x [1, P] and w [N, P] DMA-transposed into SBUF: xT [P, 1], wT [P, N]."""
    xT = nl.ndarray((P, 1), x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=xT, src=x, axes=(1, 0))
    wT = nl.ndarray((P, w.shape[0]), w.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=wT, src=w, axes=(1, 0))
    return xT, wT


def _matmul_out(xT, wT):
    """x @ w.T from the SBUF tiles, stored to a new [1, N] float32 HBM tensor."""
    N = wT.shape[1]
    ps = nl.ndarray((1, N), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=xT, moving=wT)
    o = nl.ndarray((1, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=ps)
    out = nl.ndarray((1, N), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


@nki.jit
def overwritten_weight(x, w):
    """The weight tile's first 16 partitions are overwritten (memset 0.5) before the matmul
    reads them: the DMA must stay, and the matmul must see the overwrite."""
    xT, wT = _load_xT_wT(x, w)
    nisa.memset(dst=wT[0:16, :], value=0.5)
    return _matmul_out(xT, wT)


def test_partially_overwritten_tile_keeps_its_dma():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, P)).astype(np.float32)
    w = rng.standard_normal((64, P)).astype(np.float32)
    skipped = overwritten_weight.specialize(x, w).programs[0].plan["elided"]
    assert 1 not in skipped  # the weight DMA (instruction 1) stays
    wt = w.T.copy()
    wt[0:16, :] = 0.5
    ref = x @ wt
    for _ in range(3):
        np.testing.assert_allclose(overwritten_weight(x, w), ref, rtol=1e-5, atol=1e-5)


@nki.jit
def load_then_clobber(x, w, scratch):
    """Loads w, then writes `scratch` (which the caller may alias with w), then multiplies with
    the loaded tile: the product must use w as it was when loaded."""
    xT, wT = _load_xT_wT(x, w)
    z = nl.ndarray(w.shape, w.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=scratch, src=z)
    return _matmul_out(xT, wT)


def test_input_aliased_with_a_written_tensor_is_not_read_in_place():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, P)).astype(np.float32)
    w0 = rng.standard_normal((96, P)).astype(np.float32)
    ref = x @ w0.T
    assert load_then_clobber.specialize(x, w0, w0.copy()).programs[0].plan["elided_dmas"] >= 1
    for _ in range(3):  # checked run, then planned runs
        w = w0.copy()
        got = load_then_clobber(x, w, w)  # the same memory as input and written tensor
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        assert not w.any()  # the kernel did clear it


def _strided_rewrite_kernel(both_halves: bool):
    @nki.jit
    def kern(x, w):
        """After the matmul, the weight tile is rewritten in two strided halves (even columns,
        then odd ones: plain writes of exactly known bytes), then copied out. With both halves
        the copy reads only rewritten bytes and the weight DMA can go; with one half the copy
        reads bytes the DMA wrote and the DMA must stay."""
        xT, wT = _load_xT_wT(x, w)
        out = _matmul_out(xT, wT)
        N = w.shape[0]
        nisa.memset(dst=wT[:, 0:N:2], value=0.25)
        if both_halves:
            nisa.memset(dst=wT[:, 1:N:2], value=-0.5)
        o = nl.ndarray(wT.shape, wT.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=wT)
        tile = nl.ndarray(wT.shape, wT.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=tile, src=o)
        return out, tile

    return kern


@pytest.mark.parametrize("both_halves", [True, False])
def test_strided_rewrites_are_tracked_byte_exactly(both_halves):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, P)).astype(np.float32)
    w = rng.standard_normal((64, P)).astype(np.float32)
    kern = _strided_rewrite_kernel(both_halves)
    skipped = kern.specialize(x, w).programs[0].plan["elided"]
    assert (1 in skipped) == both_halves  # instruction 1: the weight DMA
    want = w.T.copy()
    want[:, 0::2] = 0.25
    if both_halves:
        want[:, 1::2] = -0.5
    for _ in range(3):  # checked run, then planned runs
        out, tile = kern(x, w)
        np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(tile, want)


def _cache_kernel(write_before_read: bool):
    @nki.jit
    def kern(x, cache, row):
        """A KV-cache-style input: loaded, read by a matmul, and written by the kernel itself
        (`row` into its first row). Written after the last read, the load can be elided (the
        matmul reads the cache in place before the write); written before the matmul, the
        matmul must see the loaded (old) values and the load stays."""
        xT, cT = _load_xT_wT(x, cache)
        r = nl.ndarray(row.shape, row.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=r, src=row)
        if write_before_read:
            nisa.dma_copy(dst=cache[0:1, :], src=r)
        out = _matmul_out(xT, cT)
        if not write_before_read:
            nisa.dma_copy(dst=cache[0:1, :], src=r)
        return out

    return kern


@pytest.mark.parametrize("write_before_read", [False, True])
def test_a_written_input_is_read_in_place_only_before_its_writes(write_before_read):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, P)).astype(np.float32)
    c0 = rng.standard_normal((32, P)).astype(np.float32)
    row = rng.standard_normal((1, P)).astype(np.float32)
    kern = _cache_kernel(write_before_read)
    skipped = kern.specialize(x, c0, row).programs[0].plan["elided"]
    assert (1 in skipped) != write_before_read  # instruction 1: the cache load
    for _ in range(3):  # checked run, then planned runs
        cache = c0.copy()
        np.testing.assert_allclose(kern(x, cache, row), x @ c0.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(cache[0], row[0])
        np.testing.assert_array_equal(cache[1:], c0[1:])


def _matmul_chain_kernel(between: str):
    @nki.jit
    def chain(x, w):
        """out[1, N] = x @ w.T over K // 128 accumulating matmuls (nn.Linear weight, read in place)
        plus the first chunk's product for the first N // 4 outputs, transposed, into its own tile.
        `between` puts an instruction after every matmul: "none"; "memset" of an unrelated tile
        (the matmuls still form one run); "copy": x's tile copied onto itself (a write of what the
        next matmul reads: each matmul runs on its own); "scale": the next matmul's chunk of x
        doubled (the same, with values a GEMV computed ahead of it would get wrong)."""
        N, K = w.shape
        KT = K // P
        xT = nl.ndarray((P, KT, 1), x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=xT, src=x.reshape((1, KT, P)), axes=(2, 1, 0))
        wT = nl.ndarray((P, KT, N), w.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=wT, src=w.reshape((N, KT, P)), axes=(2, 1, 0))
        ps = nl.ndarray((1, N), nl.float32, buffer=nl.psum)
        ps2 = nl.ndarray((N // 4, 1), nl.float32, buffer=nl.psum)
        junk = nl.ndarray((1, 8), nl.float32, buffer=nl.sbuf)
        for k in range(KT):
            nisa.nc_matmul(dst=ps, stationary=xT[:, k, :], moving=wT[:, k, :], accumulate=k > 0)
            if between == "memset":
                nisa.memset(dst=junk, value=float(k))
            elif between == "copy":
                nisa.tensor_copy(dst=xT, src=xT)
            elif between == "scale":
                c = (k + 1) % KT
                nisa.tensor_scalar(dst=xT[:, c, :], data=xT[:, c, :], op0=nl.multiply, operand0=2.0)
        nisa.nc_matmul(dst=ps2, stationary=wT[:, 0, 0 : N // 4], moving=xT[:, 0, :])
        o = nl.ndarray((1, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=ps)
        o2 = nl.ndarray((N // 4, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o2, src=ps2)
        out = nl.ndarray((1, N), nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((N // 4, 1), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=o)
        nisa.dma_copy(dst=out2, src=o2)
        return out, out2

    return chain


@pytest.mark.parametrize("N,K", [(512, 512), (200, 384), (264, 1024), (200, 1152)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_matmul_run_gives_the_bits_of_one_by_one(N, K, dtype):
    """Thin matmuls run as one parallel job (Plan matmul runs), consecutive or with instructions
    between them that write nothing they read, the k chunks of a projection as one GEMV chain
    (bf16: a pass over the weight rows computes every chunk; rows of 1 KiB and more, chains of
    3, 4, 8 and 9 and column counts with a tail): the same bits as the same matmuls executed one
    at a time, accumulation order included."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, K, generator=g).to(dtype)
    w = (torch.randn(N, K, generator=g) / K**0.5).to(dtype)
    run, spaced, single = (_matmul_chain_kernel(b) for b in ("none", "memset", "copy"))
    assert run.specialize(x, w).programs[0].plan["matmul_runs"] == 1
    assert spaced.specialize(x, w).programs[0].plan["matmul_runs"] == 1
    assert single.specialize(x, w).programs[0].plan["matmul_runs"] == 0
    for k in (run, spaced, single):  # first runs: checked, the full program
        k(x, w)
    (a, a2), (s, s2), (b, b2) = run(x, w), spaced(x, w), single(x, w)
    assert torch.equal(a, b) and torch.equal(a2, b2)
    assert torch.equal(s, b) and torch.equal(s2, b2)
    torch.testing.assert_close(a, x.float() @ w.float().T, rtol=1e-4, atol=1e-4)
    ref2 = x.float()[:, 0:P] @ w.float()[: N // 4, 0:P].T  # the first 128-row chunk only
    torch.testing.assert_close(a2[:, 0], ref2[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_write_a_later_matmul_reads_ends_the_run(dtype):
    """An instruction between thin matmuls that changes what a later one reads keeps them out of
    one run (their GEMVs cannot be computed first): planned runs see the written values."""
    g = torch.Generator().manual_seed(8)
    N, K = 512, 512
    x = torch.randn(1, K, generator=g).to(dtype)
    w = (torch.randn(N, K, generator=g) / K**0.5).to(dtype)
    kern = _matmul_chain_kernel("scale")
    assert kern.specialize(x, w).programs[0].plan["matmul_runs"] == 0
    xs = x.float().clone()
    xs[:, P:] *= 2  # every chunk after the first, doubled before its matmul (exact)
    ref = xs @ w.float().T
    ref2 = 2 * x.float()[:, 0:P] @ w.float()[: N // 4, 0:P].T  # chunk 0, doubled after the chain
    for _ in range(3):  # checked run, then planned runs
        out, out2 = kern(x, w)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(out2[:, 0], ref2[0], rtol=1e-4, atol=1e-4)


def test_lnc2_decode_mlp_reads_every_weight_in_place():
    """nkilib mlp at LNC=2 (decode: each core half of the intermediate dim, partial down
    projections exchanged with nisa.sendrecv): a sendrecv's dst is a plain write, so a weight
    tile whose bytes it later reuses is still read in place. Planned runs give the bits of the
    checked full run."""
    from nkilib.core.mlp.mlp import mlp
    from nkilib.core.utils.common_types import WeightLayout

    g = torch.Generator().manual_seed(3)
    H, I = 512, 2048
    x = torch.randn(1, 1, H, generator=g).to(torch.bfloat16)
    wg, wu = ((torch.randn(I, H, generator=g) / H**0.5).to(torch.bfloat16) for _ in range(2))
    wd = (torch.randn(H, I, generator=g) / I**0.5).to(torch.bfloat16)
    args = dict(
        hidden_tensor=x,
        gate_proj_weights_tensor=wg,
        up_proj_weights_tensor=wu,
        down_proj_weights_tensor=wd,
        weight_layout=WeightLayout.OUT_IN,
    )
    for prog in mlp[2].specialize(**args).programs:
        loads = [
            i
            for i, line in enumerate(prog.dump().splitlines())
            if line.split(": ", 1)[1].startswith("nki.isa.dma_copy") and "_weights_tensor@HBM" in line
        ]
        assert len(loads) >= 3 and set(loads) <= set(prog.plan["elided"])
    first = mlp[2](**args)[0].clone()  # checked: the full program
    again = mlp[2](**args)[0]
    assert torch.equal(first, again)
    ref = (torch.nn.functional.silu(x.float() @ wg.float().T) * (x.float() @ wu.float().T)) @ wd.float().T
    torch.testing.assert_close(again.float(), ref, rtol=2e-2, atol=2e-2)  # bf16 tiles


# -- fused runs of elementwise instructions ------------------------------------------------------


@nki.jit
def _elementwise_chain(x, y):
    """20 rounds of 5 fusable fp32 instructions (immediates, per-partition scalars, reversed
    operands, in-place and out-of-place, copies), each round ended by a half-tile write that
    overlaps the whole tile's access pattern (it cannot share the run)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    Pn, F = x.shape
    t = nl.load(x)
    u = nl.load(y)
    v = nl.ndarray((Pn, 1), nl.float32, buffer=nl.sbuf)
    w = nl.ndarray((Pn, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=v, src=t[:, 0:1])
    for i in range(20):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=1.0001, op1=nl.add, operand1=0.5)
        nisa.tensor_scalar(
            dst=w, data=t, op0=nl.subtract, operand0=v, reverse0=i % 2 == 1, op1=nl.maximum, operand1=-3.0
        )
        nisa.tensor_tensor(dst=t, data1=w, data2=u, op=nl.divide)
        nisa.tensor_copy(dst=w, src=t)
        nisa.tensor_tensor(dst=u, data1=u, data2=w, op=nl.add)
        nisa.tensor_scalar(dst=t[:, 0 : F // 2], data=t[:, F // 2 : F], op0=nl.power, operand0=1.5)
    nl.store(out, t)
    return out


@pytest.mark.parametrize("shape", [(1, 64), (128, 2), (128, 64), (96, 600)])
def test_a_fused_run_gives_the_bits_of_the_full_program(shape):
    """Plan fused runs: consecutive fp32 elementwise instructions on the same partitions run
    block by block on dense copies of their operands; the results (NaNs from negative powers
    included) are the bits of the first, checked run, which executes every instruction alone.
    [96, 600] runs in blocks of partitions (the registers exceed one block)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    plan = _elementwise_chain.specialize(x, y).programs[0].plan
    assert plan["fused_runs"] == 20 and plan["fused_instructions"] == 100
    full = _elementwise_chain(x, y)  # first run: checked, the full program
    assert np.isnan(full).any() and np.isfinite(full).any()
    for _ in range(2):
        assert np.array_equal(_elementwise_chain(x, y).view(np.uint32), full.view(np.uint32))


def _unfusable_kernel(case: str):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        Pn, F = x.shape
        t = nl.load(x)
        for _ in range(4):
            if case == "bf16":  # a bf16 tile: every write rounds
                nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=1.01)
                nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=0.3)
            elif case == "partitions":  # other partitions: row p reads partition p + 64
                nisa.tensor_scalar(dst=t[0:64, :], data=t[64:128, :], op0=nl.multiply, operand0=1.01)
                nisa.tensor_scalar(dst=t[64:128, :], data=t[0:64, :], op0=nl.add, operand0=0.3)
            else:  # overlapping access patterns that differ
                nisa.tensor_scalar(dst=t[:, 0:40], data=t[:, 20:60], op0=nl.multiply, operand0=1.01)
                nisa.tensor_scalar(dst=t[:, 20:60], data=t[:, 0:40], op0=nl.add, operand0=0.3)
        nl.store(out, t)
        return out

    return kernel


@pytest.mark.parametrize("case", ["bf16", "partitions", "overlap"])
def test_instructions_a_fused_run_cannot_express_run_alone(case):
    """No fused run where dense fp32 copies would change a result: bf16 tiles (each write
    rounds), rows that read other partitions, different access patterns sharing bytes. The
    results match numpy."""
    kernel = _unfusable_kernel(case)
    x = np.random.default_rng(5).standard_normal((128, 64)).astype(np.float32)
    arg = torch.from_numpy(x).to(torch.bfloat16) if case == "bf16" else x
    assert kernel.specialize(arg).programs[0].plan["fused_runs"] == 0
    ref = arg.float().numpy() if case == "bf16" else x.copy()
    for _ in range(4):
        if case == "bf16":
            ref = torch.from_numpy(ref * np.float32(1.01)).bfloat16().float().numpy()
            ref = torch.from_numpy(ref + np.float32(0.3)).bfloat16().float().numpy()
        elif case == "partitions":
            ref[0:64] = ref[64:128] * np.float32(1.01)
            ref[64:128] = ref[0:64] + np.float32(0.3)
        else:
            ref[:, 0:40] = ref[:, 20:60] * np.float32(1.01)
            ref[:, 20:60] = ref[:, 0:40] + np.float32(0.3)
    for _ in range(2):
        got = kernel(arg)
        got = got.float().numpy() if case == "bf16" else got
        np.testing.assert_array_equal(got, ref)
