"""NKI on neuron-emu, one run:

1. An NKI tiled matmul in bf16 (the nki-samples tutorial kernel and shape: lhs [4096, 1024] @
   rhs [1024, 2048]) executed by the NeuronCore model, against torch.matmul on the CPU (bf16, the
   stated peer, and fp32) on the same inputs.
2. Instructions per second on small tiles (the executor's per-instruction overhead).
3. The cost model's Trainium2 estimate for that matmul next to the analytic bound
   (2*M*N*K / 79 TFLOPS bf16 per NeuronCore).
4. Per-call overhead: a warm call of a 3-instruction kernel (load, add, store of a 128x4 tile)
   on neuron tensors against an eager `add` + synchronize of the same tile.
5. The decode MLP of Lab 2 (nkilib `mlp`, one token, the small model's shapes, weights as
   nn.Linear stores them) on neuron tensors against the time to read its weights once at the
   host's measured read bandwidth.

Usage: python benchmarks/nki_bench.py [--shape 4096x1024x2048 | --size S] [--iters 5] [--skip-torch-bf16]
       [--only overhead]
Writes benchmarks/results/nki_bench.json (nki_bench_overhead.json with --only overhead).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import nki
import nki.isa as nisa
import nki.language as nl
import torch
from _common import read_bandwidth, write_result


@nki.jit
def matmul_tiled(lhsT, rhs):
    """result[M, N] = lhsT.T @ rhs with 128x128 stationary and 128x512 moving tiles."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            res_psum = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                lt = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                rt = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k * TK : (k + 1) * TK, m * TM : (m + 1) * TM])
                nisa.dma_copy(dst=rt, src=rhs[k * TK : (k + 1) * TK, n * TN : (n + 1) * TN])
                nisa.nc_matmul(dst=res_psum, stationary=lt, moving=rt)
            res_sb = nl.ndarray((TM, TN), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum)
            nisa.dma_copy(dst=result[m * TM : (m + 1) * TM, n * TN : (n + 1) * TN], src=res_sb)
    return result


@nki.jit
def matmul_blocked(lhsT, rhs):
    """Same product, loading each lhsT column strip once per M block and each rhs row strip
    in 2 KiB-per-partition chunks: fewer, larger DMAs (the tutorial's optimisation)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = 128, 128, 512
    NB = 2048 if N % 2048 == 0 else TN  # columns per rhs load
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        strip = nl.ndarray((TK, K // TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(
            dst=strip, src=lhsT[:, m * TM : (m + 1) * TM].reshape((K // TK, TK, TM)).permute(1, 0, 2)
        )
        for nb in nl.affine_range(N // NB):
            psums = [nl.ndarray((TM, TN), nl.float32, buffer=nl.psum) for _ in range(NB // TN)]
            for k in nl.affine_range(K // TK):
                rt = nl.ndarray((TK, NB), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=rt, src=rhs[k * TK : (k + 1) * TK, nb * NB : (nb + 1) * NB])
                for j, ps in enumerate(psums):
                    nisa.nc_matmul(dst=ps, stationary=strip[:, k, :], moving=rt[:, j * TN : (j + 1) * TN])
            res = nl.ndarray((TM, NB), dtype=result.dtype, buffer=nl.sbuf)
            for j, ps in enumerate(psums):
                nisa.tensor_copy(dst=res[:, j * TN : (j + 1) * TN], src=ps)
            nisa.dma_copy(dst=result[m * TM : (m + 1) * TM, nb * NB : (nb + 1) * NB], src=res)
    return result


def make_small_tile_kernel(ops: int):
    @nki.jit
    def many_small_instructions(x):
        """`ops` Vector Engine instructions on one resident tile between a load and a store."""
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        for i in range(ops):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=1.0001, op1=nl.add, operand1=0.5)
        nl.store(out, t)
        return out

    return many_small_instructions


@nki.jit
def add3(a, b):
    """Three instructions: load both operands, add, store (the per-call overhead probe)."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
    nl.store(out, x)
    return out


