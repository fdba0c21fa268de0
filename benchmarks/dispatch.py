"""Per-op overhead of a tiny `add` on neuron vs cpu, measured in one run.

    python benchmarks/dispatch.py

Prints microseconds per op for both devices and the ratio neuron/cpu (lower is better);
writes benchmarks/results/dispatch.json. The neuron figure includes everything a user pays:
dispatch, output allocation and the queued launch (synchronized at the end of each batch).
"""

from __future__ import annotations

import torch
import torch_neuronx
from _common import time_per_call, write_result


def main() -> None:
    rows = {}
    for device in ("cpu", "neuron"):
        a = torch.randn(4, device=device)
        b = torch.randn(4, device=device)
        rows[device] = time_per_call(lambda: a + b, device, iters=2000)
    torch_neuronx.clear_op_tracking()
    a = torch.randn(4, device="neuron")
    _ = a + a
    torch.neuron.synchronize()
    native = not any(op.startswith("aten::add") for op in torch_neuronx.get_fallback_ops())
    ratio = rows["neuron"] / rows["cpu"]
    print("tiny add (4 elements), median of 7 x 2000 calls")
    print(f"  cpu    : {rows['cpu'] * 1e6:8.2f} us/op")
    print(f"  neuron : {rows['neuron'] * 1e6:8.2f} us/op  ({'native kernel' if native else 'CPU fallback'})")
    print(f"  ratio neuron/cpu: {ratio:.2f}x")
    path = write_result("dispatch", {"cpu_us": rows["cpu"] * 1e6, "neuron_us": rows["neuron"] * 1e6,
                                     "ratio": ratio, "add_is_native": native})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
