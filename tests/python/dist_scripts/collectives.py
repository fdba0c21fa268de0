"""Run under torchrun (any number of ranks and nodes): checks every collective of the neuron
backend against values computed locally, and exits non-zero on any mismatch. Prints
"rank <r> ok" at the end and the transport the group uses ("shm", "shm+gloo" or "gloo")."""

import os

import torch
import torch.distributed as dist
from _out import say

dist.init_process_group("neuron")
r, w = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", r))
torch.neuron.set_device(local)
d = torch.device("neuron", local)


def check(name, got, want):
    if not torch.equal(got.cpu(), want):
        raise SystemExit(f"rank {r}: {name}: got {got.cpu().tolist()[:8]} want {want.tolist()[:8]}")


# all_reduce with every op, on the dtypes they apply to
vals = [float(q + 1) for q in range(w)]
for op, want in [
    (dist.ReduceOp.SUM, sum(vals)),
    (dist.ReduceOp.AVG, sum(vals) / w),
    (dist.ReduceOp.PRODUCT, float(torch.tensor(vals, dtype=torch.float64).prod())),
    (dist.ReduceOp.MIN, 1.0),
    (dist.ReduceOp.MAX, float(w)),
]:
    x = torch.full((5,), vals[r], device=d)
    dist.all_reduce(x, op=op)
    check(f"all_reduce {op}", x, torch.full((5,), want, dtype=torch.float32))
for op, fn in [(dist.ReduceOp.BAND, lambda a, b: a & b), (dist.ReduceOp.BOR, lambda a, b: a | b),
               (dist.ReduceOp.BXOR, lambda a, b: a ^ b)]:
    bits = [0b1011 ^ (q * 0b0110) for q in range(w)]
    want = bits[0]
    for b in bits[1:]:
        want = fn(want, b)
    x = torch.full((3,), bits[r], dtype=torch.int64, device=d)
    dist.all_reduce(x, op=op)
    check(f"all_reduce {op} int64", x, torch.full((3,), want, dtype=torch.int64))
