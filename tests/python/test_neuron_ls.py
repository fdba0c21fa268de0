"""neuron-ls lists the processes that hold neuron devices (the runtime's process registry): PID,
command, cores and HBM in use; entries of killed processes disappear."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from repo_paths import REPO

HOLDER = """
import sys, torch
x = torch.empty(4 << 20, dtype=torch.float32, device="neuron:1")  # 16 MiB on neuron:1
torch.neuron.synchronize()
print("ready", flush=True)
sys.stdin.readline()
"""


def neuron_ls() -> str:
    exe = shutil.which("neuron-ls") or os.path.join(REPO, "build", "csrc", "tools", "neuron-ls")
    if not os.path.exists(exe):
        pytest.skip("neuron-ls is not built")
    return exe


@pytest.fixture
def registry(tmp_path, monkeypatch):
    d = tmp_path / "registry"
    monkeypatch.setenv("NEURON_EMU_REGISTRY_DIR", str(d))
    for var in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "NEURON_EMU_INSTANCE_TYPE"):
        monkeypatch.delenv(var, raising=False)
    return d


def run_ls(*args) -> str:
    return subprocess.run([neuron_ls(), *args], capture_output=True, text=True, check=True).stdout


def test_a_process_holding_a_device_is_listed_then_its_stale_entry_removed(registry):
    exe = neuron_ls()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "--tag=holder"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        devices = json.loads(subprocess.run([exe, "-j"], capture_output=True, text=True, check=True).stdout)
        procs = devices[0]["neuron_processes"]
        assert [p["pid"] for p in procs] == [holder.pid]
        p = procs[0]
        assert "--tag=holder" in p["command"]
        assert p["neuron_runtime_version"] == "neuron-emu"
        assert p["neuroncore_ids"] == [1]  # only neuron:1 has memory on it
        assert p["memory_allocated"] >= 16 << 20 and p["memory_used"] >= p["memory_allocated"]

        table = run_ls()
        header = table.splitlines()[2]
        assert "PID" in header and "COMMAND" in header and "RUNTIME" in header
        row = table.splitlines()[5]
        assert f"| {holder.pid} " in row and "| 1 " in row and "MB" in row
        assert "... |" in row and "--tag=holder" not in row  # shortened to 40 characters
        wide = run_ls("-w").splitlines()[5]
        assert len(wide) > len(row) and "\n" not in wide  # 80; newlines of `python -c` code blanked
    finally:
        holder.kill()  # SIGKILL: no exit handler runs, the entry stays behind
        holder.wait()
    assert os.path.exists(registry / str(holder.pid))
    devices = json.loads(run_ls("-j"))
    assert devices[0]["neuron_processes"] == []
    assert not os.path.exists(registry / str(holder.pid))  # removed by the listing


def test_a_process_that_exits_removes_its_entry(registry):
    subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='neuron')"], check=True)
    assert list(registry.iterdir()) == []
    assert json.loads(run_ls("-j"))[0]["neuron_processes"] == []


def test_without_processes_the_table_is_the_lab_guide_one(registry):
    lines = run_ls().splitlines()
    assert lines[0] == "instance-type: trn2.3xlarge"
    assert lines[2] == "| NEURON | NEURON | NEURON   | NEURON | PCI          | CPU      | NUMA |"
    assert lines[5] == "| 0      | 4      | 0-3      | 96 GB  | 0000:33:00.0 | 0-11     | 0    |"


def test_show_all_procs_lists_neuron_ls_itself(registry):
    out = run_ls("-a", "-w")
    assert "| NA " in out  # no Neuron runtime in neuron-ls
    assert "neuron-ls -a -w" in out or "..." in out  # its own command (shortened when the path is long)


def test_a_terminated_process_is_not_listed(registry):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "ready"
    assert [p["pid"] for p in json.loads(run_ls("-j"))[0]["neuron_processes"]] == [holder.pid]
    holder.send_signal(signal.SIGTERM)
    holder.wait()
    assert json.loads(run_ls("-j"))[0]["neuron_processes"] == []