def timed_sync(fn, iters: int, repeats: int = 5) -> float:
    """Median seconds per call of `fn` + torch.neuron.synchronize(), `iters` calls per sample."""
    for _ in range(3):
        fn()
    torch.neuron.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
            torch.neuron.synchronize()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


@contextlib.contextmanager
def _full_path():
    """Calls inside take nki.jit's full argument path (binding, specialization key, deps check,
    _Run), not the warm-call fast path: the before/after of that path in one run."""
    from nki import _jit

    old = _jit._FAST_PATH
    _jit._FAST_PATH = False
    try:
        yield
    finally:
        _jit._FAST_PATH = old


def overhead_and_decode() -> dict:
    from nkilib.core.mlp.mlp import mlp
    from nkilib.core.utils.common_types import WeightLayout

    dev = torch.device("neuron")
    a = torch.randn(128, 4, device=dev)
    b = torch.randn(128, 4, device=dev)
    # Interleaved rounds (the machine may be shared): the ratio of each round's medians.
    rounds = []
    for _ in range(5):
        nki_r = timed_sync(lambda: add3(a, b), 200)
        eager_r = timed_sync(lambda: a + b, 200)
        with _full_path():
            full_r = timed_sync(lambda: add3(a, b), 200)
        rounds.append((nki_r, eager_r, full_r))
    nki_s = statistics.median(r[0] for r in rounds)
    eager_s = statistics.median(r[1] for r in rounds)
    full_s = statistics.median(r[2] for r in rounds)
    ratio = statistics.median(r[0] / r[1] for r in rounds)
    full_ratio = statistics.median(r[2] / r[1] for r in rounds)
    an, bn = a.cpu().numpy(), b.cpu().numpy()
    np_s = timed(lambda: add3(an, bn), 2000)
    with _full_path():
        np_full_s = timed(lambda: add3(an, bn), 2000)
    np_eager_s = timed(lambda: an + bn, 2000)
    H, I = 512, 2048  # examples/lab2 "small"
    bf = torch.bfloat16
    x = torch.randn(1, 1, H, dtype=bf, device=dev)
    wg, wu = (torch.randn(I, H, dtype=bf, device=dev) / H**0.5 for _ in range(2))
    wd = torch.randn(H, I, dtype=bf, device=dev) / I**0.5
    call = lambda: mlp(  # noqa: E731
        hidden_tensor=x,
        gate_proj_weights_tensor=wg,
        up_proj_weights_tensor=wu,
        down_proj_weights_tensor=wd,
        weight_layout=WeightLayout.OUT_IN,
    )
    mlp_s = timed_sync(call, 20)
    weight_bytes = 2 * (wg.numel() + wu.numel() + wd.numel())
    bw = read_bandwidth()
    plan = mlp.specialize(
        hidden_tensor=x,
        gate_proj_weights_tensor=wg,
        up_proj_weights_tensor=wu,
        down_proj_weights_tensor=wd,
        weight_layout=WeightLayout.OUT_IN,
    ).programs[0].plan
    return {
        "add3_neuron_seconds": nki_s,
        "eager_add_sync_seconds": eager_s,
        "add3_vs_eager": ratio,
        "add3_full_path_seconds": full_s,
        "add3_full_path_vs_eager": full_ratio,
        "add3_numpy_seconds": np_s,
        "add3_numpy_full_path_seconds": np_full_s,
        "numpy_add_seconds": np_eager_s,
        "decode_mlp_seconds": mlp_s,
        "decode_mlp_weight_bytes": weight_bytes,
        "host_read_bandwidth_gb_s": bw / 1e9,
        "decode_mlp_weight_read_seconds": weight_bytes / bw,
        "decode_mlp_vs_weight_read": mlp_s / (weight_bytes / bw),
        "decode_mlp_plan": {k: v for k, v in plan.items() if k != "elided"},
    }


