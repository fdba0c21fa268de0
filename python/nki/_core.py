"""Access to the C++ NeuronCore model (the extension ``nki._nki_native``, which needs no torch)
and the target machine."""

from __future__ import annotations

import os

_core = None


def core():
    """The native module (loaded on first use)."""
    global _core
    if _core is None:
        try:
            from . import _nki_native
        except ImportError as e:
            raise ImportError(
                f"nki: cannot load its native core nki/_nki_native ({e}); build it with `make build`"
            ) from e
        _core = _nki_native
    return _core


# NeuronCore generations by platform target (NEURON_PLATFORM_TARGET_OVERRIDE).
_TARGETS = {
    "trn1": {"nc_version": 2, "sbuf_bytes_per_partition": 192 * 1024},
    "inf2": {"nc_version": 2, "sbuf_bytes_per_partition": 192 * 1024},
    "trn2": {"nc_version": 3, "sbuf_bytes_per_partition": 224 * 1024},
    "trn3": {"nc_version": 4, "sbuf_bytes_per_partition": 256 * 1024},
}


def target(platform: str | None = None) -> dict:
    """The machine kernels are traced for: `platform` (``nki.jit(platform_target=)``), else
    NEURON_PLATFORM_TARGET_OVERRIDE=trn1|trn2|trn3 like the real compiler, else the instance
    profile (NEURON_EMU_INSTANCE_TYPE)."""
    t = dict(core().default_target())
    override = (platform or os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "")).strip().lower()
    if override:
        if override not in _TARGETS:
            raise ValueError(
                f"NEURON_PLATFORM_TARGET_OVERRIDE={override!r}: expected one of {sorted(_TARGETS)}"
            )
        t.update(_TARGETS[override])
        t["platform"] = override
    else:
        t["platform"] = {2: "trn1", 3: "trn2", 4: "trn3"}.get(t["nc_version"], "trn2")
    return t
