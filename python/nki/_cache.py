"""Persistent trace cache (NKI_ENABLE_TRACE_CACHE=1): traced programs are stored on disk keyed
by the kernel's source file, its qualified name, the nki version, the specialization
(argument shapes, dtypes and constants), the launch grid and the target. Entries are written
atomically and checksummed; a damaged entry is deleted and the kernel is traced again."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import struct
import tempfile
import warnings

log = logging.getLogger(__name__)

MAGIC = b"NKITRC01"
ENV = "NKI_ENABLE_TRACE_CACHE"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip() == "1"


def cache_dir() -> str:
    d = os.environ.get("NEURON_EMU_NKI_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "neuron-emu", "nki-trace-cache")


def source_fingerprint(func) -> str | None:
    """Hash of the file defining `func` plus its qualified name (None when there is no file)."""
    try:
        path = inspect.getsourcefile(func)
        if not path or not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            text = f.read()
    except (TypeError, OSError):
        return None
    h = hashlib.sha256(text)
    h.update(b"\0" + func.__qualname__.encode())
    return h.hexdigest()


def entry_key(fingerprint: str, version: str, spec: str, grid: tuple, target: dict) -> str:
    h = hashlib.sha256()
    for part in (fingerprint, version, spec, repr(grid), json.dumps(target, sort_keys=True)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _path(key: str) -> str:
    return os.path.join(cache_dir(), key[:2], key + ".nkitrace")


def load(key: str):
    """(meta, [program bytes]) or None when absent or damaged (a damaged file is removed)."""
    path = _path(key)
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
            f"NKI trace cache entry {path} is damaged ({e}); tracing the kernel again", stacklevel=3
        )
        try:
            os.unlink(path)
        except OSError:
            pass
        return None


def store(key: str, meta: dict, programs: list[bytes]) -> None:
    path = _path(key)
    meta = dict(meta, num_programs=len(programs))
    j = json.dumps(meta).encode()
    body = struct.pack("<I", len(j)) + j + b"".join(struct.pack("<Q", len(p)) + p for p in programs)
    blob = MAGIC + hashlib.sha256(body).digest() + body
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
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
