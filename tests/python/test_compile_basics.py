"""Behaviour of torch.compile(backend="neuron") around the graphs: graph breaks, new shapes,
dynamic=True, modes, CPU inputs, ops that cannot be compiled, custom ops, debug artifacts,
metrics, backend registration and the IR verifier."""

from __future__ import annotations

import glob
import logging
import os
import subprocess
import sys

import pytest
import torch
import torch_neuronx
from repo_paths import REPO
from torch_neuronx import _C


def f_basic(x, y):
    return torch.tanh(x @ y + 1.0) * 2


def test_backend_is_registered():
    assert "neuron" in torch._dynamo.list_backends()
    with open(os.path.join(REPO, "distributions", "torch-neuronx", "pyproject.toml")) as f:
        text = f.read()
    assert 'neuron = "torch_neuronx.neuron_dynamo_backend.backend:neuron_backend"' in text


def test_metrics_api_on_both_modules(fresh_compile):
    assert torch.neuron.get_dynamo_metrics is not None
    m = torch_neuronx.get_dynamo_metrics()
    for k in ("graphs_compiled", "cache_hits", "cache_misses", "compile_time_s", "dynamo_graphs"):
        assert k in m
    x, y = torch.randn(3, 4, device="neuron"), torch.randn(4, 5, device="neuron")
    torch.compile(f_basic, backend="neuron")(x, y)
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs_compiled"] == 1 and m["cache_misses"] == 1 and m["compile_time_s"] > 0
    torch_neuronx.reset_dynamo_metrics()
    assert torch.neuron.get_dynamo_metrics()["graphs_compiled"] == 0


def test_graph_break_gives_two_compiled_graphs(fresh_compile):
    def fn(x):
        a = torch.relu(x) * 3
        torch._dynamo.graph_break()
        return torch.sigmoid(a) + x

    x = torch.randn(5, 7)
    got = torch.compile(fn, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-6)
    m = torch.neuron.get_dynamo_metrics()
    assert m["dynamo_graphs"] == 2 and m["graphs_compiled"] == 2


def test_data_dependent_graph_break(fresh_compile):
    def fn(x):
        s = x.sum()
        if s.item() > 0:  # .item() breaks the graph
            return x * 2
        return x - 1

    x = torch.randn(6)
    cf = torch.compile(fn, backend="neuron")
    for v in (x.abs(), -x.abs()):
        torch.testing.assert_close(cf(v.to("neuron")).cpu(), fn(v), rtol=1e-6, atol=1e-6)


def test_new_shape_recompiles(fresh_compile, caplog):
    cf = torch.compile(f_basic, backend="neuron")
    with caplog.at_level(logging.INFO, logger="torch_neuronx.neuron_dynamo_backend.backend"):
        for n in (2, 3, 5, 3, 5, 5):
            x, y = torch.randn(n, 4), torch.randn(4, 6)
            torch.testing.assert_close(cf(x.to("neuron"), y.to("neuron")).cpu(), f_basic(x, y), rtol=1e-5, atol=1e-5)
    # One NEFF per distinct shape; repeated shapes reuse their compiled graph (no retrace).
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs_compiled"] == 3 and m["aot_graphs"]["inference"] == 3
    assert m["dynamo_graphs"] == 2  # the second shape makes Dynamo's graph dynamic
    # The recompile names the input whose shape changed.
    lines = [r.getMessage() for r in caplog.records if "recompiling" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "float32[3, 4] strides [4, 1] on neuron -> float32[5, 4] strides [4, 1] on neuron" in lines[0]


def test_dynamic_true_is_treated_as_static(fresh_compile, caplog):
    cf = torch.compile(f_basic, backend="neuron", dynamic=True)
    with caplog.at_level(logging.WARNING, logger="torch_neuronx.neuron_dynamo_backend.backend"):
        for n in (2, 4):
            x, y = torch.randn(n, 4), torch.randn(4, 3)
            torch.testing.assert_close(cf(x.to("neuron"), y.to("neuron")).cpu(), f_basic(x, y), rtol=1e-5, atol=1e-5)
    assert "dynamic shapes are treated as static" in caplog.text
    assert torch.neuron.get_dynamo_metrics()["graphs_compiled"] == 2


def test_other_modes_warn_and_use_default(fresh_compile, caplog):
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    with caplog.at_level(logging.WARNING, logger="torch_neuronx.neuron_dynamo_backend.backend"):
        got = torch.compile(f_basic, backend="neuron", mode="max-autotune-no-cudagraphs")(x.to("neuron"), y.to("neuron"))
    torch.testing.assert_close(got.cpu(), f_basic(x, y), rtol=1e-5, atol=1e-5)
    assert "only mode='default' is supported" in caplog.text


def test_cpu_inputs_are_copied_in(fresh_compile):
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    got = torch.compile(f_basic, backend="neuron")(x, y)
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), f_basic(x, y), rtol=1e-5, atol=1e-5)


