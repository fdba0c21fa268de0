"""Launchers for the distributed tests: torchrun on this host, and several torchrun "nodes" on
this host, each in its own mount namespace with a private /dev/shm (as separate hosts would
be), so that the shared-memory path cannot reach across nodes."""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from repo_paths import REPO

SHM_MARK = "NEURON_TEST_SHM_LEFT="
_NEURON_LS = os.path.join(REPO, "build", "csrc", "tools", "neuron-ls")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra: dict | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def _torchrun_cmd(script: str, args, nproc: int, port: int, nnodes: int = 1, node_rank: int = 0) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--rdzv_backend", "c10d",
           "--rdzv_endpoint", f"127.0.0.1:{port}"]
    if nnodes > 1:
        cmd += ["--nnodes", str(nnodes), "--node_rank", str(node_rank)]
    return cmd + [script, *args]


def torchrun(script: str, cwd: str, extra_env: dict | None = None, nproc: int = 4, args=(), timeout: int = 300,
             private_shm: bool = False) -> subprocess.CompletedProcess:
    """torchrun on this host; with private_shm, inside a namespace of its own whose /dev/shm
    contents are printed at the end (see shm_left)."""
    cmd = _torchrun_cmd(script, args, nproc, free_port())
    if private_shm:
        cmd = _in_private_shm(cmd)
    return subprocess.run(cmd, cwd=cwd, env=_env(extra_env), capture_output=True, text=True, timeout=timeout,
                          check=False)


def _in_private_shm(cmd: list[str]) -> list[str]:
    inner = " ".join(_quote(c) for c in cmd)
    # Processes torchrun kills (SIGTERM when a peer failed) cannot remove their entry from the
    # process registry; its next reader (neuron-ls) does. Then nothing may be left.
    script = (f"mount -t tmpfs -o size=2g tmpfs /dev/shm || exit 97; {inner}; rc=$?; "
              f"{_quote(_NEURON_LS)} >/dev/null 2>&1; "
              f"echo \"{SHM_MARK}[$(cd /dev/shm && find . -mindepth 1 ! -path ./neuron-emu | sed 's|^./||' | tr '\\n' ' ')]\"; "
              f"exit $rc")
    return ["unshare", "--mount", "--propagation", "private", "bash", "-c", script]


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


@functools.cache
def private_shm_available() -> bool:
    """Private mount namespaces need root (CI runs as root)."""
    try:
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                            "mount -t tmpfs tmpfs /dev/shm && touch /dev/shm/x"], capture_output=True, timeout=30,
                           check=False)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@dataclass
class Node:
    returncode: int
    output: str  # stdout and stderr


def nodes(script: str, cwd: str, extra_env: dict | None = None, nnodes: int = 2, nproc: int = 2, args=(),
          timeout: int = 300) -> list[Node]:
    """Runs `script` on `nnodes` torchrun nodes of `nproc` ranks on this host, each with a
    private /dev/shm; returns each node's exit code and output (in launch order, not in
    GROUP_RANK order). The rendezvous endpoint is a store served by this process, as an
    external endpoint would be, so that any node may die without taking the rendezvous along.
    A node still running after `timeout` is killed (exit code -9) and its output returned."""
    import torch.distributed as dist

    port = free_port()
    rdzv = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    env = _env(extra_env)
    procs = [subprocess.Popen(_in_private_shm(_torchrun_cmd(script, args, nproc, port, nnodes, n)), cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for n in range(nnodes)]
    deadline = time.monotonic() + timeout
    out = []
    try:
        for p in procs:
            try:
                text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                text, _ = p.communicate()
                text += f"\n[killed after {timeout} s]"
            out.append(Node(p.returncode, text))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        del rdzv
    return out


def shm_left(output: str) -> list[str]:
    """The /dev/shm entries a private-shm run left behind. The process registry's directory
    (/dev/shm/neuron-emu, what neuron-ls reads) belongs to the machine and stays; a registration
    file left inside it is reported like any other entry."""
    m = re.findall(re.escape(SHM_MARK) + r"\[(.*)\]", output)
    assert m, "no /dev/shm report in the output:\n" + output[-3000:]
    return m[-1].split()
