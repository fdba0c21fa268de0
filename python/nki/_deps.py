"""What a trace depends on besides the kernel's arguments: the source files whose code ran while
the kernel's Python executed, and the values of the module globals and closure cells that user
code (the kernel and the helpers it called) read. Both caches key traces by them: the in-memory
cache checks the values on every hit, the disk cache (NKI_ENABLE_TRACE_CACHE=1) stores them with
the entry and checks the files and values before it trusts the entry.

A value is named by a path from a root that another process can find again: the kernel function
(``["k"]``) or a module by name (``["m", "pkg.mod"]``), then steps ``["g", name]`` (a global
of a function or module), ``["a", name]`` (an attribute) and ``["c", name]`` (a closure cell).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import dis
import enum
import hashlib
import json
import logging
import operator
import os
import sys
import sysconfig
import types

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_OWN_DIRS: tuple[str, ...] = (_PKG_DIR + os.sep,)  # nki and the frameworks registered with it


def _library_dirs() -> tuple[str, ...]:
    """Code in these directories is not user code: its values are not recorded (the sources of
    nki and of the frameworks registered with it are still hashed; the standard library and
    site-packages are keyed by the Python version)."""
    dirs = set(_OWN_DIRS)
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(name)
        if p:
            dirs.add(os.path.abspath(p) + os.sep)
    return tuple(sorted(dirs))


_LIBRARY_DIRS = _library_dirs()
_SYSTEM_DIRS = tuple(d for d in _LIBRARY_DIRS if not d.startswith(_OWN_DIRS))


def add_library_dir(d: str) -> None:
    """Treats the package in `d` like nki's own code (nki._frameworks.register)."""
    global _OWN_DIRS, _LIBRARY_DIRS, _SYSTEM_DIRS
    d = os.path.abspath(d) + os.sep
    if d in _OWN_DIRS:
        return
    _OWN_DIRS = (*_OWN_DIRS, d)
    _LIBRARY_DIRS = _library_dirs()
    _SYSTEM_DIRS = tuple(x for x in _LIBRARY_DIRS if not x.startswith(_OWN_DIRS))


_MISSING = object()
_CO_NEWLOCALS = 0x0002


# ---------------------------------------------------------------------------------------------
# Values


class Unkeyable(Exception):
    """A value a trace read that has no stable, process-independent form."""


def freeze(v):
    """A hashable, deterministic, process-independent form of a constant (raises Unkeyable)."""
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return (type(v).__name__, v)
    if isinstance(v, enum.Enum):
        return ("enum", type(v).__module__, type(v).__qualname__, v.name)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(freeze(x) for x in v))
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, tuple(sorted(repr(freeze(x)) for x in v)))
    if isinstance(v, dict):
        return ("dict", tuple((freeze(k), freeze(x)) for k, x in v.items()))
    ident = getattr(type(v), "_cache_identity", None)
    if ident is not None:  # nki.jit kernels (sub-kernels called by a kernel)
        return ident(v)
    if isinstance(v, types.ModuleType):
        return ("module", v.__name__)
    if isinstance(v, type):
        return ("type", v.__module__, v.__qualname__)
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType)):
        # Identity across processes; what the function computes is covered by the source files.
        return ("function", getattr(v, "__module__", None), v.__qualname__)
    if isinstance(v, types.MethodType):
        return ("method", freeze(v.__self__), v.__func__.__qualname__)
    if isinstance(v, logging.Logger):
        return ("logger", v.name)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return (
            "dataclass",
            type(v).__module__,
            type(v).__qualname__,
            tuple((f.name, freeze(getattr(v, f.name))) for f in dataclasses.fields(v)),
        )
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(v, np.dtype):
            return ("np.dtype", v.str)
        if isinstance(v, np.generic):
            return ("np." + type(v).__name__, v.item())
        if isinstance(v, np.ndarray) and v.nbytes <= (1 << 20) and v.dtype.kind in "biufc":
            digest = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
            return ("ndarray", v.dtype.str, v.shape, digest)
    t = sys.modules.get("torch")
    if t is not None and isinstance(v, t.dtype):
        return ("torch.dtype", str(v))
    raise Unkeyable(type(v).__qualname__)


def _is_code_like(v) -> bool:
    """Values whose in-memory identity matters (the same name can be a different function after a
    reload); they are compared by identity in memory and by name across processes."""
    return isinstance(v, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType))


