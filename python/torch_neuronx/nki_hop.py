"""NKI kernels as PyTorch operators.

``wrap_nki(kernel)`` turns an ``@nki.jit`` kernel into a callable for torch tensors
(``wrap_nki(kernel)[grid](...)`` launches a grid). ``@nki_op("ns::name", mutates_args=...)``
registers a function that calls NKI kernels as a torch custom operator: in eager mode it runs
the kernels on the tensors' device (one task on the current stream per kernel); under
``torch.compile`` the operator is a single graph node whose output shapes come from tracing the
kernels with fake tensors; the neuron backend records the kernel launches of the body and runs
them natively inside the compiled program (see neuron_dynamo_backend/nki_lowering.py).
``op.register_autograd(...)`` adds a backward for training.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import nki
import torch
from nki._jit import Kernel


class NKIHOPCaller:
    """A kernel bound for torch tensors; ``caller[grid]`` sets the launch grid."""

    def __init__(self, kernel, grid: tuple = ()):
        self.kernel = kernel if isinstance(kernel, Kernel) else nki.jit(kernel)
        if grid:
            self.kernel = self.kernel[grid]
        self.grid = tuple(grid)

    def __getitem__(self, grid) -> NKIHOPCaller:
        if isinstance(grid, int):
            grid = (grid,)
        return NKIHOPCaller(self.kernel, tuple(grid))

    def __call__(self, *args, **kwargs):
        return _call_kernel(self.kernel, *args, **kwargs)

    def __repr__(self) -> str:
        return f"NKIHOPCaller({self.kernel!r})"


@torch.compiler.disable
def _call_kernel(kernel: Kernel, *args, **kwargs):
    # Called directly inside a torch.compile region (without nki_op) the kernel is not
    # traceable by Dynamo: it runs eagerly at a graph break. Inside an nki_op it runs as the
    # operator's implementation (real tensors) or its fake implementation (fake tensors).
    return kernel(*args, **kwargs)


def wrap_nki(nki_kernel, **kwargs) -> NKIHOPCaller:
    """Wraps an ``@nki.jit`` kernel (or a plain kernel function) for torch tensors."""
    return NKIHOPCaller(nki_kernel)


@dataclass(frozen=True)
class _NkiOpInfo:
    """What the compiler needs to lower an nki_op: the body (run on fake tensors at compile time
    to record its kernel launches) and the arguments it declares mutated."""

    name: str
    fn: Callable
    mutates_args: tuple[str, ...] | str


# "ns::name" -> the op's body. neuron_dynamo_backend.nki_lowering turns calls of these ops into
# single native nodes of compiled graphs.
_NKI_OPS: dict[str, _NkiOpInfo] = {}


def nki_op(name: str, fn: Callable | None = None, mutates_args: str | Iterable[str] = ()) -> Callable:
    """Registers `fn` (which calls NKI kernels on torch tensors) as the custom operator `name`
    ("namespace::op"). `fn` needs type annotations (they define the operator schema), like
    ``torch.library.custom_op``. The same function is the fake (meta) implementation: under fake
    tensors the kernels only compute output shapes. Under ``torch.compile(backend="neuron")`` a body
that only launches NKI kernels (plus allocations, views, copies and fills) becomes one native
node of the compiled program; any other torch op in the body makes the node run eagerly.
"""
    if isinstance(mutates_args, str) and mutates_args != "unknown":
        mutates_args = (mutates_args,)

    def register(f: Callable):
        op = torch.library.custom_op(name, mutates_args=mutates_args)(f)
        op.register_fake(f)
        muts = mutates_args if isinstance(mutates_args, str) else tuple(sorted(mutates_args))
        _NKI_OPS[name] = _NkiOpInfo(name, f, muts)
        return op

    return register(fn) if fn is not None else register


def _install_dynamo_guard() -> None:
    """Makes a direct ``@nki.jit`` kernel call inside torch.compile a graph break that runs the
    kernel eagerly (Dynamo cannot trace through the NKI tracer)."""
    if getattr(Kernel.__call__, "_neuron_dynamo_guard", False):
        return
    original = Kernel.__call__
    guarded = torch.compiler.disable(original)
    guarded._neuron_dynamo_guard = True  # type: ignore[attr-defined]
    Kernel.__call__ = guarded


_install_dynamo_guard()

__all__ = ["NKIHOPCaller", "nki_op", "wrap_nki"]
