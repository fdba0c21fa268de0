"""neuron_dtypes: the Neuron element types as numpy types, and conversions between them.

The real stack ships this module with its compiler; the public NKI Library's tests and
references use it to prepare inputs (``static_cast(x, nl.bfloat16)``) and to reason about
types (``sizeinbytes``, ``finfo``, ``is_float_type``). The types are numpy dtypes (bfloat16 and
the float8 types from ml_dtypes); every function accepts a numpy dtype, a numpy scalar type,
an NKI dtype (``nl.bfloat16``) or a type name.
"""

from __future__ import annotations

import numpy as np

from nki import _dtypes as _dt

__all__ = [
    "bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float16", "float32", "int8",
    "int16", "int32", "uint8", "uint16", "uint32", "float8_e4m3fn_x4", "float8_e5m2_x4",
    "float4_e2m1fn_x4", "static_cast", "sizeinbytes", "finfo", "iinfo", "is_float_type",
    "to_numpy_dtype",
]

# Packed microscaling types (four values in one 16/32-bit container) have no numpy type: they
# are named by their NKI dtype, and static_cast refuses them (pack them with the kernels' MX
# helpers instead).
_PACKED = {"float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"}


def _name(dtype) -> str:
    if isinstance(dtype, _dt.DType):
        return str(dtype)
    if isinstance(dtype, str) and dtype in _dt.ALL:
        return dtype
    try:
        return str(np.dtype(dtype))
    except TypeError:
        return str(_dt.to_dtype(dtype))


def to_numpy_dtype(dtype) -> np.dtype:
    """The numpy dtype of a Neuron element type (raises TypeError for packed MX types)."""
    name = _name(dtype)
    if name in _PACKED:
        raise TypeError(f"neuron_dtypes: {name} is a packed microscaling type with no numpy element type")
    if name in _dt.ALL:
        return _dt.numpy_dtype(_dt.ALL[name])
    return np.dtype(name)


def static_cast(x, dtype) -> np.ndarray:
    """`x` converted to `dtype` element by element: floats round to nearest even, as the
    hardware's converters do; integer targets take numpy's conversion."""
    return np.asarray(x).astype(to_numpy_dtype(dtype))


def sizeinbytes(dtype) -> int:
    """Bytes of one element (of one container for packed MX types)."""
    name = _name(dtype)
    if name in _dt.ALL:
        return _dt.ALL[name].itemsize
    return np.dtype(name).itemsize


def is_float_type(dtype) -> bool:
    name = _name(dtype)
    if name in _dt.ALL:
        return _dt.is_float(name)  # bfloat16, float8 and the packed MX types included
    return bool(np.issubdtype(np.dtype(name), np.floating))


def finfo(dtype):
    """Machine limits of a floating type (ml_dtypes.finfo for bfloat16 and float8)."""
    nd = to_numpy_dtype(dtype)
    try:
        return np.finfo(nd)
    except ValueError:
        import ml_dtypes

        return ml_dtypes.finfo(nd)


def iinfo(dtype):
    return np.iinfo(to_numpy_dtype(dtype))


bfloat16 = to_numpy_dtype("bfloat16")
float8_e4m3 = to_numpy_dtype("float8_e4m3")
float8_e4m3fn = to_numpy_dtype("float8_e4m3fn")
float8_e5m2 = to_numpy_dtype("float8_e5m2")
float16, float32 = np.dtype(np.float16), np.dtype(np.float32)
int8, int16, int32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
uint8, uint16, uint32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
float8_e4m3fn_x4 = _dt.ALL["float8_e4m3fn_x4"]
float8_e5m2_x4 = _dt.ALL["float8_e5m2_x4"]
float4_e2m1fn_x4 = _dt.ALL["float4_e2m1fn_x4"]
