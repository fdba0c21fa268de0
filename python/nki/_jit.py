"""``nki.jit``: specialization (the kernel's Python runs once per argument signature, leaving a
program of ISA instructions), trace caching, and execution of the program on numpy arrays,
CPU tensors or neuron tensors (one task on the device's current stream)."""

from __future__ import annotations

import base64
import contextlib
import contextvars
import enum
import functools
import inspect
import itertools
import logging
import math
import os
import sys
import threading

from . import _cache, _deps, _frameworks, _tracer
from . import _dtypes as dt
from ._core import core, target
from ._tensor import MemoryRegion, NkiTensor, new_tensor

log = logging.getLogger(__name__)


def _version() -> str:
    from . import __version__

    return __version__


# ---------------------------------------------------------------------------------------------
# Arguments


def _torch():
    return sys.modules.get("torch")


def _is_tensor(x) -> bool:
    t = _torch()
    if t is not None and isinstance(x, t.Tensor):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


_TRACING_TENSOR_TYPES: tuple | None = None


def _tracing_types() -> tuple:
    """FakeTensor and FunctionalTensor (tensors that only carry shapes under torch.compile)."""
    global _TRACING_TENSOR_TYPES
    if _TRACING_TENSOR_TYPES is None:
        from torch._subclasses.fake_tensor import FakeTensor

        types = [FakeTensor]
        try:
            from torch._subclasses.functional_tensor import FunctionalTensor

            types.append(FunctionalTensor)
        except ImportError:  # pragma: no cover
            pass
        _TRACING_TENSOR_TYPES = tuple(types)
    return _TRACING_TENSOR_TYPES


def _framework(tensors) -> tuple[str, object]:
    """("numpy" | "cpu" | "neuron" | "fake", device) of the tensor arguments."""
    t = _torch()
    kinds = set()
    device = None
    for x in tensors:
        if t is not None and isinstance(x, t.Tensor):
            if isinstance(x, _tracing_types()) or x.device.type == "meta":
                kinds.add("fake")
                device = x.device
            elif x.device.type == "neuron":
                kinds.add("neuron")
                if device is not None and device != x.device and "fake" not in kinds:
                    raise ValueError(
                        f"NKI kernel arguments are on different devices: {device} and {x.device}"
                    )
                device = x.device
            elif x.device.type == "cpu":
                kinds.add("cpu")
            else:
                raise ValueError(f"NKI kernels run on neuron or CPU tensors, got a tensor on {x.device}")
        else:
            kinds.add("numpy")
    if "fake" in kinds:
        return "fake", device
    if len(kinds) > 1:
        raise ValueError(f"NKI kernel arguments mix {sorted(kinds)} tensors; pass all on one device")
    return (kinds.pop() if kinds else "numpy"), device


def _tensor_spec(x) -> tuple:
    return ("T", tuple(int(s) for s in x.shape), str(dt.to_dtype(x.dtype)))


