"""Run under torchrun: every rank kills itself (SIGKILL) right after joining the group,
before its first collective. Whatever the group created must not outlive the processes."""

import os
import signal

import torch.distributed as dist

dist.init_process_group("neuron")
print(f"rank {dist.get_rank()} joined", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
