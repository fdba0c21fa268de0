"""Run under torchrun with 4 ranks: checks every collective of the neuron backend against the
values computed locally, and exits non-zero on any mismatch."""

import torch
import torch.distributed as dist

dist.init_process_group("neuron")
r, w = dist.get_rank(), dist.get_world_size()
torch.neuron.set_device(r)
d = torch.device("neuron", r)


def check(name, got, want):
    if not torch.equal(got.cpu(), want):
        raise SystemExit(f"rank {r}: {name}: got {got.cpu().tolist()} want {want.tolist()}")


x = torch.full((5,), float(r + 1), device=d)
dist.all_reduce(x)
check("all_reduce sum", x, torch.full((5,), float(sum(range(1, w + 1)))))
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

out = torch.empty(w * 3, device=d)
dist.all_gather_into_tensor(out, torch.full((3,), float(r), device=d))
check("all_gather_into_tensor", out, torch.arange(w, dtype=torch.float32).repeat_interleave(3))
outs = [torch.empty(2, device=d) for _ in range(w)]
dist.all_gather(outs, torch.full((2,), float(10 * r), device=d))
check("all_gather", torch.cat(outs), torch.arange(w, dtype=torch.float32).repeat_interleave(2) * 10)

rs = torch.empty(2, device=d)
dist.reduce_scatter_tensor(rs, torch.arange(2.0 * w, device=d))
check("reduce_scatter_tensor", rs, torch.arange(2.0 * r, 2.0 * r + 2) * w)

b = torch.full((4,), float(r), device=d)
dist.broadcast(b, 1)
check("broadcast", b, torch.full((4,), 1.0))

red = torch.full((2,), float(r), device=d)
dist.reduce(red, dst=2)
if r == 2:
    check("reduce", red, torch.full((2,), float(sum(range(w)))))

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

gl = [torch.empty(2, device=d) for _ in range(w)] if r == 0 else None
dist.gather(torch.full((2,), float(r), device=d), gl, dst=0)
if r == 0:
    check("gather", torch.cat(gl), torch.arange(w, dtype=torch.float32).repeat_interleave(2))
sc = torch.empty(3, device=d)
dist.scatter(sc, [torch.full((3,), float(q), device=d) for q in range(w)] if r == 3 else None, src=3)
check("scatter", sc, torch.full((3,), float(r)))

if r == 0:
    dist.send(torch.arange(6.0, device=d), 1)
elif r == 1:
    t = torch.empty(6, device=d)
    dist.recv(t, 0)
    check("send/recv", t, torch.arange(6.0))

dist.barrier()
dist.destroy_process_group()
print(f"rank {r} ok", flush=True)