def _freeze(v):
    """Hashable, deterministic form of a constant argument (the specialization key)."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return (type(v).__name__, v)
    if isinstance(v, enum.Enum):
        return ("enum", type(v).__qualname__, v.name)
    if isinstance(v, dt.DType):
        return ("dtype", str(v))
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_freeze(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _freeze(x)) for k, x in v.items())))
    state = getattr(v, "_nki_state", None)
    if state is not None and callable(state):  # nl.NKIObject: keyed by its field values
        return ("nkiobj", type(v).__module__, type(v).__qualname__, _freeze(state()))
    if _is_tensor(v):
        return _tensor_spec(v)
    t = _torch()
    if t is not None and isinstance(v, t.dtype):
        return ("torch.dtype", str(v))
    try:
        hash(v)
    except TypeError:
        raise TypeError(
            f"NKI kernel argument {v!r} of type {type(v).__name__} is not a tensor or a hashable constant"
        ) from None
    return ("obj", type(v).__qualname__, repr(v))


def _map_tensors(v, fn):
    if _is_tensor(v):
        return fn(v)
    if isinstance(v, tuple):
        return tuple(_map_tensors(x, fn) for x in v)
    if isinstance(v, list):
        return [_map_tensors(x, fn) for x in v]
    if isinstance(v, dict):
        return {k: _map_tensors(x, fn) for k, x in v.items()}
    return v


# ---------------------------------------------------------------------------------------------
# The warm-call fast path. A call whose arguments are all tensors (exact torch.Tensor or
# numpy.ndarray), immutable scalars (None, bool, int, float, str, bytes, enum members, dtypes) and
# lists or tuples of those is keyed by its structure: the grid, the keyword names, per list or
# tuple its type and its elements' keys, per tensor its dtype,
# shape, strides and device, per scalar its type and value, and the environment the trace and
# target depend on (nki._nki_native.EnvKey). A key seen before maps to the trace the full path chose
# then; it is taken only while the globals and closure values that trace read are still the same
# objects (anything else goes the full path, which checks them by value and may retrace).

_FAST_PATH = True  # off: every call takes the full path (benchmarks/nki_bench.py compares)
_FAST_ENTRIES = 256  # call structures remembered per kernel
_FAST_ENV_VARS = ("NEURON_PLATFORM_TARGET_OVERRIDE", "NKI_DISABLE_COMPILE_CACHE", "NKI_SIMULATOR")
_FAST_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
_env_key = None


def _fast_env_key() -> bytes:
    global _env_key
    if _env_key is None:
        _env_key = core().EnvKey(list(_FAST_ENV_VARS))
    return _env_key()


def _fast_part(v):
    """The key of one argument (None when the call cannot take the fast path)."""
    tp = type(v)
    if tp in _FAST_SCALARS:
        return (tp, v)
    t = sys.modules.get("torch")
    if t is not None:
        if tp is t.Tensor or tp is t.nn.Parameter:  # weights (nn.Linear.weight) are Parameters
            return (0, v.dtype, v.shape, v.stride(), v.device)
        if tp is t.dtype:
            return (tp, v)
    np = sys.modules.get("numpy")
    if np is not None and tp is np.ndarray:
        return (1, v.dtype, v.shape, v.strides)
    if isinstance(v, enum.Enum) or tp is dt.DType:
        return (tp, v)
    if tp is list or tp is tuple:  # lists of weights, KV caches per layer
        parts = []
        for x in v:
            k = _fast_part(x)
            if k is None:
                return None
            parts.append(k)
        return (tp, tuple(parts))
    return None


class _NoType:  # stands for torch.Tensor until torch is imported
    pass


_torch_tensor: type = _NoType


def _fast_key(grid, args, kwargs):
    global _torch_tensor
    tt = _torch_tensor
    if tt is _NoType:
        t = sys.modules.get("torch")
        if t is not None:
            tt = _torch_tensor = t.Tensor
    parts = [grid]
    for v in args:
        if type(v) is tt:  # inline: the common case
            parts.append((0, v.dtype, v.shape, v.stride(), v.device))
            continue
        k = _fast_part(v)
        if k is None:
            return None
        parts.append(k)
    for name, v in kwargs.items():
        parts.append(name)
        if type(v) is tt:
            parts.append((0, v.dtype, v.shape, v.stride(), v.device))
            continue
        k = _fast_part(v)
        if k is None:
            return None
        parts.append(k)
    parts.append(_fast_env_key())
    return tuple(parts)


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _immutable_default(v) -> bool:
    if type(v) in _FAST_SCALARS or isinstance(v, enum.Enum) or type(v) is dt.DType:
        return True
    t = sys.modules.get("torch")
    if t is not None and type(v) is t.dtype:
        return True
    return type(v) is tuple and all(_immutable_default(x) for x in v)


def _tensor_order(sig: inspect.Signature, args, kwargs) -> list | None:
    """Which call arguments (positions in args + kwargs values; a tensor inside a list or tuple
    argument by its path of indices) the full path's tensor list holds, in its order; None when
    the structure is not one the fast path reproduces (a default that is a tensor or a mutable
    value)."""
    vals = list(args) + list(kwargs.values())

    def mark(v, path):
        if _is_tensor(v):
            return _Slot(path[0] if len(path) == 1 else path)
        if type(v) is tuple or type(v) is list:  # what _fast_part keys element by element
            return type(v)(mark(x, path + (j,)) for j, x in enumerate(v))
        return v

    marked = [mark(v, (i,)) for i, v in enumerate(vals)]
    names = list(kwargs)
    try:
        bound = sig.bind(*marked[: len(args)], **dict(zip(names, marked[len(args):])))
    except TypeError:
        return None
    passed = set(bound.arguments)
    bound.apply_defaults()
    for name, v in bound.arguments.items():
        if name not in passed and not _immutable_default(v):
            return None
    order: list = []

    def walk(v):
        if isinstance(v, _Slot):
            order.append(v.index)
        elif _is_tensor(v):
            raise LookupError
        elif isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    try:
        walk(tuple(bound.arguments.values()))
    except LookupError:
        return None
    return order


def _at(vals, path: tuple):
    """The tensor at `path` inside the call's arguments (a list or tuple argument's element)."""
    v = vals[path[0]]
    for j in path[1:]:
        v = v[j]
    return v


class _FastEntry:
    """A call structure's trace, the check that it still holds, and its launch template."""

    def __init__(self, func, traced: TracedKernel, framework: str, device, order: list):
        self.traced = traced
        self.framework = framework
        self.device = device
        self.order = order
        self.valid = traced.deps.identity_check(func)
        self._tpl = None

    def run(self, kernel, tensors: list):
        tpl = self._tpl
        if tpl is None:
            tpl = self._tpl = _LaunchTemplate.make(self.traced, tensors, self.framework, self.device)
        if tpl is False:
            return _execute(kernel, self.traced, tensors, self.framework, self.device)
        return tpl.launch(self.traced, tensors)


# ---------------------------------------------------------------------------------------------
# Launch observers: a compiler that records what a function does with fake tensors (torch_neuronx
# lowers NKI custom ops into compiled graphs this way) sees every kernel launch instead of the
# fake execution: observer(kernel, traced, tensors, device) returns the launch's outputs.

