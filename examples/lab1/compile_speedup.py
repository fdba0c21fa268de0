"""Lab 1 Step 3 Additional: time eager vs compiled the way the guide does (synchronize, 100
calls, synchronize), measured on this host and estimated for Trainium2 side by side.

    python compile_speedup.py

Eager mode launches every op of the forward (linear, relu, linear: a few kernels each) as its
own device task; the compiled forward is one NEFF, launched once per call. The Trainium2
column is neuron-emu's cost model (docs/cost-model.md), not a measurement.
"""

import time

import torch
from torch import nn
from torch_compile import SimpleModel

CALLS = 100


def timed(fn, x):
    """The guide's pattern: fence, 100 calls, wait for completion."""
    with torch.no_grad():
        fn(x)  # warm-up (compiles the NEFF on the first compiled call)
        with torch.neuron.estimated_time() as est:
            torch.neuron.synchronize()  # fence
            start = time.perf_counter()
            for _ in range(CALLS):
                fn(x)
            torch.neuron.synchronize()  # wait for completion
            elapsed = time.perf_counter() - start
    return elapsed, est


def main() -> None:
    torch.manual_seed(0)
    device = torch.device("neuron")
    model = SimpleModel().to(device).eval()
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(2, 10).to(device)

    eager_s, eager_est = timed(model, x)
    comp_s, comp_est = timed(compiled, x)
    print(f"{CALLS} forward calls      {'this host':>12} {'Trainium2 est.':>15} {'device tasks':>13}")
    for name, s, est in (("eager", eager_s, eager_est), ("torch.compile", comp_s, comp_est)):
        print(f"{name:<21} {s * 1e3:>9.2f} ms {est.wall_s * 1e3:>12.2f} ms {est.tasks:>13}")
    print(f"compiled speed-up     {eager_s / comp_s:>11.1f}x {eager_est.wall_s / comp_est.wall_s:>14.1f}x")
    print(
        f"(eager: {eager_est.tasks // CALLS} op launches per forward; compiled: "
        f"{comp_est.tasks // CALLS} NEFF launch per forward)"
    )


if __name__ == "__main__":
    main()
