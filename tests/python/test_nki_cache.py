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
    entries = glob.glob(str(tmp_path / "cache" / "*" / "*" / "*.nkitrace"))
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
    (entry,) = glob.glob(str(tmp_path / "cache" / "*" / "*" / "*.nkitrace"))
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
    assert not glob.glob(str(tmp_path / "cache" / "*" / "*" / "*.nkitrace"))


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


# ---------------------------------------------------------------------------------------------
# What a trace read: closure cells, module globals (of the kernel and of helper modules) and the
# source of every module whose code ran. Each case fails with a key made of the kernel's own
# file and the specialization only.

DEPS_KMOD = """
import os
import nki
import nki.language as nl
import helpers

SCALE = float(os.environ.get("KSCALE", "1"))


@nki.jit
def k_global(x):
    print("TRACING k_global")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(x), SCALE))
    return out


@nki.jit
def k_helper(x):
    print("TRACING k_helper")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, helpers.shift(nl.load(x)))
    return out


def make(scale):
    @nki.jit
    def k_closure(x):
        print("TRACING k_closure", scale)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(x), scale))
        return out

    return k_closure
"""

DEPS_HELPERS = """
import os
import nki.language as nl

OFFSET = float(os.environ.get("KOFFSET", "0"))


def shift(t):
    return nl.add(t, OFFSET + {delta})
"""

DEPS_RUN = """
import sys, numpy as np
sys.path.insert(0, {dir!r})
import kmod
x = np.ones((4, 4), np.float32)
kernels = [("global", kmod.k_global), ("helper", kmod.k_helper), ("closure2", kmod.make(2.0)),
           ("closure3", kmod.make(3.0))]
for name, k in kernels:
    r = float(k(x).sum())
    i = k.cache_info()
    print(f"{{name}} RESULT {{r}} TRACES {{i['traces']}} DISK_HITS {{i['disk_hits']}}")
"""


def _deps_run(py, tmp_path, **env):
    full = {"NEURON_EMU_NKI_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1",
            "NKI_ENABLE_TRACE_CACHE": "1", **env}
    r = py(DEPS_RUN.format(dir=str(tmp_path)), env=full)
    assert r.returncode == 0, r.stderr
    return dict(line.split(" ", 1) for line in r.stdout.splitlines() if " RESULT " in line)


def _write_deps_modules(tmp_path, delta):
    (tmp_path / "kmod.py").write_text(DEPS_KMOD)
    (tmp_path / "helpers.py").write_text(DEPS_HELPERS.format(delta=delta))


def test_disk_cache_keys_closures_globals_and_helper_sources(py, tmp_path):
    _write_deps_modules(tmp_path, delta="1.0")
    first = _deps_run(py, tmp_path, KSCALE="2", KOFFSET="0")
    # Two closures of one factory in one process: each gets its own trace (was: make(3.0)
    # loaded the entry make(2.0) stored and returned 32).
    assert first == {
        "global": "RESULT 32.0 TRACES 1 DISK_HITS 0",
        "helper": "RESULT 32.0 TRACES 1 DISK_HITS 0",
        "closure2": "RESULT 32.0 TRACES 1 DISK_HITS 0",
        "closure3": "RESULT 48.0 TRACES 1 DISK_HITS 0",
    }
    assert _deps_run(py, tmp_path, KSCALE="2", KOFFSET="0") == {
        "global": "RESULT 32.0 TRACES 0 DISK_HITS 1",
        "helper": "RESULT 32.0 TRACES 0 DISK_HITS 1",
        "closure2": "RESULT 32.0 TRACES 0 DISK_HITS 1",
        "closure3": "RESULT 48.0 TRACES 0 DISK_HITS 1",
    }
    # Module globals set from the environment, in the kernel's module and in a helper module.
    third = _deps_run(py, tmp_path, KSCALE="3", KOFFSET="5")
    assert third["global"] == "RESULT 48.0 TRACES 1 DISK_HITS 0"
    assert third["helper"] == "RESULT 112.0 TRACES 1 DISK_HITS 0"
    assert third["closure2"] == "RESULT 32.0 TRACES 0 DISK_HITS 1"
    # Both variants stay usable.
    assert _deps_run(py, tmp_path, KSCALE="2", KOFFSET="0") == {
        k: v.replace("TRACES 1 DISK_HITS 0", "TRACES 0 DISK_HITS 1") for k, v in first.items()
    }
    # Editing the helper module (not the kernel's file) invalidates the kernels whose trace ran it.
    _write_deps_modules(tmp_path, delta="10.0")
    fifth = _deps_run(py, tmp_path, KSCALE="2", KOFFSET="0")
    assert fifth["helper"] == "RESULT 176.0 TRACES 1 DISK_HITS 0"
    assert fifth["global"] == "RESULT 32.0 TRACES 0 DISK_HITS 1"