m = torch.tensor([r, -r], dtype=torch.int32, device=d)
dist.all_reduce(m, op=dist.ReduceOp.MAX)
check("all_reduce max int32", m, torch.tensor([w - 1, 0], dtype=torch.int32))
bf = torch.full((3,), 0.1 * (r + 1), dtype=torch.bfloat16, device=d)
dist.all_reduce(bf, op=dist.ReduceOp.AVG)
want_bf = torch.stack([torch.full((3,), 0.1 * (q + 1), dtype=torch.bfloat16) for q in range(w)]).float().mean(0)
check("all_reduce avg bf16", bf, want_bf.to(torch.bfloat16))
big = torch.full((5 << 20,), float(r), device=d)  # 20 MiB: several shared-memory chunks
dist.all_reduce(big)
check("all_reduce chunked", big[::4096], torch.full(((5 << 20) // 4096,), float(sum(range(w)))))
odd = torch.arange(7.0, device=d) + r  # fewer elements than some ranks' shards
dist.all_reduce(odd)
check("all_reduce 7 elements", odd, torch.arange(7.0) * w + sum(range(w)))
empty = torch.empty(0, device=d)
dist.all_reduce(empty)

out = torch.empty(w * 3, device=d)
dist.all_gather_into_tensor(out, torch.full((3,), float(r), device=d))
check("all_gather_into_tensor", out, torch.arange(w, dtype=torch.float32).repeat_interleave(3))
outs = [torch.empty(2, device=d) for _ in range(w)]
dist.all_gather(outs, torch.full((2,), float(10 * r), device=d))
check("all_gather", torch.cat(outs), torch.arange(w, dtype=torch.float32).repeat_interleave(2) * 10)
n = 3 << 20  # 12 MiB per rank: chunked
big_out = torch.empty(w * n, device=d)
dist.all_gather_into_tensor(big_out, torch.full((n,), float(r), device=d))
check("all_gather_into_tensor chunked", big_out[:: n // 2], torch.arange(w, dtype=torch.float32).repeat_interleave(2))

rs = torch.empty(2, device=d)
dist.reduce_scatter_tensor(rs, torch.arange(2.0 * w, device=d))
check("reduce_scatter_tensor", rs, torch.arange(2.0 * r, 2.0 * r + 2) * w)
rsl = torch.empty(3, dtype=torch.bfloat16, device=d)
dist.reduce_scatter(rsl, [torch.full((3,), float(q + r), dtype=torch.bfloat16, device=d) for q in range(w)],
                    op=dist.ReduceOp.AVG)
check("reduce_scatter avg bf16", rsl, torch.full((3,), r + (w - 1) / 2, dtype=torch.bfloat16))
mrs = (3 << 20) // 2  # more than a chunk per block
big_rs = torch.empty(mrs, device=d)
dist.reduce_scatter_tensor(big_rs, torch.ones(w * mrs, device=d) * (r + 1))
check("reduce_scatter_tensor chunked", big_rs[::4096], torch.full((len(range(0, mrs, 4096)),), float(sum(vals))))

b = torch.full((4,), float(r), device=d)
dist.broadcast(b, 1)
check("broadcast", b, torch.full((4,), 1.0))

red = torch.full((2,), float(r), device=d)
dist.reduce(red, dst=w - 2)
if r == w - 2:
    check("reduce", red, torch.full((2,), float(sum(range(w)))))
else:
    check("reduce leaves non-roots alone", red, torch.full((2,), float(r)))

a2a = torch.empty(w, device=d)
dist.all_to_all_single(a2a, torch.arange(w, dtype=torch.float32, device=d) + 10 * r)
check("all_to_all_single", a2a, torch.arange(w, dtype=torch.float32) * 10 + r)
# uneven splits: rank r sends q+1 elements to rank q
in_splits = [q + 1 for q in range(w)]
out_splits = [r + 1] * w
src = torch.cat([torch.full((q + 1,), float(100 * r + q)) for q in range(w)]).to(d)
dst = torch.empty(sum(out_splits), device=d)
dist.all_to_all_single(dst, src, out_splits, in_splits)
check("all_to_all_single uneven", dst, torch.cat([torch.full((r + 1,), float(100 * p + r)) for p in range(w)]))
a2l_out = [torch.empty(p + 1, device=d) for p in range(w)]
dist.all_to_all(a2l_out, [torch.full((r + 1,), float(10 * r + q), device=d) for q in range(w)])
check("all_to_all uneven", torch.cat(a2l_out), torch.cat([torch.full((p + 1,), float(10 * p + r)) for p in range(w)]))

gl = [torch.empty(2, device=d) for _ in range(w)] if r == 0 else None
dist.gather(torch.full((2,), float(r), device=d), gl, dst=0)
if r == 0:
    check("gather", torch.cat(gl), torch.arange(w, dtype=torch.float32).repeat_interleave(2))
sc = torch.empty(3, device=d)
dist.scatter(sc, [torch.full((3,), float(q), device=d) for q in range(w)] if r == w - 1 else None, src=w - 1)
check("scatter", sc, torch.full((3,), float(r)))

if r == 0:
    dist.send(torch.arange(6.0, device=d), w - 1)
elif r == w - 1:
    t = torch.empty(6, device=d)
    dist.recv(t, 0)
    check("send/recv", t, torch.arange(6.0))

# An exchange around the ring, larger than a mailbox: every rank sends before it receives.
ring = 3 << 20
mine = torch.full((ring,), float(r), device=d)
got = torch.empty(ring, device=d)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, (r + 1) % w), dist.P2POp(dist.irecv, got, (r - 1) % w)])
for q in reqs:
    q.wait()
check("batch_isend_irecv ring", got[::65536], torch.full((ring // 65536,), float((r - 1) % w)))

dist.barrier()
backend = dist.group.WORLD._get_backend(d)
say(f"rank {r} transport {backend._transport} hosts {backend._hosts}")
dist.destroy_process_group()
say(f"rank {r} ok")
