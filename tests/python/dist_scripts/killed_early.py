"""Run under torchrun: every rank kills itself (SIGKILL) right after joining the group,
before its first collective. Whatever the group created must not outlive the processes."""

import os
import signal

import torch.distributed as dist
from _out import say

dist.init_process_group("neuron")
say(f"rank {dist.get_rank()} joined")
os.kill(os.getpid(), signal.SIGKILL)
