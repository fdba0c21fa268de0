"""Run under torchrun: every case makes the ranks call mismatched collectives on a fresh group
and prints, per rank, "rank <r> <case>: ok|bad|no error: <first line of the error>". With
`detail` as argument (TORCH_DISTRIBUTED_DEBUG=DETAIL), any error that reports a mismatch is
accepted (c10d's wrapper may catch it first)."""

import os
import sys

import torch
import torch.distributed as dist
from _out import say

dist.init_process_group("neuron")
r, w = dist.get_rank(), dist.get_world_size()
torch.neuron.set_device(int(os.environ.get("LOCAL_RANK", r)))
d = torch.device("neuron")
detail = "detail" in sys.argv[1:]
last = w - 1

# Collectives that agree still work (and, under DETAIL, pass c10d's own checks).
x = torch.ones(3, device=d)
dist.all_reduce(x)
assert x.cpu().tolist() == [float(w)] * 3, x
dist.barrier()
say(f"rank {r} agreeing collectives: ok")


def a2a(g):
    splits = [1] * w
    if r == last:
        splits = [2] + [1] * (w - 1)  # sends 2 elements to rank 0, which expects 1
    out = torch.empty(w, device=d)
    dist.all_to_all_single(out, torch.ones(sum(splits), device=d), [1] * w, splits, group=g)


cases = [
    ("shape", lambda g: dist.all_reduce(torch.ones(2 if r == last else 3, device=d), group=g),
     [f"rank {last} calls all_reduce", "differs: shape"]),
    ("dtype", lambda g: dist.all_reduce(torch.ones(3, dtype=torch.bfloat16 if r == 0 else torch.float32, device=d),
                                        group=g),
     ["rank 0 calls all_reduce", "bfloat16", "differs: dtype"]),
    ("op", lambda g: dist.broadcast(torch.ones(3, device=d), 0, group=g) if r == 1
     else dist.all_reduce(torch.ones(3, device=d), group=g),
     ["rank 1 calls broadcast", "differs: operation"]),
    ("all_to_all splits", a2a, [f"rank {last} sends 8 bytes to rank 0", f"rank 0 expects 4 bytes from rank {last}"]),
]
for name, fn, needles in cases:
    if detail and name == "all_to_all splits":
        continue
    g = dist.new_group(backend="neuron")
    try:
        fn(g)
        torch.neuron.synchronize()
        say(f"rank {r} {name}: no error")
    except RuntimeError as e:
        msg = str(e)
        ok = ("mismatch" in msg.lower()) if detail else all(n in msg for n in needles)
        say(f"rank {r} {name}: {'ok' if ok else 'bad'}: {msg.splitlines()[0][:400]}")
# The default group is unaffected by the failures of the others.
y = torch.full((2,), float(r), device=d)
dist.all_reduce(y)
say(f"rank {r} default group after failures: {'ok' if y.cpu().tolist() == [float(sum(range(w)))] * 2 else 'bad'}")
os._exit(0)  # the failed groups cannot be destroyed collectively
