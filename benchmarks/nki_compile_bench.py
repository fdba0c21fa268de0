"""NKI custom ops inside torch.compile(backend="neuron"), one run, side by side:

  the same function - fused torch ops around an nki_op that launches two kernels (a body
  buffer, then a kernel-allocated result) - called eagerly on the neuron device and compiled
  (one program, the NKI launches inside its stream task).

Also reports the compiled call's cost over running the two kernels alone (the NKI node's
overhead inside the program). Usage: python benchmarks/nki_compile_bench.py [--iters 200]
Writes benchmarks/results/nki_compile_bench.json.
"""

from __future__ import annotations

import argparse

import nki
import nki.language as nl
import torch
from _common import time_per_call, write_result
from torch_neuronx import nki_op, wrap_nki


@nki.jit
def exp_into(x, out):
    for i in nl.affine_range(x.shape[0] // 128):
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.exp(nl.load(x[i * 128 : (i + 1) * 128, :])))


@nki.jit
def add(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        nl.store(c[rows, :], value=nl.add(nl.load(a[rows, :]), nl.load(b[rows, :])))
    return c


@nki_op("nki_compile_bench::exp_add", mutates_args={})
def exp_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    e = torch.empty_like(x)
    exp_into(x, e)
    return wrap_nki(add)(e, y)


def block(x, y):
    return exp_add(x * 0.5, y) + 1.0


def measure(shape: tuple[int, int], iters: int) -> dict:
    x = torch.randn(*shape).to("neuron")
    y = torch.randn(*shape).to("neuron")
    compiled = torch.compile(block, backend="neuron")
    torch.testing.assert_close(compiled(x, y).cpu(), block(x, y).cpu(), rtol=0, atol=0)
    m = torch.neuron.get_dynamo_metrics()
    assert not m["fallback_ops"], m["fallback_ops"]
    e = torch.empty_like(x)
    t_eager = time_per_call(lambda: block(x, y), "neuron", iters)
    t_comp = time_per_call(lambda: compiled(x, y), "neuron", iters)
    t_kernels = time_per_call(lambda: (exp_into(x, e), add(e, y)), "neuron", iters)
    print(f"{shape}: eager {t_eager * 1e6:8.1f} us  compiled {t_comp * 1e6:8.1f} us  "
          f"({t_eager / t_comp:.2f}x)  the two kernels alone (eager launches) {t_kernels * 1e6:8.1f} us")
    return {
        "shape": list(shape),
        "eager_us": t_eager * 1e6,
        "compiled_us": t_comp * 1e6,
        "kernels_alone_us": t_kernels * 1e6,
        "speedup_compiled_vs_eager": t_eager / t_comp,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    rows = [measure(shape, args.iters) for shape in [(128, 512), (512, 1024)]]
    print("results:", write_result("nki_compile_bench", {"rows": rows}))


if __name__ == "__main__":
    main()
