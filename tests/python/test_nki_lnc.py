"""LNC=2 kernels: the instances of ``kernel[2](...)`` run at the same time as the two physical
NeuronCores of a logical core (shared HBM, their own SBUF/PSUM), meet at nisa.core_barrier and
exchange tiles with nisa.sendrecv; deadlocks and mismatched exchanges fail with errors that name
the instructions, and the cost model synchronises the cores' timelines."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

P, F = 128, 64


@nki.jit
def swap_halves(a):
    """Core r loads a[r] and sends it to the other core, which stores it: out[r] = a[1 - r]."""
    out = nl.ndarray((2, P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0)
    mine = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[r])
    theirs = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - r, recv_from_rank=1 - r, pipe_id=0)
    nisa.dma_copy(dst=out[r], src=theirs)
    return out


@pytest.mark.parametrize("run", ["plain", "simulate"])
def test_sendrecv_swaps_tiles_between_the_two_cores(run):
    a = np.random.default_rng(0).standard_normal((2, P, F)).astype(np.float32)
    k = swap_halves[2] if run == "plain" else nki.simulate(swap_halves[2])
    out = k(a)
    np.testing.assert_array_equal(out[0], a[1])
    np.testing.assert_array_equal(out[1], a[0])


@nki.jit
def sum_over_cores(a):
    """Each core writes its half into shared HBM, the barrier orders the writes, then each core
    reads the other's half: out[r] = a[0] + a[1] on both cores."""
    part = nl.ndarray((2, P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((2, P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0)
    mine = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[r])
    nisa.dma_copy(dst=part[r], src=mine)
    nisa.core_barrier(part, (0, 1))
    theirs = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=theirs, src=part[1 - r])
    total = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=theirs, op=nl.add)
    nisa.dma_copy(dst=out[r], src=total)
    return out


def test_core_barrier_orders_shared_hbm_writes_and_the_check_sees_them_defined():
    a = np.random.default_rng(1).standard_normal((2, P, F)).astype(np.float32)
    # nki.simulate checks every byte read: the peer's half is defined after the barrier.
    out = nki.simulate(sum_over_cores[2])(a)
    np.testing.assert_array_equal(out[0], a[0] + a[1])
    np.testing.assert_array_equal(out[1], a[0] + a[1])


@nki.jit
def matmul_sharded(xT, w):
    """y = xT.T @ w with the contraction K split over the programs: core r multiplies its half
    of w and the partial sums are added after a sendrecv (the pattern of the real mlp_tkg)."""
    K, M = xT.shape
    N = w.shape[1]
    n = nl.num_programs(0)
    r = nl.program_id(0)
    kc = K // n
    y = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for t in nl.sequential_range(kc // 128):
        k0 = r * kc + t * 128
        xt = nl.ndarray((128, M), dtype=xT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=xT[k0 : k0 + 128, :])
        wt = nl.ndarray((128, N), dtype=w.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=wt, src=w[k0 : k0 + 128, :])
        nisa.nc_matmul(dst=acc, stationary=xt, moving=wt, accumulate=t > 0)
    part = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=acc)
    if n > 1:
        other = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.sendrecv(src=part, dst=other, send_to_rank=1 - r, recv_from_rank=1 - r, pipe_id=0)
        total = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        # The same order of the two partial sums on both cores: identical results.
        if r == 0:
            nisa.tensor_tensor(dst=total, data1=part, data2=other, op=nl.add)
        else:
            nisa.tensor_tensor(dst=total, data1=other, data2=part, op=nl.add)
        if r == 0:
            nisa.dma_copy(dst=y, src=total)
    else:
        nisa.dma_copy(dst=y, src=part)
    return y


def test_matmul_sharded_over_two_programs_matches_one_program_and_is_deterministic():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    w = rng.standard_normal((1024, 256)).astype(np.float32)
    xT = np.ascontiguousarray(x.T)
    one = matmul_sharded(xT, w)
    two = matmul_sharded[2](xT, w)
    # fp32 accumulation in a different order (two partial sums): a few ulps of the result.
    np.testing.assert_allclose(two, x @ w, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-4)
    for _ in range(4):
        np.testing.assert_array_equal(matmul_sharded[2](xT, w), two)


@nki.jit
def waits_on_a_barrier_the_peer_never_reaches(a):
    out = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    if nl.program_id(0) == 0:
        nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)
    else:
        nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_deadlock_names_both_cores_instructions_and_lines():
    a = np.zeros((P, F), np.float32)
    with pytest.raises(nki.NkiValidationError) as e:
        waits_on_a_barrier_the_peer_never_reaches[2](a)
    msg = str(e.value)
    assert e.value.kind == "deadlock"
    assert "core 0 waits in nki.isa.sendrecv at" in msg and "for the tile of rank 1" in msg
    assert "core 1 waits in nki.isa.core_barrier at" in msg
    assert msg.count("test_nki_lnc.py:") >= 2