_launch_observer: contextvars.ContextVar = contextvars.ContextVar("nki_launch_observer", default=None)


@contextlib.contextmanager
def observe_launches(observer):
    """Routes kernel calls with fake tensors to `observer` inside the block (this thread/context)."""
    token = _launch_observer.set(observer)
    try:
        yield
    finally:
        _launch_observer.reset(token)


# ---------------------------------------------------------------------------------------------

_MEMORY_VARIANTS = 8  # traces kept per signature (one per set of global/closure values seen)


class TracedKernel:
    """The specialized form of a kernel for one argument signature: one finalized program per
    grid instance, plus how its HBM tensors map to the launch's arguments and outputs."""

    def __init__(self, programs: list, meta: dict, deps: _deps.Deps | None = None):
        self.programs = programs
        self.meta = meta
        self.deps = deps if deps is not None else _deps.Deps()
        self._checked = False  # a checked host run passed
        self._device_check = None  # core().CheckState of checked device launches
        self.lock = threading.Lock()
        self._static_estimates = None

    @property
    def checked(self) -> bool:
        """Whether a run with the uninitialized-memory check passed (a failed or still-running
        checked run does not count: the next call checks again)."""
        return self._checked or (self._device_check is not None and self._device_check.passed)

    def device_check_state(self):
        if self._device_check is None:
            self._device_check = core().CheckState()
        return self._device_check

    def dump(self) -> str:
        """The instructions of every instance (only ISA instructions remain after tracing)."""
        out = []
        for i, p in enumerate(self.programs):
            if len(self.programs) > 1:
                out.append(f"# instance {i}")
            out.append(p.dump())
        return "\n".join(out)

    @property
    def num_instructions(self) -> int:
        return sum(p.size() for p in self.programs)


