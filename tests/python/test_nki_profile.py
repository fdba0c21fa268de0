"""The Trainium cost model behind nki.benchmark / nki.profile / nki.estimate: engine times from
the documented formulas, parallel engines, HBM traffic, and the Perfetto timeline."""

from __future__ import annotations

import json
import math

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch


def _load(path):
    with open(path) as f:
        return json.load(f)


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(M // 128):
        for n in range(N // 512):
            ps = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in range(K // 128):
                lt = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                rt = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(dst=rt, src=rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                nisa.nc_matmul(dst=ps, stationary=lt, moving=rt)
            sb = nl.ndarray((128, 512), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=sb, src=ps)
            nisa.dma_copy(dst=result[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], src=sb)
    return result


@nki.jit
def matmuls_on_resident_tiles(x, reps):
    """`reps` back-to-back 128x128x512 bf16 matmuls on tiles already in SBUF."""
    s = nl.zeros((128, 128), nl.bfloat16)
    m = nl.zeros((128, 512), nl.bfloat16)
    ps = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    for i in range(reps):
        nisa.nc_matmul(dst=ps, stationary=s, moving=m, accumulate=i > 0)
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_tensor_engine_time_matches_documented_formula():
    x = np.zeros((1, 1), np.float32)
    est = nki.estimate(matmuls_on_resident_tiles, x, 32)
    # max(min(64, N_stationary), N_moving) = 512 cycles per matmul at 2.4 GHz (NeuronCore-v3).
    assert est.busy_ns["Tensor"] == pytest.approx(32 * 512 / 2.4)
    assert est.flops == 32 * 2 * 128 * 128 * 512
    # Back to back on resident tiles the Tensor Engine runs at the 79 TFLOPS peak.
    tensor_tflops = est.flops / est.busy_ns["Tensor"] / 1000
    assert tensor_tflops == pytest.approx(2 * 128 * 128 * 2.4e9 / 1e12, rel=1e-9)
    assert 78 < tensor_tflops < 80
    assert est.total_ns > est.busy_ns["Tensor"]  # plus memsets, the PSUM copy and the store


def test_fp32_matmul_is_four_times_slower():
    @nki.jit
    def k(x, dtype):
        s = nl.zeros((128, 128), dtype)
        m = nl.zeros((128, 512), dtype)
        ps = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=m)

    x = np.zeros((1, 1), np.float32)
    bf = nki.estimate(k, x, nl.bfloat16).busy_ns["Tensor"]
    fp = nki.estimate(k, x, nl.float32).busy_ns["Tensor"]
    assert fp == pytest.approx(4 * bf)


def test_estimate_respects_bounds_and_counts_hbm_traffic():
    K = M = N = 512
    a = torch.randn(K, M, dtype=torch.bfloat16)
    b = torch.randn(K, N, dtype=torch.bfloat16)
    est = nki.estimate(matmul_tiled, a, b)
    flops = 2 * K * M * N
    assert est.flops == flops
    assert est.total_ns >= flops / 79e12 * 1e9  # never faster than the Tensor Engine peak
    # Every lhsT tile is loaded once per n tile and every rhs tile once per m tile.
    loads = (M // 128) * (N // 512) * (K // 128) * (128 * 128 + 128 * 512) * 2
    assert est.hbm_read_bytes == loads
    assert est.hbm_write_bytes == M * N * 2
    assert all(0.0 <= u <= 1.0 for u in est.utilization.values())


def test_engines_overlap():
    # DMA loads of the next tiles overlap the matmuls: the total is less than the sum of the
    # engines' busy times.
    a = torch.randn(1024, 256, dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, dtype=torch.bfloat16)
    est = nki.estimate(matmul_tiled, a, b)
    dma_busy_per_queue = est.busy_ns["DMA"] / 16
    assert est.total_ns < est.busy_ns["Tensor"] + est.busy_ns["Vector"] + dma_busy_per_queue


def test_benchmark_result_and_timeline(tmp_path):
    a = torch.randn(256, 128, dtype=torch.bfloat16)
    b = torch.randn(256, 512, dtype=torch.bfloat16)
    res = nki.benchmark(matmul_tiled, warmup=1, iters=3, working_directory=str(tmp_path))(a, b)
    p50 = res.nc_latency.get_latency_percentile(50)
    assert p50 == pytest.approx(res.estimate.total_us) and p50 > 0
    assert len(res.emulator_latency.samples_us) == 3
    torch.testing.assert_close(res.outputs.float(), a.float().T @ b.float(), rtol=2e-2, atol=0.5)
    trace = _load(res.timeline_path)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in events}
    assert {"nc_matmul", "dma_copy", "tensor_copy"} <= names
    lanes = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert "Tensor Engine" in lanes and "DMA queue 15" in lanes
    assert all("test_nki_profile.py:" in e["args"]["source"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    assert end == pytest.approx(res.estimate.total_us, abs=1e-3)  # ts/dur are printed to 0.1 ns
    assert trace["otherData"]["estimated_latency_us"] == pytest.approx(res.estimate.total_us)


def test_old_style_benchmark_decorator():
    @nki.benchmark(warmup=1, iters=2)
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(x)))
        return out

    k(np.zeros((128, 256), np.float32))
    p99 = k.benchmark_result.nc_latency.get_latency_percentile(99)
    assert p99 > 0


def test_profile_writes_timeline_and_summary(tmp_path):
    x = np.random.randn(128, 512).astype(np.float32)
    res = nki.profile(matmuls_on_resident_tiles, working_directory=str(tmp_path))(x, 4)
    summary = _load(res.summary_path)
    assert summary["kernel"].endswith("matmuls_on_resident_tiles")
    assert summary["instructions"] == res.estimate.instructions
    assert summary["engine_utilization"]["Tensor"] > 0
    assert _load(res.timeline_path)["traceEvents"]


def test_grid_instances_run_on_parallel_cores():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        rows = x.shape[0] // nl.num_programs(0)
        p = nl.program_id(0)
        nl.store(out[p * rows : (p + 1) * rows], nl.exp(nl.load(x[p * rows : (p + 1) * rows])))
        return out

    x = np.zeros((256, 512), np.float32)
    one = nki.estimate(k[2], x)
    assert len(one.per_instance) == 2 and one.cores == 2
    # LNC=2: the two instances run side by side on the two physical cores.
    assert one.total_ns == pytest.approx(max(e.total_ns for e in one.per_instance))
    four = nki.estimate(k[4], np.zeros((512, 512), np.float32))
    assert four.total_ns == pytest.approx(2 * max(e.total_ns for e in four.per_instance), rel=1e-6)


def test_dma_efficiency_depends_on_contiguous_bytes():
    @nki.jit
    def load(x):
        t = nl.ndarray((128, 2048), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)

    @nki.jit
    def load_strided(x):
        # the same bytes gathered one element at a time (a transposed access pattern)
        t = nl.ndarray((128, 2048), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.permute(1, 0))

    fast = nki.estimate(load, np.zeros((128, 2048), np.float32)).total_ns
    slow = nki.estimate(load_strided, np.zeros((2048, 128), np.float32)).total_ns
    assert slow > 5 * fast
    # 1 MiB over 16 engines at 23 B/ns each, plus the fixed cost and one descriptor per row.
    expected = 1300 + (128 * 2048 * 4) / 16 / 23 + 8 * 20
    assert fast == pytest.approx(expected, rel=1e-6)
    assert math.isfinite(slow)
