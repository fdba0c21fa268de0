"""NKI custom ops inside torch.compile(backend="neuron"): an nki_op is one native node of the
compiled program (no graph split, no Python at run time), results equal eager bit for bit (the
same traced programs run on the same NeuronCore model), NEFFs stay self-contained across
processes, and NKI errors keep their message."""

from __future__ import annotations

import json
import os
import textwrap

import nki
import nki.language as nl
import pytest
import torch
from torch_neuronx import nki_op, wrap_nki

# ---- kernels ---------------------------------------------------------------------------


@nki.jit
def add_kernel(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, value=nl.add(nl.load(a), nl.load(b)))
    return c


@nki.jit
def scale_rows(x, factor):
    """Grid kernel: instance pid scales its block of rows by factor * (pid + 1)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    rows = x.shape[0] // nl.num_programs(0)
    pid = nl.program_id(0)
    t = nl.load(x[pid * rows : (pid + 1) * rows, :])
    nl.store(out[pid * rows : (pid + 1) * rows, :], nl.multiply(t, factor * (pid + 1)))
    return out


@nki.jit
def accumulate(acc, x):
    """acc += x, in place (an in/out argument)."""
    nl.store(acc, value=nl.add(nl.load(acc), nl.load(x)))


@nki.jit
def exp_into(x, out):
    nl.store(out, value=nl.exp(nl.load(x)))


@nki.jit
def row_scale(hidden_tensor, weight, scale=1.0):
    """nkilib style: keyword arguments, a list of outputs, tiles of 128 rows."""
    n, h = hidden_tensor.shape
    out = nl.ndarray((n, h), dtype=hidden_tensor.dtype, buffer=nl.shared_hbm)
    w = nl.load(weight)
    for i in nl.affine_range((n + 127) // 128):
        rows = min(128, n - i * 128)
        t = nl.load(hidden_tensor[i * 128 : i * 128 + rows, :])
        nl.store(out[i * 128 : i * 128 + rows, :], nl.multiply(nl.multiply(t, w[:rows, :]), scale))
    return [out]


@nki.jit
def uninitialized_read(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)  # never written
    nl.store(out, value=t)
    return out


@nki.jit
def too_many_partitions(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out


# ---- ops -------------------------------------------------------------------------------

_body_calls = {"real": 0}


def _count_real(*tensors):
    from torch._subclasses.fake_tensor import FakeTensor

    if not any(isinstance(t, FakeTensor) for t in tensors):
        _body_calls["real"] += 1


@nki_op("nkicc_test::add", mutates_args={})
def op_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _count_real(a, b)
    return wrap_nki(add_kernel)(a, b)


@nki_op("nkicc_test::scale_rows4", mutates_args={})
def op_scale_rows4(x: torch.Tensor, factor: float) -> torch.Tensor:
    return wrap_nki(scale_rows)[4](x, factor)


@nki_op("nkicc_test::accumulate", mutates_args={"acc"})
def op_accumulate(acc: torch.Tensor, x: torch.Tensor) -> None:
    wrap_nki(accumulate)(acc, x)


@nki_op("nkicc_test::exp_add", mutates_args={})
def op_exp_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # Two launches: a buffer allocated by the body, then a kernel-allocated result.
    e = torch.empty_like(x)
    exp_into(x, e)
    return wrap_nki(add_kernel)(e, y)


@nki_op("nkicc_test::not_only_kernels", mutates_args={})
def op_not_only_kernels(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return wrap_nki(add_kernel)(a, b).relu()


@nki_op("nkicc_test::row_scale", mutates_args={})
def op_row_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # Glue as in nkilib wrappers: flatten the batch, a transposed weight (strided: staged),
    # keyword arguments, a list result, a view of it returned.
    b, s, h = x.shape
    out = wrap_nki(row_scale)(hidden_tensor=x.reshape(b * s, h), weight=w.t(), scale=0.5)
    return out[0].reshape(b, s, h)[:, : s - 1]


@nki_op("nkicc_test::zeros_then_accumulate", mutates_args={})
def op_zeros_then_accumulate(x: torch.Tensor) -> torch.Tensor:
    acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    accumulate(acc, x.to(torch.float32))
    accumulate(acc, x.to(torch.float32))
    return acc


@nki_op("nkicc_test::uninitialized", mutates_args={})
def op_uninitialized(x: torch.Tensor) -> torch.Tensor:
    return wrap_nki(uninitialized_read)(x)


@nki_op("nkicc_test::too_many_partitions", mutates_args={})
def op_too_many_partitions(x: torch.Tensor) -> torch.Tensor:
    return wrap_nki(too_many_partitions)(x)


# ---- helpers ---------------------------------------------------------------------------


def _metrics():
    return torch.neuron.get_dynamo_metrics()


def _assert_one_native_graph(nki_ops: dict):
    m = _metrics()
    assert m["fallback_ops"] == {}, m["fallback_ops"]
    assert m["nki_ops"] == nki_ops
    assert m["graphs_compiled"] + m["cache_hits"] >= 1


def _neuron(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to("neuron")


# ---- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nki_op_is_one_native_node(fresh_compile, dtype):
    a, b = _neuron(128, 64, dtype=dtype, seed=1), _neuron(128, 64, dtype=dtype, seed=2)

    def f(x, y):
        return op_add(x * 2, y) + 1

    eager = f(a, b)
    _body_calls["real"] = 0
    cf = torch.compile(f, backend="neuron")
    for _ in range(2):
        out = cf(a, b)
    torch.neuron.synchronize()
    # The same programs on the same model: identical to eager, bit for bit.
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=0, atol=0)
    _assert_one_native_graph({"nkicc_test::add": 1})
    assert _body_calls["real"] == 0  # the op body never ran on real tensors
    assert _metrics()["executions"] == 2  # one compiled program per call, nothing else


def test_compiled_call_is_one_stream_task(fresh_compile):
    from torch.profiler import ProfilerActivity, profile

    a, b = _neuron(128, 64, seed=20), _neuron(128, 64, seed=21)
    f = torch.compile(lambda x, y: op_exp_add(x * 2, y) + 1, backend="neuron")
    f(a, b)
    torch.neuron.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        f(a, b)
        torch.neuron.synchronize()
    device = {e.key: e.count for e in prof.key_averages() if e.self_device_time_total > 0}
    # Both kernel launches ran inside the compiled program's task (eager would add nki:: tasks).
    assert list(device.values()) == [1] and next(iter(device)).startswith("neuron::compiled_graph("), device


def test_lab1_example_prints_both_lines_without_a_split(py, tmp_path):
    r = py(
        f"import runpy; runpy.run_path({os.path.join('examples', 'lab1', 'nki_integration.py')!r}, run_name='__main__')",
        env={"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert r.returncode == 0, r.stderr
    assert "Eager mode - NKI add result shape: torch.Size([128]), device: neuron:0" in r.stdout
    assert "Compiled mode - NKI add result shape: torch.Size([128]), device: neuron:0" in r.stdout
    assert "cannot be compiled" not in r.stderr + r.stdout


def test_grid_launch(fresh_compile):
    x = _neuron(128, 32)

    @torch.compile(backend="neuron")
    def f(v):
        return op_scale_rows4(v + 1, 3.0)

    out = f(x)
    blocks = torch.arange(1, 5, dtype=torch.float32).repeat_interleave(32)[:, None] * 3.0
    torch.testing.assert_close(out.cpu(), (x.cpu() + 1) * blocks, rtol=1e-6, atol=1e-6)
    _assert_one_native_graph({"nkicc_test::scale_rows4": 1})


def test_in_place_op_mutates_the_graph_input(fresh_compile):
    acc0, x = _neuron(128, 16, seed=3), _neuron(128, 16, seed=4)

    def f(acc, v):
        op_accumulate(acc, v * 2)
        op_accumulate(acc, v)
        return acc.sum(dim=1)

    acc_e = acc0.clone()
    eager = f(acc_e, x)
    acc_c = acc0.clone()
    out = torch.compile(f, backend="neuron")(acc_c, x)
    torch.testing.assert_close(acc_c.cpu(), acc_e.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=1e-6, atol=1e-5)
    _assert_one_native_graph({"nkicc_test::accumulate": 2})


def test_in_place_op_keeps_the_old_value_for_later_readers(fresh_compile):
    acc0, x = _neuron(128, 16, seed=5), _neuron(128, 16, seed=6)

    def f(acc, v):
        before = acc * 1  # a reader of the old value: the op cannot write acc in place first
        op_accumulate(acc, v)
        return before + acc

    acc_e = acc0.clone()
    eager = f(acc_e, x)
    acc_c = acc0.clone()
    out = torch.compile(f, backend="neuron")(acc_c, x)
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(acc_c.cpu(), acc_e.cpu(), rtol=0, atol=0)


def test_two_launches_in_one_op(fresh_compile):
    x, y = _neuron(128, 8, seed=7), _neuron(128, 8, seed=8)

    def f(a, b):
        return op_exp_add(a, b) * 2

    eager = f(x, y)
    out = torch.compile(f, backend="neuron")(x, y)
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(out.cpu(), (x.cpu().exp() + y.cpu()) * 2, rtol=1e-5, atol=1e-5)
    _assert_one_native_graph({"nkicc_test::exp_add": 1})


def test_fills_and_dtype_copies_in_the_body(fresh_compile):
    x = _neuron(128, 8, dtype=torch.bfloat16, seed=9)
    f = torch.compile(lambda v: op_zeros_then_accumulate(v), backend="neuron")
    out = f(x)
    torch.testing.assert_close(out.cpu(), op_zeros_then_accumulate(x).cpu(), rtol=0, atol=0)
    torch.testing.assert_close(out.cpu(), 2 * x.cpu().float(), rtol=0, atol=0)
    _assert_one_native_graph({"nkicc_test::zeros_then_accumulate": 1})


def test_nkilib_style_wrapper(fresh_compile):
    x = _neuron(2, 96, 64, seed=10)
    w = _neuron(64, 128, seed=11)  # passed transposed: a strided argument

    def f(v, wt):
        return op_row_scale(v * 1.5, wt)

    eager = f(x, w)
    out = torch.compile(f, backend="neuron")(x, w)
    assert out.shape == (2, 95, 64)
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=0, atol=0)
    rows = (x.cpu() * 1.5).reshape(192, 64)
    wt = w.cpu().t()  # [128, 64]: row r of each 128-row tile scales row r
    expect = torch.cat([rows[:128] * wt * 0.5, rows[128:] * wt[:64] * 0.5]).reshape(2, 96, 64)[:, :95]
    torch.testing.assert_close(out.cpu(), expect, rtol=1e-6, atol=1e-6)
    _assert_one_native_graph({"nkicc_test::row_scale": 1})


def test_strided_input_is_staged(fresh_compile):
    a = _neuron(64, 128, seed=12)
    b = _neuron(128, 64, seed=13)

    @torch.compile(backend="neuron")
    def f(x, y):
        return op_add(x.t(), y)  # a transposed view reaches the NKI node

    out = f(a, b)
    torch.testing.assert_close(out.cpu(), a.cpu().t() + b.cpu(), rtol=0, atol=0)
    assert _metrics()["fallback_ops"] == {}


def test_body_with_other_torch_ops_falls_back(fresh_compile, caplog):
    a, b = _neuron(128, 8, seed=14), _neuron(128, 8, seed=15)

    def f(x, y):
        return op_not_only_kernels(x - 1, y) + op_add(x, y)

    with caplog.at_level("WARNING"):
        out = torch.compile(f, backend="neuron")(a, b)
    torch.testing.assert_close(out.cpu(), f(a, b).cpu(), rtol=0, atol=0)
    m = _metrics()
    assert list(m["fallback_ops"]) == ["nkicc_test::not_only_kernels.default"]
    assert m["nki_ops"] == {"nkicc_test::add": 1}
    assert "nkicc_test::not_only_kernels.default" in caplog.text and "aten.relu" in caplog.text


def test_training_with_nki_forward_and_backward(fresh_compile):
    from test_nki_torch import nki_square

    w0 = _neuron(64, 32, seed=16)
    target = _neuron(64, 32, seed=17)

    def step(w):
        loss = ((nki_square(w) - target) ** 2).mean()
        loss.backward()
        return loss

    we = w0.clone().requires_grad_(True)
    le = step(we)
    wc = w0.clone().requires_grad_(True)
    lc = torch.compile(step, backend="neuron")(wc)
    torch.testing.assert_close(lc.detach().cpu(), le.detach().cpu(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(wc.grad.cpu(), we.grad.cpu(), rtol=1e-6, atol=1e-6)
    m = _metrics()
    assert m["fallback_ops"] == {}
    assert m["nki_ops"] == {"nki_test::square": 1, "nki_test::square_backward": 1}


def test_uninitialized_read_surfaces_with_the_nki_message(fresh_compile):
    x = _neuron(128, 16, seed=18)
    f = torch.compile(lambda v: op_uninitialized(v + 1), backend="neuron")
    with pytest.raises(RuntimeError) as e:
        f(x)
        torch.neuron.synchronize()
    msg = str(e.value)
    assert "compiled_graph" in msg and "nkicc_test::uninitialized" in msg
    assert "never-written" in msg or "uninitialized" in msg
    assert "test_compile_nki.py:" in msg  # the kernel's source line
    assert _metrics()["fallback_ops"] == {}


def test_hardware_rule_violation_surfaces_at_compile_time(fresh_compile):
    x = _neuron(256, 8, seed=19)
    f = torch.compile(lambda v: op_too_many_partitions(v), backend="neuron")
    with pytest.raises(Exception) as e:
        f(x)
    msg = str(e.value)
    assert "partition dimension 256 > 128" in msg and "test_compile_nki.py:" in msg
    assert "[rule: partition dimension (dim 0) <= 128" in msg


# ---- across processes -------------------------------------------------------------------

_MODULE = '''
import nki, nki.language as nl, torch
from torch_neuronx import nki_op, wrap_nki

@nki.jit
def kernel(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, value=nl.add(nl.load(a), nl.multiply(nl.load(b), FACTOR)))
    return c

@nki_op("nkicc_proc::axpy", mutates_args={})
def axpy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return wrap_nki(kernel)(a, b)
'''

_RUN = '''
import json, sys, torch
sys.path.insert(0, {dir!r})
import nki._jit as J
real = []
orig = J._execute
def counting(kernel, traced, tensors, framework, *a, **k):
    if framework != "fake":
        real.append(kernel)
    return orig(kernel, traced, tensors, framework, *a, **k)
J._execute = counting
import kmod
torch.manual_seed(0)
a = torch.randn(128, 32).to("neuron"); b = torch.randn(128, 32).to("neuron")
f = torch.compile(lambda x, y: kmod.axpy(x + 1, y), backend="neuron")
out = f(a, b).cpu()
ref = (a.cpu() + 1) + b.cpu() * kmod.FACTOR_VALUE
m = torch.neuron.get_dynamo_metrics()
print(json.dumps({{"err": float((out - ref).abs().max()), "real_kernel_calls": len(real),
                  "warm": m["warm_starts"], "sources": m["neff_sources"], "nki_ops": m["nki_ops"],
                  "fallback": m["fallback_ops"]}}))
'''


def _write_module(d, factor: float) -> None:
    (d / "kmod.py").write_text(
        textwrap.dedent(_MODULE).replace("FACTOR)", f"{factor})") + f"\nFACTOR_VALUE = {factor}\n"
    )


def _run(py, d, cache) -> dict:
    r = py(_RUN.format(dir=str(d)), env={"TORCH_NEURONX_NEFF_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_neff_cache_runs_the_nki_node_in_a_new_process(py, tmp_path):
    d = tmp_path / "mod"
    d.mkdir()
    cache = tmp_path / "cache"
    _write_module(d, 2.0)
    first = _run(py, d, cache)
    assert first["err"] == 0 and first["sources"]["compiled"] == 1 and first["nki_ops"] == {"nkicc_proc::axpy": 1}
    assert first["real_kernel_calls"] == 0 and first["fallback"] == {}
    # New process: the warm start loads the NEFF from disk (no tracing, no lowering) and the
    # NKI node runs from the programs inside it.
    second = _run(py, d, cache)
    assert second["warm"] == 1 and second["err"] == 0 and second["real_kernel_calls"] == 0
    # Without the warm-start index: Dynamo + lowering again, same payload, a disk cache hit.
    for f in (cache / "frontend").iterdir():
        f.unlink()
    third = _run(py, d, cache)
    assert third["warm"] == 0 and third["sources"] == {"compiled": 0, "memory": 0, "disk": 1}
    assert third["err"] == 0 and third["real_kernel_calls"] == 0


def test_changed_kernel_source_is_not_served_from_the_cache(py, tmp_path):
    d = tmp_path / "mod"
    d.mkdir()
    cache = tmp_path / "cache"
    _write_module(d, 2.0)
    assert _run(py, d, cache)["err"] == 0
    _write_module(d, 5.0)  # same graph, same op name, different kernel
    r = _run(py, d, cache)
    assert r["warm"] == 0 and r["sources"]["compiled"] == 1 and r["err"] == 0


def test_kernels_without_source_files_skip_the_warm_start(py, tmp_path):
    code = """
