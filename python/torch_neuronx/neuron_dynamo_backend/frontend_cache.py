"""Warm start: maps a Dynamo graph (its code and input signature) straight to the NEFF that
AOT autograd + the compiler produced for it, so a new process skips AOT tracing.

Used only for inference graphs compiled as one NEFF whose inputs are exactly Dynamo's inputs
and whose outputs are fresh tensors (then AOT's runtime wrapper has nothing to do). Index
entries live next to the NEFFs in TORCH_NEURONX_NEFF_CACHE_DIR/frontend/<key>.entry, written
atomically and sealed by the runtime's cache-file helper (checksum + the entry's own key), so a
damaged entry or one written for another graph is rejected (counted as ``cache_corrupted``) and
the normal path runs. An entry names its NEFF by key and graph hash; the NEFF loader checks
both against the NEFF's embedded metadata. An entry also lists
what the NKI ops compiled into the NEFF read while they were traced (nki._deps: the source files
of every module whose code ran in the op bodies and their kernels, with content hashes, and the
values of the module globals they read): when any of it changed, the entry is not used (the
normal path retraces the kernels and compiles a new NEFF). docs/caches.md lists every key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from nki import _deps

from .. import _C

_FORMAT = 3
_KIND = "frontend"


def _dir() -> str | None:
    v = os.environ.get("TORCH_NEURONX_DISABLE_NEFF_CACHE", "") or os.environ.get("TORCH_NEURONX_NEFF_DISABLE_CACHE", "")
    if v.strip().lower() in ("1", "true", "yes", "on"):
        return None
    return os.path.join(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or "/tmp/neff_cache", "frontend")


def key(gm: torch.fx.GraphModule, inputs: Sequence[Any], training: bool) -> str | None:
    if training or _dir() is None:
        return None
    h = hashlib.sha256()
    h.update(f"v{_FORMAT} {_C._cc.compiler_version()} {torch.__version__}\n".encode())
    h.update((os.environ.get("NEURON_CC_FLAGS", "") + "|" + os.environ.get("NEURON_COMPILER_OPT_LEVEL", "")).encode())
    # NKI kernels inside the graph are traced for this target.
    h.update(("|" + os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "")).encode())
    topo = _C._topology()
    h.update(f"{topo['instance_type']} lnc{topo['lnc']}\n".encode())
    h.update(gm.code.encode())
    # Tensors the graph reads as attributes are baked into the NEFF: hash their contents.
    for n in gm.graph.nodes:
        if n.op != "get_attr":
            continue
        obj = gm
        for part in str(n.target).split("."):
            obj = getattr(obj, part, None)
        h.update(str(n.target).encode())
        if isinstance(obj, torch.Tensor):
            t = obj.detach().to("cpu").contiguous()
            h.update(str((tuple(t.shape), t.dtype)).encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(obj).encode())
    for x in inputs:
        if isinstance(x, torch.Tensor):
            h.update(str((tuple(x.shape), tuple(x.stride()), x.dtype, x.device.type, x.requires_grad)).encode())
        else:
            h.update(repr(x).encode())
    return h.hexdigest()[:40]


def _path(d: str, k: str) -> str:
    if not _C._cc.is_cache_key(k):
        raise ValueError(f"frontend cache key {k!r} is not a hex digest")
    return os.path.join(d, k + ".entry")


def lookup(k: str) -> Callable | None:
    d = _dir()
    if d is None:
        return None
    try:
        blob = _C._cc.cache_file_read(_path(d, k), _KIND, k)
        if blob is None:
            return None
        entry = json.loads(blob.decode())
        if entry.get("format") != _FORMAT:
            return None
        if any(_file_hash(path) != digest for path, digest in entry.get("sources", [])):
            return None
        if not _deps.manifest_matches(entry["nki_deps"], None):
            return None  # a source an NKI op ran, or a global it read, changed
        exe = _C._cc.load_cached(str(entry["neff_key"]), str(entry["graph_hash"]))
        template = [tuple(t) for t in entry["template"]]
        n_inputs = int(entry["n_inputs"])
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return None
    if exe is None:
        return None

    identity = all(kind == "out" and i == k for k, (kind, i) in enumerate(template))

    def run(*args):
        if len(args) != n_inputs:
            raise RuntimeError(f"neuron warm-start graph expects {n_inputs} inputs, got {len(args)}")
        outs = exe.run([a for a in args if isinstance(a, torch.Tensor)])
        if identity:  # the graph returns its outputs in order (no constants): no per-call mapping
            return tuple(outs)
        return tuple([outs[i] if kind == "out" else i for kind, i in template])

    run._neuron_source = exe.source  # type: ignore[attr-defined]
    return run


def store(k: str, boxed_fn: Callable, aten_graph: torch.fx.GraphModule, n_dynamo_inputs: int) -> None:
    d = _dir()
    if d is None:
        return
    from .backend import CompiledGraph

    # make_boxed_func keeps the wrapped callable in its closure.
    inner = None
    for cell in getattr(boxed_fn, "__closure__", None) or ():
        if isinstance(cell.cell_contents, CompiledGraph):
            inner = cell.cell_contents
    if inner is None or not _plain_inference(aten_graph, n_dynamo_inputs):
        return
    sources = []
    for path in getattr(inner, "sources", []):
        digest = _file_hash(path)
        if digest is None:
            return  # a kernel without a readable source file: never warm-start past it
        sources.append([path, digest])
    nki_deps = getattr(inner, "nki_deps", None)
    if nki_deps is None:
        return  # an NKI op read something another process cannot check: never warm-start past it
    entry = {
        "format": _FORMAT,
        "nki_deps": nki_deps,
        "neff_key": inner.exe.key,
        "graph_hash": inner.exe.graph_hash,
        "template": inner.template,
        "n_inputs": inner.n_inputs,
        "sources": sources,
    }
    try:
        os.makedirs(d, exist_ok=True)
        _C._cc.cache_file_write(_path(d, k), _KIND, k, json.dumps(entry).encode())
    except (OSError, ValueError):
        pass


def _file_hash(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _plain_inference(g: torch.fx.GraphModule, n_dynamo_inputs: int) -> bool:
    """AOT's wrapper is the identity when the graph takes Dynamo's inputs one to one and
    returns only fresh tensors (no aliases of inputs or of each other)."""
    try:
        ctx = torch._guards.TracingContext.try_get()
        meta = ctx.fw_metadata if ctx is not None else None
    except (AttributeError, RuntimeError):
        meta = None
    if meta is None:
        return False
    phs = [n for n in g.graph.nodes if n.op == "placeholder"]
    if len(phs) != n_dynamo_inputs or len(meta.input_info) != n_dynamo_inputs:
        return False
    from torch._functorch._aot_autograd.schemas import OutputType

    if any(o.output_type != OutputType.non_alias for o in meta.output_info):
        return False
    if any(i.mutates_metadata for i in meta.input_info):
        return False
    if getattr(meta, "num_intermediate_bases", 0):
        return False
    return not any(
        i.mutates_data and not i.mutations_under_no_grad_or_inference_mode and not i.mutations_hidden_from_autograd
        for i in meta.input_info
        if getattr(i, "requires_grad", False)
    )