def digest(frozen) -> str:
    return hashlib.sha256(repr(frozen).encode()).hexdigest()[:32]


def resolve(path, func):
    """The value at `path` in this process (_MISSING when it does not exist)."""
    kind = path[0]
    if kind == "k":
        v, steps = func, path[1:]
    elif kind == "m":
        v, steps = sys.modules.get(path[1], _MISSING), path[2:]
    else:
        return _MISSING
    for step, name in steps:
        if v is _MISSING:
            return v
        if step == "g":
            g = v.__globals__ if isinstance(v, types.FunctionType) else getattr(v, "__dict__", None)
            v = g.get(name, _MISSING) if isinstance(g, dict) else _MISSING
        elif step == "a":
            try:
                v = getattr(v, name)
            except Exception:  # noqa: BLE001 - a path that no longer resolves is a mismatch
                return _MISSING
        elif step == "c":
            code = getattr(v, "__code__", None)
            cells = getattr(v, "__closure__", None) or ()
            if code is None or name not in code.co_freevars:
                return _MISSING
            try:
                v = cells[code.co_freevars.index(name)].cell_contents
            except (IndexError, ValueError):  # an empty cell
                return _MISSING
        else:
            return _MISSING
    return v


def path_str(path, func=None) -> str:
    """`path` as the user would write it (for notes)."""
    if path[0] == "k":
        steps = path[1:]
        qual = getattr(func, "__qualname__", "<kernel>")
        out = getattr(func, "__module__", "<kernel>") if steps and steps[0][0] == "g" else qual
    else:
        out, steps = path[1], path[2:]
    for step, name in steps:
        out += f" (closure variable {name!r})" if step == "c" else f".{name}"
    return out


# ---------------------------------------------------------------------------------------------
# Files


_file_digests: dict[tuple, str | None] = {}