import json, torch, nki, nki.language as nl
from torch_neuronx import nki_op, wrap_nki

@nki.jit
def k(a):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, value=nl.multiply(nl.load(a), 3.0))
    return c

@nki_op("nkicc_inline::triple", mutates_args={})
def triple(a: torch.Tensor) -> torch.Tensor:
    return wrap_nki(k)(a)

a = torch.arange(128 * 4, dtype=torch.float32).reshape(128, 4).to("neuron")
out = torch.compile(lambda x: triple(x), backend="neuron")(a).cpu()
m = torch.neuron.get_dynamo_metrics()
print(json.dumps({"ok": bool(torch.equal(out, a.cpu() * 3)), "warm": m["warm_starts"], "sources": m["neff_sources"]}))
"""
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        r = py(code, env=env)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["ok"] and runs[0]["sources"]["compiled"] == 1
    # No file to check the kernel against: no warm start, but the NEFF itself is reused.
    assert runs[1]["ok"] and runs[1]["warm"] == 0 and runs[1]["sources"]["disk"] == 1


_HELPER_MODULE = '''
import os
import nki.language as nl

OFFSET = float(os.environ.get("KOFFSET", "0"))


def shift(t):
    return nl.add(t, OFFSET + DELTA)
'''

_DEP_MODULE = '''
import nki, nki.language as nl, torch
from torch_neuronx import nki_op, wrap_nki
import khelp

@nki.jit
def kernel(a):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, value=khelp.shift(nl.load(a)))
    return c

@nki_op("nkicc_deps::shift", mutates_args={})
def shift(a: torch.Tensor) -> torch.Tensor:
    return wrap_nki(kernel)(a)
'''

_DEP_RUN = '''
import json, sys, torch
sys.path.insert(0, {dir!r})
import kmod, khelp
a = torch.ones(128, 32).to("neuron")
out = torch.compile(lambda x: kmod.shift(x * 2), backend="neuron")(a).cpu()
m = torch.neuron.get_dynamo_metrics()
print(json.dumps({{"value": float(out[0, 0]), "warm": m["warm_starts"]}}))
'''


def test_warm_start_checks_what_the_nki_op_read(py, tmp_path):
    """The warm-start index serves a NEFF only while the helper modules the kernel ran and the
    globals they read are unchanged (was: only the kernel's and the op body's files)."""
    d = tmp_path / "mod"
    d.mkdir()
    (d / "kmod.py").write_text(textwrap.dedent(_DEP_MODULE))

    def run(delta: str, offset: str) -> dict:
        (d / "khelp.py").write_text(textwrap.dedent(_HELPER_MODULE).replace("DELTA", delta))
        env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "cache"), "KOFFSET": offset,
               "PYTHONDONTWRITEBYTECODE": "1"}
        r = py(_DEP_RUN.format(dir=str(d)), env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    assert run("1.0", "0") == {"value": 3.0, "warm": 0}
    assert run("1.0", "0") == {"value": 3.0, "warm": 1}
    assert run("1.0", "5") == {"value": 8.0, "warm": 0}  # a global set from the environment
    assert run("10.0", "0") == {"value": 12.0, "warm": 0}  # an edited helper module
