"""Elementwise and reduction kernels: neuron vs PyTorch CPU eager, measured in one run.

    python benchmarks/elementwise.py [--quick]

Large ops: add, mul, gelu, silu on 16M elements (fp32 and bf16); sum and amax over rows of
4096 (a 4096 x 4096 tensor). Each is timed on neuron (synchronized) and on the CPU twice: the
usual functional call (allocates its result) and the out= form (reuses a buffer: no page
faults from fresh allocations, the stricter peer). `speed` is CPU time / neuron time
(>= 0.9 is the target, checked against the stricter peer). Tiny op: the per-op overhead of a
4-element add (neuron / CPU, <= 2.0 is the target). Writes benchmarks/results/elementwise.json.
"""

from __future__ import annotations

import argparse

import torch
import torch_neuronx
from _common import time_per_call, write_result

N = 16 * 1024 * 1024


def large_cases():
    gelu = torch.nn.functional.gelu
    silu = torch.nn.functional.silu
    return [
        ("add", lambda a, b: torch.add(a, b), lambda a, b, o: torch.add(a, b, out=o)),
        ("mul", lambda a, b: torch.mul(a, b), lambda a, b, o: torch.mul(a, b, out=o)),
        ("gelu", lambda a, b: gelu(a), lambda a, b, o: torch._C._nn.gelu(a, out=o)),
        ("silu", lambda a, b: silu(a), lambda a, b, o: torch._C._nn.silu(a, out=o)),
    ]


def reduction_cases():
    return [
        ("sum_rows4096", lambda x: x.sum(-1), lambda x, o: torch.sum(x, -1, out=o)),
        ("amax_rows4096", lambda x: x.amax(-1), lambda x, o: torch.amax(x, -1, out=o)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    iters, repeats = (2, 3) if args.quick else (5, 5)
    threads = torch.get_num_threads()
    rows = []
    print(f"neuron vs PyTorch CPU eager ({threads} CPU threads, neuron host pool "
          f"{torch_neuronx._C._host_threads()} threads); speed = CPU time / neuron time")
    print(f"{'op':<16}{'dtype':<10}{'cpu ms':>10}{'cpu out= ms':>13}{'neuron ms':>11}{'speed':>8}{'vs out=':>9}")

    def record(name, dtype, f_cpu, f_cpu_out, f_neuron):
        t_cpu = time_per_call(f_cpu, "cpu", iters, repeats)
        t_out = time_per_call(f_cpu_out, "cpu", iters, repeats)
        t_n = time_per_call(f_neuron, "neuron", iters, repeats)
        row = dict(op=name, dtype=str(dtype).replace("torch.", ""), cpu_ms=t_cpu * 1e3, cpu_out_ms=t_out * 1e3,
                   neuron_ms=t_n * 1e3, speed=t_cpu / t_n, speed_vs_out=t_out / t_n)
        rows.append(row)
        print(f"{name:<16}{row['dtype']:<10}{row['cpu_ms']:>10.2f}{row['cpu_out_ms']:>13.2f}{row['neuron_ms']:>11.2f}"
              f"{row['speed']:>8.2f}{row['speed_vs_out']:>9.2f}")

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(N, generator=g).to(dtype)
        b = torch.randn(N, generator=g).to(dtype)
        o = torch.empty_like(a)
        an, bn, on = a.to("neuron"), b.to("neuron"), o.to("neuron")
        for name, fn, fn_out in large_cases():
            record(name, dtype, lambda: fn(a, b), lambda: fn_out(a, b, o), lambda: fn(an, bn))
        x = torch.randn(4096, 4096, generator=g).to(dtype)
        xo = torch.empty(4096, dtype=dtype)
        xn = x.to("neuron")
        for name, fn, fn_out in reduction_cases():
            record(name, dtype, lambda: fn(x), lambda: fn_out(x, xo), lambda: fn(xn))
        del a, b, o, an, bn, on, x, xn

    # Tiny-op dispatch overhead.
    tiny = {}
    for device in ("cpu", "neuron"):
        ta = torch.randn(4, device=device)
        tb = torch.randn(4, device=device)
        tiny[device] = time_per_call(lambda: ta + tb, device, 2000, 7)
    tiny_ratio = tiny["neuron"] / tiny["cpu"]
    print(f"tiny add (4 elements): cpu {tiny['cpu'] * 1e6:.2f} us, neuron {tiny['neuron'] * 1e6:.2f} us, "
          f"ratio {tiny_ratio:.2f}x (target <= 2.0)")

    worst = min(r["speed_vs_out"] for r in rows)
    print(f"slowest large op vs the stricter CPU peer: {worst:.2f}x (target >= 0.9)")
    torch_neuronx.clear_op_tracking()
    an = torch.randn(8, device="neuron")
    torch.nn.functional.gelu(an + an).sum(-1)
    torch.neuron.synchronize()
    native = torch_neuronx.get_fallback_ops() == []
    path = write_result("elementwise", dict(large=rows, tiny_cpu_us=tiny["cpu"] * 1e6,
                                            tiny_neuron_us=tiny["neuron"] * 1e6, tiny_ratio=tiny_ratio,
                                            worst_large_speed=worst, all_native=native, cpu_threads=threads))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