class Kernel:
    """A function decorated with ``@nki.jit``. Call it with numpy arrays, CPU tensors or neuron
    tensors; ``kernel[grid](...)`` launches a grid (``nl.program_id`` tells instances apart)."""

    def __init__(self, func, grid=(), options=None, _shared=None):
        self.func = func
        self.grid = grid
        self.options = options or {}
        self._sig = inspect.signature(func)
        self._shared = (
            _shared
            if _shared is not None
            else {
                "cache": {},
                "fast": {},  # warm-call fast path: call structure -> _FastEntry
                "stats": {"traces": 0, "memory_hits": 0, "disk_hits": 0, "disk_stores": 0},
                "lock": threading.Lock(),
            }
        )
        functools.update_wrapper(self, func)

    # -- grid ------------------------------------------------------------------------------------
    def __getitem__(self, grid) -> Kernel:
        if isinstance(grid, int):
            grid = (grid,)
        grid = tuple(int(g) for g in grid)
        if not grid or any(g <= 0 for g in grid):
            raise ValueError(f"launch grid must be positive ints, got {grid}")
        # One Kernel per grid (they share every cache): `kernel[lnc](...)` in a decode loop does
        # not pay for inspect.signature and update_wrapper (~50 us for an nkilib kernel) per call.
        grids = self._shared.setdefault("grids", {})
        k = grids.get(grid)
        if k is None:
            k = grids[grid] = Kernel(self.func, grid, self.options, self._shared)
        return k

    def __repr__(self) -> str:
        g = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<nki.jit kernel {self.func.__qualname__}{g}>"

    def _cache_identity(self) -> tuple:
        """How a trace that read this kernel (a sub-kernel it calls) keys it: the code is covered
        by the source files, the closure by the values recorded when it ran."""
        return ("nki.jit", self.func.__module__, self.func.__qualname__, self.grid)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    # -- cache -----------------------------------------------------------------------------------
    def cache_info(self) -> dict:
        """Counters: traces run, in-memory hits, disk (NKI_ENABLE_TRACE_CACHE) hits and stores."""
        return dict(self._shared["stats"], entries=sum(len(v) for v in self._shared["cache"].values()))

    def cache_clear(self) -> None:
        self._shared["cache"].clear()
        self._shared["fast"].clear()

    # -- call --------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if _tracer.active() is not None:  # a sub-kernel called while tracing: inline it
            return self.func(*args, **kwargs)
        key = _fast_key(self.grid, args, kwargs) if _FAST_PATH else None
        if key is not None:
            entry = self._shared["fast"].get(key)
            if entry is not None and not _deps._required.get() and entry.valid():
                vals = args + tuple(kwargs.values()) if kwargs else args
                self._shared["stats"]["memory_hits"] += 1
                return entry.run(self, [vals[i] if type(i) is int else _at(vals, i) for i in entry.order])
        traced, tensors, framework, device = self._specialize(args, kwargs)
        if key is not None:
            self._note_fast(key, args, kwargs, traced, framework, device)
        if framework == "fake":
            observer = _launch_observer.get()
            if observer is not None:
                return observer(self, traced, tensors, device)
        if os.environ.get("NKI_SIMULATOR", "") == "1" and framework != "fake":
            # Like the real NKI_SIMULATOR=1: run on the host, synchronously, with every check on.
            if framework == "neuron":
                import torch

                torch.neuron.synchronize(device)
            return _execute(self, traced, tensors, framework, device, check=True, host=True)
        return _execute(self, traced, tensors, framework, device)

    def specialize(self, *args, **kwargs) -> TracedKernel:
        """Traces (or fetches from the caches) the program for these arguments without running it."""
        return self._specialize(args, kwargs)[0]

    def _bind(self, args, kwargs):
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.func.__qualname__}: {e}") from None
        bound.apply_defaults()
        return bound

    def _specialize(self, args, kwargs):
        bound = self._bind(args, kwargs)
        tensors: list = []
        _map_tensors(tuple(bound.arguments.values()), lambda t: tensors.append(t) or t)
        framework, device = _framework(tensors)
        spec = tuple((name, _freeze(v)) for name, v in bound.arguments.items())
        tgt = target(self.options.get("platform_target"))
        key = (self.grid, spec, tuple(sorted((k, v) for k, v in tgt.items() if not isinstance(v, dict))))
        shared = self._shared
        stats = shared["stats"]
        use_memory = os.environ.get("NKI_DISABLE_COMPILE_CACHE", "") != "1"
        traced = self._memory_hit(key) if use_memory else None
        if traced is not None:
            stats["memory_hits"] += 1
            return traced, tensors, framework, device
        with shared["lock"]:
            traced = self._memory_hit(key) if use_memory else None
            if traced is None:
                traced = self._load_or_trace(bound, tgt, spec)
                if use_memory:
                    variants = shared["cache"].setdefault(key, [])
                    variants.insert(0, traced)
                    del variants[_MEMORY_VARIANTS:]
            else:
                stats["memory_hits"] += 1
        return traced, tensors, framework, device

    def _memory_hit(self, key) -> TracedKernel | None:
        """The trace for `key` whose recorded globals and closure values still hold."""
        need_recorded = _deps.required()
        for traced in self._shared["cache"].get(key, ()):
            if need_recorded and not traced.deps.recorded:
                continue
            if traced.deps.valid_in_memory(self.func):
                return traced
        return None

    def _note_fast(self, key, args, kwargs, traced, framework, device) -> None:
        """Remembers the trace the full path chose for a call of this structure, for the warm-call
        fast path (only where a later call of the same structure is sure to choose it too)."""
        if framework == "fake" or os.environ.get("NKI_DISABLE_COMPILE_CACHE", "") == "1":
            return
        if os.environ.get("NKI_SIMULATOR", "") == "1":
            return
        order = _tensor_order(self._sig, args, kwargs)
        if order is None:
            return
        fast = self._shared["fast"]
        old = fast.get(key)
        if old is not None and old.traced is traced:
            return  # its values are equal, not identical, to the recorded ones: keep the full path
        if len(fast) >= _FAST_ENTRIES:
            fast.clear()
        fast[key] = _FastEntry(self.func, traced, framework, device, order)

    def _load_or_trace(self, bound, tgt: dict, spec) -> TracedKernel:
        stats = self._shared["stats"]
        material = None
        if _cache.enabled():
            material = _cache.key_material(self.func, _version(), spec, self.grid, tgt)
            if isinstance(material, str):
                _cache.note_not_persisted(self.func, [material])
                material = None
            else:
                hit = _cache.lookup(material, self.func)
                if hit is not None:
                    meta, blobs = hit
                    try:
                        programs = [core().Program.deserialize(b) for b in blobs]
                        deps = _deps.Deps.from_manifest(meta["deps"], self.func)
                    except Exception as e:  # noqa: BLE001 - a stale or damaged entry: retrace
                        log.warning("NKI trace cache entry unusable (%s); tracing again", e)
                    else:
                        stats["disk_hits"] += 1
                        return TracedKernel(programs, meta, deps)
        if material is not None or _deps.required():
            # Only a trace that may be reused by another process pays for recording what it read
            # (tracing runs 1.5-3x slower under it); in memory the static view suffices.
            with _deps.Recorder(self.func) as rec:
                traced = self._trace(bound, tgt)
            traced.deps = rec.finish()
        else:
            traced = self._trace(bound, tgt)
            traced.deps = _deps.static_deps(self.func)
        stats["traces"] += 1
        if material is not None:
            if traced.deps.unkeyable:
                _cache.note_not_persisted(self.func, traced.deps.unkeyable)
            else:
                _cache.store(
                    material, traced.deps.manifest(), traced.meta, [p.serialize() for p in traced.programs]
                )
                stats["disk_stores"] += 1
        return traced

    # -- tracing ----------------------------------------------------------------------------------
    def _trace(self, bound, tgt: dict) -> TracedKernel:
        grid = self.grid
        instances = list(itertools.product(*[range(g) for g in grid])) if grid else [()]
        programs, inst_meta = [], []
        shared_specs = None
        output = None
        written_inputs: set[int] = set()
        try:
            def_file = inspect.getsourcefile(self.func) or "<unknown>"
            def_line = inspect.getsourcelines(self.func)[1]
        except (OSError, TypeError):
            def_file, def_line = "<unknown>", 0
        for pid in instances:
            tr = _tracer.Trace(tgt, grid, pid, self.func.__qualname__)
            with _tracer.tracing(tr):
                tr.default_loc = tr.program.intern(f"{_tracer._short_path(def_file)}:{def_line}")
                arg_index = itertools.count()

                def to_nki(x, name, arg_index=arg_index):
                    t = new_tensor(
                        tuple(x.shape), dt.to_dtype(x.dtype), MemoryRegion.shared_hbm, name, is_input=True
                    )
                    t._b.slot_info.update(kind="in", arg=next(arg_index))
                    return t

                call = self._sig.bind(*bound.args, **bound.kwargs)
                for name, v in list(call.arguments.items()):
                    call.arguments[name] = _map_tensors(v, lambda x, n=name: to_nki(x, n))
                ret = self.func(*call.args, **call.kwargs)
                out = _output_structure(ret, tr, self.func.__qualname__)
                tr.program.finalize()
            slots = []
            shared_here = []
            for info in tr.hbm:
                if info["kind"] == "in":
                    slots.append({"kind": "in", "arg": info["arg"], "name": info["name"]})
                elif info["kind"] == "const":
                    data = info["data"]
                    slots.append({
                        "kind": "const", "name": info["name"], "shape": list(data.shape),
                        "dtype": info["dtype"], "data": base64.b64encode(data.tobytes()).decode(),
                    })
                elif info["kind"] == "shared":
                    slots.append({"kind": "shared", "index": len(shared_here)})
                    shared_here.append(
                        {"shape": list(info["shape"]), "dtype": info["dtype"], "name": info["name"]}
                    )
                else:
                    n = math.prod(info["shape"]) * dt.to_dtype(info["dtype"]).itemsize
                    slot = {"kind": "private", "bytes": max(n, 1), "name": info["name"]}
                    if "print" in info:  # nl.device_print buffer
                        slot.update(print=info["print"], shape=list(info["shape"]), dtype=info["dtype"])
                    slots.append(slot)
            for slot, _name, _dt, _shape, is_input, written, _nb in tr.program.hbm_buffers():
                if slots[slot]["kind"] == "const":
                    if written:
                        raise ValueError(
                            f"{self.func.__qualname__}: writes the read-only nl.shared_constant '{slots[slot]['name']}'"
                        )
                    continue
                if is_input and written:
                    written_inputs.add(slots[slot]["arg"])
            if shared_specs is None:
                shared_specs, output = shared_here, out
            else:
                mine = [(s["shape"], s["dtype"]) for s in shared_here]
                first = [(s["shape"], s["dtype"]) for s in shared_specs]
                if mine != first:
                    raise ValueError(
                        f"{self.func.__qualname__}: grid instance {pid} allocates shared_hbm tensors {mine} but "
                        f"instance {instances[0]} allocates {first}; every instance must allocate the same outputs"
                    )
            programs.append(tr.program)
            inst_meta.append({"slots": slots, "pid": list(pid)})
        meta = {
            "name": self.func.__qualname__,
            "grid": list(grid),
            "instances": inst_meta,
            "shared": shared_specs or [],
            "output": output,
            "written_inputs": sorted(written_inputs),
        }
        return TracedKernel(programs, meta)


