"""Each rank of a torchrun job (neuron process group) runs NKI kernels with nki.collectives
and compares their results with numpy's. With argument "mismatch", rank 1 calls all_reduce on
a tile of another shape than rank 0's: both must fail, naming both ranks; with "peer_dies",
rank 1 exits before its collective and rank 0 must fail (not hang); with "peer_fails", rank
1's kernel fails before its collective and rank 0 must fail naming rank 1's error."""

import os
import sys
import traceback

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
import numpy as np
import torch
import torch.distributed as dist
import torch_neuronx  # noqa: F401
from _out import say

dist.init_process_group("neuron")
rank, world = dist.get_rank(), dist.get_world_size()
GROUP = ncc.ReplicaGroup([list(range(world))])


def _hbm_pair(x):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    nisa.dma_copy(dst=src, src=x)
    return src


@nki.jit
def all_reduce_hbm(x):
    src = _hbm_pair(x)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=GROUP, op=nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def all_reduce_sbuf_max(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[t], dsts=[r], replica_group=GROUP, op=nl.maximum)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out


@nki.jit
def all_gather_hbm_dim0(x):
    src = _hbm_pair(x)
    shape = (x.shape[0] * world, x.shape[1])
    dst = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=GROUP, collective_dim=0)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def all_gather_sbuf_dim1(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    shape = (x.shape[0], x.shape[1] * world)
    g = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[t], dsts=[g], replica_group=GROUP, collective_dim=1)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=g)
    return out


