"""The Python side of the instruction table: codes and slots come from the native core (csrc/nki/isa.def),
dumps print attributes by name, and the tracer places operands and attributes by name."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki import _tracer


def test_dump_prints_activation_functions_and_attributes_by_name():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        u = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=u, op=nl.exp, data=t)
        nisa.activation(dst=u, op=nl.tanh, data=u, scale=2.0)
        nisa.tensor_scalar(dst=u, data=u, op0=nl.multiply, operand0=3.0, op1=nl.add, operand1=1.0)
        nl.store(out, u)
        return out

    lines = k.specialize(np.zeros((128, 4), np.float32)).dump().splitlines()
    acts = [ln for ln in lines if "nki.isa.activation" in ln]
    assert len(acts) == 2
    assert " op=exp " in acts[0] and " op=tanh " in acts[1], acts
    assert "scale_imm=2 " in acts[1]
    ts = next(ln for ln in lines if "nki.isa.tensor_scalar" in ln)
    assert " data=" in ts and " op0=multiply op1=add reverse0=false reverse1=false imm0=3 imm1=1" in ts, ts


def test_python_operator_names_match_the_native_table():
    table = _tracer.isa()
    for name in dir(nl):
        fn = getattr(nl, name)
        alu = getattr(fn, "_nki_alu", None)
        act = getattr(fn, "_nki_act", None)
        if alu is not None:
            assert alu in table.alu, (name, alu)
        if act is not None:
            assert act in table.act, (name, act)
    # Every operator and function of the engines is reachable from nl.
    assert {a for a in table.alu if a != "bypass"} <= {
        getattr(getattr(nl, n), "_nki_alu", None) for n in dir(nl)
    }
    assert set(table.act) <= {getattr(getattr(nl, n), "_nki_act", None) for n in dir(nl)}
    # The opcodes and engines the tracer uses are the native ones.
    assert table.ops["TensorTensor"].api == "nki.isa.tensor_tensor"
    assert {"vector", "scalar", "gpsimd"} <= table.ops["TensorTensor"].engines
    assert table.ops["Matmul"].engines == {"tensor"}


def test_emit_places_by_name_and_rejects_unknown_names():
    @nki.jit
    def bad_operand(a):
        t = nl.load(a)
        _tracer.emit("TensorCopy", "vector", {"dst": t, "source": t})

    with pytest.raises(TypeError, match="has no operand 'source'"):
        bad_operand(np.zeros((4, 4), np.float32))

    @nki.jit
    def missing_attr(a):
        t = nl.load(a)
        _tracer.emit("Memset", "vector", {"dst": t}, {})

    with pytest.raises(TypeError, match="attribute 'value' not given"):
        missing_attr(np.zeros((4, 4), np.float32))
