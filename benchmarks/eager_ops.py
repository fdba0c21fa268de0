"""Eager kernels, neuron vs PyTorch CPU, per kernel family at LLM-sized shapes, in one run.

    python benchmarks/eager_ops.py [--quick]

Each row times the same op on neuron tensors and on CPU tensors (median of repeated batches,
synchronized), and prints speed = CPU time / neuron time (higher is better; targets: >= 0.9 for
large ops, >= 1.0 for the bf16 GEMV). "native" says whether the neuron op ran without any CPU
fallback. Results go to benchmarks/results/eager_ops.json. --quick uses smaller shapes (a smoke
run, not for the record); --only gemv,sdpa runs some families. PyTorch's CPU bf16 GEMM is a scalar
loop on hosts without AVX-512-BF16/AMX (~1 GFLOP/s: one 4096^3 product took 15 minutes on a loaded
2-core host): unless --exact is given, that peer is timed at 1024^3 and scaled by the FLOP ratio
(64x), and the row says "projected". Peer calls longer than a few seconds are measured once.
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


def on_device(fn: Callable[..., object], *tensors: torch.Tensor):
    """setup(device) -> a zero-argument call of fn on copies of `tensors` on that device."""

    def setup(device: str) -> Callable[[], object]:
        args = [t.to(device) for t in tensors]
        return lambda: fn(*args)

    return setup


def softmax_last(x):
    return torch.softmax(x, -1)


def rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def layer_norm(x, w):
    return F.layer_norm(x, (x.shape[-1],), w, w)


def causal_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def embedding(table, ids):
    return F.embedding(ids, table)


def cat_last(x, y):
    return torch.cat([x, y], -1)


def decode_gemvs(x512, x2048, *weights):
    """The 43 linears of one Lab 2 decode step (bf16, batch 1): weights streamed from DRAM."""
    for w in weights:
        F.linear(x2048 if w.shape[1] == 2048 else x512, w)


def decode_weights(rand, quick: bool):
    layers = 1 if quick else 6
    ws = []
    for _ in range(layers):
        ws += [rand(512, 512) for _ in range(4)] + [rand(2048, 512), rand(2048, 512), rand(512, 2048)]
    ws.append(rand(32000 if not quick else 4000, 512))
    return [w.bfloat16() for w in ws]


def row_sum(x):
    return x.sum(-1)


def silu(x):
    return F.silu(x)


def normal_fill(x):
    return x.normal_()


def adamw_step(quick: bool):
    """setup(device) -> one fused AdamW step over a model-sized parameter list (fused=True)."""
    shapes = [(512, 512)] * 8 if quick else [(2048, 2048)] * 4 + [(4096,)] * 8

    def setup(device: str) -> Callable[[], object]:
        g = torch.Generator().manual_seed(1)
        params = [torch.randn(s, generator=g).to(device).requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(device)
        opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
        return opt.step

    return setup


def cases(quick: bool):
    """(family, description, setup(device) -> callable)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g)

    n = 1024 if quick else 4096
    rows = 256 if quick else 2048
    a32, b32 = rand(n, n), rand(n, n)
    w_small, w_big = rand(2048, 512).bfloat16(), rand(4096, 4096).bfloat16()
    L = 128 if quick else 512
    width = 512 if quick else 4096
    elems = 2**20 if quick else 16 * 2**20
    return [
        ("gemm", f"bf16 matmul {n}x{n}x{n}", on_device(torch.matmul, a32.bfloat16(), b32.bfloat16())),
        ("gemm", f"fp32 matmul {n}x{n}x{n}", on_device(torch.matmul, a32, b32)),
        ("gemv", "bf16 linear batch 1, 512->2048", on_device(F.linear, rand(1, 512).bfloat16(), w_small)),
        ("gemv", "bf16 linear batch 1, 4096->4096", on_device(F.linear, rand(1, 4096).bfloat16(), w_big)),
        ("gemv", "bf16 linear batch 16, 4096->4096 (tall-skinny)",
         on_device(F.linear, rand(16, 4096).bfloat16(), w_big)),
        ("gemv", "Lab 2 decode step: 43 bf16 linears, 83 MB" if not quick else "decode step (1 layer)",
         on_device(decode_gemvs, rand(1, 512).bfloat16(), rand(1, 2048).bfloat16(), *decode_weights(rand, quick))),
        ("softmax", f"softmax fp32 {rows}x4096 (last dim)", on_device(softmax_last, rand(rows, 4096))),
        ("rmsnorm", f"rms_norm fp32 {rows}x4096 with weight", on_device(rms_norm, rand(rows, 4096), rand(4096))),
        ("layernorm", f"layer_norm fp32 {rows}x4096 with weight",
         on_device(layer_norm, rand(rows, 4096), rand(4096))),
        ("sdpa", f"SDPA fp32 causal, batch 1, 8 heads, seq {L}, head 64",
         on_device(causal_sdpa, rand(1, 8, L, 64), rand(1, 8, L, 64), rand(1, 8, L, 64))),
        ("embedding", f"embedding 2048 tokens from (32000, {width}) fp32",
         on_device(embedding, rand(32000, width), torch.randint(0, 32000, (2048,), generator=g))),
        ("cat", f"cat two {rows}x4096 fp32 on the last dim", on_device(cat_last, rand(rows, 4096), rand(rows, 4096))),
        ("elementwise", f"add fp32, {elems // 2**20}M elements", on_device(torch.add, rand(elems), rand(elems))),
        ("activation", f"silu bf16, {elems // 2**20}M elements", on_device(silu, rand(elems).bfloat16())),
        ("reduction", f"sum fp32 rows of 4096, {rows}x4096", on_device(row_sum, rand(rows, 4096))),
        ("rng", f"normal_ fp32, {elems // 2**20}M elements", on_device(normal_fill, rand(elems))),
        ("optimizer", "AdamW fused step, 16.8M fp32 params" if not quick else "AdamW fused step, 2M fp32 params",
         adamw_step(quick)),
        ("dispatch", "tiny add (4 elements): per-op overhead", on_device(torch.add, rand(4), rand(4))),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke run)")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per measurement")
    ap.add_argument("--only", default="", help="comma-separated families to run (default: all)")
    ap.add_argument("--exact", action="store_true", help="time the slow CPU bf16 GEMM peer at full size")
    args = ap.parse_args()
    torch.manual_seed(0)
    results = []
    print(f"{'family':12s} {'case':48s} {'cpu':>11s} {'neuron':>11s} {'speed':>7s}  native")
    print(f"(speed = cpu time / neuron time; {torch.get_num_threads()} CPU threads, "
          f"{torch_neuronx._C._host_threads()} neuron host threads)")
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
        projected = False
        if desc.startswith("bf16 matmul") and not args.exact and not args.quick:
            # PyTorch's CPU bf16 GEMM costs the same per FLOP at any size here: time a 1024^3
            # product and scale by the FLOP ratio instead of waiting many minutes.
            small = torch.randn(1024, 1024).bfloat16()
            t_cpu = measure(lambda s=small: s @ s, "cpu", budget) * (4096 / 1024) ** 3
            projected = True
        else:
            t_cpu = measure(cpu_fn, "cpu", budget)
        t_neuron = measure(neuron_fn, "neuron", budget)
        speed = t_cpu / t_neuron
        results.append({"family": family, "case": desc, "cpu_s": t_cpu, "neuron_s": t_neuron, "speed": speed,
                        "native": native, "cpu_projected": projected})

        def fmt(t: float) -> str:
            return f"{t * 1e3:8.3f} ms" if t >= 1e-4 else f"{t * 1e6:8.2f} us"

        note = "  (cpu projected from 1024^3)" if projected else ""
        print(f"{family:12s} {desc:48s} {fmt(t_cpu)} {fmt(t_neuron)} {speed:6.2f}x  {'yes' if native else 'NO'}{note}")
        del cpu_fn, neuron_fn
    if only:  # a partial run does not replace the recorded results
        return
    path = write_result("eager_ops", {"quick": args.quick, "threads": torch.get_num_threads(),
                                      "neuron_host_threads": torch_neuronx._C._host_threads(), "rows": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
