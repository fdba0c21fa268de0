"""NKI element types (``nl.float32``, ``nl.bfloat16``, ...) and their mapping to numpy / torch."""

from __future__ import annotations

import sys

try:  # registers bfloat16 / float8 with numpy, so `x.astype(nl.bfloat16)` works as on the real stack
    import ml_dtypes  # noqa: F401
except ImportError:  # pragma: no cover - numpy-only installs keep the fp32/int types
    pass


class DType(str):
    """An NKI data type; compares equal to its name (``nl.float32 == "float32"``)."""

    __slots__ = ()

    @property
    def itemsize(self) -> int:
        return _SIZES[str(self)]

    @property
    def code(self) -> int:
        return _CODES[str(self)]

    def __repr__(self) -> str:
        return f"nl.{self!s}"


# Order matches neuron::nki::DT in csrc/nki/dtype.h.
_NAMES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "uint8",
    "uint16",
    "uint32",
    "float16",
    "bfloat16",
    "float32",
    "tfloat32",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e8m0fnu",
    "float8_e5m2_x4",
    "float8_e4m3fn_x4",
    "float4_e2m1fn_x4",
]
_SIZES = dict(zip(_NAMES, [1, 1, 2, 4, 1, 2, 4, 2, 2, 4, 4, 1, 1, 1, 1, 4, 4, 2]))
_CODES = {n: i for i, n in enumerate(_NAMES)}
ALL = {n: DType(n) for n in _NAMES}

bool_ = ALL["bool"]
int8, int16, int32 = ALL["int8"], ALL["int16"], ALL["int32"]
uint8, uint16, uint32 = ALL["uint8"], ALL["uint16"], ALL["uint32"]
float16, bfloat16, float32, tfloat32 = ALL["float16"], ALL["bfloat16"], ALL["float32"], ALL["tfloat32"]
float8_e4m3, float8_e4m3fn, float8_e5m2 = ALL["float8_e4m3"], ALL["float8_e4m3fn"], ALL["float8_e5m2"]
float8_e8m0fnu = ALL["float8_e8m0fnu"]
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = (
    ALL["float8_e5m2_x4"],
    ALL["float8_e4m3fn_x4"],
    ALL["float4_e2m1fn_x4"],
)

FLOATS = {float16, bfloat16, float32, tfloat32, float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu}


def is_float(dt: str) -> bool:
    return dt in FLOATS or dt.endswith("_x4")


_RESOLVED: dict = {}  # torch / numpy dtype objects already mapped (hot path of every launch)


def to_dtype(x) -> DType:
    """Accepts an NKI dtype, its name, a numpy dtype/type or a torch dtype."""
    if isinstance(x, DType):
        return x
    try:
        hit = _RESOLVED.get(x)
    except TypeError:  # unhashable
        hit = None
    if hit is not None:
        return hit
    r = _to_dtype(x)
    if not isinstance(x, str):
        _RESOLVED[x] = r
    return r


def _to_dtype(x) -> DType:
    if isinstance(x, str):
        name = {"bool_": "bool", "float": "float32", "fp32": "float32", "bf16": "bfloat16"}.get(x, x)
        if name in ALL:
            return ALL[name]
        raise TypeError(f"unknown NKI dtype {x!r}; expected one of {sorted(ALL)}")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.dtype):
        name = _TORCH_NAMES.get(str(x).replace("torch.", ""))
        if name is None:
            raise TypeError(f"torch dtype {x} has no NKI equivalent (NKI has no 64-bit types)")
        return ALL[name]
    try:
        import numpy as np

        name = np.dtype(x).name
    except TypeError:
        raise TypeError(f"cannot interpret {x!r} as an NKI dtype") from None
    mapped = _NUMPY_NAMES.get(name)
    if mapped is None:
        raise TypeError(f"numpy dtype {name} has no NKI equivalent (NKI has no 64-bit types)")
    return ALL[mapped]


_TORCH_NAMES = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "float8_e8m0fnu": "float8_e8m0fnu",
}
_NUMPY_NAMES = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "float16": "float16",
    "float32": "float32",
    # ml_dtypes names, when that package provides the numpy types
    "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "float8_e4m3": "float8_e4m3",
}


def torch_dtype(dt: DType):
    import torch

    name = {v: k for k, v in _TORCH_NAMES.items()}.get(str(dt))
    if name is None:
        raise TypeError(f"NKI dtype {dt} has no torch equivalent")
    return getattr(torch, name)


def numpy_dtype(dt: DType):
    import numpy as np

    if dt in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3"):
        try:
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, str(dt)))
        except (ImportError, AttributeError):
            raise TypeError(f"numpy has no {dt} type (install ml_dtypes, or pass torch tensors)") from None
    return np.dtype(str(dt))


def promote(a: DType, b: DType) -> DType:
    """The higher-precision of two types (NKI type promotion)."""
    if a == b:
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and not fb:
        return a
    if fb and not fa:
        return b
    if fa and fb:
        if a.itemsize != b.itemsize:
            return a if a.itemsize > b.itemsize else b
        if {a, b} == {float32, tfloat32}:
            return float32
        return float32 if a.itemsize == 2 else bfloat16
    if a == bool_:
        return b
    if b == bool_:
        return a
    signed = a.startswith("int") or b.startswith("int")
    size = max(a.itemsize, b.itemsize)
    if signed and (
        a.startswith("uint") and a.itemsize == size or b.startswith("uint") and b.itemsize == size
    ):
        size = min(size * 2, 4)
    return ALL[("int" if signed else "uint") + str(size * 8)]
