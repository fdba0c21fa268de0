"""The `neuron` c10d backend under torchrun with 4 ranks on one host (one logical core each):
results, validation of the calls across ranks, dead peers, and what is left behind."""

import os
import re

import pytest
from dist_launch import free_port, private_shm_available, shm_left, torchrun
from repo_paths import REPO

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "dist_scripts")


def lines_matching(pattern: str, text: str) -> list[str]:
    return sorted(m.group(0) for m in re.finditer(pattern, text))


def test_every_collective_matches_local_reference():
    r = torchrun(os.path.join(SCRIPTS, "collectives.py"), HERE)
    assert r.returncode == 0, r.stdout + r.stderr
    # Ranks print concurrently, so lines may interleave: look for the four markers anywhere.
    assert lines_matching(r"rank \d ok", r.stdout) == [f"rank {i} ok" for i in range(4)]
    assert lines_matching(r"rank \d transport \S+", r.stdout) == [f"rank {i} transport shm" for i in range(4)]


@pytest.fixture(scope="session")
def lab1_one_node():
    """Lab 1 Step 5 as the lab guide runs it (4 ranks on one host)."""
    return torchrun("distributed_fsdp.py", os.path.join(REPO, "examples", "lab1"),
                    {"NEURON_RT_VIRTUAL_CORE_SIZE": "2", "NEURON_RT_NUM_CORES": "4"})


def lab1_losses(stdout: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("Iteration ")]


def test_lab1_step5_fsdp_example(lab1_one_node):
    r = lab1_one_node
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines_matching(r"\[Rank \d/4\] Initialized on neuron:\d", r.stdout) == [
        f"[Rank {i}/4] Initialized on neuron:{i}" for i in range(4)
    ]
    losses = lab1_losses(r.stdout)
    assert [line.split(",")[0] for line in lines if line.startswith("Iteration ")] == [
        f"Iteration {i}/5" for i in range(1, 6)
    ]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert lines[-1] == "Training complete!"


def check_mismatch_report(stdout: str, cases: list[str]):
    for case in ["agreeing collectives", *cases, "default group after failures"]:
        got = lines_matching(rf"rank \d {re.escape(case)}: (?:ok|bad|no error)", stdout)
        assert got == [f"rank {i} {case}: ok" for i in range(4)], (case, stdout)


def test_mismatched_calls_fail_on_every_rank_naming_the_ranks_and_what_differs():
    r = torchrun(os.path.join(SCRIPTS, "mismatch.py"), HERE, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    check_mismatch_report(r.stdout, ["shape", "dtype", "op", "all_to_all splits"])
    # The message names the ranks and the calls, e.g. for the shapes:
    assert "ranks 0, 1, 2 call all_reduce" in r.stdout and "rank 3 calls all_reduce" in r.stdout, r.stdout


def test_torch_distributed_debug_detail_works():
    r = torchrun(os.path.join(SCRIPTS, "mismatch.py"), HERE, {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, args=["detail"],
                 timeout=240)
    assert "does not yet support sequence numbers" not in r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    check_mismatch_report(r.stdout, ["shape", "dtype", "op"])


def test_a_rank_that_exits_fails_the_others_naming_it():
    # The group's timeout stays the default 30 minutes: only dead-peer detection ends the wait.
    r = torchrun(os.path.join(SCRIPTS, "peer_exits.py"), HERE, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    failed = re.findall(r"rank (\d) failed after [\d.]+ s: (.*)", r.stdout)
    assert sorted(int(q) for q, _ in failed) == [0, 1, 2], r.stdout
    for _, msg in failed:
        assert "all_reduce" in msg and "rank 3" in msg, msg
        assert "has exited" in msg or "failed" in msg, msg
    assert re.search(r"rank 3 \(pid \d+\) has exited", r.stdout), r.stdout


@pytest.mark.skipif(not private_shm_available(), reason="needs a private mount namespace (root)")
def test_ranks_killed_before_their_first_collective_leave_no_shared_memory():
    r = torchrun(os.path.join(SCRIPTS, "killed_early.py"), HERE, private_shm=True, timeout=180)
    assert "joined" in r.stdout, r.stdout + r.stderr
    assert shm_left(r.stdout) == [], r.stdout


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


def test_local_rank_selects_the_default_device(py):
    r = py(
        """
        import torch
        print(torch.neuron.current_device(), torch.ones(1, device='neuron').device)
        """,
        env={"LOCAL_RANK": "2"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "neuron:2"]


def test_join_timeout_is_validated(py):
    r = py(
        """
        from datetime import timedelta
        import torch_neuronx.distributed as nd
        print(nd._join_timeout(timedelta(minutes=30)).total_seconds(), nd._join_timeout(timedelta(seconds=5)).total_seconds())
        import os
        os.environ['NEURON_EMU_COLLECTIVE_JOIN_TIMEOUT'] = 'soon'
        try:
            nd._join_timeout(timedelta(minutes=30))
        except ValueError as e:
            print(e)
        """
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "60.0 5.0"
    assert lines[1].startswith("NEURON_EMU_COLLECTIVE_JOIN_TIMEOUT=soon: expected a number of seconds")
