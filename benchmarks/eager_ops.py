"""Eager kernels, neuron vs PyTorch CPU, per kernel family at LLM-sized shapes, in one run.

    python benchmarks/eager_ops.py [--quick]

Each row times the same op on neuron tensors and on CPU tensors (median of repeated batches,
synchronized), and prints speed = CPU time / neuron time (higher is better; targets: >= 0.9 for
large ops, >= 1.0 for the bf16 GEMV). "native" says whether the neuron op ran without any CPU
fallback. Results go to benchmarks/results/eager_ops.json. --quick uses smaller shapes (a smoke
run, not for the record). PyTorch's CPU bf16 GEMM is very slow on hosts without AVX-512-BF16/AMX;
a peer call that takes longer than a few seconds is measured once.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
import torch_neuronx

from _common import sync, write_result


def measure(fn: Callable[[], object], device: str, budget: float) -> float:
    """Seconds per call: one warm-up call, then repeated synchronized batches within `budget`."""
    t0 = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - t0
    if first > 3.0:  # too slow to repeat: the warm-up call is the measurement
        return first
    iters = max(1, int(budget / 5 / max(first, 1e-6)))
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync(device)
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def cases(quick: bool):
    """(family, description, setup(device) -> callable)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    n = 1024 if quick else 4096
    rows = 256 if quick else 2048
    a32, b32 = rand(n, n), rand(n, n)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    gemv = {(k, o): (rand(1, k).bfloat16(), rand(o, k).bfloat16()) for k, o in ((512, 2048), (4096, 4096))}
    skinny = (rand(16, 4096).bfloat16(), gemv[(4096, 4096)][1])
    x_rows = rand(rows, 4096)
    w_rows = rand(4096)
    L = 128 if quick else 512
    q, k, v = rand(1, 8, L, 64), rand(1, 8, L, 64), rand(1, 8, L, 64)
    table = rand(32000, 4096 if not quick else 512)
    tokens = torch.randint(0, 32000, (2048,), generator=g)
    c1, c2 = rand(rows, 4096), rand(rows, 4096)
    e1, e2 = rand(16 * 2**20 if not quick else 2**20), rand(16 * 2**20 if not quick else 2**20)
    t1, t2 = rand(4), rand(4)

    def on(dev, *ts):
        return [t.to(dev) for t in ts]

    return [
        ("gemm", f"bf16 matmul {n}x{n}x{n}", lambda d: (lambda x, y: lambda: x @ y)(*on(d, a16, b16))),
        ("gemm", f"fp32 matmul {n}x{n}x{n}", lambda d: (lambda x, y: lambda: x @ y)(*on(d, a32, b32))),
        *[
            ("gemv", f"bf16 linear batch 1, {kk}->{oo}",
             (lambda kk, oo: lambda d: (lambda x, w: lambda: F.linear(x, w))(*on(d, *gemv[(kk, oo)])))(kk, oo))
            for kk, oo in ((512, 2048), (4096, 4096))
        ],
        ("gemv", "bf16 linear batch 16, 4096->4096 (tall-skinny)",
         lambda d: (lambda x, w: lambda: F.linear(x, w))(*on(d, *skinny))),
        ("softmax", f"softmax fp32 {rows}x4096 (last dim)",
         lambda d: (lambda x: lambda: torch.softmax(x, -1))(*on(d, x_rows))),
        ("rmsnorm", f"rms_norm fp32 {rows}x4096 with weight",
         lambda d: (lambda x, w: lambda: F.rms_norm(x, (4096,), w, 1e-6))(*on(d, x_rows, w_rows))),
        ("layernorm", f"layer_norm fp32 {rows}x4096 with weight",
         lambda d: (lambda x, w: lambda: F.layer_norm(x, (4096,), w, w))(*on(d, x_rows, w_rows))),
        ("sdpa", f"SDPA fp32 causal, batch 1, 8 heads, seq {L}, head 64",
         lambda d: (lambda q_, k_, v_: lambda: F.scaled_dot_product_attention(q_, k_, v_, is_causal=True))(
             *on(d, q, k, v))),
        ("embedding", f"embedding 2048 tokens from {tuple(table.shape)} fp32",
         lambda d: (lambda t, i: lambda: F.embedding(i, t))(*on(d, table, tokens))),
        ("cat", f"cat two {rows}x4096 fp32 on the last dim",
         lambda d: (lambda x, y: lambda: torch.cat([x, y], -1))(*on(d, c1, c2))),
        ("elementwise", f"add fp32, {e1.numel() // 2**20}M elements",
         lambda d: (lambda x, y: lambda: x + y)(*on(d, e1, e2))),
        ("dispatch", "tiny add (4 elements): per-op overhead",
         lambda d: (lambda x, y: lambda: x + y)(*on(d, t1, t2))),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke run)")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per measurement")
    ap.add_argument("--only", default="", help="comma-separated families to run (default: all)")
    args = ap.parse_args()
    torch.manual_seed(0)
    results = []
    print(f"{'family':12s} {'case':48s} {'cpu':>11s} {'neuron':>11s} {'speed':>7s}  native")
    only = {f for f in args.only.split(",") if f}
    for family, desc, setup in cases(args.quick):
        if only and family not in only:
            continue
        cpu_fn = setup("cpu")
        neuron_fn = setup("neuron")
        torch.neuron.synchronize()
        torch_neuronx.clear_op_tracking()
        neuron_fn()
        torch.neuron.synchronize()
        native = torch_neuronx.get_fallback_ops() == []
        budget = args.budget if family != "dispatch" else 1.0
        t_cpu = measure(cpu_fn, "cpu", budget)
        t_neuron = measure(neuron_fn, "neuron", budget)
        speed = t_cpu / t_neuron
        results.append({"family": family, "case": desc, "cpu_s": t_cpu, "neuron_s": t_neuron, "speed": speed,
                        "native": native})

        def fmt(t: float) -> str:
            return f"{t * 1e3:8.3f} ms" if t >= 1e-4 else f"{t * 1e6:8.2f} us"

        print(f"{family:12s} {desc:48s} {fmt(t_cpu)} {fmt(t_neuron)} {speed:6.2f}x  {'yes' if native else 'NO'}")
        del cpu_fn, neuron_fn
    if only:  # a partial run does not replace the recorded results
        return
    path = write_result("eager_ops", {"quick": args.quick, "threads": torch.get_num_threads(),
                                      "neuron_host_threads": torch_neuronx._C._host_threads(), "rows": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
