"""torch.compile(backend="neuron") measured against its peers in one run.

    python benchmarks/compile_bench.py [--quick]

1. Lab 1 Step 3 model (Linear 10->20, ReLU, Linear 20->5) at batch 2: neuron compiled vs
   neuron eager (target >= 3x).
2. Llama decode step, Lab 2 "small" size (vocab 32000, dim 512, 6 layers, 8 heads of 64,
   SwiGLU 2048, tied embeddings, 41,556,480 parameters, bf16, static KV cache): neuron
   compiled vs PyTorch CPU torch.compile (Inductor) (target >= 1.0x).
3. Cold compile of that model in a new process with an empty NEFF cache (target <= 60 s).
4. Warm start in a new process from the disk cache (target <= 3 s): time to the first output
   of the compiled model, measured after `import torch._dynamo` (the one-time import of
   PyTorch's compiler stack, paid by every torch.compile backend, is reported separately).

Writes benchmarks/results/compile_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch_neuronx
from _common import time_per_call, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "workloads"))

from compile_models import LLAMA_SMALL, Llama, count_parameters


class SimpleModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(10, 20)
        self.relu = torch.nn.ReLU()
        self.linear2 = torch.nn.Linear(20, 5)

    def forward(self, x):
        return self.linear2(self.relu(self.linear1(x)))


def bench_step3(iters: int) -> dict:
    torch.manual_seed(0)
    model = SimpleModel().to("neuron").eval()
    x = torch.randn(2, 10, device="neuron")
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        eager = time_per_call(lambda: model(x), "neuron", iters=iters)
        comp = time_per_call(lambda: compiled(x), "neuron", iters=iters)
        torch.testing.assert_close(compiled(x).cpu(), model(x).cpu(), rtol=1e-5, atol=1e-6)
    return {"neuron_eager_us": eager * 1e6, "neuron_compiled_us": comp * 1e6, "speedup": eager / comp}


def _decode_loop(fn, tok, positions):
    i = 0

    def step():
        nonlocal i
        fn(tok, positions[i % len(positions)])
        i += 1

    return step


INDUCTOR_CHILD = r"""
import json, statistics, sys, time, torch
sys.path.insert(0, {workloads!r})
from compile_models import LLAMA_SMALL, Llama
torch.manual_seed(0)
model = Llama(LLAMA_SMALL).to(torch.bfloat16).eval()
tok = torch.tensor([[42]])
positions = [torch.tensor([p]) for p in range(1, 64)]
with torch.no_grad():
    t0 = time.perf_counter()
    f = torch.compile(model)
    f(tok, positions[0])
    first = time.perf_counter() - t0
    for i in range(10):
        f(tok, positions[i])
    samples = []
    for r in range(5):
        t0 = time.perf_counter()
        for i in range({iters}):
            f(tok, positions[i % len(positions)])
        samples.append((time.perf_counter() - t0) / {iters})
    model.reset_cache()
    logits = f(tok, positions[0]).float()
torch.save(logits, {logits!r})
print("RESULT " + json.dumps({{"ms": statistics.median(samples) * 1e3, "first_call_s": first}}))
"""


def bench_llama_decode(iters: int) -> dict:
    """Inductor runs in its own process (plain PyTorch, no neuron runtime threads), the neuron
    model in this one; both use the same weights (seed 0) and the same decode positions."""
    with tempfile.TemporaryDirectory() as d:
        logits_path = os.path.join(d, "logits.pt")
        env = dict(os.environ)
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        code = INDUCTOR_CHILD.format(workloads=os.path.join(REPO, "tests", "workloads"), iters=iters, logits=logits_path)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800, check=False)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-4000:])
        ind = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
        ind_logits = torch.load(logits_path)
    torch.manual_seed(0)
    model = Llama(LLAMA_SMALL).to(torch.bfloat16).eval()
    params = count_parameters(model)
    assert params == 41_556_480
    model = model.to("neuron")
    tok = torch.tensor([[42]], device="neuron")
    positions = [torch.tensor([p], device="neuron") for p in range(1, 64)]
    with torch.no_grad():
        t0 = time.perf_counter()
        neuron = torch.compile(model, backend="neuron")
        neuron(tok, positions[0])
        torch.neuron.synchronize()
        first = time.perf_counter() - t0
        neu = time_per_call(_decode_loop(neuron, tok, positions), "neuron", iters=iters, repeats=5)
        model.reset_cache()
        ours = neuron(tok, positions[0]).cpu().float()
    max_err = (ours - ind_logits).abs().max().item() / max(ind_logits.abs().max().item(), 1e-6)
    return {
        "parameters": params,
        "inductor_cpu_ms": ind["ms"],
        "neuron_compiled_ms": neu * 1e3,
        "speedup_vs_inductor": ind["ms"] / (neu * 1e3),
        "neuron_tokens_per_s": 1.0 / neu,
        "inductor_tokens_per_s": 1e3 / ind["ms"],
        "max_relative_logit_diff": max_err,
        "in_process_first_call_s": {"neuron": first, "inductor": ind["first_call_s"]},
    }


CHILD = r"""
import json, sys, time
t_start = time.perf_counter()
import torch, torch_neuronx
sys.path.insert(0, {workloads!r})
from compile_models import LLAMA_SMALL, Llama
t_import_torch = time.perf_counter() - t_start
torch.manual_seed(0)
model = Llama(LLAMA_SMALL).to(torch.bfloat16).eval().to("neuron")
tok = torch.tensor([[42]], device="neuron")
pos = torch.tensor([1], device="neuron")
t0 = time.perf_counter()
import torch._dynamo
t_import_dynamo = time.perf_counter() - t0
t1 = time.perf_counter()
with torch.no_grad():
    out = torch.compile(model, backend="neuron")(tok, pos)
    torch.neuron.synchronize()
