"""The `neuron` c10d backend under torchrun with 4 ranks (one logical core each)."""

import os
import re
import socket
import subprocess
import sys

import pytest
from repo_paths import REPO

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def torchrun(script: str, cwd: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--rdzv_backend", "c10d",
           "--rdzv_endpoint", f"localhost:{free_port()}", script]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_every_collective_matches_local_reference():
    r = torchrun(os.path.join(HERE, "dist_scripts", "collectives.py"), HERE)
    assert r.returncode == 0, r.stdout + r.stderr
    # Ranks print concurrently, so lines may interleave: look for the four markers anywhere.
    assert sorted(re.findall(r"rank \d ok", r.stdout)) == [f"rank {i} ok" for i in range(4)]


def test_lab1_step5_fsdp_example():
    r = torchrun("distributed_fsdp.py", os.path.join(REPO, "examples", "lab1"),
                 {"NEURON_RT_VIRTUAL_CORE_SIZE": "2", "NEURON_RT_NUM_CORES": "4"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert sorted(re.findall(r"\[Rank \d/4\] Initialized on neuron:\d", r.stdout)) == [
        f"[Rank {i}/4] Initialized on neuron:{i}" for i in range(4)
    ]
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("Iteration ")]
    assert [line.split(",")[0] for line in lines if line.startswith("Iteration ")] == [
        f"Iteration {i}/5" for i in range(1, 6)
    ]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert lines[-1] == "Training complete!"


@pytest.mark.parametrize("world", [1])
def test_single_rank_group(py, world):
    r = py(
        f"""
        import os, torch, torch.distributed as dist
        os.environ.update(MASTER_ADDR='localhost', MASTER_PORT='{free_port()}')
        dist.init_process_group('neuron', rank=0, world_size={world})
        x = torch.ones(3, device='neuron')
        dist.all_reduce(x)
        assert x.cpu().tolist() == [1.0, 1.0, 1.0]
        assert dist.get_backend() == 'neuron'
        dist.destroy_process_group()
        print('ok')
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