FOREIGN_KMOD = """
import nki
import nki.language as nl


class Config:
    def __init__(self, c):
        self.c = c


CFG = Config(3.0)


def _bias(cfg):
    return cfg.c


@nki.jit
def ka(x):
    print("TRACING ka")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(x), 1.0))
    return out


@nki.jit
def kb(x):
    print("TRACING kb")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(x), 2.0))
    return out


@nki.jit
def kc(x):
    print("TRACING kc")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(x), _bias(CFG)))
    return out
"""

FOREIGN_RUN = """
import sys, numpy as np
sys.path.insert(0, {dir!r})
import kmod
x = np.ones((4, 4), np.float32)
for name in ("ka", "kb", "kc", "kc"):
    print(name, "RESULT", float(getattr(kmod, name)(x).sum()))
"""


def _entries_by_kernel(tmp_path) -> dict:
    import json
    import struct

    out = {}
    for p in glob.glob(str(tmp_path / "cache" / "*" / "*" / "*.nkitrace")):
        with open(p, "rb") as f:
            body = f.read()[40:]
        (n,) = struct.unpack_from("<I", body, 0)
        out[json.loads(body[4 : 4 + n])["key"]["kernel"]] = p
    return out


def test_foreign_entry_is_a_miss_and_unkeyable_values_are_not_persisted(py, tmp_path):
    (tmp_path / "kmod.py").write_text(FOREIGN_KMOD)
    env = {"NEURON_EMU_NKI_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1",
           "NKI_ENABLE_TRACE_CACHE": "1"}
    r = py(FOREIGN_RUN.format(dir=str(tmp_path)), env=env)
    assert r.returncode == 0, r.stderr
    assert "ka RESULT 32.0" in r.stdout and "kb RESULT 48.0" in r.stdout and "kc RESULT 64.0" in r.stdout
    # kc passes a module-level object to a helper: the object has no stable form, so its trace
    # stays in memory, with a one-line note (once).
    note = "NKI trace cache: kernel kc (" 
    assert r.stderr.count(note) == 1, r.stderr
    assert "kmod.CFG (a Config) cannot be keyed" in r.stderr
    entries = _entries_by_kernel(tmp_path)
    assert sorted(entries) == ["ka", "kb"]

    # ka's entry placed where kb's belongs (a copied or planted file) is not kb's program.
    with open(entries["ka"], "rb") as f:
        blob = f.read()
    with open(entries["kb"], "wb") as f:
        f.write(blob)
    r = py(FOREIGN_RUN.format(dir=str(tmp_path)), env=env)
    assert r.returncode == 0, r.stderr
    assert "TRACING ka" not in r.stdout
    assert "TRACING kb" in r.stdout and "kb RESULT 48.0" in r.stdout
    assert "was written for another kernel or specialization (kernel ka in" in r.stderr
    assert r.stdout.count("TRACING kc") == 1  # traced again in the new process, once


SCALE = 2.0


def test_in_memory_hits_check_the_globals_a_kernel_reads():
    global SCALE

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(x), SCALE))
        return out

    x = np.ones((4, 4), np.float32)
    try:
        assert float(k(x).sum()) == 32.0
        SCALE = 3.0
        assert float(k(x).sum()) == 48.0  # a new trace, not the one made with 2.0
        SCALE = 2.0
        assert float(k(x).sum()) == 32.0  # the first trace again
        assert k.cache_info()["traces"] == 2 and k.cache_info()["memory_hits"] == 1
    finally:
        SCALE = 2.0