def file_digest(path: str) -> str | None:
    """sha256 of a file's bytes (memoized per size and mtime), None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    memo = (path, st.st_size, st.st_mtime_ns)
    if memo in _file_digests:
        return _file_digests[memo]
    try:
        with open(path, "rb") as f:
            d = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        d = None
    _file_digests[memo] = d
    return d


# ---------------------------------------------------------------------------------------------
# Bytecode: which globals and closure cells a code object reads


_reads_memo: dict = {}


def _reads(code: types.CodeType) -> tuple[tuple, tuple]:
    """(global chains, closure chains) loaded by `code`: a chain is the name and the attribute
    names read off it right away (``cfg.tile.size`` -> ("cfg", "tile", "size"))."""
    hit = _reads_memo.get(code)
    if hit is not None:
        return hit
    globs: set = set()
    cells: set = set()
    chain: list | None = None
    target: set | None = None
    for ins in dis.get_instructions(code):
        op = ins.opname
        if chain is not None and op in ("LOAD_ATTR", "LOAD_METHOD"):
            chain.append(ins.argval)
            continue
        if chain is not None:
            target.add(tuple(chain))
            chain = None
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            chain, target = [ins.argval], globs
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF") and ins.argval in code.co_freevars:
            chain, target = [ins.argval], cells
    if chain is not None:
        target.add(tuple(chain))
    hit = (tuple(sorted(globs)), tuple(sorted(cells)))
    _reads_memo[code] = hit
    return hit


# ---------------------------------------------------------------------------------------------
# Recording


class Deps:
    """What one trace read. `values`: [(path, value, frozen or None)]; `files`: {path: sha256};
    `unkeyable`: why the trace cannot be persisted (empty when it can)."""

    def __init__(self, recorded: bool = False):
        self.values: list[tuple] = []
        self.files: dict[str, str] = {}
        self.unkeyable: list[str] = []
        self.recorded = recorded  # from a Recorder (files and values of the code that ran)

    def valid_in_memory(self, func) -> bool:
        """Whether every recorded value is still what the trace saw (same object, or an equal
        constant)."""
        for path, v, frozen in self.values:
            cur = resolve(path, func)
            if cur is v:
                continue
            if frozen is None or _is_code_like(v) or cur is _MISSING:
                return False
            try:
                if freeze(cur) != frozen:
                    return False
            except Unkeyable:
                return False
        return True

    def identity_check(self, func):
        """A function of no arguments that is True while every recorded value is still the very
        object the trace saw (a stricter test than valid_in_memory, made for warm calls: one
        C-level lookup per value; a False means "ask valid_in_memory")."""
        groups: dict = {}  # id(dict) -> (dict, names, expected values)
        generic = []

        def add(d, name, v):
            g = groups.setdefault(id(d), (d, [], []))
            g[1].append(name)
            g[2].append(v)

        attrs: dict = {}  # (id(dict), name) -> (dict, name, attribute chains, expected values)
        for path, v, _f in self.values:
            if path[0] == "k" and isinstance(func, types.FunctionType):
                g, steps = func.__globals__, path[1:]
            elif path[0] == "m":
                mod = sys.modules.get(path[1], _MISSING)
                g, steps = getattr(mod, "__dict__", None), path[2:]
                if not isinstance(g, dict):
                    return lambda: False
                add(sys.modules, path[1], mod)  # the module itself, then what is read off it
            else:
                g, steps = None, ()
            if g is None or not steps or steps[0][0] != "g" or any(st != "a" for st, _ in steps[1:]):
                generic.append((path, v))
            elif len(steps) == 1:
                add(g, steps[0][1], v)
            else:  # a global's attributes (enum members, config fields): one attrgetter per global
                a = attrs.setdefault((id(g), steps[0][1]), (g, steps[0][1], [], []))
                a[2].append(".".join(n for _, n in steps[1:]))
                a[3].append(v)
        if not groups and not generic and not attrs:
            return lambda: True
        items = []
        for d, names, vals in groups.values():
            if len(names) == 1:
                names, vals = names * 2, vals * 2  # itemgetter of one name returns no tuple
            items.append((d, operator.itemgetter(*names), tuple(vals)))
        attr_items = []
        for d, name, chains, vals in attrs.values():
            if len(chains) == 1:
                chains, vals = chains * 2, vals * 2
            attr_items.append((d, name, operator.attrgetter(*chains), tuple(vals)))
        is_ = operator.is_

        def check() -> bool:
            try:
                for d, get, expected in items:
                    if not all(map(is_, get(d), expected)):
                        return False
                for d, name, get, expected in attr_items:
                    if not all(map(is_, get(d[name]), expected)):
                        return False
            except Exception:  # noqa: BLE001 - a value that no longer resolves: ask the full check
                return False
            for path, v in generic:
                if resolve(path, func) is not v:
                    return False
            return True

        return check

    @classmethod
    def from_manifest(cls, manifest: dict, func) -> Deps:
        """The in-memory form of a stored manifest that matched this process."""
        deps = cls(recorded=True)
        deps.files = {p: d for p, d in manifest["files"]}
        for p, _d in manifest["values"]:
            path = _path_from_json(p)
            v = resolve(path, func)
            deps.values.append((path, v, freeze(v)))
        return deps

    def manifest(self) -> dict:
        """The JSON form stored with a disk entry (only meaningful when nothing is unkeyable)."""
        return {
            "files": sorted([p, d] for p, d in self.files.items()),
            "values": sorted([_path_json(p), digest(f)] for p, _v, f in self.values),
        }

    def portable(self, func) -> dict | None:
        """The manifest with paths rooted at modules instead of at `func` (for a cache that must
        check it before the function is at hand, the warm-start index); None when the trace
        was not recorded, read something unkeyable or a closure cell of `func`."""
        if not self.recorded or self.unkeyable:
            return None
        mod = sys.modules.get(getattr(func, "__module__", None) or "")
        if getattr(mod, "__dict__", None) is not getattr(func, "__globals__", None):
            mod = None
        values = []
        for path, _v, f in self.values:
            if path[0] == "k":
                if mod is None or path[1][0] != "g":
                    return None
                path = ("m", mod.__name__, *path[1:])
            values.append([_path_json(path), digest(f)])
        return {"files": sorted([p, d] for p, d in self.files.items()), "values": sorted(values)}


def merge(manifests) -> dict | None:
    """One manifest covering all of `manifests` (None if any is None)."""
    files: dict = {}
    values: dict = {}
    for m in manifests:
        if m is None:
            return None
        files.update((p, d) for p, d in m["files"])
        values.update((json.dumps(p), (p, d)) for p, d in m["values"])
    return {
        "files": sorted([p, d] for p, d in files.items()),
        "values": sorted(list(v) for v in values.values()),
    }


_required: contextvars.ContextVar = contextvars.ContextVar("nki_recording_required", default=False)


@contextlib.contextmanager
def recording_required():
    """Kernels traced (or taken from memory) inside the block carry recorded deps, because their
    programs go into something another process reuses (a NEFF behind the warm-start index)."""
    token = _required.set(True)
    try:
        yield
    finally:
        _required.reset(token)


def required() -> bool:
    return _required.get()


def _path_json(path) -> list:
    return [path[0]] + [list(s) if isinstance(s, tuple) else s for s in path[1:]]


def _path_from_json(p) -> tuple:
    return tuple([p[0]] + [tuple(s) if isinstance(s, list) else s for s in p[1:]])


def manifest_matches(manifest: dict, func) -> bool:
    """Whether the files and values a stored trace read are the same in this process."""
    try:
        for path, d in manifest["files"]:
            if file_digest(path) != d:
                return False
        for p, d in manifest["values"]:
            cur = resolve(_path_from_json(p), func)
            if cur is _MISSING:
                return False
            try:
                if digest(freeze(cur)) != d:
                    return False
            except Unkeyable:
                return False
    except (KeyError, TypeError, ValueError):
        return False
    return True


class Recorder:
    """Context manager around a kernel's Python: notes every code object that starts running
    (a global trace function that sets no local tracing, chained to a debugger's or coverage
    tool's), then works out the files and values those codes read."""

    def __init__(self, func):
        self.func = func
        self.codes: dict[types.CodeType, dict] = {}
        self._prev = None

    def __enter__(self):
        self._prev = sys.gettrace()
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(self._prev)

    def _on_call(self, frame, event, arg):
        code = frame.f_code
        if code not in self.codes:
            g = frame.f_globals
            if code.co_filename.startswith("<"):
                # Generated code (namedtuple, dataclass methods) called by the standard library
                # or site-packages belongs to them.
                back = frame.f_back
                if back is not None and back.f_code.co_filename.startswith(_SYSTEM_DIRS):
                    g = None
            self.codes[code] = g
        prev = self._prev
        return prev(frame, event, arg) if prev is not None else None

    def finish(self) -> Deps:
        """The files and values the codes that ran read."""
        deps = collect(self.func, self.codes, files=True)
        deps.recorded = True
        return deps


def static_deps(func, max_functions: int = 256) -> Deps:
    """Without a recording: the values read by the kernel, the functions nested in it and the user
    functions it reaches through its globals and closures (a cheaper, partial view used to
    check in-memory hits when the disk cache is off)."""
    codes: dict = {}
    queue = [func]
    while queue and len(codes) < max_functions:
        f = queue.pop()
        code = getattr(f, "__code__", None)
        if code is None or code in codes or code.co_filename.startswith(_LIBRARY_DIRS):
            continue
        stack = [code]
        while stack:  # functions defined inside f read f's globals
            c = stack.pop()
            codes[c] = f.__globals__
            stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType) and k not in codes)
        globs, cells = _reads(code)
        for chain in globs:
            v = f.__globals__.get(chain[0], _MISSING)
            if v is not _MISSING:
                queue.extend(_functions_in(_follow(v, chain[1:])))
        for chain in cells:
            if chain[0] in code.co_freevars and f.__closure__:
                try:
                    v = f.__closure__[code.co_freevars.index(chain[0])].cell_contents
                except ValueError:
                    continue
                queue.extend(_functions_in(_follow(v, chain[1:])))
    return collect(func, codes, files=False)