def test_cpu_autocopy_can_be_disabled(py):
    r = py(
        """
        import torch
        fn = torch.compile(lambda x: x * 2 + 1, backend="neuron")
        try:
            fn(torch.randn(4))
        except RuntimeError as e:
            print("ERR", e)
        """,
        env={"TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY": "1", "TORCH_NEURONX_NEFF_CACHE_DIR": "/tmp/neff_cache_autocopy_test"},
        timeout=300,
    )
    assert "Input tensor at index 0 is on cpu device" in r.stdout, r.stdout + r.stderr


def test_uncompilable_op_splits_the_graph(fresh_compile, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "dbg"))

    def fn(x):
        a = torch.exp(x) * 2
        b = torch.cumsum(a, dim=1)  # no lowering: runs eagerly between compiled parts
        return torch.tanh(b) + a

    x = torch.randn(4, 6)
    with caplog.at_level(logging.WARNING, logger="torch_neuronx.neuron_dynamo_backend.backend"):
        got = torch.compile(fn, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-5)
    m = torch.neuron.get_dynamo_metrics()
    assert "aten::cumsum.default" in m["fallback_ops"]
    assert m["graphs_compiled"] == 2  # before and after the eager op
    assert "run eagerly" in caplog.text and "aten::cumsum.default" in caplog.text
    with open(tmp_path / "dbg" / "proc_0" / "fallback_ops.txt") as f:
        report = f.read()
    assert "aten::cumsum.default" in report


def test_custom_op_is_one_opaque_node(fresh_compile):
    lib = torch.library.Library("neuron_emu_test", "FRAGMENT")
    try:
        lib.define("scale_add(Tensor a, Tensor b, float scale) -> Tensor")
    except RuntimeError:
        pass  # defined by an earlier test run in this process

    def impl(a, b, scale):
        return a * scale + b

    for key in ("CPU", "PrivateUse1"):
        lib.impl("scale_add", lambda a, b, scale: (a.cpu() * scale + b.cpu()).to(a.device), key)
    lib.impl("scale_add", lambda a, b, scale: torch.empty_like(a), "Meta")
    from torch_neuronx.neuron_dynamo_backend import register_opaque_op

    _C._cc._register_test_custom_kernel()
    register_opaque_op("neuron_emu_test::scale_add", lambda node: repr(float(node.args[2])))

    def fn(x, y):
        return torch.ops.neuron_emu_test.scale_add(torch.relu(x), y, 3.0) - 1

    x, y = torch.randn(5, 6), torch.randn(5, 6)
    want = impl(torch.relu(x), y, 3.0) - 1
    torch_neuronx.clear_op_tracking()
    got = torch.compile(fn, backend="neuron")(x.to("neuron"), y.to("neuron"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
    m = torch.neuron.get_dynamo_metrics()
    assert m["fallback_ops"] == {} and m["graphs_compiled"] == 1
    assert _C._cc.has_custom_kernel("neuron_emu_test::scale_add")


def test_artifacts_and_neff_dump(fresh_compile, tmp_path, monkeypatch):
    dbg = tmp_path / "dbg"
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(dbg))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    torch.compile(f_basic, backend="neuron")(x.to("neuron"), y.to("neuron"))
    proc = dbg / "proc_0"
    assert len(glob.glob(str(proc / "fx_graphs" / "*.txt"))) == 1
    dumps = sorted(os.path.basename(p) for p in glob.glob(str(proc / "ir" / "*" / "*.ir")))
    assert dumps[0] == "00-input.ir" and any("after-fuse_elementwise" in d for d in dumps)
    assert any("after-plan_memory" in d for d in dumps)
    [neff] = glob.glob(str(proc / "neff" / "*.neff"))
    text = _C._cc.dump_neff(neff)
    assert "NEFF format version 2" in text and "target: trn2" in text and "steps:" in text
    cli = os.path.join(REPO, "build", "csrc", "tools", "neff-dump")
    if os.path.exists(cli):
        r = subprocess.run([cli, neff], capture_output=True, text=True, check=False)
        assert r.returncode == 0 and "NEFF format version 2" in r.stdout


def test_verifier_reports_a_malformed_graph():
    b = _C._cc.GraphBuilder("bad")
    x = b.input("f32", [2, 3], [3, 1], "x")
    y = b.input("f32", [4, 3], [3, 1], "y")
    with pytest.raises(ValueError, match=r"'add': operand shapes \[2,3\], \[4,3\] do not broadcast"):
        b.node("add", [x, y], {}, None)
    with pytest.raises(ValueError, match=r"'reshape': cannot reshape \[2,3\] \(6 elements\) to \[4\]"):
        b.node("reshape", [x], {"shape": [4]}, None)
    with pytest.raises(ValueError, match=r"result is f32\[2,3\], traced as f32\[3,2\]"):
        b.node("exp", [x], {}, [("f32", [3, 2])])


def test_bad_compiler_flags_report_the_variable(fresh_compile, monkeypatch):
    monkeypatch.setenv("NEURON_CC_FLAGS", "--optlevel 7")
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    with pytest.raises(Exception, match="NEURON_CC_FLAGS: --optlevel expects 0..3"):
        torch.compile(f_basic, backend="neuron")(x.to("neuron"), y.to("neuron"))


def test_opt_level_zero_is_still_correct(fresh_compile, monkeypatch):
    monkeypatch.setenv("NEURON_COMPILER_OPT_LEVEL", "0")
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    got = torch.compile(f_basic, backend="neuron")(x.to("neuron"), y.to("neuron"))
    torch.testing.assert_close(got.cpu(), f_basic(x, y), rtol=1e-5, atol=1e-5)


def test_failed_compile_can_fall_back_to_eager(fresh_compile, monkeypatch, caplog):
    monkeypatch.setenv("NEURON_CC_FLAGS", "--optlevel 7")  # makes the compiler fail
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    with caplog.at_level(logging.WARNING, logger="torch_neuronx.neuron_dynamo_backend.backend"):
        got = torch.compile(f_basic, backend="neuron")(x.to("neuron"), y.to("neuron"))
    torch.testing.assert_close(got.cpu(), f_basic(x, y), rtol=1e-5, atol=1e-5)
    assert "failed to compile" in caplog.text
    assert any(k.startswith("<whole graph") for k in torch.neuron.get_dynamo_metrics()["fallback_ops"])


def test_model_name_names_the_artifacts(fresh_compile, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "dbg"))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    torch.compile(f_basic, backend="neuron", options={"model_name": "my model"})(x.to("neuron"), y.to("neuron"))
    [neff] = glob.glob(str(tmp_path / "dbg" / "proc_0" / "neff" / "*.neff"))
    assert os.path.basename(neff).startswith("my_model_")


