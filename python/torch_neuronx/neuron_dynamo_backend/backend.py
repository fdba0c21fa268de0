"""``torch.compile(backend="neuron")``: Dynamo -> AOT autograd -> Neuron IR -> NEFF.

Dynamo hands us a torch-level FX graph; AOT autograd functionalizes it, applies our
decomposition table and splits forward/backward; each aten graph is lowered to Neuron IR,
compiled (or fetched from the NEFF cache) and runs as one task on the device stream. Ops the
compiler cannot lower are split out and run eagerly between compiled parts.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from nki import _deps

from .. import _C
from .._progress import slow_step
from . import (
    artifacts,
    decompositions,
    frontend_cache,
    metrics,
    nki_lowering,  # noqa: F401  (registers the lowering of NKI custom ops)
    scatter_rewrite,
)
from .lowering import Lowering, Unsupported, V

log = logging.getLogger(__name__)

_counter = itertools.count()
_warned: set[str] = set()
_lock = threading.Lock()


def _warn_once(key: str, msg: str, *args) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(msg, *args)


def _forward_cc_warnings() -> None:
    for w in _C._cc.drain_warnings():
        _warn_once(w, "%s", w)


def _flags() -> str:
    return os.environ.get("NEURON_CC_FLAGS", "")


def _opt_level() -> int:
    v = os.environ.get("NEURON_COMPILER_OPT_LEVEL", "").strip().upper().lstrip("-O")
    if not v:
        return 2
    if v not in ("0", "1", "2", "3"):
        raise ValueError(f"NEURON_COMPILER_OPT_LEVEL={os.environ['NEURON_COMPILER_OPT_LEVEL']!r}: expected 0..3 (or -O0..-O3)")
    return min(2, int(v))


# =======================================================================================
# aten graph -> executable


class CompiledGraph:
    """A lowered aten graph: one NEFF, called with the graph's placeholders in order."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, example_inputs: Sequence[Any] | None = None,
                 lowering: Lowering | None = None) -> None:
        """`lowering`: the graph already lowered (by the support analysis, with nothing
        unsupported found), so it is not lowered twice."""
        self.name = name
        L = lowering
        if L is None:
            L = Lowering(gm, name, example_inputs=example_inputs)
            L.run()
        self.template = self._output_template(gm, L)
        self._identity = all(kind == "out" and i == k for k, (kind, i) in enumerate(self.template))
        self.n_inputs = len(L.input_index)
        # Every placeholder is a tensor input of the program: the call passes its arguments
        # through as they are (no per-call filtering).
        self._all_tensors = self.n_inputs == sum(1 for n in gm.graph.nodes if n.op == "placeholder")
        self.sources = sorted(L.sources)
        self.nki_deps = _deps.merge(L.nki_deps)
        self.exe = _C._cc.compile(
            L.b,
            {
                "name": name,
                "flags": _flags(),
                "opt_level": _opt_level(),
                "dump_dir": artifacts.ir_dump_dir(name),
                "neff_copy": artifacts.neff_path(name),
            },
        )
        _forward_cc_warnings()
        metrics.record_compile(self.exe.source)
        for op in L.nki_ops:
            metrics.record_nki_op(op)
        log.debug("neuron: graph %s -> %s (%s)", name, self.exe.key, self.exe.source)

    @staticmethod
    def _output_template(gm: torch.fx.GraphModule, L: Lowering) -> list:
        out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        template, k = [], 0
        for a in out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]:
            v = L.env.get(a) if isinstance(a, torch.fx.Node) else a
            if isinstance(v, V):
                template.append(("out", k))
                k += 1
            else:
                template.append(("const", v))
        return template

    def __call__(self, *args):
        outs = self.exe.run(args if self._all_tensors else [a for a in args if isinstance(a, torch.Tensor)])
        if self._identity:  # outputs in order, no constants: no per-call mapping
            return tuple(outs)
        return tuple([outs[i] if kind == "out" else i for kind, i in self.template])


def _tensor_inputs_only(gm: torch.fx.GraphModule) -> bool:
    return all(
        isinstance(n.meta.get("val"), torch.Tensor) for n in gm.graph.nodes if n.op == "placeholder"
    )


def _unsupported_nodes(gm: torch.fx.GraphModule, name: str,
                       example_inputs=None) -> tuple[Lowering | None, dict[torch.fx.Node, str]]:
    """The graph lowered in tolerant mode and the nodes it could not lower (with reasons); the
    lowering is None when the whole graph is unsupported."""
    L = Lowering(gm, name, tolerant=True, example_inputs=example_inputs)
    try:
        L.run()
    except Unsupported as e:  # not tied to one node (e.g. an input type)
        return None, {n: str(e) for n in gm.graph.nodes if n.op == "call_function"}
    return L, L.unsupported