def _follow(v, attrs):
    for a in attrs:
        if not isinstance(v, (types.ModuleType, type)) and _keyable(v):
            break
        if isinstance(v, types.ModuleType) and _is_library_module(v):
            return None
        try:
            v = getattr(v, a)
        except Exception:  # noqa: BLE001
            break
    return v


def _functions_in(v) -> list:
    out = []
    for _ in range(4):
        if isinstance(v, types.FunctionType):
            out.append(v)
        v = getattr(v, "__wrapped__", None) if v is not None and not isinstance(v, type) else None
        if v is None:
            break
    return out


def collect(func, codes: dict, files: bool) -> Deps:
    """What `codes` (code object -> its globals, None for standard-library code) read: their
    source files (when `files`) and the globals and closure cells user code loads."""
    deps = Deps()
    seen_values: set = set()
    user_codes = []
    for code, g in codes.items():
        fn = code.co_filename
        if g is None or fn.startswith(_SYSTEM_DIRS) or fn.startswith("<frozen"):
            continue  # keyed by the Python version
        if files:
            if not os.path.isfile(fn):
                deps.unkeyable.append(f"{code.co_qualname} has no source file ({fn})")
                continue
            if fn not in deps.files:
                d = file_digest(fn)
                if d is None:
                    deps.unkeyable.append(f"cannot read {fn}")
                    continue
                deps.files[fn] = d
        if not fn.startswith(_LIBRARY_DIRS) and code.co_flags & _CO_NEWLOCALS:
            user_codes.append((code, g))

    def add(path, v):
        key = repr(path)
        if key in seen_values:
            return
        seen_values.add(key)
        try:
            frozen = freeze(v)
        except Unkeyable as e:
            frozen = None
            deps.unkeyable.append(f"{path_str(path, func)} (a {e}) cannot be keyed")
        deps.values.append((path, v, frozen))

    def read_chain(path, v, attrs):
        """Follows attribute reads off `v` through modules, classes and objects that are not
        constants themselves; records the value where the chain stops."""
        for a in attrs:
            if isinstance(v, types.ModuleType) and _is_library_module(v):
                return  # library code and constants: covered by its sources / version
            if not isinstance(v, (types.ModuleType, type)) and _keyable(v):
                break
            try:
                nv = getattr(v, a)
            except Exception:  # noqa: BLE001 - not read at trace time after all
                break
            path, v = (*path, ("a", a)), nv
        if isinstance(v, types.ModuleType) and _is_library_module(v):
            return
        add(path, v)

    func_globals = getattr(func, "__globals__", None)
    for code, g in user_codes:
        globs, _cells = _reads(code)
        if not globs:
            continue
        if g is func_globals:
            root = ("k",)
        else:
            name = g.get("__name__")
            mod = sys.modules.get(name) if isinstance(name, str) else None
            if mod is None or getattr(mod, "__dict__", None) is not g:
                deps.unkeyable.append(f"the globals of {code.co_qualname} belong to no imported module")
                continue
            root = ("m", name)
        for chain in globs:
            v = g.get(chain[0], _MISSING)
            if v is _MISSING:
                continue  # a builtin, or a name never defined (so never read)
            read_chain((*root, ("g", chain[0])), v, chain[1:])

    # Closure cells: the kernel's own, and those of helpers that existed before the trace
    # (found as values the trace read); closures made while tracing hold derived values.
    ran = {(c.co_filename, c.co_qualname) for c in codes}
    owners: dict = {}
    if isinstance(func, types.FunctionType):
        owners.setdefault(func.__code__, []).append((("k",), func))
    for path, v, _f in list(deps.values):
        w, p = v, path
        for _ in range(4):
            if isinstance(w, types.FunctionType):
                owners.setdefault(w.__code__, []).append((p, w))
            nxt = getattr(w, "__wrapped__", None) if not isinstance(w, type) else None
            if nxt is None:
                break
            w, p = nxt, (*p, ("a", "__wrapped__"))
    for code, _g in user_codes:
        _globs, cells = _reads(code)
        cells = [c for c in cells if c[0] != "__class__"]  # super(): the class itself
        if not cells:
            continue
        found = owners.get(code)
        if not found:
            parent = code.co_qualname.rpartition(".<locals>.")[0]
            if parent and (code.co_filename, parent) in ran:
                continue  # defined while tracing
            deps.unkeyable.append(
                f"closure variables {sorted(c[0] for c in cells)} of {code.co_qualname} (a function the "
                "kernel did not reach through a global)"
            )
            continue
        for path, fobj in found:
            for chain in cells:
                try:
                    v = fobj.__closure__[code.co_freevars.index(chain[0])].cell_contents
                except (ValueError, IndexError, TypeError):
                    continue
                read_chain((*path, ("c", chain[0])), v, chain[1:])
    return deps


def _keyable(v) -> bool:
    try:
        freeze(v)
    except Unkeyable:
        return False
    return True


def _is_library_module(m: types.ModuleType) -> bool:
    f = getattr(m, "__file__", None)
    if f is None:
        return m.__name__ in sys.builtin_module_names
    return os.path.abspath(f).startswith(_LIBRARY_DIRS)
