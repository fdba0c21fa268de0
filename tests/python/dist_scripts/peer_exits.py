"""Run under torchrun: the last rank exits (cleanly, so torchrun leaves the others alone) after
one collective; the others keep calling all_reduce and must fail naming it, long before the
process group's timeout. Prints "rank <r> failed: <first line>"."""

import os
import time

import torch
import torch.distributed as dist
from _out import say

dist.init_process_group("neuron")
r, w = dist.get_rank(), dist.get_world_size()
torch.neuron.set_device(int(os.environ.get("LOCAL_RANK", r)))
x = torch.ones(1 << 10, device="neuron")
dist.all_reduce(x)
x.cpu()
if r == w - 1:
    os._exit(0)
start = time.monotonic()
try:
    for _ in range(1000):
        dist.all_reduce(x)
        x.cpu()
        time.sleep(0.01)
    say(f"rank {r} no error")
except RuntimeError as e:
    say(f"rank {r} failed after {time.monotonic() - start:.1f} s: {str(e).splitlines()[0]}")
os._exit(0)
