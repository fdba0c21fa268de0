"""One-time registration of the ``neuron`` device with PyTorch."""

from __future__ import annotations

import os

import torch

_registered = False


def register_device() -> None:
    global _registered
    if _registered:
        return
    # The runtime defaults the real package sets on import.
    os.environ.setdefault("TORCH_NEURONX_ENABLE_ASYNC_NRT", "1")

    torch.utils.rename_privateuse1_backend("neuron")
    from . import neuron as device_module

    torch._register_device_module("neuron", device_module)
    if not hasattr(torch.Tensor, "neuron"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
        )
    _patch_tensor_printing()
    _patch_current_accelerator()
    _registered = True


def _patch_tensor_printing() -> None:
    # Formatting a tensor runs many small ops on it (abs, masked_select, ...). For neuron
    # tensors format a host copy instead, so printing neither falls back op by op nor shows
    # up in get_fallback_ops(); the device suffix is still printed by the caller.
    from torch import _tensor_str

    original = _tensor_str._tensor_str
    if getattr(original, "_neuron_patched", False):
        return

    def _tensor_str_neuron(self, indent):
        if self.device.type == "neuron":
            self = self.to("cpu")
        return original(self, indent)

    _tensor_str_neuron._neuron_patched = True  # type: ignore[attr-defined]
    _tensor_str._tensor_str = _tensor_str_neuron


def _patch_current_accelerator() -> None:
    # The device of the current accelerator carries the current index (neuron:0), so that
    # `print(torch.accelerator.current_accelerator())` shows the device tensors land on.
    import torch.accelerator as acc

    original = acc.current_accelerator
    if getattr(original, "_neuron_patched", False):
        return

    def current_accelerator(check_available: bool = False):
        dev = original(check_available)
        if dev is not None and dev.type == "neuron" and dev.index is None:
            # torch's own binding (not ours) so that Dynamo can trace through this function.
            return torch.device("neuron", torch._C._accelerator_getDeviceIndex())
        return dev

    current_accelerator.__doc__ = original.__doc__
    current_accelerator._neuron_patched = True  # type: ignore[attr-defined]
    acc.current_accelerator = current_accelerator
