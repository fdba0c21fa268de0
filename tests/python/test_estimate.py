"""Estimated Trainium2 time (torch.neuron.estimated_time, docs/cost-model.md): the estimate of
known work equals the cost model's formula, and the profiler trace carries the estimated
track. No test here asserts anything about this host's wall-clock time."""

import json

import pytest
import torch
import torch_neuronx
from torch.profiler import ProfilerActivity, profile
from torch_neuronx import _C
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

P = None


def params():
    global P
    if P is None:
        P = torch.neuron.device_time_params()
    return P


def eager_ns(nbytes):
    p = params()
    return p["eager_launch_ns"] + nbytes / p["hbm_bytes_per_ns"]


def transfer_ns(nbytes):
    p = params()
    return p["pcie_latency_ns"] + nbytes / p["pcie_bytes_per_ns"]


def test_eager_op_sequence_is_launches_plus_hbm_traffic():
    a = torch.randn(1000, dtype=torch.bfloat16).to("neuron")
    b = torch.randn(1000, dtype=torch.bfloat16).to("neuron")
    with torch.neuron.estimated_time() as t:
        c = a + b  # reads a, b, writes c: 3 x 2000 bytes
        d = c * 2.0  # the scalar stays on the host: reads c, writes d
    assert t.tasks == 2
    expected = eager_ns(6000) + eager_ns(4000)
    assert t.device_s * 1e9 == pytest.approx(expected, abs=2)  # each task rounded to 1 ns
    # The host waited for the estimated device at the end: the estimate covers the device work.
    assert t.wall_s >= t.device_s
    assert "Trainium2 est." in str(t)
    del d


def test_matmul_is_costed_by_the_roofline():
    a = torch.randn(256, 512, dtype=torch.bfloat16).to("neuron")
    b = torch.randn(512, 1024, dtype=torch.bfloat16).to("neuron")
    with torch.neuron.estimated_time() as t:
        torch.mm(a, b)
    p = params()
    flops_ns = 2 * 256 * 512 * 1024 / (p["peak_bf16_tflops"] * 1e3)
    bytes_ns = 2 * (256 * 512 + 512 * 1024 + 256 * 1024) / p["hbm_bytes_per_ns"]
    assert t.tasks == 1
    assert t.device_s * 1e9 == pytest.approx(p["eager_launch_ns"] + max(flops_ns, bytes_ns), abs=2)


def test_compiled_graph_is_one_launch_at_its_program_estimate(monkeypatch):
    exes = []
    real = _C._cc.compile

    def capture(*args, **kwargs):
        exe = real(*args, **kwargs)
        exes.append(exe)
        return exe

    monkeypatch.setattr(_C._cc, "compile", capture)
    real_load = _C._cc.load_cached

    def capture_load(*args, **kwargs):  # a warm start from the NEFF cache
        exe = real_load(*args, **kwargs)
        if exe is not None:
            exes.append(exe)
        return exe

    monkeypatch.setattr(_C._cc, "load_cached", capture_load)
    torch._dynamo.reset()

    def f(x, w, b):
        return torch.relu(x @ w + b) * 2.0

    g = torch.compile(f, backend="neuron")
    x = torch.randn(8, 64).to("neuron")
    w = torch.randn(64, 32).to("neuron")
    bias = torch.randn(32).to("neuron")
    g(x, w, bias)
    assert len(exes) == 1
    est = exes[0].estimate()
    p = params()
    steps = est["steps"]
    assert est["launch_us"] * 1e3 == pytest.approx(p["neff_launch_ns"])
    assert est["total_us"] == pytest.approx(est["launch_us"] + sum(s[2] for s in steps))
    for _name, _kind, us, nbytes, flops in steps:
        roof = max(nbytes / p["hbm_bytes_per_ns"], flops / (p["peak_fp32_tflops"] * 1e3))
        assert us * 1e3 == pytest.approx(p["kernel_boundary_ns"] + roof)
    with torch.neuron.estimated_time() as t:
        g(x, w, bias)
    assert t.tasks == 1
    assert t.device_s * 1e6 == pytest.approx(est["total_us"], abs=2e-3)
    # One NEFF launch costs less than the same ops launched one by one.
    with torch.neuron.estimated_time() as te:
        f(x, w, bias)
    assert te.tasks >= 3 and te.device_s > t.device_s


