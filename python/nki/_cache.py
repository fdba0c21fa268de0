"""Persistent trace cache (NKI_ENABLE_TRACE_CACHE=1). An entry is found by the kernel's identity
and its specialization: qualified name, module and file, the nki version, the argument
signature (shapes, dtypes, constants), the launch grid, the target, the Python and numpy
versions and the native core build. Several entries can share that key: each stores what its
trace read (nki._deps: the source files whose code ran, with their hashes, and the values of the
globals and closure cells user code read), and is used only when all of them are unchanged.
Every entry stores its full key and is used only when that key is the one asked for. Entries
are written atomically and checksummed; a damaged entry is deleted and the kernel retraced.
docs/caches.md describes every cache key of the project."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import sys
import tempfile
import warnings

from . import _deps

log = logging.getLogger(__name__)

MAGIC = b"NKITRC02"
FORMAT = 2
ENV = "NKI_ENABLE_TRACE_CACHE"
MAX_VARIANTS = 16  # entries kept per kernel specialization (different values read); oldest go


def enabled() -> bool:
    return os.environ.get(ENV, "").strip() == "1"


def cache_dir() -> str:
    d = os.environ.get("NEURON_EMU_NKI_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "neuron-emu", "nki-trace-cache")


_NATIVE_ID: str | None = None


def _native_id() -> str:
    """The native core build: size and modification time of the extension and of the shared
    libraries next to it (the NeuronCore model, kernels and runtime are libnki_core.so,
    libneuron_kernels.so, libneuron_rt.so)."""
    global _NATIVE_ID
    if _NATIVE_ID is None:
        from ._core import core

        f = getattr(core(), "__file__", None)
        if not f:
            return "unknown"
        d = os.path.dirname(f)
        libs = [n for n in os.listdir(d) if n.startswith("lib") and n.endswith(".so")]
        names = [os.path.basename(f), *libs]
        parts = []
        for name in sorted(names):
            try:
                st = os.stat(os.path.join(d, name))
            except OSError:
                return "unknown"
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        _NATIVE_ID = ",".join(parts)
    return _NATIVE_ID


def key_material(func, version: str, spec, grid: tuple, target: dict) -> dict | str:
    """Everything an entry is looked up by, as JSON data; a string says why there is none."""
    code = getattr(func, "__code__", None)
    if code is None:
        return f"{func!r} is not a Python function"
    spec_s = repr(spec)
    if " at 0x" in spec_s:
        return "an argument has no process-independent form (its repr shows a memory address)"
    np = sys.modules.get("numpy")
    material = {
        "format": FORMAT,
        "kernel": func.__qualname__,
        "module": getattr(func, "__module__", None),
        "file": os.path.abspath(code.co_filename),
        "nki": version,
        "spec": spec_s,
        "grid": list(grid),
        "target": target,
        "python": "{}.{}".format(*sys.version_info[:2]),
        "numpy": getattr(np, "__version__", None),
        "native": _native_id(),
    }
    return json.loads(json.dumps(material, sort_keys=True, default=str))


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _dir(material: dict) -> str:
    k = _digest(material)
    return os.path.join(cache_dir(), k[:2], k)


def lookup(material: dict, func):
    """(meta, [program bytes]) of an entry for `material` whose recorded files and values match
    this process, or None."""
    d = _dir(material)
    try:
        names = [n for n in os.listdir(d) if n.endswith(".nkitrace")]
    except OSError:
        return None
    paths = [os.path.join(d, n) for n in names]
    paths.sort(key=_mtime, reverse=True)  # the most recently written first
    for path in paths:
        hit = _read(path)
        if hit is None:
            continue
        meta, programs = hit
        if meta.get("key") != material:
            _warn_once(
                f"NKI trace cache entry {path} was written for another kernel or specialization "
                f"({_describe(meta.get('key'))}); ignoring it"
            )
            continue
        if not _deps.manifest_matches(meta.get("deps"), func):
            continue
        return meta, programs
    return None


def store(material: dict, manifest: dict, meta: dict, programs: list[bytes]) -> None:
    d = _dir(material)
    path = os.path.join(d, _digest(manifest)[:32] + ".nkitrace")
    meta = dict(meta, key=material, deps=manifest, num_programs=len(programs))
    j = json.dumps(meta).encode()
    body = struct.pack("<I", len(j)) + j + b"".join(struct.pack("<Q", len(p)) + p for p in programs)
    blob = MAGIC + hashlib.sha256(body).digest() + body
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        log.warning("could not write NKI trace cache entry %s: %s", path, e)
        return
    _prune(d)


def _prune(d: str) -> None:
    try:
        paths = [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".nkitrace")]
    except OSError:
        return
    paths.sort(key=_mtime, reverse=True)
    for p in paths[MAX_VARIANTS:]:
        try:
            os.unlink(p)
        except OSError:
            pass


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _read(path: str):
    """(meta, [program bytes]) or None when absent or damaged (a damaged file is removed)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    try:
        if blob[:8] != MAGIC:
            raise ValueError("bad magic")
        digest, body = blob[8:40], blob[40:]
        if hashlib.sha256(body).digest() != digest:
            raise ValueError("checksum mismatch")
        (jlen,) = struct.unpack_from("<I", body, 0)
        meta = json.loads(body[4 : 4 + jlen].decode())
        pos = 4 + jlen
        programs = []
        for _ in range(meta["num_programs"]):
            (n,) = struct.unpack_from("<Q", body, pos)
            pos += 8
            programs.append(bytes(body[pos : pos + n]))
            pos += n
        if pos != len(body):
            raise ValueError("trailing bytes")
        return meta, programs
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error) as e:  # damaged: drop, retrace
        warnings.warn(
            f"NKI trace cache entry {path} is damaged ({e}); tracing the kernel again", stacklevel=4
        )
        try:
            os.unlink(path)
        except OSError:
            pass
        return None


def _describe(material) -> str:
    if not isinstance(material, dict):
        return "no key"
    return f"kernel {material.get('kernel')} in {material.get('file')}"


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, stacklevel=4)


def note_not_persisted(func, reasons: list[str]) -> None:
    """A note, once per kernel and reason, at the kernel's definition: why its trace is kept in
    memory only."""
    code = getattr(func, "__code__", None)
    where = f" ({os.path.basename(code.co_filename)})" if code is not None else ""
    more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
    msg = (
        f"NKI trace cache: kernel {func.__qualname__}{where} is not persisted: {reasons[0]}{more}; "
        "it is traced again in every process"
    )
    if msg in _warned:
        return
    _warned.add(msg)
    if code is None:
        warnings.warn(msg, stacklevel=2)
    else:
        warnings.warn_explicit(
            msg, UserWarning, code.co_filename, code.co_firstlineno, module=getattr(func, "__module__", None)
        )
