"""Device selection, availability and properties."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _C

_device_t = torch.device | str | int | None


def _index(device: _device_t, optional: bool = True) -> int:
    """The device index of `device` (None means the current device)."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device, but got: {device}")
        return _C._current_device() if device.index is None else device.index
    raise TypeError(f"Invalid device {device!r}: expected torch.device, str, int or None")


def is_available() -> bool:
    """True if at least one logical NeuronCore is visible to this process."""
    return _C._device_count() > 0


def device_count() -> int:
    """Number of logical NeuronCores visible to this process (``neuron:0`` ... ``neuron:n-1``)."""
    return int(_C._device_count())


def is_initialized() -> bool:
    return bool(_C._is_initialized())


def init() -> None:
    """Start the runtime now (it otherwise starts on first use)."""
    _lazy_init()


def _lazy_init() -> None:
    if _C._is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    _C._init()


def _is_in_bad_fork() -> bool:
    return bool(_C._is_in_bad_fork())


def current_device() -> int:
    return int(_C._current_device())


def set_device(device: _device_t) -> None:
    """Select the current device of this thread; out-of-range indices raise."""
    idx = _index(device)
    if idx < 0:
        return
    _lazy_init()
    n = device_count()
    if idx >= n:
        raise RuntimeError(f"The device index is out of range: neuron:{idx} is not available, this process "
                           f"sees {n} logical NeuronCores")
    _C._set_device(idx)


class device:
    """Context manager that changes the current device (like ``torch.cuda.device``)."""

    def __init__(self, device: _device_t):
        self.idx = _index(device) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = current_device()
            if self.prev_idx != self.idx:
                set_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        if self.idx >= 0 and self.prev_idx != self.idx:
            set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of `obj` (a tensor) current."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else None)


def synchronize(device: _device_t = None) -> None:
    """Wait for all work queued on every stream of `device` (default: the current device).

    An error raised by queued work surfaces here, naming the op that failed.
    """
    _lazy_init()
    _C._synchronize(_index(device))


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    total_memory: int
    instance_type: str
    nc_version: int
    logical_nc_config: int
    physical_cores: int
    global_core_id: int
    neuron_device: int
    sbuf_bytes: int
    psum_bytes: int

    def __repr__(self) -> str:
        return (
            f"NeuronDeviceProperties(name='{self.name}', total_memory={self.total_memory // 2**20}MB, "
            f"nc_version={self.nc_version}, logical_nc_config={self.logical_nc_config})"
        )


def get_device_properties(device: _device_t = None) -> NeuronDeviceProperties:
    _lazy_init()
    return NeuronDeviceProperties(**_C._device_properties(_index(device)))


def get_device_name(device: _device_t = None) -> str:
    return get_device_properties(device).name


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The lower-precision dtypes autocast can target (float32 is not one: torch.autocast warns
    and disables itself, as for CUDA's unsupported dtypes)."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
