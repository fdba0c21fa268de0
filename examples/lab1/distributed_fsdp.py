"""Lab 1, Step 5: distributed training with FSDP over 4 NeuronCores.

    NEURON_RT_VIRTUAL_CORE_SIZE=2 \\
    NEURON_RT_NUM_CORES=4 \\
    torchrun \\
        --nproc_per_node 4 \\
        --rdzv_backend c10d \\
        --rdzv_endpoint localhost:29500 \\
        distributed_fsdp.py

Each rank drives one logical NeuronCore (neuron:<local rank>); parameters are sharded with
FSDP2 (`fully_shard`) and the collectives run over the `neuron` c10d backend.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local_rank)
    device = torch.device(f"neuron:{local_rank}")
    dist.init_process_group(backend="neuron", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[Rank {rank}/{world}] Initialized on {device}", flush=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    # Every rank trains on its own slice of a shared synthetic regression problem.
    g = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(32, 64, generator=g).to(device)
    y = torch.randn(32, 64, generator=g).to(device)

    iterations = 5
    for it in range(iterations):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # The loss averaged over ranks, so every rank prints the same number.
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"Iteration {it + 1}/{iterations}, Loss: {avg.item():.4f}", flush=True)

    dist.barrier()
    if rank == 0:
        print("Training complete!", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
