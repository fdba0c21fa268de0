"""nki.compiler: allocation and scheduling directives of the real NKI compiler.

On neuron-emu the placement of SBUF tensors is decided by the trace's liveness allocator
(which checks capacity and, for ``address=`` tensors, overlap); ``sbuf.mod_alloc(...)`` names
the buffer and how its blocks share tiles, its ``base_addr`` is recorded, not obeyed. PSUM
placements (``psum.mod_alloc(base_bank=...)``, ``psum.alloc(func)``) are obeyed: every block
sits at its (bank, partition, byte) (nki._tensor._new_psum_placed). The kernel decorators only steer the real
compiler's optimizer and leave results unchanged, so they return the kernel as it is.
"""

from __future__ import annotations

import contextlib

from ._tensor import MemoryRegion


class _Allocation:
    """A buffer with an allocation directive, usable as ``nl.ndarray(..., buffer=...)``."""

    def __init__(self, region: MemoryRegion, kind: str, hints: dict):
        self._nki_region = region
        self.kind = kind
        self.hints = hints

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hints.items())
        return f"nki.compiler.{self._nki_region.value}.{self.kind}({args})"


class _OnChip:
    def __init__(self, region: MemoryRegion):
        self._region = region

    def alloc(self, func=None, **hints) -> _Allocation:
        """Direct allocation: ``func(idx=, pdim_size=, fdim_size=)`` gives each block's place
        (obeyed for PSUM: (bank, start partition, byte offset); recorded for SBUF)."""
        return _Allocation(self._region, "alloc", dict(hints, func=func))

    def mod_alloc(self, base_addr=None, base_partition=None, num_par_tiles=None, num_free_tiles=None, **hints):
        """Modulo allocation of a tensor's blocks over a few physical tiles (PSUM: at
        ``base_bank`` etc., obeyed; SBUF: ``base_addr`` recorded)."""
        return _Allocation(
            self._region,
            "mod_alloc",
            dict(hints, base_addr=base_addr, base_partition=base_partition,
                 num_par_tiles=num_par_tiles, num_free_tiles=num_free_tiles),
        )

    def auto_alloc(self) -> _Allocation:
        return _Allocation(self._region, "auto_alloc", {})

    @property
    def _nki_region(self) -> MemoryRegion:  # ``buffer=ncc.sbuf`` itself
        return self._region

    def __repr__(self) -> str:
        return f"nki.compiler.{self._region.value}"


sbuf = _OnChip(MemoryRegion.sbuf)
psum = _OnChip(MemoryRegion.psum)


def _decorator(func):
    return func if func is not None else (lambda f: f)


def skip_middle_end_transformations(func=None):
    """Tells the real compiler to skip its middle-end passes; no effect on results here."""
    return _decorator(func)


def enable_stack_allocator(func=None, log_level=50):
    """Selects the real compiler's stack allocator; placement here is the trace allocator's."""
    return _decorator(func)


def force_auto_alloc(func=None):
    """Ignores direct allocations in the real compiler; here placement is always automatic."""
    return _decorator(func)


class _MultiBuffer:
    def __init__(self, factor: int):
        self.factor = int(factor)


def multi_buffer(factor=2) -> _MultiBuffer:
    """A multi-buffering directive for loops (``nl.affine_range(..., directives=...)``)."""
    return _MultiBuffer(factor)


def no_reorder():
    """Keeps instructions in program order (the emulator issues every engine in order)."""
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# nki.compiler.frontend: the real compiler's Python front ends (``ParserFrontend().compile(kernel,
# inputs=..., target=..., lnc=...)``), which the NKI Library's trace-only tests call. Here a front
# end traces the kernel for those inputs (every trace-time check and kernel_assert runs) and
# returns the traced program; nothing is compiled further (CompileOnly/NEFF needs the real
# toolchain).


class _Module:
    """``result.module``: the traced program; ``.operation.print(file=f)`` writes its dump."""

    def __init__(self, traced):
        self._traced = traced
        self.operation = self

    def print(self, file=None, **_options) -> None:
        text = self._traced.dump()
        if file is None:
            print(text)
        else:
            file.write(text + "\n")


class FrontendResult:
    """What ``NKIFrontend.compile`` returns: the traced kernel and its program (``module``)."""

    def __init__(self, traced, target: str | None, lnc: int):
        self.traced = traced
        self.module = _Module(traced)
        self.target = target
        self.lnc = lnc


class NKIFrontend:
    """A front end from a Python kernel to a program: here, the tracer of nki.jit."""

    def compile(self, kernel, inputs: dict | None = None, target: str | None = None, lnc: int = 1,
                artifacts_dir=None, dump_python_ast: bool = False, output_names=None) -> FrontendResult:
        from ._jit import jit
        from ._profile import _as_kernel

        k = _as_kernel(kernel)
        if target is not None and str(target) in ("trn1", "trn2", "trn3"):
            k = jit(k.func, platform_target=str(target), **{n: v for n, v in k.options.items()
                                                            if n not in ("platform_target", "mode")})
        if int(lnc) > 1:
            k = k[int(lnc)]
        return FrontendResult(k.specialize(**(inputs or {})), target, int(lnc))


class ParserFrontend(NKIFrontend):
    """The real compiler's AST front end; traced here like every kernel."""


class TracerFrontend(NKIFrontend):
    """The real compiler's tracing front end."""


def _frontend_module():
    import sys
    import types

    m = types.ModuleType("nki.compiler.frontend", "Front ends from Python kernels to programs.")
    for n in ("FrontendResult", "NKIFrontend", "ParserFrontend", "TracerFrontend"):
        setattr(m, n, globals()[n])
    sys.modules[m.__name__] = m
    return m


frontend = _frontend_module()


__all__ = [
    "enable_stack_allocator",
    "force_auto_alloc",
    "multi_buffer",
    "no_reorder",
    "psum",
    "sbuf",
    "skip_middle_end_transformations",
]