def _output_structure(ret, tr, name: str) -> dict:
    def ref(t):
        if not isinstance(t, NkiTensor):
            raise TypeError(f"{name}: kernels return HBM tensors (or tuples of them), got {t!r}")
        info = t._b.slot_info
        if info is None and t.on_chip and t._vec is None:
            # A returned SBUF/PSUM tile (the SDK docs' simulation examples do it): the simulator
            # hands back its final contents; here they are stored to an output at the end.
            from . import language as nl

            with _tracer.api("nki.language.store"):
                out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
                nl.store(out, t)
            t, info = out, out._b.slot_info
        if info is None:
            raise TypeError(
                f"{name}: returned tensor '{t.name}' is in {t.buffer.value}; kernel outputs are HBM tensors "
                "allocated with nl.ndarray(..., buffer=nl.shared_hbm)"
            )
        if info["kind"] == "private" and t._b.region == MemoryRegion.hbm:
            # A returned nl.hbm tensor (the docs' examples allocate outputs so): it is an output,
            # allocated by the launch and handed to the caller like an nl.shared_hbm one.
            info["kind"] = "shared"
        if info["kind"] == "private":
            raise TypeError(
                f"{name}: returned tensor '{t.name}' is in {t.buffer.value}; kernel outputs must be allocated in "
                "nl.shared_hbm"
            )
        same_bytes = t.size * t.dtype.itemsize == math.prod(info["shape"]) * dt.to_dtype(info["dtype"]).itemsize
        if t.offset != 0 or not t.is_contiguous() or not same_bytes or t.dtype.itemsize != dt.to_dtype(
            info["dtype"]
        ).itemsize:
            raise TypeError(
                f"{name}: returned a partial or reinterpreted view {t.shape} of '{t.name}' {tuple(info['shape'])}; "
                "return the tensor itself, a reshape of all of it or a view of it as a dtype of the same size"
            )
        view = [] if t.shape == tuple(info["shape"]) else [list(t.shape)]  # a reshaped output
        if t.dtype != info["dtype"]:  # output.view(nl.int32): the same bytes as another dtype
            view = [view[0] if view else None, str(t.dtype)]
        if info["kind"] == "in":
            return ["in", info["arg"], *view]
        return ["shared", info, *view]  # the index once every returned tensor is known

    def resolve(r):
        # A returned nl.hbm tensor becomes shared while the refs are made: index after all.
        if r[0] == "shared":
            shared = [i for i in tr.hbm if i["kind"] == "shared"]
            r[1] = next(k for k, i in enumerate(shared) if i is r[1])
        return r

    if ret is None:
        return {"type": "none"}
    if isinstance(ret, (tuple, list)):
        refs = [ref(t) for t in ret]
        return {"type": type(ret).__name__, "refs": [resolve(r) for r in refs]}
    return {"type": "single", "ref": resolve(ref(ret))}


