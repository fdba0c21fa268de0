"""Run PyTorch's OpInfo sample inputs on the neuron device and compare with the CPU.

For each OpInfo of `torch.testing._internal.common_methods_invocations.op_db`:

* dtypes: float32 when the op supports it on the CPU, plus one integral dtype (int64, else
  int32/bool) in the full sweep; the first supported dtype for ops without float32.
* forward: `op(sample.input, *sample.args, **sample.kwargs)` on CPU and on neuron copies of the
  same sample, outputs post-processed with `sample.output_process_fn_grad` and compared with
  `torch.testing.assert_close` at PyTorch's own device-vs-CPU tolerance (TestCommon
  .test_compare_cpu: atol = rtol = 1e-3), or the OpInfo's toleranceOverride for that test.
* backward (float32, when the OpInfo supports autograd): gradients of the outputs, seeded with
  the same random cotangents on both devices, with respect to every input that requires grad.
* random ops: an op whose CPU result changes between two identical calls is compared on
  shape, dtype and device only.

Each op gets one status: pass, fail (with the first error), or skip (with the reason), plus
whether it ran natively or needed the CPU fallback (torch_neuronx.get_fallback_ops()).
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback

import torch
import torch_neuronx
from torch.utils._pytree import tree_flatten

DEV = "neuron"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Results of the session's OpInfo tests, written out by conftest.py in a full sweep.
RESULTS: list = []
DEFAULT_TOL = dict(atol=1e-3, rtol=1e-3)
INTEGRAL_PREFERENCE = (torch.int64, torch.int32, torch.bool)


@dataclasses.dataclass
class OpResult:
    name: str
    status: str = "skip"  # pass | fail | skip
    reason: str = ""
    dtypes: list[str] = dataclasses.field(default_factory=list)
    samples: int = 0
    forward: str = "-"  # ok | fail | -
    backward: str = "-"
    fallback_ops: list[str] = dataclasses.field(default_factory=list)
    forward_fallback_ops: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def native(self) -> bool:
        return not self.fallback_ops


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def tolerance(op, dtype):
    """The OpInfo's toleranceOverride for test_compare_cpu (or for every test), else default."""
    from torch.testing._internal.common_device_type import toleranceOverride

    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) not in (None, "test_compare_cpu"):
            continue
        for dec in getattr(info, "decorators", ()):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                return dict(atol=max(t.atol, 1e-5), rtol=max(t.rtol, 1e-5))
    return dict(DEFAULT_TOL)


def pick_dtypes(op, full: bool) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    picked = []
    if torch.float32 in supported:
        picked.append(torch.float32)
    if full or not picked:
        for d in INTEGRAL_PREFERENCE:
            if d in supported:
                picked.append(d)
                break
    if not picked and supported:
        picked.append(sorted(supported, key=str)[0])
    return picked


def _is_plain_tensor(x):
    return isinstance(x, torch.Tensor) and x.layout == torch.strided and not x.is_quantized