def test_cpu_fallback_is_copies_down_and_up_around_the_host_op():
    x = torch.randn(5000).to("neuron")
    torch_neuronx.clear_op_tracking()
    with torch.neuron.estimated_time() as t:
        torch.histc(x, bins=10)  # no neuron kernel: falls back to the CPU
    assert any(op.startswith("aten::histc") for op in torch_neuronx.get_fallback_ops())
    # Device tasks: x down (20000 bytes), the 10-bin result up (40 bytes).
    assert t.tasks == 2
    assert t.device_s * 1e9 == pytest.approx(transfer_ns(20000) + transfer_ns(40), abs=2)
    # The host waited for both copies (each wait with the wake-up latency) and ran the host op
    # (modelled: its bytes, x and the result); its own Python time comes on top.
    p = params()
    host_op = p["host_op_ns"] + 20040 / p["host_bytes_per_ns"]
    formula = transfer_ns(20000) + p["host_wake_ns"] + host_op + transfer_ns(40) + p["host_wake_ns"]
    assert t.wall_s * 1e9 >= formula


def test_waiting_for_this_machine_is_not_estimated_time():
    # A device task that takes this machine 300 ms but is estimated at one launch.
    with torch.neuron.estimated_time() as t:
        _C._debug_launch_sleep(0, 300)
    assert t.host_wall_s >= 0.3
    assert t.device_s * 1e9 == pytest.approx(params()["eager_launch_ns"], abs=2)
    assert t.wall_s < t.host_wall_s - 0.25


def test_profiler_trace_has_estimated_track_neuron_rows_flows_and_fallbacks(tmp_path):
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=str(tmp_path / "p"))
    exporter = NeuronProfiler(cfg)
    a = torch.randn(4096).to("neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                 on_trace_ready=exporter.export_trace):
        b = a * 3.0
        b.add_(1.0)
        torch.histc(b, bins=4)  # a CPU fallback
        torch.neuron.synchronize()
    trace = json.loads((tmp_path / "p" / "neuron_trace.json").read_text())
    ev = trace["traceEvents"]
    names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert "neuron:0" in names and "neuron:0 estimated Trainium2" in names
    assert not any(n.startswith("GPU") for n in names)
    est = [e for e in ev if e.get("cat") == "trn2_estimate"]
    assert {"aten::mul.out", "aten::add_.Tensor"} & {e["name"] for e in est} or len(est) >= 2
    mul = next(e for e in est if e["name"].startswith("aten::mul"))
    assert mul["dur"] == pytest.approx(eager_ns(4096 * 4 * 2) / 1e3, abs=2e-3)
    # Estimated tasks run in order on the estimated core.
    est.sort(key=lambda e: e["ts"])
    for x, y in zip(est, est[1:]):
        assert y["ts"] >= x["ts"] + x["dur"] - 1e-3
    fallback = [e for e in ev if e.get("cat") == "cpu_fallback"]
    assert fallback and fallback[0]["name"].startswith("cpu_fallback::aten::histc") and fallback[0]["pid"] == 0
    starts = [e for e in ev if e.get("ph") == "s" and e.get("cat") == "neuron_launch"]
    ends = [e for e in ev if e.get("ph") == "f" and e.get("cat") == "neuron_launch"]
    assert starts and len(starts) == len(ends)
    assert all(isinstance(e["pid"], int) and e["pid"] == 0 for e in ends)
    summary = exporter.last_summary
    assert summary["trn2_estimate"]["device_time_us"] > 0
    assert summary["kernels"][mul["name"]]["trn2_est_us"] == pytest.approx(mul["dur"], abs=2e-3)
    assert "Trainium2 estimate" in (tmp_path / "p" / "neuron_summary.txt").read_text()


def test_profiling_prints_no_kineto_usdt_lines():
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "x = torch.ones(3, device='neuron')\n"
        "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):\n"
        "    (x + 1).cpu()\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")
    assert "USDT" not in r.stdout and "USDT" not in r.stderr


def test_collectives_are_a_ring_over_neuronlink():
    """torchrun with 2 ranks: an all_reduce of 4 MiB per rank is 2(n-1) ring steps of
    bytes/n over one logical core's share of NeuronLink, each with the step latency; an
    all_gather n-1 steps of its output / n, a reduce_scatter n-1 steps of its input / n (the
    other tasks of the block, the group stream's hand-offs, cost nothing)."""
    import os
    import re

    from dist_launch import torchrun

    here = os.path.dirname(os.path.abspath(__file__))
    r = torchrun(os.path.join(here, "dist_scripts", "estimate_collectives.py"), here, nproc=2, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = re.findall(r"rank (\d) (\w+) tasks=(\d+) est_ns=([\d.]+) formula_ns=([\d.]+)", r.stdout)
    ops = ("all_gather", "all_gather_coalesced", "all_reduce", "reduce_scatter", "reduce_scatter_coalesced")
    assert sorted((q, op) for q, op, *_ in rows) == [(q, op) for q in "01" for op in ops], r.stdout
    for _, op, tasks, est, formula in rows:
        assert int(tasks) >= 1, (op, r.stdout)
        assert float(formula) > 2 * 1300  # the bytes term matters, not only the step latency
        assert float(est) == pytest.approx(float(formula), abs=2), (op, est, formula)