def print_overhead(over: dict) -> None:
    print(
        f"Per call: 3-instruction kernel on neuron tensors {over['add3_neuron_seconds'] * 1e6:.1f} us, "
        f"eager add + sync {over['eager_add_sync_seconds'] * 1e6:.1f} us -> {over['add3_vs_eager']:.2f}x "
        f"(full argument path {over['add3_full_path_seconds'] * 1e6:.1f} us -> "
        f"{over['add3_full_path_vs_eager']:.2f}x)"
    )
    print(
        f"  on numpy arrays {over['add3_numpy_seconds'] * 1e6:.1f} us (full path "
        f"{over['add3_numpy_full_path_seconds'] * 1e6:.1f} us; "
        f"numpy a + b {over['numpy_add_seconds'] * 1e6:.1f} us)"
    )
    print(
        f"Decode MLP (nkilib mlp, 1 token, H=512 I=2048 bf16): {over['decode_mlp_seconds'] * 1e3:.2f} ms; "
        f"reading its {over['decode_mlp_weight_bytes'] / 1e6:.1f} MB at {over['host_read_bandwidth_gb_s']:.1f} GB/s "
        f"takes {over['decode_mlp_weight_read_seconds'] * 1e3:.2f} ms -> {over['decode_mlp_vs_weight_read']:.2f}x "
        f"({over['decode_mlp_plan']['elided_dmas']} DMAs elided)"
    )


