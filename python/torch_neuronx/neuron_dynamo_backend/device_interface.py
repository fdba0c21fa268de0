"""Dynamo's device interface for ``neuron`` (``torch._dynamo.device_interface``): what code that
is generic over accelerators asks Dynamo about a device (current device, count, streams,
events, synchronize, properties). Registered when that module is imported."""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from .. import neuron


class NeuronInterface(DeviceInterface):
    device = neuron.device  # type: ignore[assignment]
    Event = neuron.Event  # type: ignore[assignment]
    Stream = neuron.Stream  # type: ignore[assignment]

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            neuron.set_device(device)

        @staticmethod
        def current_device() -> int:
            return neuron.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            return neuron.get_device_properties(device)

    current_device = staticmethod(neuron.current_device)
    set_device = staticmethod(neuron.set_device)
    device_count = staticmethod(neuron.device_count)
    is_available = staticmethod(neuron.is_available)
    stream = staticmethod(neuron.stream)
    current_stream = staticmethod(neuron.current_stream)
    set_stream = staticmethod(neuron.set_stream)
    synchronize = staticmethod(neuron.synchronize)
    get_device_properties = staticmethod(neuron.get_device_properties)  # type: ignore[assignment]
    memory_allocated = staticmethod(neuron.memory_allocated)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return torch._C._accelerator_maybeExchangeDevice(device)

    @staticmethod
    def exchange_device(device: int) -> int:
        return torch._C._accelerator_exchangeDevice(device)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        neuron.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return neuron.current_stream(device_idx).stream_id

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        return f"NeuronCore-v{neuron.get_device_properties(device).nc_version}"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        raise RuntimeError("neuron devices do not run Triton kernels (use NKI: nki.jit / torch_neuronx.nki_op)")


def register() -> None:
    register_interface_for_device("neuron", NeuronInterface)
    for i in range(neuron.device_count()):
        register_interface_for_device(f"neuron:{i}", NeuronInterface)
