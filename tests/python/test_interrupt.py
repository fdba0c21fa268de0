"""Ctrl-C stops a runaway NKI kernel: SIGINT during torch.neuron.synchronize(), during a copy to
the CPU that waits for the kernel, or during a host run (numpy, also in a process without torch)
raises KeyboardInterrupt within a fraction of a second; a kernel interrupted on the device fails
(its outputs are incomplete) and says so at the next synchronization. Real subprocesses receive
a real SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from repo_paths import REPO

SCRIPT = """
import signal, sys, time

# Start as a program launched from an interactive shell does: SIGINT handled by Python and not
# blocked. A test run started in the background (`make test &`, CI) ignores SIGINT, and ignored
# signals are inherited, so Python would install no handler and Ctrl-C would do nothing.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
import nki, nki.language as nl, numpy as np

mode = sys.argv[1]
if mode != "host-without-torch":  # there nki alone installs the poll
    import torch


@nki.jit
def spin(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)

    def body(i):
        nl.store(out, nl.load(x))

    nl.fori_loop(0, 2**40, body)
    return out


host = mode.startswith("host")
x = np.ones((4, 4), np.float32) if host else torch.ones(4, 4, device="neuron")
try:
    if host:
        print("WAITING", flush=True)
        spin(x)
    elif mode == "copy":
        y = spin(x)
        print("WAITING", flush=True)
        y.cpu()
    else:
        spin(x)
        print("WAITING", flush=True)
        torch.neuron.synchronize()
    print("NOT INTERRUPTED")
except KeyboardInterrupt as e:
    print("INTERRUPTED:", e, flush=True)
print("TORCH LOADED:", "torch" in sys.modules)
if not host:
    try:
        torch.neuron.synchronize()
        print("NO ERROR")
    except RuntimeError as e:
        print("AFTER:", e)
    z = torch.ones(2, device="neuron") * 3  # the device still works
    print("STILL WORKS", z.cpu().tolist())
"""


@pytest.mark.parametrize("mode", ["synchronize", "copy", "host", "host-without-torch"])
def test_ctrl_c_interrupts_a_runaway_kernel(mode):
    env = dict(os.environ, NEURON_EMU_NKI_MAX_LOOP_ITERATIONS=str(2**50))
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        assert p.stdout.readline().strip() == "WAITING", p.stderr.read()
        time.sleep(1.0)  # well inside the wait (or the host run) by now
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "NOT INTERRUPTED" not in out
    assert f"TORCH LOADED: {mode != 'host-without-torch'}" in out, out
    if mode.startswith("host"):
        assert "INTERRUPTED: nki.language.fori_loop (end) at " in out, out
        assert "interrupted (Ctrl-C) after" in out
    else:
        assert "INTERRUPTED: interrupted (Ctrl-C) while waiting for neuron:0" in out, out
        assert "AFTER: nki::spin failed on neuron:0" in out and "interrupted (Ctrl-C) after" in out, out
        assert "outputs are incomplete" in out
        assert "STILL WORKS [3.0, 3.0]" in out