def test_warm_start_index_distinguishes_constants(tmp_path):
    """Graphs that differ only in a constant Dynamo burned in (a global float) must not share a
    NEFF through the warm-start index; the same graph in a new process warm-starts."""
    script = r"""
import sys, torch, torch_neuronx
scale = float(sys.argv[1])
with torch.no_grad():
    out = torch.compile(lambda x: x * scale, backend="neuron")(torch.ones(4, device="neuron")).cpu()
print("OUT", out.tolist(), torch.neuron.get_dynamo_metrics()["warm_starts"])
"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(tmp_path)
    outs = []
    for v in ("2", "3", "2"):
        r = subprocess.run([sys.executable, "-c", script, v], capture_output=True, text=True, env=env, timeout=300,
                           check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(next(ln for ln in r.stdout.splitlines() if ln.startswith("OUT")))
    assert outs == ["OUT [2.0, 2.0, 2.0, 2.0] 0", "OUT [3.0, 3.0, 3.0, 3.0] 0", "OUT [2.0, 2.0, 2.0, 2.0] 1"]


def test_cpu_side_ops_stay_on_the_cpu(fresh_compile):
    def fn(x):
        y = x * 2
        return y.cpu() + 1, y.sum()

    x = torch.randn(4)
    a, b = torch.compile(fn, backend="neuron")(x.to("neuron"))
    assert a.device.type == "cpu" and b.device.type == "neuron"
    torch.testing.assert_close(a, x * 2 + 1)
    torch.testing.assert_close(b.cpu(), (x * 2).sum())


def test_bad_fallback_execution_value_names_the_variable(fresh_compile, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "bogus")
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    with pytest.raises(Exception, match="TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION='bogus': expected 1"):
        torch.compile(f_basic, backend="neuron")(x.to("neuron"), y.to("neuron"))


def test_executable_run_takes_a_tuple_or_list_and_names_a_bad_argument(fresh_compile):
    # The compiled callable passes its arguments through as they are (a tuple); anything but a
    # tensor of the compiled shape is refused with the input's position.
    b = _C._cc.GraphBuilder("run_args")
    x = b.input("f32", [2, 3], [3, 1], "x")
    [y] = b.node("exp", [x], {}, None)
    b.set_outputs([y], [])
    exe = _C._cc.compile(b, {"name": "run_args", "flags": "", "opt_level": 2, "dump_dir": "", "neff_copy": ""})
    t = torch.randn(2, 3)
    for args in ((t.to("neuron"),), [t.to("neuron")]):
        [out] = exe.run(args)
        torch.testing.assert_close(out.cpu(), torch.exp(t.to("neuron")).cpu(), rtol=0, atol=0)  # eager bits
    with pytest.raises(RuntimeError, match="compiled graph: input 0 is a float, expected a tensor"):
        exe.run((1.0,))
    with pytest.raises(RuntimeError, match=r"compiled graph: input 0 is Float\[3, 2\]"):
        exe.run((torch.randn(3, 2, device="neuron"),))
    with pytest.raises(RuntimeError, match="expects 1 inputs, got 2"):
        exe.run((t, t))
