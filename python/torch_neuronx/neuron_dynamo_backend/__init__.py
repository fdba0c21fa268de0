"""The ``neuron`` backend of ``torch.compile``: Dynamo -> AOT autograd -> Neuron IR -> NEFF.

Usage: ``torch.compile(model, backend="neuron")``. See ``backend.py`` for the pipeline,
``lowering.py`` for the supported aten ops, ``docs/neff-format.md`` for the NEFF format.
Importing this package is cheap: the backend modules load on first use.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .metrics import get_dynamo_metrics, reset_dynamo_metrics


def __getattr__(name: str) -> Any:
    if name == "neuron_backend":
        return importlib.import_module(".backend", __name__).neuron_backend
    if name == "register_opaque_op":
        return importlib.import_module(".lowering", __name__).register_opaque_op
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_REGISTRY = "torch._dynamo.backends.registry"
_DEVICE_INTERFACE = "torch._dynamo.device_interface"


def _register_backend() -> None:
    registry = sys.modules[_REGISTRY]
    if "neuron" not in registry._COMPILER_FNS:
        from .backend import neuron_backend

        registry.register_backend(neuron_backend, name="neuron")


def _register_device_interface() -> None:
    from .device_interface import register

    register()


_ON_IMPORT = {_REGISTRY: _register_backend, _DEVICE_INTERFACE: _register_device_interface}


class _RegisterOnImport:
    """A meta-path finder that registers the backend right after Dynamo's backend registry is
    imported, and the device interface after ``torch._dynamo.device_interface``, so ``import
    torch`` does not pay for importing Dynamo (the entry point in
    distributions/torch-neuronx/pyproject.toml registers the backend for installed packages)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _ON_IMPORT:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _ON_IMPORT[fullname]()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install() -> None:
    for name, register in _ON_IMPORT.items():
        if name in sys.modules:
            register()
    if not all(name in sys.modules for name in _ON_IMPORT) and not any(
        isinstance(f, _RegisterOnImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _RegisterOnImport())


__all__ = ["get_dynamo_metrics", "neuron_backend", "register_opaque_op", "reset_dynamo_metrics"]
