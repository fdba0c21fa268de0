"""Each rank runs collectives inside torch.neuron.estimated_time() and reports the estimated
device time next to the cost model's formula for a ring over the world (docs/cost-model.md)."""

import torch
import torch.distributed as dist
import torch_neuronx  # noqa: F401
from _out import say

dist.init_process_group("neuron")
rank, world = dist.get_rank(), dist.get_world_size()
torch.neuron.set_device(rank)
p = torch.neuron.device_time_params()
link = p["neuronlink_bytes_per_ns"] / p["logical_cores_per_device"]


def ring(steps: int, per_step_bytes: float) -> float:
    return steps * (p["collective_step_ns"] + per_step_bytes / link)


n = 1 << 20  # fp32 elements: 4 MiB per rank
x = torch.full((n,), float(rank + 1), device="neuron")
with torch.neuron.estimated_time() as t:
    dist.all_reduce(x)
assert torch.equal(x.cpu(), torch.full((n,), float(world * (world + 1) // 2))), "all_reduce result"
say(f"rank {rank} all_reduce tasks={t.tasks} est_ns={t.device_s * 1e9:.1f} "
    f"formula_ns={ring(2 * (world - 1), 4 * n / world):.1f}")

out = torch.empty(world * n, device="neuron")
with torch.neuron.estimated_time() as t:
    dist.all_gather_into_tensor(out, x)
say(f"rank {rank} all_gather tasks={t.tasks} est_ns={t.device_s * 1e9:.1f} "
    f"formula_ns={ring(world - 1, 4 * n * world / world):.1f}")

rs = torch.empty(n, device="neuron")
with torch.neuron.estimated_time() as t:
    dist.reduce_scatter_tensor(rs, out)
say(f"rank {rank} reduce_scatter tasks={t.tasks} est_ns={t.device_s * 1e9:.1f} "
    f"formula_ns={ring(world - 1, 4 * n * world / world):.1f}")
# Coalesced calls (FSDP's): one all_gather_into_tensor_coalesced / reduce_scatter_tensor_coalesced
# task over the blocks, priced as one collective of their total size.
m = n // 2
parts = [torch.full((m,), float(rank + 1), device="neuron") for _ in range(2)]
outs = [torch.empty(world * m, device="neuron") for _ in range(2)]
with torch.neuron.estimated_time() as t:
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, parts):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
assert all(torch.equal(o.cpu()[r * m:(r + 1) * m], torch.full((m,), float(r + 1))) for o in outs for r in range(world))
say(f"rank {rank} all_gather_coalesced tasks={t.tasks} est_ns={t.device_s * 1e9:.1f} "
    f"formula_ns={ring(world - 1, 2 * 4 * m * world / world):.1f}")

shards = [torch.empty(m, device="neuron") for _ in range(2)]
with torch.neuron.estimated_time() as t:
    with dist._coalescing_manager(async_ops=True) as cm:
        for s, o in zip(shards, outs):
            dist.reduce_scatter_tensor(s, o)
    cm.wait()
assert all(torch.equal(s.cpu(), torch.full((m,), float(world * (rank + 1)))) for s in shards), "reduce_scatter coalesced"
say(f"rank {rank} reduce_scatter_coalesced tasks={t.tasks} est_ns={t.device_s * 1e9:.1f} "
    f"formula_ns={ring(world - 1, 2 * 4 * m * world / world):.1f}")
dist.destroy_process_group()
