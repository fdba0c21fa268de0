"""Run on two torchrun nodes: all ranks train with all_reduce; on the second node (GROUP_RANK 1)
local rank 0 kills every process of its node (its mount namespace: the agent and the workers)
at once, as a host that dies. The ranks of the other node must fail naming the lost ranks.
Prints "rank <r> failed after <s> s: <first line>"."""

import os
import signal
import time

import torch
import torch.distributed as dist
from _out import say


def kill_my_node():
    mine = os.readlink("/proc/self/ns/mnt")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == mine:
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


dist.init_process_group("neuron")
r = dist.get_rank()
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
victim = os.environ["GROUP_RANK"] == "1"
x = torch.ones(1 << 12, device="neuron")
start = None
try:
    for it in range(200):
        if it == 3:
            start = time.monotonic()
            if victim and os.environ["LOCAL_RANK"] == "0":
                kill_my_node()
        dist.all_reduce(x)
        x.div_(dist.get_world_size())
        x.cpu()
        time.sleep(0.05)
    say(f"rank {r} no error")
except RuntimeError as e:
    say(f"rank {r} failed after {time.monotonic() - start:.1f} s: {str(e).splitlines()[0]}")
    # Fail as a job would (a clean exit would make torchrun wait for the dead node at its exit
    # barrier), after the other survivor had the time to report too.
    time.sleep(5)
    os._exit(1)
os._exit(0)