# ---------------------------------------------------------------------------------------------
# Execution


def _check_mode() -> str:
    """NEURON_EMU_NKI_CHECK as the native launches read it: "first", "always" or "never" (an
    unknown value raises, naming the variable)."""
    return core().check_policy()


class _Run:
    """Buffers of one launch: arguments (contiguous), outputs and scratch, and the per-instance
    binding lists the executor takes."""

    def __init__(self, traced: TracedKernel, tensors: list, framework: str, device):
        import numpy as np

        self.framework = framework
        self.device_key = str(device) if framework == "neuron" else "cpu"
        meta = traced.meta
        self.originals = tensors
        self.args = []
        self.copy_back = []
        if framework == "numpy":
            for i, a in enumerate(tensors):
                dt.to_dtype(a.dtype)  # validates
                c = np.ascontiguousarray(a)
                if c is not a and i in meta["written_inputs"]:
                    self.copy_back.append((a, c))
                self.args.append(c)
            self.shared = [
                np.empty(s["shape"], dtype=dt.numpy_dtype(dt.to_dtype(s["dtype"]))) for s in meta["shared"]
            ]
            self.private = [
                [
                    np.empty(s["bytes"], dtype=np.uint8) if s["kind"] == "private" else None
                    for s in inst["slots"]
                ]
                for inst in meta["instances"]
            ]
        else:
            import torch

            dev = device if framework == "neuron" else torch.device("cpu")
            for i, t in enumerate(tensors):
                t = t.detach()
                dt.to_dtype(t.dtype)
                c = t if t.is_contiguous() else t.contiguous()
                if c is not t and i in meta["written_inputs"]:
                    self.copy_back.append((t, c))
                self.args.append(c)
            self.shared = [
                torch.empty(s["shape"], dtype=dt.torch_dtype(dt.to_dtype(s["dtype"])), device=dev)
                for s in meta["shared"]
            ]
            self.private = [
                [
                    torch.empty(s["bytes"], dtype=torch.uint8, device=dev) if s["kind"] == "private" else None
                    for s in inst["slots"]
                ]
                for inst in meta["instances"]
            ]

    def _const(self, traced: TracedKernel, k: int, j: int, s: dict):
        """The array of a shared constant (decoded once per traced kernel and device)."""
        import numpy as np

        cache = traced.__dict__.setdefault("_consts", {})
        dev = self.device_key
        key = (k, j, dev)
        hit = cache.get(key)
        if hit is None:
            arr = np.frombuffer(base64.b64decode(s["data"]), dtype=dt.numpy_dtype(dt.to_dtype(s["dtype"])))
            arr = arr.reshape(s["shape"]).copy()
            if self.framework != "numpy":
                import torch

                t = torch.from_numpy(arr.view(np.uint8).reshape(-1)).view(dt.torch_dtype(dt.to_dtype(s["dtype"])))
                hit = t.reshape(s["shape"]).to(dev) if dev != "cpu" else t.reshape(s["shape"])
            else:
                hit = arr
            cache[key] = hit
        return hit

    @staticmethod
    def _ptr(x) -> tuple[int, int]:
        if hasattr(x, "data_ptr"):
            return x.data_ptr(), x.numel() * x.element_size()
        return x.ctypes.data, x.nbytes

    def bindings(self, traced: TracedKernel) -> list:
        meta = traced.meta
        out = []
        for k, inst in enumerate(meta["instances"]):
            lst = []
            for j, s in enumerate(inst["slots"]):
                if s["kind"] == "in":
                    p, n = self._ptr(self.args[s["arg"]])
                    lst.append((p, n, s.get("name", ""), True, False))
                elif s["kind"] == "shared":
                    p, n = self._ptr(self.shared[s["index"]])
                    lst.append((p, n, meta["shared"][s["index"]]["name"], False, False))
                elif s["kind"] == "const":
                    p, n = self._ptr(self._const(traced, k, j, s))
                    lst.append((p, n, s["name"], True, False))
                else:
                    p, n = self._ptr(self.private[k][j])
                    lst.append((p, n, "", False, True))
            out.append(lst)
        return out

    def device_prints(self, traced: TracedKernel) -> None:
        """Prints the nl.device_print buffers of every program, in program order."""
        import numpy as np

        many = len(traced.meta["instances"]) > 1
        for k, inst in enumerate(traced.meta["instances"]):
            for j, s in enumerate(inst["slots"]):
                if "print" not in s:
                    continue
                raw = self.private[k][j]
                raw = raw.cpu().numpy() if hasattr(raw, "cpu") else raw
                vals = np.frombuffer(raw.tobytes(), dtype=dt.numpy_dtype(dt.to_dtype(s["dtype"])))
                vals = vals[: math.prod(s["shape"])].reshape(s["shape"])
                where = f"[program {tuple(inst['pid'])}] " if many else ""
                print(f"{where}{s['print']} {vals}", flush=True)

    def finish(self) -> None:
        for orig, c in self.copy_back:
            if hasattr(orig, "copy_"):
                orig.copy_(c)
            else:
                orig[...] = c

    def outputs(self, traced: TracedKernel):
        return resolve_outputs(traced.meta["output"], self.originals, self.shared)