def to_neuron(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(DEV)
        if x.requires_grad:
            y.requires_grad_()
        return y
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(DEV)
    if isinstance(x, str) and x == "cpu":
        return DEV
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().cpu()
        if x.requires_grad:
            y.requires_grad_()
        return y
    if isinstance(x, torch.device) and x.type == DEV:
        return torch.device("cpu")
    if isinstance(x, str) and x.startswith(DEV):
        return "cpu"
    return x


def _cpu_device(v):
    if isinstance(v, torch.device) and v.type == DEV:
        return torch.device("cpu")
    if isinstance(v, str) and v.split(":")[0] == DEV:
        return "cpu"
    return v


def sample_to_cpu(sample):
    """The CPU copy of a device sample: tensors copied, device arguments (factories) redirected."""
    s = sample.transform(to_cpu)
    s.args = tuple(_cpu_device(a) for a in s.args)
    s.kwargs = {k: _cpu_device(v) for k, v in s.kwargs.items()}
    return s


def differentiable_inputs(sample):
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def run_forward(op, sample):
    out = op(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(out)


RANDOM_NAME_PARTS = ("dropout", "rand", "bernoulli", "multinomial", "normal", "uniform", "exponential",
                     "geometric", "cauchy", "log_normal", "poisson", "randperm")


# Ops whose result is uninitialized memory: only shape/dtype/device are meaningful.
UNINITIALIZED = ("empty", "new_empty", "empty_like", "empty_strided", "new_empty_strided", "empty_permuted")


def uses_seed_wrapper(op) -> bool:
    """OpInfos that fix the CPU seed inside the op (wrapper_set_seed): deterministic on the CPU
    but drawn from a different generator on the device."""
    code = getattr(getattr(op, "op", None), "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def is_random(op, sample) -> bool:
    """Random ops are recognised by name, seed wrappers, or CPU results that change with the seed."""
    if op.name in UNINITIALIZED or any(part in op.name for part in RANDOM_NAME_PARTS) or uses_seed_wrapper(op):
        return True
    torch.manual_seed(0)
    first, _ = tree_flatten(run_forward(op, sample))
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        other, _ = tree_flatten(run_forward(op, sample))
        for x, y in zip(first, other):
            if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
                if x.shape != y.shape or not torch.equal(x.detach(), y.detach()):
                    return True
    return False


def compare(got, want, tol, values=True):
    gl, gs = tree_flatten(got)
    wl, ws = tree_flatten(want)
    assert gs == ws, f"output structure differs: {gs} vs {ws}"
    for g, w in zip(gl, wl):
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"expected a tensor, got {type(g)}"
            assert g.device.type == DEV or g.device.type == w.device.type, f"output on {g.device}"
            assert g.dtype == w.dtype, f"dtype {g.dtype} vs {w.dtype}"
            assert g.shape == w.shape, f"shape {tuple(g.shape)} vs {tuple(w.shape)}"
            if values:
                t = tol
                if w.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
                    t = dict(atol=0, rtol=0)  # assert_close compares these bitwise only
                torch.testing.assert_close(g.detach().cpu(), w.detach(), equal_nan=True, **t)
        elif values and isinstance(w, float):
            torch.testing.assert_close(g, w, equal_nan=True, **tol)
        elif values:
            assert g == w, f"{g!r} != {w!r}"


def cotangents(outputs):
    g = torch.Generator().manual_seed(123)
    return [torch.randn(o.shape, generator=g, dtype=o.dtype) if o.dtype.is_floating_point else None for o in outputs]


def grads_of(out, inputs, cots):
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs or not inputs:
        return None
    cs = cotangents(outs)
    pairs = [(o, c) for o, c in zip(outs, cs) if c is not None]
    if not pairs:
        return None
    dev = outs[0].device
    return torch.autograd.grad(
        [o for o, _ in pairs], inputs, [c.to(dev) for _, c in pairs], allow_unused=True
    )


# Entries whose samples cannot be compared across devices by copying them.
NOT_COMPARABLE = {
    # The input is a view into a larger base and as_strided addresses the base's storage;
    # copying the view to another device copies only the view (PyTorch's own test_compare_cpu
    # has the same limitation).
    "as_strided.partial_views": "reads storage outside the view, which a device copy does not carry",
}


def run_op(op, full: bool, max_samples: int = 16) -> OpResult:
    r = OpResult(op_id(op))
    if r.name in NOT_COMPARABLE:
        r.status, r.reason = "skip", NOT_COMPARABLE[r.name]
        return r
    t0 = time.perf_counter()
    try:
        _run(op, full, max_samples, r)
    except Exception as e:  # noqa: BLE001 - any failure is the op's result
        r.status = "fail"
        r.reason = r.reason or _short(e)
    finally:
        try:
            torch.neuron.synchronize()
        except Exception:  # noqa: BLE001 - a pending error belongs to this op
            if r.status != "fail":
                r.status, r.reason = "fail", "error at synchronize"
    r.seconds = time.perf_counter() - t0
    return r


def _short(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".strip().splitlines()
    return (msg[0] if msg else type(e).__name__)[:200]


def _run(op, full, max_samples, r: OpResult):
    dtypes = pick_dtypes(op, full)
    if not dtypes:
        r.reason = "no CPU dtypes"
        return
    tested = 0
    fallback: list[str] = []
    fwd_ok = bwd_ok = None
    for dtype in dtypes:
        grad = dtype == torch.float32 and op.supports_autograd
        # Samples are made on the device and copied to the CPU for the reference, like
        # PyTorch's TestCommon.test_compare_cpu (sample functions may place some arguments,
        # e.g. index tensors, on the CPU on purpose).
        try:
            torch.manual_seed(0)
            samples = list(op.sample_inputs(DEV, dtype, requires_grad=grad))[:max_samples]
        except Exception as e:  # noqa: BLE001
            r.reason = f"sample_inputs failed: {_short(e)}"
            continue
        tol = tolerance(op, dtype)
        for nsample in samples:
            leaves, _ = tree_flatten((nsample.input, nsample.args, nsample.kwargs))
            if any(isinstance(t, torch.Tensor) and not _is_plain_tensor(t) for t in leaves):
                continue
            try:
                sample = sample_to_cpu(nsample)
            except Exception:  # noqa: BLE001
                continue
            # CPU reference (samples the CPU rejects are error inputs, not conformance cases).
            try:
                random = is_random(op, sample)
                torch.manual_seed(0)
                want = run_forward(op, sample)
                want_grads = grads_of(want, differentiable_inputs(sample), None) if grad else None
            except Exception:  # noqa: BLE001
                continue
            torch_neuronx.clear_op_tracking()
            try:
                torch.manual_seed(0)
                got = run_forward(op, nsample)
                torch.neuron.synchronize()
            except Exception as e:
                fallback += torch_neuronx.get_fallback_ops()
                r.reason = f"forward {dtype}: {_short(e)}"
                r.forward = "fail"
                raise
            try:
                compare(got, want, tol, values=not random)
            except AssertionError as e:
                r.reason = f"forward {dtype}: {_short(e)}"
                r.forward = "fail"
                fallback += torch_neuronx.get_fallback_ops()
                r.fallback_ops = sorted(set(fallback))
                raise
            fwd_ok = True
            r.forward_fallback_ops = sorted(set(r.forward_fallback_ops) | set(torch_neuronx.get_fallback_ops()))
            if want_grads is not None and not random:
                try:
                    got_grads = grads_of(got, differentiable_inputs(nsample), None)
                    torch.neuron.synchronize()
                    compare(
                        [g for g in got_grads if g is not None] if got_grads else [],
                        [g for g in want_grads if g is not None],
                        tol,
                    )
                    bwd_ok = True
                except Exception as e:
                    r.reason = f"backward {dtype}: {_short(e)}"
                    r.backward = "fail"
                    fallback += torch_neuronx.get_fallback_ops()
                    r.fallback_ops = sorted(set(fallback))
                    raise
            fallback += torch_neuronx.get_fallback_ops()
            tested += 1
        r.dtypes.append(str(dtype).replace("torch.", ""))
    r.samples = tested
    r.fallback_ops = sorted(set(fallback))
    if tested == 0:
        r.status = "skip"
        r.reason = r.reason or "no sample the CPU accepts"
        return
    r.status = "pass"
    r.forward = "ok" if fwd_ok else "-"
    r.backward = "ok" if bwd_ok else "-"


def format_traceback() -> str:
    return traceback.format_exc(limit=3)
