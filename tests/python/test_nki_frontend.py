"""``nki.compiler.frontend``: ``ParserFrontend().compile(kernel, inputs=, target=, lnc=)`` traces
a kernel for those inputs without running it (the NKI Library's trace-only tests): trace-time
checks and assertions fire, the program comes back. Kernels written here."""

from __future__ import annotations

import io

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.compiler.frontend import NKIFrontend, ParserFrontend, TracerFrontend


def scaled_copy(x, factor: float, rows: int):
    """Not decorated: the front end takes plain functions too."""
    assert x.shape[0] == rows, f"size mismatch: {x.shape[0]} rows, expected {rows}"
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=t, data=nl.load(x), op0=nl.multiply, operand0=factor)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_traces_without_running():
    x = np.ones((128, 64), np.float32)
    res = ParserFrontend().compile(scaled_copy, inputs={"x": x, "factor": 2.0, "rows": 128}, target="trn2", lnc=1)
    f = io.StringIO()
    res.module.operation.print(file=f, enable_debug_info=True, use_local_scope=True)
    text = f.getvalue()
    assert "nki.isa.tensor_scalar" in text and "nki.isa.dma_copy" in text
    assert res.traced.num_instructions == text.count("nki.isa.")


def test_a_failing_trace_time_check_raises():
    x = np.ones((128, 64), np.float32)
    with pytest.raises(AssertionError, match="size mismatch: 128 rows, expected 64"):
        ParserFrontend().compile(scaled_copy, inputs={"x": x, "factor": 2.0, "rows": 64}, target="trn2")
    bad = np.ones((256, 64), np.float32)  # 256 partitions: a hardware rule
    with pytest.raises(Exception, match="partition"):
        TracerFrontend().compile(scaled_copy, inputs={"x": bad, "factor": 2.0, "rows": 256}, target="trn2")


def test_lnc_traces_every_program():
    @nki.jit
    def per_core(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        r = nl.program_id(0)
        t = nl.load(x[r])
        nl.store(out[r], t)
        return out

    res = NKIFrontend().compile(per_core, inputs={"x": np.ones((2, 128, 8), np.float32)}, target="trn2", lnc=2)
    assert len(res.traced.programs) == 2
    assert "# instance 1" in res.traced.dump()
