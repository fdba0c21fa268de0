import json

import pytest
import torch
import torch_neuronx
from torch.profiler import ProfilerActivity, profile
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode


def test_device_time_appears_in_torch_profiler():
    x = torch.randn(512, 512).to("neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(3):
            y = x.to(torch.bfloat16)
        x.fill_(1.0)
        y.cpu()
    names = {e.key: e for e in prof.key_averages()}
    assert names["neuron::copy_d2d"].count == 3
    assert names["neuron::copy_d2d"].self_device_time_total > 0
    assert names["aten::fill_.Scalar"].self_device_time_total > 0
    # Outside a profile nothing is recorded.
    with profile(activities=[ProfilerActivity.CPU]) as prof_cpu:
        x.fill_(2.0)
    assert "aten::fill_.Scalar" not in {e.key for e in prof_cpu.key_averages()}


def test_neuron_profiler_exports_trace_and_summary(tmp_path):
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME, ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY],
                       profile_output_dir=str(tmp_path / "prof"), capture_enabled_for_nc=[0])
    exporter = NeuronProfiler(cfg)
    a = torch.randn(256).to("neuron:0")
    b = torch.randn(256).to("neuron:1")
    torch_neuronx.clear_op_tracking()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                 on_trace_ready=exporter.export_trace):
        a.fill_(3.0)
        b.fill_(4.0)
        torch.histc(a)  # a CPU fallback, reported in the summary
        torch.neuron.synchronize()
    out = tmp_path / "prof"
    trace = json.loads((out / "neuron_trace.json").read_text())
    device = [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    assert device and all(e["pid"] == 0 for e in device)  # neuron:1 was not captured
    summary = json.loads((out / "neuron_summary.json").read_text())
    assert "aten::fill_.Scalar" in summary["kernels"]
    assert summary["cpu_fallback_ops"] and summary["cpu_fallback_ops"][0].startswith("aten::histc")
    assert set(summary["cores"]) == {"neuron:0"}
    assert summary["cpu_util"]["wall_s"] > 0 and summary["host_memory"]["max_rss_bytes"] > 0
    assert "CPU fallback ops:" in (out / "neuron_summary.txt").read_text()


def test_max_events_per_nc_caps_the_trace(tmp_path):
    cfg = NeuronConfig(profile_output_dir=str(tmp_path), max_events_per_nc=2)
    exporter = NeuronProfiler(cfg)
    x = torch.zeros(16, device="neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                 on_trace_ready=exporter.export_trace):
        for _ in range(5):
            x.fill_(1.0)
    assert exporter.last_summary["dropped_events"] >= 3
    assert sum(k["calls"] for k in exporter.last_summary["kernels"].values()) == 2


def test_config_validation():
    with pytest.raises(ValueError, match="capture_enabled_for_nc"):
        NeuronConfig(capture_enabled_for_nc=[9])
    with pytest.raises(TypeError):
        NeuronConfig(modes=["device"])
    with pytest.raises(ValueError):
        NeuronConfig(max_events_per_nc=0)
