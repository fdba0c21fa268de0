"""Run on two torchrun nodes: the workers of the second node (GROUP_RANK 1) exit before they
create the process group; the others must fail in init_process_group naming the ranks that
never joined. Prints "rank <r> failed: <first line>"."""

import os
import sys

import torch.distributed as dist
from _out import say

if os.environ["GROUP_RANK"] == "1":
    sys.exit(0)
r = int(os.environ["RANK"])
try:
    dist.init_process_group("neuron")
    say(f"rank {r} no error")
except Exception as e:  # noqa: BLE001 - any error type is reported
    say(f"rank {r} failed: {str(e).splitlines()[0]}")
os._exit(0)
