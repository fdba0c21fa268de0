"""The ISA's unary ALU operators (``nl.abs``, ``nl.square``, ``nl.relu``, ``nl.rsqrt``,
``nl.reciprocal`` and their numpy spellings) as ``op0``/``op1`` of the Vector Engine's
arithmetic instructions, with kernels written here: the result depends on the first operand
only (the scalar operand is ignored), as in a max-abs quantization scale
``tensor_scalar_reduce(op0=nl.abs, operand0=0.0, reduce_op=nl.maximum)``."""

from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def unary_then(x, op, op1):
    """out = op1(op(x, 7.0), 2.0) with op a unary ALU operator (7.0 is ignored)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=t, data=nl.load(x), op0=op, operand0=7.0, op1=op1, operand1=2.0)
    nl.store(out, t)
    return out


_REF = {
    "abs": np.abs,
    "square": np.square,
    "relu": lambda v: np.maximum(v, 0),
    "rsqrt": lambda v: 1 / np.sqrt(v),
    "reciprocal": lambda v: 1 / v,
}


@pytest.mark.parametrize("name", sorted(_REF))
@pytest.mark.parametrize("spelling", ["nl", "np"])
def test_unary_alu_in_tensor_scalar(name, spelling):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    if name in ("rsqrt", "reciprocal"):
        x = np.abs(x) + 0.5
    op = getattr(nl, name) if spelling == "nl" else {"abs": np.abs, "square": np.square}.get(name)
    if op is None:
        pytest.skip(f"numpy has no {name} ufunc")
    out = nki.simulate(unary_then)(x, op, nl.multiply)
    # fp32 on both sides; rsqrt/reciprocal may differ from numpy's by an ulp
    np.testing.assert_allclose(out, _REF[name](x) * 2.0, rtol=2e-7)


@nki.jit
def max_abs_scale(x):
    """Per row: the largest |x| (the dequantization scale of a row-wise quantizer)."""
    scale = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    junk = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    s = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=junk, data=nl.load(x), op0=nl.abs, operand0=0.0,
                              reduce_op=nl.maximum, reduce_res=s)
    nl.store(scale, s)
    return scale


def test_max_abs_through_tensor_scalar_reduce():
    x = np.random.default_rng(1).standard_normal((128, 300)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(max_abs_scale)(x), np.abs(x).max(axis=1, keepdims=True))


def test_integer_abs_and_square():
    x = np.random.default_rng(2).integers(-1000, 1000, (64, 32)).astype(np.int32)
    np.testing.assert_array_equal(nki.simulate(unary_then)(x, nl.abs, nl.add), np.abs(x) + 2)
    np.testing.assert_array_equal(nki.simulate(unary_then)(x, nl.square, nl.add), x * x + 2)


def test_a_unary_operator_is_no_reduction():
    @nki.jit
    def reduce_abs(x):
        out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
        r = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.abs, data=nl.load(x), axis=1)
        nl.store(out, r)
        return out

    with pytest.raises(Exception, match="(?i)reduc"):
        nki.simulate(reduce_abs)(np.ones((8, 4), np.float32))