class _LaunchTemplate:
    """What _Run and _Run.bindings work out per call, worked out once for a trace and a call
    structure (the fast path): output and scratch allocations, each binding's size, name and
    role, the shared constants' addresses. Per call only the buffers' addresses change."""

    @staticmethod
    def make(traced: TracedKernel, tensors: list, framework: str, device):
        """The template, or False where the full _Run is needed (argument copies, device_print)."""
        meta = traced.meta
        if any("print" in s for inst in meta["instances"] for s in inst["slots"]):
            return False
        for a in tensors:
            if framework == "numpy":
                if a.ndim == 0 or not a.flags.c_contiguous:
                    return False
            elif not a.is_contiguous():
                return False
        return _LaunchTemplate(traced, tensors, framework, device)

    def __init__(self, traced: TracedKernel, tensors: list, framework: str, device):
        run = _Run(traced, tensors, framework, device)  # validates, and decodes the constants
        first = run.bindings(traced)
        meta = traced.meta
        self.framework = framework
        self.device = device
        self.device_index = int(device.index or 0) if framework == "neuron" else 0
        self.name = meta["name"]
        self.output = meta["output"]
        if framework == "numpy":
            import numpy as np

            self.empty = np.empty
            self.shared = [(tuple(a.shape), a.dtype) for a in run.shared]
            self.scratch_dtype = np.uint8
        else:
            import torch

            dev = device if framework == "neuron" else torch.device("cpu")
            self.empty = functools.partial(torch.empty, device=dev)
            self.shared = [(tuple(t.shape), t.dtype) for t in run.shared]
            self.scratch_dtype = torch.uint8
        self.private = []  # bytes of each scratch buffer of the launch
        consts = []
        self.slots = []  # per instance: (pool, index, bytes, name, is_input, scratch)
        for k, inst in enumerate(meta["instances"]):
            lst = []
            for j, s in enumerate(inst["slots"]):
                p, n, name, is_input, scratch = first[k][j]
                if s["kind"] == "in":
                    lst.append((0, s["arg"], n, name, is_input, scratch))
                elif s["kind"] == "shared":
                    lst.append((1, s["index"], n, name, is_input, scratch))
                elif s["kind"] == "const":
                    consts.append(p)
                    lst.append((3, len(consts) - 1, n, name, is_input, scratch))
                else:
                    self.private.append(s["bytes"])
                    lst.append((2, len(self.private) - 1, n, name, is_input, scratch))
            self.slots.append(lst)
        self.consts = consts
        self.native = self.host = None
        if framework == "neuron":
            native = _frameworks.launch_template(framework)
            if native is not None:
                self.native = native(
                    traced.programs, self.slots, consts, self.shared, self.private, self.device_index,
                    self.name,
                )
        else:
            host = getattr(core(), "HostLaunchTemplate", None)
            if host is not None:
                self.host = host(traced.programs, self.slots, consts, self.private)

    def launch(self, traced: TracedKernel, tensors: list):
        if self.native is not None:
            want = _want_check(traced, None)
            shared = self.native.launch(tensors, want, traced.device_check_state() if want else None)
            return resolve_outputs(self.output, tensors, shared)
        empty = self.empty
        if self.host is not None:
            shared = [empty(shape, dtype=d) for shape, d in self.shared]
            want = _want_check(traced, None)
            if self.framework == "numpy":
                self.host.run(tensors, shared, want)  # the arrays' data pointers are read natively
            else:
                self.host.run([t.data_ptr() for t in tensors], [t.data_ptr() for t in shared], want)
            if want:
                traced._checked = True
            return resolve_outputs(self.output, tensors, shared)
        shared = [empty(shape, dtype=d) for shape, d in self.shared]
        private = [empty(n, dtype=self.scratch_dtype) for n in self.private]
        if self.framework == "numpy":
            pools = (
                [a.ctypes.data for a in tensors],
                [a.ctypes.data for a in shared],
                [a.ctypes.data for a in private],
                self.consts,
            )
        else:
            pools = (
                [t.data_ptr() for t in tensors],
                [t.data_ptr() for t in shared],
                [t.data_ptr() for t in private],
                self.consts,
            )
        bindings = [[(pools[q][i], n, name, a, b) for q, i, n, name, a, b in inst] for inst in self.slots]
        want = _want_check(traced, None)
        if self.framework == "neuron":
            _frameworks.launcher("neuron")(
                traced.programs, bindings, self.device_index, self.name, want, 0,
                traced.device_check_state() if want else None,
            )
        else:
            core().run(traced.programs, bindings, want, False)
            if want:
                traced._checked = True
        # The scratch buffers are released on return, as _execute releases its _Run's.
        return resolve_outputs(self.output, tensors, shared)


