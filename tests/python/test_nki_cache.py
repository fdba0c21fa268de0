"""The NKI trace cache: in memory (same shapes/dtypes/constants -> no retrace) and on disk with
NKI_ENABLE_TRACE_CACHE=1 (hit in a fresh process; invalidated by a source or version change;
a damaged entry is retraced). Cross-process behaviour runs real subprocesses."""

from __future__ import annotations

import glob
import os
import textwrap

import nki
import nki.language as nl
import numpy as np

KERNEL_SRC = """
import nki
import nki.language as nl


@nki.jit
def k(x):
    print("TRACING")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(x), {const}))
    return out
"""

RUN = """
import sys, numpy as np
sys.path.insert(0, {dir!r})
{prelude}
import kmod
x = np.ones((8, 8), np.float32)
print("RESULT", float(kmod.k(x).sum()))
info = kmod.k.cache_info()
print("TRACES", info["traces"], "DISK_HITS", info["disk_hits"], "STORES", info["disk_stores"])
"""


def _write_kernel(tmp_path, const):
    (tmp_path / "kmod.py").write_text(KERNEL_SRC.format(const=const))
    for pyc in glob.glob(str(tmp_path / "__pycache__" / "*")):
        os.unlink(pyc)


def _run(py, tmp_path, enabled=True, prelude=""):
    env = {"NEURON_EMU_NKI_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1"}
    env["NKI_ENABLE_TRACE_CACHE"] = "1" if enabled else "0"
    r = py(RUN.format(dir=str(tmp_path), prelude=textwrap.dedent(prelude)), env=env)
    assert r.returncode == 0, r.stderr
    return r


def test_disk_cache_hit_miss_and_invalidation(py, tmp_path):
    _write_kernel(tmp_path, "1.0")
    first = _run(py, tmp_path)
    assert "TRACING" in first.stdout and "TRACES 1 DISK_HITS 0 STORES 1" in first.stdout
    assert "RESULT 128.0" in first.stdout
    assert (
        "UserWarning: NKI_ENABLE_TRACE_CACHE=1: the NKI kernel compile cache is persisted across processes"
        in (first.stderr)
    )
    entries = glob.glob(str(tmp_path / "cache" / "*" / "*.nkitrace"))
    assert len(entries) == 1

    # A new process with the same kernel and arguments loads the trace: the kernel's Python
    # does not run again.
    second = _run(py, tmp_path)
    assert "TRACING" not in second.stdout
    assert "TRACES 0 DISK_HITS 1" in second.stdout and "RESULT 128.0" in second.stdout

    # Changing the kernel source invalidates the entry.
    _write_kernel(tmp_path, "2.0")
    third = _run(py, tmp_path)
    assert "TRACING" in third.stdout and "RESULT 192.0" in third.stdout

    # So does a different nki version.
    fourth = _run(py, tmp_path, prelude="import nki; nki.__version__ = '0.0.0-other'")
    assert "TRACING" in fourth.stdout and "TRACES 1" in fourth.stdout


def test_damaged_entry_is_retraced_not_trusted(py, tmp_path):
    _write_kernel(tmp_path, "1.0")
    _run(py, tmp_path)
    (entry,) = glob.glob(str(tmp_path / "cache" / "*" / "*.nkitrace"))
    with open(entry, "rb") as f:
        blob = bytearray(f.read())
    blob[-3] ^= 0xFF  # flip bits inside a serialized instruction
    with open(entry, "wb") as f:
        f.write(bytes(blob))
    r = _run(py, tmp_path)
    assert "damaged" in r.stderr and "checksum mismatch" in r.stderr
    assert "TRACING" in r.stdout and "RESULT 128.0" in r.stdout
    # ...and the retrace rewrote a good entry.
    r2 = _run(py, tmp_path)
    assert "TRACING" not in r2.stdout and "DISK_HITS 1" in r2.stdout


def test_disabled_cache_traces_in_every_process(py, tmp_path):
    _write_kernel(tmp_path, "1.0")
    for _ in range(2):
        r = _run(py, tmp_path, enabled=False)
        assert "TRACING" in r.stdout and "NKI_ENABLE_TRACE_CACHE" not in r.stderr
    assert not glob.glob(str(tmp_path / "cache" / "*" / "*.nkitrace"))


def test_in_memory_cache_keys():
    calls = []

    @nki.jit
    def k(x, c):
        calls.append(1)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(x), c))
        return out

    x = np.zeros((4, 4), np.float32)
    k(x, 1.0)
    k(x + 5, 1.0)  # same shapes, dtypes, constants
    assert len(calls) == 1
    k(x.astype(np.int32), 1)  # new dtype
    k(x, 2.0)  # new constant
    k[2](np.zeros((4, 4), np.float32), 1.0)  # new grid
    assert len(calls) == 2 + 1 + 2  # the grid traces each of its 2 instances
    assert k.cache_info()["memory_hits"] == 1


def test_serialization_round_trip_runs_identically():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.softmax(nl.load(x), axis=1))
        return out

    x = np.random.randn(64, 32).astype(np.float32)
    traced = k.specialize(x)
    from nki._core import core

    clones = [core().Program.deserialize(p.serialize()) for p in traced.programs]
    assert [c.dump() for c in clones] == [p.dump() for p in traced.programs]
