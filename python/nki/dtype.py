"""nki.dtype: the NKI data types (also ``nki.language.<name>``). The module itself is what the
real library uses as a type annotation (``dtype: nki.dtype = nl.bfloat16``)."""

from __future__ import annotations

from ._dtypes import (  # noqa: F401
    DType,
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)

bool = bool_  # noqa: A001