def timed(fn, iters: int) -> float:
    fn()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def timed_interleaved(fns, iters: int) -> list[float]:
    """Median seconds per call of each of `fns`, their calls alternating (load on a shared host
    then shifts all of them alike, and their ratios stay meaningful)."""
    for fn in fns:
        fn()
    samples = [[] for _ in fns]
    for _ in range(iters):
        for fn, out in zip(fns, samples):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return [statistics.median(x) for x in samples]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096x1024x2048", help="MxKxN of the matmul (the tutorial's)")
    ap.add_argument("--size", type=int, help="a cube S^3 instead of --shape")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument(
        "--skip-torch-bf16", action="store_true", help="skip the (very slow on AVX2 hosts) torch bf16 peer"
    )
    ap.add_argument(
        "--only", choices=("overhead",), help="only the per-call overhead and decode MLP section (4, 5)"
    )
    args = ap.parse_args()
    if args.only == "overhead":
        over = overhead_and_decode()
        path = write_result("nki_bench_overhead", {"overhead_and_decode": over})
        print_overhead(over)
        print(f"results: {path}")
        return
    if args.size:
        M = K = N = args.size
    else:
        try:
            M, K, N = (int(x) for x in args.shape.lower().split("x"))
        except ValueError:
            ap.error(f"--shape wants MxKxN, got {args.shape!r}")
    if min(M, N) % 512 or K % 128 or M % 128:
        ap.error(f"the tiled kernels need M and N multiples of 512 and K of 128, got {M}x{K}x{N}")
    torch.manual_seed(0)
    lhsT = torch.randn(K, M, dtype=torch.bfloat16)
    rhs = torch.randn(K, N, dtype=torch.bfloat16)

    # -- 1. matmul on the host -------------------------------------------------------------
    t0 = time.perf_counter()
    traced = matmul_tiled.specialize(lhsT, rhs)
    trace_s = time.perf_counter() - t0
    out = matmul_tiled(lhsT, rhs)  # first run: every check on
    ref = lhsT.float().T @ rhs.float()
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    a_f, b_f = lhsT.float().T.contiguous(), rhs.float()
    nki_s, blocked_s, torch_fp32_s = timed_interleaved(
        [lambda: matmul_tiled(lhsT, rhs), lambda: matmul_blocked(lhsT, rhs), lambda: torch.matmul(a_f, b_f)],
        args.iters,
    )
    a_b = lhsT.T.contiguous()
    if args.skip_torch_bf16:
        torch_bf16_s = None
    else:
        t0 = time.perf_counter()  # one call: it takes minutes on hosts without AVX512-BF16/AMX
        torch.matmul(a_b, rhs)
        torch_bf16_s = time.perf_counter() - t0

    # -- 2. instructions per second on small tiles -------------------------------------------
    small = {}
    for shape in ((1, 64), (128, 1), (128, 64), (128, 512)):
        kern = make_small_tile_kernel(2000)
        x = torch.randn(*shape)
        tk = kern.specialize(x)
        kern(x)
        s = timed(lambda kern=kern, x=x: kern(x), args.iters)
        n = tk.num_instructions
        small[f"{shape[0]}x{shape[1]}"] = {
            "instructions": n,
            "seconds_per_call": s,
            "instructions_per_second": n / s,
            "ns_per_instruction": s / n * 1e9,
        }

    # -- 3. cost model ----------------------------------------------------------------------
    est = nki.estimate(matmul_tiled, lhsT, rhs)
    est_b = nki.estimate(matmul_blocked, lhsT, rhs)
    flops = 2 * M * K * N
    bound_us = flops / 79e12 * 1e6

    over = overhead_and_decode()
    payload = {
        "overhead_and_decode": over,
        "matmul": {
            "shape": [M, K, N],
            "nki_gflops": flops / nki_s / 1e9,
            "torch_fp32_gflops": flops / torch_fp32_s / 1e9,
            "dtype": "bfloat16",
            "instructions": traced.num_instructions,
            "trace_seconds": trace_s,
            "nki_tiled_seconds": nki_s,
            "nki_blocked_seconds": blocked_s,
            "torch_matmul_bf16_seconds": torch_bf16_s,
            "torch_matmul_fp32_seconds": torch_fp32_s,
            "nki_vs_torch_bf16": (nki_s / torch_bf16_s) if torch_bf16_s else None,
            "nki_vs_torch_fp32": nki_s / torch_fp32_s,
            "max_rel_error_vs_fp32": err,
        },
        "small_tiles": small,
        "cost_model": {
            "analytic_bound_us_79tflops": bound_us,
            "tiled": {
                "estimated_us": est.total_us,
                "vs_bound": est.total_us / bound_us,
                "achieved_tflops": est.achieved_tflops,
                "utilization": est.utilization,
                "hbm_bytes": est.hbm_read_bytes + est.hbm_write_bytes,
            },
            "blocked": {
                "estimated_us": est_b.total_us,
                "vs_bound": est_b.total_us / bound_us,
                "achieved_tflops": est_b.achieved_tflops,
                "utilization": est_b.utilization,
                "hbm_bytes": est_b.hbm_read_bytes + est_b.hbm_write_bytes,
            },
        },
    }
    path = write_result("nki_bench", payload)

    print(f"NKI tiled matmul {M}x{K}x{N} bf16 ({traced.num_instructions} instructions, traced in {trace_s:.2f} s)")
    print(f"  NKI (NeuronCore model)   {nki_s * 1e3:9.1f} ms   (blocked kernel {blocked_s * 1e3:.1f} ms)")
    if torch_bf16_s:
        print(
            f"  torch.matmul bf16 (CPU) {torch_bf16_s * 1e3:9.1f} ms   -> NKI/torch = {nki_s / torch_bf16_s:.3f}x"
        )
    print(
        f"  torch.matmul fp32 (CPU) {torch_fp32_s * 1e3:9.1f} ms   -> NKI/torch = {nki_s / torch_fp32_s:.2f}x"
        f"   ({flops / nki_s / 1e9:.0f} vs {flops / torch_fp32_s / 1e9:.0f} GFLOP/s; calls alternated)"
    )
    print(f"  max relative error vs fp32 reference: {err:.2e} (bf16 output rounding)")
    print("Small tiles (2000 x tensor_scalar):")
    for k, v in small.items():
        print(
            f"  [{k:>7}] {v['instructions_per_second'] / 1e6:6.2f} M instructions/s ({v['ns_per_instruction']:.0f} ns each)"
        )
    print_overhead(over)
    print(f"Trainium2 estimate (one NeuronCore), bound {bound_us:.1f} us at 79 TFLOPS:")
    for name, e in (("tiled", est), ("blocked", est_b)):
        util = ", ".join(f"{k} {v:.0%}" for k, v in e.utilization.items() if v > 0.005)
        print(
            f"  {name:8} {e.total_us:8.1f} us = {e.total_us / bound_us:.2f}x bound, {e.achieved_tflops:.1f} TFLOPS ({util})"
        )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
