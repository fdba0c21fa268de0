"""nki imports and runs numpy kernels without PyTorch: its native core (nki._nki_native) is an
extension without torch, and torch_neuronx registers the neuron device with nki, never the
other way round. Each case runs in a fresh interpreter and checks sys.modules at the end; the
"blocked" runs also make every import of torch fail, so a path that only tried it is caught."""

from __future__ import annotations

import json

import pytest

# Imports nki by the new or the old (neuronxcc.nki) path, runs numpy kernels through every
# entry point, compares with numpy, and prints what it saw as JSON.
SCRIPT = r"""
import hashlib, json, sys, tempfile

BLOCK = sys.argv[1] == "blocked"
if sys.argv[1] == "torch":  # the reference: the same kernels with torch (and torch_neuronx) loaded
    import torch  # noqa: F401
if BLOCK:
    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "torch_neuronx", "torchgen", "functorch"):
                raise ImportError(f"this test forbids importing {name}")
            return None

    sys.meta_path.insert(0, _NoTorch())

if sys.argv[2] == "neuronxcc":
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
else:
    import nki
    import nki.isa as nisa
    import nki.language as nl

after_import = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_neuronx"))

import ml_dtypes
import numpy as np


@nki.jit
def add_exp(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(a)) + nl.load(b))
    return out


@nki.jit
def matmul(lhsT, rhs):
    out = nl.ndarray((lhsT.shape[1], rhs.shape[1]), nl.float32, buffer=nl.shared_hbm)
    lt = nl.ndarray(lhsT.shape, lhsT.dtype, buffer=nl.sbuf)
    rt = nl.ndarray(rhs.shape, rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lt, src=lhsT)
    nisa.dma_copy(dst=rt, src=rhs)
    ps = nl.ndarray(out.shape, nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=lt, moving=rt)
    sb = nl.ndarray(out.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    nisa.dma_copy(dst=out, src=sb)
    return out


@nki.jit
def reads_garbage(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=t)  # t was never written
    return out


rng = np.random.default_rng(0)
a = rng.standard_normal((128, 256), dtype=np.float32)
b = rng.standard_normal((128, 256), dtype=np.float32)
want = np.exp(a) + b
res = {}
res["jit"] = add_exp(a, b)
res["simulate_kernel"] = nki.simulate_kernel(add_exp, a, b)
res["cpu_simulate"] = nki.cpu_simulate(add_exp)[1](a=a, b=b)
res["baremetal"] = nki.baremetal(add_exp)(a, b)
bench = nki.benchmark(add_exp, warmup=1, iters=2, working_directory=tempfile.mkdtemp())(a, b)
res["benchmark"] = bench.outputs
prof = nki.profile(add_exp, working_directory=tempfile.mkdtemp())(a, b)
est = nki.estimate(add_exp, a, b)

# bf16 numpy arrays (ml_dtypes) through the tensor engine (fp32 accumulation in PSUM)
lhsT = rng.standard_normal((128, 64), dtype=np.float32).astype(ml_dtypes.bfloat16)
rhs = rng.standard_normal((128, 32), dtype=np.float32).astype(ml_dtypes.bfloat16)
mm = matmul(lhsT, rhs)
mm_ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)

# the native core's NKI errors become nki.NkiValidationError without torch too
try:
    reads_garbage(a)
    error = None
except nki.NkiValidationError as e:
    error = [e.kind, e.instruction]

digest = hashlib.sha256()
for v in (*res.values(), mm):
    digest.update(np.ascontiguousarray(v).tobytes())
print(json.dumps({
    "digest": digest.hexdigest(),
    "after_import": after_import,
    "at_end": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_neuronx")),
    "native": nki._core.core().__name__,
    "same": {k: bool(np.array_equal(v, res["jit"])) for k, v in res.items()},
    "max_rel_err": float(np.max(np.abs(res["jit"] - want) / (1 + np.abs(want)))),
    "types": sorted({type(v).__name__ for v in res.values()}),
    "benchmark_p50_us": bench.nc_latency.get_latency_percentile(50),
    "estimate_ns": est.total_ns,
    "profile_instructions": prof.estimate.instructions,
    "matmul_max_err": float(np.max(np.abs(mm - mm_ref))),
    "matmul_dtype": str(mm.dtype),
    "error": error,
}))
"""


_RESULTS: dict = {}


def _run(py, mode: str, path: str) -> dict:
    """The script's JSON report for `mode` ("plain", "blocked", "torch") and import `path`."""
    if (mode, path) not in _RESULTS:
        p = py("import sys\nsys.argv[1:] = [%r, %r]\n" % (mode, path) + SCRIPT)
        assert p.returncode == 0, p.stderr[-4000:]
        _RESULTS[mode, path] = json.loads(p.stdout.strip().splitlines()[-1])
    return _RESULTS[mode, path]


@pytest.mark.parametrize("path", ["nki", "neuronxcc"])
@pytest.mark.parametrize("mode", ["plain", "blocked"])
def test_numpy_kernels_run_without_torch(py, path, mode):
    with_torch = _run(py, "torch", "nki")  # the numerics every mode must match
    assert "torch" in with_torch["at_end"] and "torch_neuronx" in with_torch["at_end"]
    r = _run(py, mode, path)
    assert r["after_import"] == [], r["after_import"]
    assert r["at_end"] == [], r["at_end"]
    assert r["native"] == "nki._nki_native"
    assert r["types"] == ["ndarray"]
    # every entry point runs the same programs on the same NeuronCore model
    assert all(r["same"].values()), r["same"]
    # exp on the Scalar engine (the kernels' exp, not numpy's): within fp32 rounding
    assert r["max_rel_err"] < 1e-6
    assert r["benchmark_p50_us"] > 0 and r["profile_instructions"] > 0
    assert r["benchmark_p50_us"] * 1000 == pytest.approx(r["estimate_ns"])
    # bf16 products are exact in fp32; only the fp32 accumulation order may differ from numpy
    assert r["matmul_dtype"] == "float32" and r["matmul_max_err"] < 1e-3
    assert r["error"] == ["uninitialized", "nki.isa.dma_copy"]
    # ... and without torch every result is bit for bit the one computed with torch loaded
    assert r["digest"] == with_torch["digest"]
    assert r["estimate_ns"] == with_torch["estimate_ns"]


def test_torch_neuronx_registers_the_neuron_device_with_nki():
    """With torch imported, nki has the neuron launcher and treats torch_neuronx's folder as
    library code (not the kernel's source location, not keyed by value in the trace cache)."""
    import os

    import nki
    import nki.language as nl
    import torch
    import torch_neuronx
    from nki import _deps, _frameworks, _tracer

    assert _frameworks.launcher("neuron") is torch_neuronx._C._nki_launch
    here = os.path.dirname(os.path.abspath(torch_neuronx.__file__))
    assert here in _tracer._NOT_KERNEL_CODE
    assert here + os.sep in _deps._LIBRARY_DIRS and here + os.sep not in _deps._SYSTEM_DIRS
    with pytest.raises(RuntimeError, match="no framework registered a launcher for 'xla'"):
        _frameworks.launcher("xla")

    @nki.jit
    def double(t):
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(t) * 2.0)
        return out

    # torch_neuronx._C takes the programs and check state nki._nki_native made
    x = torch.arange(128 * 64, dtype=torch.float32).reshape(128, 64)
    traced = double.specialize(x.to("neuron"))
    assert type(traced.programs[0]).__module__ == "nki._nki_native"
    y = double(x.to("neuron"))
    assert y.device.type == "neuron"
    torch.testing.assert_close(y.cpu(), x * 2, rtol=0, atol=0)
