"""OpInfo conformance: each op_db entry's samples on neuron vs CPU (see harness.py)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

import pytest
from harness import REPO, RESULTS, OpResult, op_id, run_op

HERE = os.path.dirname(os.path.abspath(__file__))

# The fast subset: the elementwise, reduction, RNG and optimizer families of this layer plus a
# few neighbours, small enough to run in the normal test suite (< 2 minutes on 2 cores).
FAST = {
    "add", "sub", "mul", "div.no_rounding_mode", "div.trunc_rounding", "div.floor_rounding", "remainder", "fmod",
    "floor_divide", "neg", "abs", "sign", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "sin", "cos", "tanh", "sigmoid", "erf", "erfinv", "floor", "round", "trunc", "frac", "reciprocal", "pow",
    "atan2", "eq", "ne", "lt", "ge", "logical_and", "logical_not", "bitwise_and", "bitwise_left_shift", "clamp",
    "clamp_min", "where", "lerp", "addcmul", "addcdiv", "maximum", "minimum", "isnan", "nan_to_num",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.softplus",
    "nn.functional.elu", "nn.functional.leaky_relu", "nn.functional.hardswish", "nn.functional.hardsigmoid",
    "nn.functional.mish", "nn.functional.threshold", "nn.functional.hardtanh",
    "sum", "mean", "prod", "max.reduction_with_dim", "min.reduction_no_dim", "amax", "amin", "argmax", "argmin",
    "var", "std_mean", "norm", "linalg.vector_norm", "any", "all", "logsumexp", "cumsum", "cumprod", "nansum",
    "square", "xlogy", "nn.functional.dropout",
}
# Entries of FAST whose forward must run without any CPU fallback (this layer's families).
NATIVE_FORWARD = FAST


def _ops(config):
    from torch.testing._internal.common_methods_invocations import op_db

    full = config.getoption("--full-sweep")
    ops = [op for op in op_db if full or op_id(op) in FAST]
    return ops, full


def pytest_generate_tests(metafunc):
    if "op" in metafunc.fixturenames:
        ops, full = _ops(metafunc.config)
        metafunc.parametrize("op", ops, ids=[op_id(op) for op in ops])
        metafunc.parametrize("full", [full], ids=["full" if full else "fast"])


class _Worker:
    """The crash-isolating worker of the full sweep (worker.py), restarted when it dies."""

    def __init__(self):
        self.proc = None

    def start(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
        # Coverage of neuron-emu's kernels, also for the ops the real stack runs on the CPU.
        env["NEURON_EMU_FALLBACK_MODEL"] = "native"
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env=env, cwd=REPO,
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("conformance worker failed to start")

    def run(self, op, full, timeout=600.0):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(f"{op_id(op)}\t{int(full)}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            if ready:
                try:
                    code = self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    code = None
                reason = f"crashed the process (exit status {code})"
            else:
                reason = f"timed out after {timeout:.0f} s"
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return OpResult(op_id(op), status="fail", reason=reason)
        return OpResult(**json.loads(line))


_WORKER = _Worker()


def test_op(op, full):
    r = _WORKER.run(op, full) if full else run_op(op, full)
    RESULTS.append(r)
    if r.status == "skip":
        pytest.skip(r.reason)
    assert r.status == "pass", f"{r.name}: {r.reason} (fallback ops: {r.fallback_ops})"
    if not full and r.name in NATIVE_FORWARD:
        assert r.forward_fallback_ops == [], f"{r.name}: forward fell back: {r.forward_fallback_ops}"
