"""Launchers for the distributed tests: torchrun on this host, and several torchrun "nodes" on
this host, each in its own mount namespace with a private /dev/shm (as separate hosts would
be), so that the shared-memory path cannot reach across nodes."""

from __future__ import annotations

import functools
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass

from repo_paths import REPO

SHM_MARK = "NEURON_TEST_SHM_LEFT="


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
    return subprocess.run(cmd, cwd=cwd, env=_env(extra_env), capture_output=True, text=True, timeout=timeout)


def _in_private_shm(cmd: list[str]) -> list[str]:
    inner = " ".join(_quote(c) for c in cmd)
    script = (f"mount -t tmpfs -o size=2g tmpfs /dev/shm || exit 97; {inner}; rc=$?; "
              f"echo \"{SHM_MARK}[$(ls -A /dev/shm | tr '\\n' ' ')]\"; exit $rc")
    return ["unshare", "--mount", "--propagation", "private", "bash", "-c", script]


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


@functools.cache
def private_shm_available() -> bool:
    """Private mount namespaces need root (CI runs as root)."""
    try:
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                            "mount -t tmpfs tmpfs /dev/shm && touch /dev/shm/x"], capture_output=True, timeout=30)
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
    private /dev/shm; returns each node's exit code and output (node order of launch, not of
    GROUP_RANK)."""
    port = free_port()
    env = _env(extra_env)
    procs = [subprocess.Popen(_in_private_shm(_torchrun_cmd(script, args, nproc, port, nnodes, n)), cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for n in range(nnodes)]
    out = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=timeout)
            out.append(Node(p.returncode, text))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return out


def shm_left(output: str) -> list[str]:
    """The /dev/shm entries a private-shm run left behind."""
    m = re.findall(re.escape(SHM_MARK) + r"\[(.*)\]", output)
    assert m, "no /dev/shm report in the output:\n" + output[-3000:]
    return m[-1].split()