@nki.jit
def reduce_scatter_hbm(x):
    src = _hbm_pair(x)
    shape = (x.shape[0] // world, x.shape[1])
    dst = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    ncc.reduce_scatter(srcs=[src], dsts=[dst], replica_group=GROUP, collective_dim=0, op=nl.add)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def all_to_all_hbm(x):
    src = _hbm_pair(x)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    ncc.all_to_all(srcs=[src], dsts=[dst], replica_group=GROUP, collective_dim=0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def permute_hbm(x):
    src = _hbm_pair(x)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=[(r, (r + 1) % world) for r in range(world)])
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def ring_step_sbuf(x):
    """One ring step; the second column of out holds the rank whose data arrived (from
    collective_permute_implicit_current_processing_rank_id at iteration 1), read through a
    rank-indexed table."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    got = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ncc.collective_permute_implicit(srcs_by_channel=[[t]], dsts_by_channel=[[got]], replica_group=GROUP)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


@nki.jit
def rank_slice(table):
    """out = table[rank_id()] through ap(scalar_offset=rank_id())."""
    _, H, W = table.shape
    out = nl.ndarray((H, W), dtype=table.dtype, buffer=nl.shared_hbm)
    r = ncc.rank_id()
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[W, H], [1, W]], scalar_offset=r, indirect_dim=0))
    return out


@nki.jit
def processing_rank_slice(table):
    """out = table[the rank whose data this rank holds after one ring step]."""
    _, H, W = table.shape
    out = nl.ndarray((H, W), dtype=table.dtype, buffer=nl.shared_hbm)
    r = ncc.collective_permute_implicit_current_processing_rank_id(iteration_id=1, replica_group=GROUP)
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[W, H], [1, W]], scalar_offset=r, indirect_dim=0))
    return out


@nki.jit
def halves_lnc2(x):
    """kernel[2]: physical core s all-reduces x[s] with core s of the other ranks."""
    s = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[s])
    r = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[t], dsts=[r], replica_group=GROUP, op=nl.add)
    g = nl.ndarray((x.shape[1], x.shape[2] * world), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[t], dsts=[g], replica_group=GROUP, collective_dim=1)
    nisa.dma_copy(dst=out[s], src=r)
    return out


def data(r, shape, seed):
    return np.random.default_rng(seed * 100 + r).standard_normal(shape).astype(np.float32)


def check(name, got, want):
    np.testing.assert_array_equal(got, want, err_msg=name)
    say(f"rank {rank} ok {name}")


def main():
    xs = [data(r, (4, 6), 1) for r in range(world)]
    total = xs[0].copy()
    for x in xs[1:]:
        total = total + x  # group order, fp32, like the emulator
    check("all_reduce_hbm", all_reduce_hbm(xs[rank]), total)
    check("all_reduce_sbuf_max", all_reduce_sbuf_max(xs[rank]), np.maximum.reduce(xs))
    # c10d collectives of the same group interleave with the kernels' (one sequence)
    t = torch.full((3,), float(rank + 1), device="neuron")
    dist.all_reduce(t)
    assert t.cpu().tolist() == [world * (world + 1) / 2] * 3
    check("all_gather_hbm_dim0", all_gather_hbm_dim0(xs[rank]), np.concatenate(xs, axis=0))
    check("all_gather_sbuf_dim1", all_gather_sbuf_dim1(xs[rank]), np.concatenate(xs, axis=1))
    blk = xs[0].shape[0] // world
    check("reduce_scatter_hbm", reduce_scatter_hbm(xs[rank]), total[rank * blk : (rank + 1) * blk])
    check("all_to_all_hbm", all_to_all_hbm(xs[rank]),
          np.concatenate([x[rank * blk : (rank + 1) * blk] for x in xs], axis=0))
    check("collective_permute", permute_hbm(xs[rank]), xs[(rank - 1) % world])
    check("collective_permute_implicit", ring_step_sbuf(xs[rank]), xs[(rank - 1) % world])
    hs = [data(r, (2, 4, 6), 5) for r in range(world)]
    want = hs[0].copy()
    for h in hs[1:]:
        want = want + h
    check("lnc2_core_meets_core", halves_lnc2[2](hs[rank]), want)
    table = np.arange(world * 2 * 3, dtype=np.float32).reshape(world, 2, 3)
    check("rank_id_scalar_offset", rank_slice(table), table[rank])
    check("current_processing_rank_id", processing_rank_slice(table), table[(rank - 1) % world])


@nki.jit
def all_reduce_rows(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[t], dsts=[r], replica_group=GROUP, op=nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out


def peer_dies():
    if rank == 1:
        os._exit(0)  # cleanly (torchrun leaves rank 0 alone), before its collective
    try:
        all_reduce_rows(data(rank, (4, 6), 3))
    except Exception as e:  # noqa: BLE001
        say(f"rank {rank} failed: " + " ".join(str(e).split()))
        os._exit(0)
    say(f"rank {rank} no error")


@nki.jit
def fails_first(x, fail):
    """With fail: copies a never-written tile to the output before the all_reduce (an
    uninitialized-memory error in the checked first run), so the rank never reaches it."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if fail:
        junk = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=junk)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_reduce(srcs=[t], dsts=[r], replica_group=GROUP, op=nl.add)
    nisa.dma_copy(dst=out, src=r)
    return out


def peer_fails():
    try:
        fails_first(data(rank, (4, 6), 4), rank == 1)
    except Exception as e:  # noqa: BLE001
        say(f"rank {rank} failed: " + " ".join(str(e).split()))
        os._exit(0)
    say(f"rank {rank} no error")


def mismatch():
    x = data(rank, (4 if rank == 0 else 8, 6), 2)
    try:
        all_reduce_rows(x)
    except Exception as e:  # noqa: BLE001
        say(f"rank {rank} failed: " + " ".join(str(e).split()))
        return
    say(f"rank {rank} no error")


if __name__ == "__main__":
    try:
        {"mismatch": mismatch, "peer_dies": peer_dies, "peer_fails": peer_fails}.get(sys.argv[1] if sys.argv[1:] else "", main)()
    except Exception:
        say(f"rank {rank} error: " + " ".join(traceback.format_exc().split()))
        raise
    if not sys.argv[1:]:
        dist.destroy_process_group()