t_first = time.perf_counter() - t1
m = torch.neuron.get_dynamo_metrics()
print("RESULT " + json.dumps({{"first_call_s": t_first, "import_dynamo_s": t_import_dynamo,
      "import_torch_s": t_import_torch, "graphs_compiled": m["graphs_compiled"],
      "cache_hits_disk": m["cache_hits_disk"], "warm_starts": m["warm_starts"],
      "compile_time_s": m["compile_time_s"], "cache_load_time_s": m["cache_load_time_s"],
      "backend_time_s": m["backend_time_s"]}}))
"""


def _child(cache_dir: str) -> dict:
    env = dict(os.environ)
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = cache_dir
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    code = CHILD.format(workloads=os.path.join(REPO, "tests", "workloads"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900, check=False)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-4000:])
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def bench_compile_times(repeats: int) -> dict:
    """Median over `repeats` new processes each: cold with an empty cache directory, warm with
    the directory a cold run filled (the host is shared: single runs vary a lot)."""
    colds, warms = [], []
    with tempfile.TemporaryDirectory(prefix="neff_cache_bench_") as root:
        for i in range(repeats):
            d = os.path.join(root, str(i))
            colds.append(_child(d))
            warms.append(_child(d))
    assert all(c["graphs_compiled"] == 1 for c in colds) and all(w["graphs_compiled"] == 0 for w in warms), (colds, warms)

    def median_run(runs):
        return sorted(runs, key=lambda r: r["first_call_s"])[len(runs) // 2]

    return {"cold": median_run(colds), "warm": median_run(warms),
            "cold_all_s": [c["first_call_s"] for c in colds], "warm_all_s": [w["first_call_s"] for w in warms]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    args = ap.parse_args()
    res = {"host_threads": torch_neuronx._C._host_threads()}
    step3 = bench_step3(200 if args.quick else 1000)
    print("Lab 1 Step 3 model, batch 2 (median per call)")
    print(f"  neuron eager    : {step3['neuron_eager_us']:9.1f} us")
    print(f"  neuron compiled : {step3['neuron_compiled_us']:9.1f} us")
    print(f"  speedup         : {step3['speedup']:9.2f}x   (target >= 3x)")
    res["step3"] = step3

    dec = bench_llama_decode(10 if args.quick else 30)
    print(f"Llama decode step, Lab 2 small ({dec['parameters']:,} parameters, bf16, batch 1)")
    print(f"  PyTorch CPU Inductor : {dec['inductor_cpu_ms']:8.2f} ms/token ({dec['inductor_tokens_per_s']:.1f} tok/s)")
    print(f"  neuron compiled      : {dec['neuron_compiled_ms']:8.2f} ms/token ({dec['neuron_tokens_per_s']:.1f} tok/s)")
    print(f"  speedup              : {dec['speedup_vs_inductor']:8.2f}x   (target >= 1.0x)")
    print(f"  max relative logit difference: {dec['max_relative_logit_diff']:.2e}")
    res["llama_decode"] = dec

    ct = bench_compile_times(1 if args.quick else 3)
    cold, warm = ct["cold"], ct["warm"]
    print("Llama small, new processes (median of the runs)")
    print(f"  cold compile (empty cache)   : {cold['first_call_s']:6.2f} s to the first output "
          f"(backend incl. AOT autograd {cold['backend_time_s']:.2f} s, Neuron compiler "
          f"{cold['compile_time_s']:.2f} s; target <= 60 s)")
    print(f"  warm start (disk cache)      : {warm['first_call_s']:6.2f} s to the first output "
          f"(backend {warm['backend_time_s'] * 1e3:.0f} ms, NEFF load {warm['cache_load_time_s'] * 1e3:.1f} ms, "
          f"the rest is Dynamo tracing; target <= 3 s)")
    print(f"  one-time `import torch._dynamo`: {warm['import_dynamo_s']:.2f} s (not included above)")
    res["compile"] = ct
    path = write_result("compile_bench", res)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