@nki.jit
def sends_to_a_peer_that_finishes(a):
    out = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    if nl.program_id(0) == 1:
        nisa.sendrecv(src=t, dst=t, send_to_rank=0, recv_from_rank=0, pipe_id=3)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_peer_that_finished_is_a_deadlock_not_a_hang():
    with pytest.raises(nki.NkiValidationError, match=r"core 0 has finished its program") as e:
        sends_to_a_peer_that_finishes[2](np.zeros((P, F), np.float32))
    assert "core 1 waits in nki.isa.sendrecv" in str(e.value) and "pipe 3" in str(e.value)
    assert "(grid instance 1 of 2)" in str(e.value)


@nki.jit
def exchanges_mismatched_tiles(a):
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.program_id(0)
    width = F if r == 0 else F // 2
    t = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[:, :width])
    got = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=got, send_to_rank=1 - r, recv_from_rank=1 - r, pipe_id=0)
    nisa.dma_copy(dst=out[:, :width], src=got)
    return out


def test_sendrecv_shape_mismatch_between_cores_is_an_error():
    # Both cores receive a tile of the wrong shape; whichever notices first is reported.
    with pytest.raises(nki.NkiValidationError) as e:
        exchanges_mismatched_tiles[2](np.zeros((P, F), np.float32))
    msg = str(e.value)
    assert (
        "receives a float32 [128, 64] tile from rank 0" in msg and "into a float32 [128, 32] dst" in msg
    ) or ("receives a float32 [128, 32] tile from rank 1" in msg and "into a float32 [128, 64] dst" in msg)
    assert "same shape and dtype" in msg


def test_sendrecv_src_and_dst_dtype_must_agree_on_one_core():
    @nki.jit
    def k(a):
        out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        got = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=got, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        nisa.dma_copy(dst=out, src=got)
        return out

    with pytest.raises(nki.NkiValidationError, match=r"dst is bfloat16, src float32"):
        k[2](np.zeros((P, F), np.float32))


def test_ranks_outside_the_logical_core_are_errors(monkeypatch):
    with pytest.raises(nki.NkiValidationError, match=r"send_to_rank 2|send_to_rank.*2"):
        @nki.jit
        def k(a):
            t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.sendrecv(src=t, dst=t, send_to_rank=2, recv_from_rank=0, pipe_id=0)
            return a

        k[2](np.zeros((P, F), np.float32))
    # One physical core per logical core: the two instances run one after the other, so there
    # is no peer to exchange with.
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    with pytest.raises(nki.NkiValidationError, match=r"send_to_rank 1 is not a core of this logical core"):
        swap_halves[2](np.zeros((2, P, F), np.float32))


def test_an_error_in_one_instance_names_it():
    @nki.jit
    def k(a):
        out = nl.ndarray((2, P, F), dtype=a.dtype, buffer=nl.shared_hbm)
        r = nl.program_id(0)
        t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
        if r == 0:
            nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out[r], src=t)  # instance 1 stores a tile it never wrote
        return out

    with pytest.raises(nki.NkiValidationError, match=r"grid instance 1 of 2") as e:
        nki.simulate(k[2])(np.zeros((P, F), np.float32))
    assert e.value.kind == "uninitialized"


@nki.jit
def unbalanced_then_barrier(a, heavy: int):
    """Core 0 runs `heavy` extra passes before the barrier; core 1 only waits."""
    out = nl.ndarray((2, P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    if r == 0:
        for _ in range(heavy):
            nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=out[r], src=t)
    return out


def test_estimate_synchronises_the_cores_at_the_barrier():
    a = np.zeros((P, F), np.float32)
    light = nki.estimate(unbalanced_then_barrier[2], a, 0)
    heavy = nki.estimate(unbalanced_then_barrier[2], a, 200)
    t0, t1 = (e.total_ns for e in heavy.per_instance)
    # Core 1 does nothing extra but leaves the barrier with core 0: the same end time within
    # one store, and far later than without core 0's work.
    assert abs(t0 - t1) < 0.05 * t0
    l0, l1 = (e.total_ns for e in light.per_instance)
    assert t1 - l1 > 0.9 * (t0 - l0)
    assert heavy.total_ns == pytest.approx(max(t0, t1))
    # Both cores run at the same time: the launch takes one core's time, not the sum.
    assert heavy.total_ns < 1.2 * t0


def test_sendrecv_estimate_is_a_dma_transfer_plus_the_semaphore_latency():
    a = np.zeros((2, P, F), np.float32)
    est = nki.estimate(swap_halves[2], a)
    params = est.params
    one = est.per_instance[0]
    # Two HBM transfers and the exchange, in sequence; each at least the DMA fixed latency.
    assert one.total_ns >= 3 * params["dma_fixed_ns"]
    assert est.per_instance[0].total_ns == pytest.approx(est.per_instance[1].total_ns)
