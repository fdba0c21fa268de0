"""Lab 2 profiling helpers: which work runs on the NeuronCore (and for how long), which ops fall
back to the CPU, and what the NKI kernels would take on Trainium2.

    python profile_utils.py --model core           # one decode step, top device kernels
    python profile_utils.py --model experimental --estimate   # + estimated Trainium2 time per kernel

Used from Python:

    from profile_utils import profile_step
    profile_step(lambda: model(tok, pos, cos, sin, k_cache, v_cache))
"""

from __future__ import annotations

import argparse
import importlib

import torch
import torch_neuronx
from torch.profiler import ProfilerActivity, profile
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode


def profile_step(step, out_dir: str = "profile", top: int = 12, estimate: bool = False):
    """Runs `step()` once under torch.profiler with neuron device activity; prints the device
    time per kernel (NKI kernels show as "nki::<kernel>") and the CPU-fallback ops; writes
    the Perfetto trace and a JSON summary under `out_dir`. With `estimate`, also prints each
    kernel's estimated Trainium2 time (neuron-emu's cost model, not a measurement)."""
    torch_neuronx.clear_op_tracking()
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=out_dir)
    neuron_prof = NeuronProfiler(cfg)
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        experimental_config=cfg,
        on_trace_ready=neuron_prof.export_trace,
    ) as prof:
        step()
        torch.neuron.synchronize()
    rows = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    rows.sort(key=lambda e: e.self_device_time_total, reverse=True)
    total = sum(e.self_device_time_total for e in rows)
    print(f"{'device work':48} {'calls':>6} {'time (ms)':>10} {'share':>6}")
    for e in rows[:top]:
        t = e.self_device_time_total
        print(f"{e.key[:48]:48} {e.count:6d} {t / 1e3:10.2f} {t / total:6.1%}")
    if estimate and neuron_prof.last_summary is not None:
        print_estimate(neuron_prof.last_summary, top)
    print(f"\nCPU fallback ops: {torch_neuronx.get_fallback_ops()}")
    print(f"trace and summary: {out_dir}/")
    return prof


def print_estimate(summary: dict, top: int = 12) -> None:
    """Estimated Trainium2 time per kernel of a NeuronProfiler summary, largest first."""
    kernels = sorted(summary["kernels"].items(), key=lambda kv: -kv[1].get("trn2_est_us", 0.0))
    total = summary["trn2_estimate"]["device_time_us"] or 1.0
    print("\nEstimated Trainium2 time (cost model, docs/cost-model.md; not a measurement):")
    print(f"{'device work':48} {'calls':>6} {'est. (us)':>10} {'share':>6}")
    for name, k in kernels[:top]:
        t = k.get("trn2_est_us", 0.0)
        print(f"{name[:48]:48} {k['calls']:6d} {t:10.1f} {t / total:6.1%}")
    print(f"{'total':48} {'':6} {total:10.1f}")


def main() -> None:
    from llama_base.config import SIZES
    from run import VARIANTS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(VARIANTS), default="core")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--out", default="profile")
    p.add_argument("--estimate", action="store_true", help="also print the estimated Trainium2 time per kernel")
    args = p.parse_args()
    cfg = SIZES[args.size]
    dev = torch.device("neuron")
    torch.manual_seed(0)
    model = (
        importlib.import_module(VARIANTS[args.model]).Llama(cfg).to(device=dev, dtype=torch.bfloat16).eval()
    )
    cos, sin = model.rope(dev, torch.float32)
    k_cache, v_cache = model.new_cache(1, dev, torch.bfloat16)
    tok = torch.tensor([[1]], dtype=torch.int32, device=dev)
    pos = torch.tensor([8], dtype=torch.int32, device=dev)
    with torch.no_grad():
        model(tok, pos, cos, sin, k_cache, v_cache)  # warm up: kernels traced, first-run checks done
        torch.neuron.synchronize()
        print(f"One decode step of '{args.model}' ({args.size}):\n")
        profile_step(lambda: model(tok, pos, cos, sin, k_cache, v_cache), args.out, estimate=args.estimate)


if __name__ == "__main__":
    main()