class _Partitioned(torch.nn.Module):
    """Runs a split graph: compiled submodules and eager aten ops in between."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__()
        self.gm = gm

    def forward(self, *args):
        return self.gm(*args)


def _fallback_execution_allowed() -> bool:
    """TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION: on (the default) raises a compile failure, 0 runs
    the graph eagerly. A value that is neither raises, naming the variable."""
    raw = os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    v = raw.strip().lower()
    if v in ("0", "false", "no", "off"):
        return True
    if v in ("", "1", "true", "yes", "on"):
        return False
    raise ValueError(
        f"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION={raw!r}: expected 1 (the default: a graph that fails to "
        "compile raises) or 0 (it runs eagerly, with a warning)"
    )


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str, prefix: str = "") -> Callable:
    name = f"{prefix}g{next(_counter)}_{kind}"
    _fallback_execution_allowed()  # a bad value fails every compilation, not only a failing one
    try:
        return _compile_aten_graph(gm, example_inputs, name)
    except Exception as e:
        if not _fallback_execution_allowed():
            raise
        _warn_once(f"compile-failed:{name}", "neuron backend: graph %s failed to compile (%s); running it eagerly "
                   "(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0)", name, e)
        metrics.record_fallback({f"<whole graph {name}>": str(e)})
        return _boxed(gm)


def _compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], name: str) -> Callable:
    kind = name.rsplit("_", 1)[-1]
    artifacts.save_fx_graph(name, gm)
    metrics.record_aot_graph(kind)
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        return _boxed(gm)  # nothing to compute: returns inputs/constants
    scatter_rewrite.rewrite_slice_index_put(gm)
    L, bad = _unsupported_nodes(gm, name, example_inputs)
    if not bad:
        return _boxed(CompiledGraph(gm, name, example_inputs, lowering=L))
    ops = {}
    for n, why in bad.items():
        ops.setdefault(_op_name(n), why)
    metrics.record_fallback(ops)
    report = artifacts.report_fallback(name, ops)
    _warn_once(
        "fallback:" + ",".join(sorted(ops)),
        "neuron backend: %d op kind(s) in graph %s cannot be compiled and run eagerly between compiled parts: %s%s",
        len(ops),
        name,
        ", ".join(f"{k} ({v})" for k, v in sorted(ops.items())),
        f" (report: {report})" if report else "",
    )
    return _boxed(_split_and_compile(gm, set(bad), name))


def _op_name(n: torch.fx.Node) -> str:
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t.namespace}::{t._opname}.{t._overloadname}"
    return getattr(t, "__name__", str(t))


def _boxed(fn: Callable) -> Callable:
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(fn)


_VIEW_LIKE = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "unsqueeze", "squeeze",
              "slice", "select", "alias", "detach", "split", "split_with_sizes", "unbind", "as_strided"}


def _split_and_compile(gm: torch.fx.GraphModule, unsupported: set, name: str) -> Callable:
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    class _Support(OperatorSupport):
        def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
            return node.op == "call_function" and node not in unsupported

    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    # Partitions that only reshuffle views are not worth a launch: leave them eager.
    keep = []
    for p in partitions:
        if any(
            n.op == "call_function"
            and (getattr(n.target, "_opname", None) not in _VIEW_LIKE)
            and n.target is not __import__("operator").getitem
            for n in p.nodes
        ):
            keep.append(p)
    split = partitioner.fuse_partitions(keep, prefix="neuron_compiled_")
    for node in list(split.graph.nodes):
        if node.op == "call_module" and node.target.startswith("neuron_compiled_"):
            sub = getattr(split, node.target)
            _propagate_meta(sub, node)
            cg = CompiledGraph(sub, f"{name}_{node.target}")
            setattr(split, node.target, _Callable(cg, single=not isinstance(node.meta.get("val"), (list, tuple))))
    split.recompile()
    return split


class _Callable(torch.nn.Module):
    def __init__(self, cg: CompiledGraph, single: bool) -> None:
        super().__init__()
        self.cg = cg
        self.single = single

    def forward(self, *args):
        out = self.cg(*args)
        return out[0] if self.single and len(out) == 1 else out


def _propagate_meta(sub: torch.fx.GraphModule, call: torch.fx.Node) -> None:
    """Placeholders of a fused submodule carry the meta of the outer values they receive."""
    phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for ph, arg in zip(phs, call.args):
        if isinstance(arg, torch.fx.Node) and "val" in arg.meta and "val" not in ph.meta:
            ph.meta["val"] = arg.meta["val"]


# =======================================================================================
# Dynamo entry point


_skipped = False


def _skip_accelerator_patch() -> None:
    """Compiled frames call torch.accelerator.current_stream() on every call (Dynamo's stream
    tracking), which reaches torch_neuronx's Python patch of current_accelerator; tell Dynamo
    not to compile that frame (else each call of a compiled function runs a resumed,
    graph-broken frame)."""
    global _skipped
    if _skipped:
        return
    import torch.accelerator as acc
    from torch._dynamo.eval_frame import skip_code

    fn = acc.current_accelerator
    if getattr(fn, "_neuron_patched", False):
        skip_code(fn.__code__)
    _skipped = True


def _has_symbolic(inputs: Sequence[Any]) -> bool:
    for x in inputs:
        if isinstance(x, torch.SymInt):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in list(x.shape) + list(x.stride())):
            return True
    return False


def neuron_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], mode: str | None = None,
                   options: dict | None = None, **kwargs) -> Callable:
    """The ``neuron`` torch.compile backend (registered through the ``torch_dynamo_backends``
    entry point and on import of torch_neuronx)."""
    t0 = time.perf_counter()
    n_ops = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    try:
        with slow_step(f"torch.compile(backend=\"neuron\"): compiling a graph of {n_ops} ops into a NEFF"):
            return _neuron_backend(gm, example_inputs, mode, options, **kwargs)
    finally:
        metrics.record_backend_time(time.perf_counter() - t0)


def _neuron_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], mode: str | None,
                    options: dict | None, **kwargs) -> Callable:
    _skip_accelerator_patch()
    if mode not in (None, "default"):
        _warn_once(f"mode:{mode}", "torch.compile(backend='neuron', mode=%r): only mode='default' is supported; "
                   "compiling with the default mode", mode)
    if kwargs:
        _warn_once(f"kwargs:{sorted(kwargs)}", "neuron backend: ignoring options %s", sorted(kwargs))
    metrics.record_dynamo_graph()
    prefix = ""
    if options and options.get("model_name"):
        prefix = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(options["model_name"])) + "_"
    if _has_symbolic(example_inputs):
        _warn_once("dynamic", "neuron backend: dynamic shapes are treated as static; each new input shape "
                   "compiles (and caches) its own NEFF")
        return _Specializing(gm, prefix)
    return _compile_static(gm, list(example_inputs), prefix)


def _compile_static(gm: torch.fx.GraphModule, example_inputs: list, prefix: str = "") -> Callable:
    training = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )
    key = frontend_cache.key(gm, example_inputs, training)
    if key is not None:
        fast = frontend_cache.lookup(key)
        if fast is not None:
            metrics.record_warm_start()
            return fast
    from torch._dynamo.backends.common import aot_autograd

    captured: dict = {}

    def fw(g, ex):
        fn = compile_aten_graph(g, ex, "forward" if training else "inference", prefix)
        if not training:
            captured["fn"] = fn
            captured["graph"] = g
        return fn

    def bw(g, ex):
        return compile_aten_graph(g, ex, "backward", prefix)

    compiled = aot_autograd(
        fw_compiler=fw,
        bw_compiler=bw,
        inference_compiler=fw,
        decompositions=decompositions.decomposition_table(training),
        keep_inference_input_mutations=True,
    )(gm, example_inputs)
    if key is not None and "fn" in captured:
        frontend_cache.store(key, captured["fn"], captured["graph"], len(example_inputs))
    return compiled


class _Specializing:
    """Dynamic-shape graphs: compile one static graph per concrete input signature. Each new
    signature compiles once (then it is a dictionary lookup); the log line names the inputs
    whose shape, strides or dtype changed against the previous signature."""

    def __init__(self, gm: torch.fx.GraphModule, prefix: str = "") -> None:
        self.gm = gm
        self.prefix = prefix
        self.compiled: dict[tuple, Callable] = {}
        self.names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        self.last: tuple | None = None

    def _reason(self, sig: tuple) -> str:
        if self.last is None:
            return "first call"
        diffs = []
        for i, (a, b) in enumerate(zip(self.last, sig)):
            if a != b:
                name = self.names[i] if i < len(self.names) else f"arg{i}"
                diffs.append(f"input {i} ({name}): {_sig_str(a)} -> {_sig_str(b)}")
        return "; ".join(diffs) or "new input signature"

    def __call__(self, *args):
        sig = tuple(
            (tuple(a.shape), tuple(a.stride()), a.dtype, a.device.type) if isinstance(a, torch.Tensor) else ("s", a)
            for a in args
        )
        fn = self.compiled.get(sig)
        if fn is None:
            reason = self._reason(sig)
            if self.compiled:
                log.info("neuron backend: recompiling a dynamic-shape graph (%d signature(s) compiled so far): %s",
                         len(self.compiled), reason)
            fn = _compile_static(self.gm, list(args), self.prefix)
            self.compiled[sig] = fn
        self.last = sig
        return fn(*args)


def _sig_str(s: tuple) -> str:
    if s and s[0] == "s":
        return repr(s[1])
    shape, stride, dtype, device = s
    return f"{str(dtype).replace('torch.', '')}{list(shape)} strides {list(stride)} on {device}"


def graph_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]
