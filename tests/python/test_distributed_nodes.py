"""The `neuron` c10d backend across torchrun nodes: two "nodes" on this host (torchrun --nnodes 2
--rdzv_endpoint 127.0.0.1:PORT), each in its own mount namespace with a private /dev/shm, so
that ranks on different nodes can only reach each other over the network (Gloo), as on two
real hosts."""

import os
import re

import pytest
from dist_launch import nodes, private_shm_available, shm_left
from repo_paths import REPO
from test_distributed import check_mismatch_report, lab1_losses, lines_matching

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "dist_scripts")

pytestmark = pytest.mark.skipif(not private_shm_available(), reason="needs private mount namespaces (root)")


def both(results) -> str:
    return "\n".join(n.output for n in results)


def test_every_collective_on_two_nodes_of_four_ranks():
    # World 8 on two trn2.3xlarge "hosts" of 4 logical cores: more ranks than one host has cores.
    res = nodes(os.path.join(SCRIPTS, "collectives.py"), HERE, nproc=4, timeout=400)
    out = both(res)
    assert all(n.returncode == 0 for n in res), out
    assert lines_matching(r"rank \d ok", out) == [f"rank {i} ok" for i in range(8)], out
    assert lines_matching(r"rank \d transport shm\+gloo hosts \[\[0, 1, 2, 3\], \[4, 5, 6, 7\]\]", out) == [
        f"rank {i} transport shm+gloo hosts [[0, 1, 2, 3], [4, 5, 6, 7]]" for i in range(8)
    ], out
    for n in res:
        assert shm_left(n.output) == [], n.output


def test_lab1_step5_on_two_nodes_gives_the_one_node_losses(lab1_one_node):
    res = nodes("distributed_fsdp.py", os.path.join(REPO, "examples", "lab1"),
                {"NEURON_RT_VIRTUAL_CORE_SIZE": "2", "NEURON_RT_NUM_CORES": "4"}, nproc=2, timeout=400)
    out = both(res)
    assert all(n.returncode == 0 for n in res), out
    # Ranks 2 and 3 are local ranks 0 and 1 of the second node.
    assert lines_matching(r"\[Rank \d/4\] Initialized on neuron:\d", out) == [
        "[Rank 0/4] Initialized on neuron:0", "[Rank 1/4] Initialized on neuron:1",
        "[Rank 2/4] Initialized on neuron:0", "[Rank 3/4] Initialized on neuron:1"]
    assert lab1_one_node.returncode == 0, lab1_one_node.stdout + lab1_one_node.stderr
    one = lab1_losses(lab1_one_node.stdout)
    two = lab1_losses(out)
    assert len(one) == 5 and two == one, (one, two)
    assert "Training complete!" in out
    for n in res:
        assert shm_left(n.output) == [], n.output


def test_mismatched_calls_across_nodes_fail_on_every_rank():
    res = nodes(os.path.join(SCRIPTS, "mismatch.py"), HERE, nproc=2, timeout=300)
    out = both(res)
    assert all(n.returncode == 0 for n in res), out
    check_mismatch_report(out, ["shape", "dtype", "op", "all_to_all splits"])


def test_a_node_that_dies_fails_every_rank_of_the_other_node_naming_the_lost_ranks():
    # The group's timeout stays the default 30 minutes: only dead-peer detection ends the wait.
    res = nodes(os.path.join(SCRIPTS, "node_dies.py"), HERE, nproc=2, timeout=240)
    out = both(res)
    failed = re.findall(r"rank (\d) failed after ([\d.]+) s: (.*)", out)
    assert sorted(int(q) for q, _, _ in failed) == [0, 1], out
    for _, _, msg in failed:
        assert "all_reduce" in msg and re.search(r"rank[s]? .*[23]", msg), msg
        assert "gone" in msg or "failed" in msg, msg
    assert "no error" not in out, out
    survivor = next(n for n in res if "rank 0 failed" in n.output)
    assert shm_left(survivor.output) == [], survivor.output


def test_a_node_that_never_arrives_fails_the_others_at_join():
    res = nodes(os.path.join(SCRIPTS, "node_absent.py"), HERE, {"NEURON_EMU_COLLECTIVE_JOIN_TIMEOUT": "5"}, nproc=2,
                timeout=240)
    out = both(res)
    failed = re.findall(r"rank (\d) failed: (.*)", out)
    assert sorted(int(q) for q, _ in failed) == [0, 1], out
    for _, msg in failed:
        assert "ranks 2, 3 of process group" in msg and "did not join within 5 s" in msg, msg
    for n in res:
        assert shm_left(n.output) == [], n.output
