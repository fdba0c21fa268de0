"""nki.collectives: a rank is a logical core of the job. Without a process group the world is
one rank (collectives over [[0]] copy, other ranks are an error); under torchrun with the
neuron backend the ranks exchange through the process group (dist_scripts/nki_collectives.py
runs kernels of every kind and compares them with numpy; calls that differ fail on every
rank, naming both). Kernels are written here."""

from __future__ import annotations

import os
import re

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ONE = ncc.ReplicaGroup([[0]])


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@nki.jit
def reduce_one(x):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    nisa.dma_copy(dst=src, src=x)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=ONE, op=nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def gather_one_sbuf(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    g = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[t], dsts=[g], replica_group=ONE, collective_dim=1)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=g)
    return out


@nki.jit
def rank_row(table):
    _, W = table.shape
    out = nl.ndarray((1, W), dtype=table.dtype, buffer=nl.shared_hbm)
    r = ncc.rank_id()
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[W, 1], [1, W]], scalar_offset=r, indirect_dim=0))
    return out


def test_world_of_one_all_reduce_and_all_gather_copy():
    x = _rand(8, 16)
    np.testing.assert_array_equal(reduce_one(x), x)
    np.testing.assert_array_equal(gather_one_sbuf(x), x)
    # at LNC=2 each physical core runs its own exchange (a copy in a world of one)
    np.testing.assert_array_equal(reduce_one[2](x), x)


def test_world_of_one_rank_id_is_zero():
    table = _rand(3, 5)
    np.testing.assert_array_equal(rank_row(table), table[0:1])


def test_group_naming_another_rank_is_an_error_without_a_process_group():
    @nki.jit
    def pair(x):
        dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
        nisa.dma_copy(dst=src, src=x)
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=ncc.ReplicaGroup([[0, 1]]), op=nl.add)
        return dst

    with pytest.raises(Exception, match=r"names rank 1 but the job has 1 rank.*no neuron process group"):
        pair(_rand(4, 4))


def test_all_gather_dst_of_the_wrong_size_is_a_verifier_error():
    @nki.jit
    def bad(x):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
        nisa.dma_copy(dst=src, src=x)
        dst = nl.ndarray((x.shape[0] * 2, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
        ncc.all_gather(srcs=[src], dsts=[dst], replica_group=ONE, collective_dim=0)
        return dst

    with pytest.raises(Exception, match="expected 16 elements"):
        bad(_rand(4, 4))


def test_metadata_driven_collectives_are_not_modeled():
    with pytest.raises(NotImplementedError, match="nki.collectives.all_gather_v"):
        ncc.all_gather_v()


def test_two_ranks_run_every_kind_of_collective():
    from dist_launch import torchrun

    r = torchrun(os.path.join(HERE, "dist_scripts", "nki_collectives.py"), HERE, nproc=2, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    names = ["all_reduce_hbm", "all_reduce_sbuf_max", "all_gather_hbm_dim0", "all_gather_sbuf_dim1",
             "reduce_scatter_hbm", "all_to_all_hbm", "collective_permute", "collective_permute_implicit",
             "rank_id_scalar_offset", "current_processing_rank_id", "lnc2_core_meets_core"]
    ok = set(re.findall(r"rank (\d) ok (\w+)", r.stdout))
    assert ok == {(q, n) for q in "01" for n in names}, r.stdout + r.stderr


def test_mismatched_calls_fail_on_both_ranks_naming_both():
    from dist_launch import torchrun

    r = torchrun(os.path.join(HERE, "dist_scripts", "nki_collectives.py"), HERE, nproc=2, args=["mismatch"],
                 timeout=300)
    lines = dict(re.findall(r"rank (\d) (failed: .*|no error)", r.stdout))
    assert set(lines) == {"0", "1"}, r.stdout + r.stderr
    for q, msg in lines.items():
        assert msg.startswith("failed:"), (q, r.stdout)
        assert "rank 0" in msg and "rank 1" in msg, msg
        assert "nki_collectives.py:" in msg, msg  # the kernel line of the calls


def test_a_peer_that_exits_makes_the_other_rank_fail():
    from dist_launch import torchrun

    r = torchrun(os.path.join(HERE, "dist_scripts", "nki_collectives.py"), HERE, nproc=2, args=["peer_dies"],
                 timeout=300)
    lines = dict(re.findall(r"rank (\d) (failed: .*|no error)", r.stdout))
    assert set(lines) == {"0"}, r.stdout + r.stderr
    assert lines["0"].startswith("failed:") and "rank 1" in lines["0"], lines["0"]


def test_a_peer_whose_kernel_fails_makes_the_other_rank_fail_with_its_error():
    from dist_launch import torchrun

    r = torchrun(os.path.join(HERE, "dist_scripts", "nki_collectives.py"), HERE, nproc=2, args=["peer_fails"],
                 timeout=300)
    lines = dict(re.findall(r"rank (\d) (failed: .*|no error)", r.stdout))
    assert set(lines) == {"0", "1"}, r.stdout + r.stderr
    assert "uninitialized" in lines["1"], lines["1"]
    assert lines["0"].startswith("failed:") and "uninitialized" in lines["0"], lines["0"]


def _reduce_over(groups):
    g = ncc.ReplicaGroup(groups)

    @nki.jit
    def k(x):
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
        nisa.dma_copy(dst=src, src=x)
        dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=g, op=nl.add)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=dst)
        return out

    return k


def test_all_reduce_estimate_is_a_ring_over_neuronlink_between_the_copies():
    """docs/cost-model.md: 2(n-1) ring steps of bytes/n, each the step latency (1300 ns) plus
    its bytes over a logical core's share of NeuronLink (1280 GB/s / 4 logical cores); the copy
    after the collective waits for it (a rendezvous)."""
    x = np.zeros((128, 2048), np.float32)  # 1 MiB
    alone = nki.estimate(_reduce_over([[0]]), x)
    pair = nki.estimate(_reduce_over([[0, 1]]), x)
    quad = nki.estimate(_reduce_over([[0, 1, 2, 3]]), x)
    ring = lambda n: 2 * (n - 1) * (1300 + x.nbytes / n / 320.0)  # noqa: E731
    # (a group of one costs only the Sync engine's issue, well under 100 ns)
    assert pair.total_ns - alone.total_ns == pytest.approx(ring(2), abs=100)
    assert quad.total_ns - alone.total_ns == pytest.approx(ring(4), abs=100)
    assert quad.total_ns - pair.total_ns == pytest.approx(ring(4) - ring(2), rel=1e-6)
