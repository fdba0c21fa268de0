"""The 64-bit dtype contract of the Neuron device.

Trainium has no int64/float64 arithmetic; torch-neuronx casts such tensors to int32/float32 and
says so once through this module's logger::

    WARNING:torch_neuronx.python_ops.dtype_autocast:Neuron backend does not support int64. ...

neuron-emu computes 64-bit values exactly, but keeps the contract visible: the native kernels
(and the CPU fallback) call ``_warn_unsupported_dtype`` the first time a tensor of each 64-bit
dtype reaches them. With ``NEURON_EMU_STRICT_DTYPES=1`` a value that the 32-bit type cannot hold
raises an error naming the op instead (int64: outside the int32 range; float64: magnitude above
the float32 maximum, or nonzero below the smallest normal float32).
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger(__name__)

_CAST_TO = {"int64": "int32", "float64": "float32"}

# Used only when nothing is configured to handle this logger's records, so that the warning
# still reads like the real stack's (`WARNING:<logger>:<message>`) without configuring the
# root logger on the user's behalf.
_fallback_handler = logging.StreamHandler(sys.stderr)
_fallback_handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))


def message(dtype: str) -> str:
    """The warning text for a 64-bit dtype name ('int64' or 'float64')."""
    target = _CAST_TO[dtype]
    return (
        f"Neuron backend does not support {dtype}. Automatically casting to {target}. "
        f"Consider using {target} directly for better performance until native {dtype} "
        "support is added."
    )


def _warn_unsupported_dtype(dtype: str) -> None:
    """Called by the native layer once per 64-bit dtype (never on a device worker thread)."""
    if not logger.isEnabledFor(logging.WARNING):
        return
    if logger.hasHandlers():
        logger.warning(message(dtype))
    else:
        record = logger.makeRecord(logger.name, logging.WARNING, __file__, 0, message(dtype), None, None)
        _fallback_handler.handle(record)


__all__ = ["logger", "message"]