def resolve_outputs(spec: dict, inputs: list, shared: list):
    """A kernel's return value from its traced output structure: input (in-place) and shared
    HBM tensors, reshaped where the kernel returned a reshape of one."""

    def get(r):
        t = inputs[r[1]] if r[0] == "in" else shared[r[1]]
        if len(r) > 2 and r[2] is not None:
            t = t.reshape(tuple(r[2]))
        if len(r) > 3:  # viewed as another dtype of the same size
            d = dt.to_dtype(r[3])
            t = t.view(dt.numpy_dtype(d) if type(t).__module__.startswith("numpy") else dt.torch_dtype(d))
        return t

    if spec["type"] == "none":
        return None
    if spec["type"] == "single":
        return get(spec["ref"])
    vals = [get(r) for r in spec["refs"]]
    return tuple(vals) if spec["type"] == "tuple" else vals


def _fake_outputs(traced: TracedKernel, tensors: list, device):
    import torch

    meta = traced.meta
    shared = [
        torch.empty(s["shape"], dtype=dt.torch_dtype(dt.to_dtype(s["dtype"])), device=device)
        for s in meta["shared"]
    ]
    return resolve_outputs(meta["output"], tensors, shared)


def _want_check(traced: TracedKernel, force: bool | None) -> bool:
    if force is not None:
        return force
    mode = _check_mode()
    if mode == "never":
        return False
    if mode == "always" or traced.programs and any(p.needs_recheck for p in traced.programs):
        return True
    return not traced.checked


def _execute(
    kernel: Kernel,
    traced: TracedKernel,
    tensors: list,
    framework: str,
    device,
    *,
    check=None,
    record=False,
    host=False,
):
    """Runs a traced kernel. Returns the outputs (and the per-instance traces when `record`)."""
    if framework == "fake":
        return _fake_outputs(traced, tensors, device)
    run = _Run(traced, tensors, framework, device)
    bindings = run.bindings(traced)
    want = _want_check(traced, check)
    prints = any("print" in s for inst in traced.meta["instances"] for s in inst["slots"])
    if framework == "neuron" and not host:
        _frameworks.launcher("neuron")(
            traced.programs,
            bindings,
            int(device.index or 0),
            traced.meta["name"],
            want,
            0,  # NEURON_EMU_NKI_MAX_LOOP_ITERATIONS, read (and validated) natively
            traced.device_check_state() if want else None,
        )
        run.finish()
        if prints:
            import torch

            torch.neuron.synchronize(device)
            run.device_prints(traced)
        return run.outputs(traced)
    traces = core().run(traced.programs, bindings, want, record)
    if want:
        traced._checked = True
    run.finish()
    if prints:
        run.device_prints(traced)
    outs = run.outputs(traced)
    if record:
        return outs, traces
    return outs


# Options of the real compiler that change nothing in the emulator's results (debug output,
# compiler flags, scheduling); accepted so real code runs, logged once when set.
_IGNORED_OPTIONS = ("debug_kernel", "show_compiler_tb", "experimental_flags", "additional_compile_opt",
                    "save_neff_name", "save_trace_name", "artifacts_dir", "enable_out_of_bound_check")
_warned_options: set = set()


def jit(func=None, *, mode: str = "auto", platform_target=None, **options):
    """Decorates an NKI kernel. ``platform_target="trn1"|"trn2"|"trn3"`` traces it for that
    NeuronCore generation (default: NEURON_PLATFORM_TARGET_OVERRIDE, else the instance profile).
    ``mode`` is the framework, which the emulator detects from the arguments; the debugging and
    compiler options of the real stack (debug_kernel, show_compiler_tb, experimental_flags, ...)
    do not change results and are accepted (noted once in the log)."""
    if platform_target is not None:
        target(str(platform_target))  # validates the name now, not at the first call
        platform_target = str(platform_target)
    for k in options:
        if k not in _warned_options:
            _warned_options.add(k)
            log.info("nki.jit(%s=...) has no effect on neuron-emu (%s)", k,
                     "debug/compiler option" if k in _IGNORED_OPTIONS else "unknown option")

    def wrap(f):
        if isinstance(f, Kernel):
            return f
        return Kernel(f, (), dict(options, mode=mode, platform_target=platform_target))

    return wrap(func) if func is not None else wrap
