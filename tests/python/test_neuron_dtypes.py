"""neuron_dtypes, the element-type module the public NKI Library's tests and references import
(shipped with the neuronx-cc distribution): numpy types for the Neuron dtypes, static_cast with
round-to-nearest-even, sizes, limits. Works without torch."""

import subprocess
import sys

import nki.language as nl
import numpy as np
import pytest
from repo_paths import REPO

import neuron_dtypes as dt


def test_static_cast_rounds_fp32_to_bf16_to_nearest_even():
    # 1 + 2^-8 is halfway between two bf16 values: ties go to the even mantissa (1.0);
    # 1 + 3*2^-8 goes up to 1 + 2^-6; 1 + 2^-8 + 2^-20 is above the tie and rounds up.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.5], dtype=np.float32)
    for target in (nl.bfloat16, dt.bfloat16, "bfloat16"):
        y = dt.static_cast(x, target)
        assert y.dtype == dt.bfloat16
        assert y.astype(np.float32).tolist() == [1.0, 1 + 2**-6, 1 + 2**-7, -2.5]


def test_static_cast_to_numpy_and_integer_types():
    mask = dt.static_cast(np.array([[True, False]]), dtype=np.uint8)
    assert mask.dtype == np.uint8 and mask.tolist() == [[1, 0]]
    assert dt.static_cast([0.5, 2.0], np.float16).dtype == np.float16
    f8 = dt.static_cast(np.array([240.0, -1.0], np.float32), nl.float8_e4m3)
    assert f8.astype(np.float32).tolist() == [240.0, -1.0]


def test_sizes_limits_and_kinds():
    assert [dt.sizeinbytes(t) for t in (nl.bfloat16, np.float32, dt.float8_e4m3fn, nl.float8_e4m3fn_x4,
                                        nl.float4_e2m1fn_x4, "int8")] == [2, 4, 1, 4, 2, 1]
    assert float(dt.finfo(nl.bfloat16).eps) == 2.0**-7
    assert float(dt.finfo(dt.float8_e4m3fn).max) == 448.0
    assert float(dt.finfo(np.float32).max) == float(np.finfo(np.float32).max)
    assert dt.iinfo(np.int8).min == -128
    assert dt.is_float_type(nl.bfloat16) and dt.is_float_type(np.float16) and dt.is_float_type(nl.float8_e5m2_x4)
    assert not dt.is_float_type(np.int32) and not dt.is_float_type(nl.uint8)


def test_packed_mx_types_have_no_element_cast():
    with pytest.raises(TypeError, match="packed microscaling"):
        dt.static_cast(np.zeros(4, np.float32), dt.float8_e4m3fn_x4)


def test_imports_without_torch():
    r = subprocess.run([sys.executable, "-c", "import sys, neuron_dtypes; assert 'torch' not in sys.modules; print('ok')"],
                       capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": f"{REPO}/python", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
