"""Multi-core NKI launches (LNC=2): the programs of ``kernel[2]`` run at the same time on their own
NeuronCores (own SBUF/PSUM, shared HBM) and exchange data with ``nisa.sendrecv`` and synchronize
with ``nisa.core_barrier``; a partner that never answers is an error naming both programs, never
a hang. Kernels are written here; results are compared with numpy."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@nki.jit
def allreduce_pair(x):
    """Each program sums its half of the rows of x over the free axis; the two partial
    [128, 1] results are exchanged with sendrecv and both programs write the total."""
    pid = nl.program_id(0)
    P, F = 128, x.shape[1] // 2
    out = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:, nl.ds(pid * F, F)])
    mine = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=mine, data=t, op=nl.add, axis=1)
    theirs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=theirs, op=nl.add)
    nisa.dma_copy(dst=out[:, nl.ds(pid, 1)], src=total)
    return out


def test_sendrecv_exchanges_partial_sums_between_the_two_cores():
    x = _rand(128, 512)
    out = nki.cpu_simulate(allreduce_pair)[2](x=x)
    # fp32 sums of 256 terms in another order than numpy's: 1e-4 absolute
    np.testing.assert_allclose(out[:, 0], x.sum(axis=1, dtype=np.float64), rtol=1e-5, atol=1e-4)
    # program 0 adds (lo + hi), program 1 (hi + lo): the same fp32 sum, bit for bit
    np.testing.assert_array_equal(out[:, 0], out[:, 1])
    # the plain launch path (first run checked, then planned) gives the same bits
    np.testing.assert_array_equal(allreduce_pair[2](x), out)
    np.testing.assert_array_equal(allreduce_pair[2](x), out)


@nki.jit
def barrier_then_read_partner(x):
    """Program p writes its half of y (HBM), waits at the barrier, then reads the other half
    that its partner wrote: only correct if the barrier really orders the two cores."""
    pid = nl.program_id(0)
    P, F = 128, x.shape[1] // 2
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:, nl.ds(pid * F, F)])
    t2 = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=t2, op=nl.exp, data=t)
    nisa.dma_copy(dst=y[:, nl.ds(pid * F, F)], src=t2)
    nisa.core_barrier(data=y, cores=(0, 1))
    u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    other = 1 - pid
    nisa.dma_copy(dst=u, src=y[:, nl.ds(other * F, F)])
    nisa.dma_copy(dst=out[:, nl.ds(other * F, F)], src=u)
    return out


def test_core_barrier_orders_hbm_writes_of_both_cores():
    x = _rand(128, 256)
    out = nki.cpu_simulate(barrier_then_read_partner)[2](x=x)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


@nki.jit
def ring_pipes(x):
    """Four programs pass a tile around a ring on two pipes at once: pipe 0 to the right,
    pipe 1 to the left; messages on different pipes do not mix."""
    pid, n = nl.program_id(0), nl.num_programs(0)
    out = nl.ndarray((n, 2, 128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    scaled = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=scaled, data=t, op0=nl.multiply, operand0=float(pid + 1))
    right = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    left = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=scaled, dst=right, send_to_rank=(pid + 1) % n, recv_from_rank=(pid - 1) % n, pipe_id=0)
    nisa.sendrecv(src=scaled, dst=left, send_to_rank=(pid - 1) % n, recv_from_rank=(pid + 1) % n, pipe_id=1)
    nisa.dma_copy(dst=out[pid, 0], src=right)
    nisa.dma_copy(dst=out[pid, 1], src=left)
    return out


def test_sendrecv_ranks_beyond_the_two_cores_of_a_logical_core_are_rejected():
    # LNC=2: a logical core has two physical cores; a ring of four programs has no hardware.
    with pytest.raises(AssertionError, match=r"invalid recv_from_rank 3"):
        nki.cpu_simulate(ring_pipes)[4](x=_rand(128, 64))


@nki.jit
def only_program_zero_sends(x):
    pid = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    if pid == 0:
        nisa.sendrecv(src=t, dst=r, send_to_rank=1, recv_from_rank=1, pipe_id=0)
        nisa.dma_copy(dst=out, src=r)
    return out


@nki.jit
def crossed_barriers(x):
    """Program 0 waits at a barrier while program 1 waits to receive: a deadlock."""
    pid = nl.program_id(0)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if pid == 0:
        nisa.core_barrier(data=out, cores=(0, 1))
        nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)
    else:
        nisa.sendrecv(src=t, dst=t, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        nisa.core_barrier(data=out, cores=(0, 1))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_partner_that_finishes_without_answering_is_an_error_naming_both():
    x = _rand(128, 8)
    with pytest.raises(Exception) as e:
        nki.cpu_simulate(only_program_zero_sends)[2](x=x)
    msg = str(e.value)
    assert "core 0 waits in nki.isa.sendrecv" in msg and "core 1 has finished" in msg, msg
    assert "test_nki_multicore.py" in msg  # the waiting instruction's kernel line


def test_a_deadlock_names_both_programs_and_their_instructions():
    x = _rand(128, 8)
    with pytest.raises(Exception) as e:
        nki.cpu_simulate(crossed_barriers)[2](x=x)
    msg = str(e.value)
    assert "deadlock" in msg, msg
    assert "core 0 waits in nki.isa.core_barrier" in msg and "core 1 waits in nki.isa.sendrecv" in msg, msg


def test_sendrecv_element_counts_must_match():
    @nki.jit
    def mismatched(x):
        pid = nl.program_id(0)
        t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        r = nl.ndarray((128, 4 + 4 * pid), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, nl.ds(0, 4 + 4 * pid)], src=r)
        return out

    with pytest.raises(Exception, match=r"sendrecv src and dst have the same shape"):
        nki.cpu_simulate(mismatched)[2](x=_rand(128, 8))


def test_sendrecv_rank_outside_the_launch_is_rejected_at_trace_time():
    with pytest.raises(AssertionError, match="invalid send_to_rank 2"):

        @nki.jit
        def bad(x):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.sendrecv(src=t, dst=t, send_to_rank=2, recv_from_rank=0, pipe_id=0)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=t)
            return out

        nki.cpu_simulate(bad)[2](x=_rand(128, 4))


def test_sendrecv_of_never_written_memory_reaching_hbm_is_reported():
    @nki.jit
    def sends_garbage(x):
        pid = nl.program_id(0)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)  # never written
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        return out

    with pytest.raises(Exception, match="uninitialized"):
        nki.simulate(sends_garbage[2])(_rand(128, 4))


@nki.jit
def swap_tiles(x):
    pid = nl.program_id(0)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=r, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.core_barrier(data=out, cores=(0, 1))
    nisa.dma_copy(dst=out, src=r)
    return out


def test_sendrecv_and_barrier_are_priced_by_the_cost_model():
    small, big = nki.estimate(swap_tiles[2], _rand(128, 16)), nki.estimate(swap_tiles[2], _rand(128, 4096))
    # two HBM DMAs plus the exchange of the same bytes: the DMA engines are busy longer for the
    # bigger tile, and the exchange adds to a kernel that only copies
    assert big.busy_ns["DMA"] > 4 * small.busy_ns["DMA"] > 0
    assert small.instructions == 2 * 4


def test_multicore_kernel_on_neuron_tensors_matches_the_host_run():
    torch = pytest.importorskip("torch")
    import torch_neuronx  # noqa: F401

    x = _rand(128, 512)
    want = nki.cpu_simulate(allreduce_pair)[2](x=x)
    got = allreduce_pair[2](torch.from_numpy(x).to("neuron"))
    np.testing.assert_array_equal(got.cpu().numpy(), want)
