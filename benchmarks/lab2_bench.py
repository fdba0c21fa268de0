"""Lab 2 on neuron-emu, one run: base vs core vs experimental.

1. Emulator throughput: `examples/lab2/run.py --model X --greedy` (eager) and
   `run.py --model X --compile --greedy` (the lab's command) for each variant, as a subprocess;
   tok/s as run.py reports it, and as a fraction of the host roofline (every parameter read once
   per token at the measured read bandwidth).
2. Emulator time of one decode step of the transformer layers alone (the part the variants
   change; embedding and lm_head are identical), next to the peers PyTorch CPU eager fp32 and
   bf16 on the same weights, and as a fraction of its roofline (the layers' weight bytes at
   the measured read bandwidth).
3. Cost model: estimated Trainium2 time (one NeuronCore, `nki.estimate`) of a decode step
   - base: every operation of the PyTorch model as its own kernel with an HBM round trip
     (RMSNorm, q/k/v/o projections, RoPE, cache write, attention, residual adds, gate/up/down,
     SiLU*up), i.e. the unfused path;
   - core: the base operations outside the NKI ops, plus the nkilib kernels the core variant
     calls (rope_hf, attention_decode_hf with the cache write, mlp);
   - experimental: the transformer_tkg megakernel for all layers;
   all three plus the shared embedding gather, final RMSNorm and lm_head.

4. The guide's runs, `run.py --model X --compile --greedy` for each variant and the sampling
   run `run.py --model base --compile` (50 tokens): this host's tok/s and run.py's whole-run
   Trainium2 estimate (its `Trainium2 est.` line), against the guide's figures.

Usage: python benchmarks/lab2_bench.py [--tokens 10] [--size small] [--skip-run]
Writes benchmarks/results/lab2_bench.json and benchmarks/results/lab2_bench.png (host and
estimated tok/s per run, the guide's figures as markers; needs matplotlib).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import subprocess
import sys
import time

import nki
import nki.isa as nisa
import nki.language as nl
import torch
from _common import read_bandwidth, write_result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB2 = os.path.join(REPO, "examples", "lab2")
sys.path.insert(0, LAB2)

from llama_base.config import SIZES
from nkilib.core.attention.attention_decode_hf import attention_decode_hf
from nkilib.core.attention.kv_cache import update_kv_cache
from nkilib.core.embeddings.rope_hf import rope_hf
from nkilib.core.mlp.mlp import mlp
from nkilib.core.qkv.qkv import qkv
from nkilib.core.rmsnorm.rmsnorm import rmsnorm
from nkilib.core.utils.common_types import WeightLayout
from nkilib.experimental.transformer.transformer_tkg import transformer_tkg

VARIANTS = {
    "base": "llama_base.llama",
    "core": "llama_nki_core.llama_nki",
    "experimental": "llama_nki_experimental.llama_nki",
}
OUT_IN = WeightLayout.OUT_IN

# ---------------------------------------------------------------------------------------------
# Single-operation kernels of the unfused (base) path


def _spread(t):
    """An elementwise operand as [128, n / 128] when it divides (all engines' lanes busy)."""
    n = t.shape[0] * t.shape[1] * t.shape[2]
    return t.reshape((128, n // 128)) if n % 128 == 0 else t.reshape((t.shape[0] * t.shape[1], t.shape[2]))


@nki.jit
def add_kernel(a, b):
    """a + b (an elementwise op: load both, add, store)."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    a2, b2, o2 = _spread(a), _spread(b), _spread(out)
    x = nl.ndarray(a2.shape, a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a2.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a2)
    nisa.dma_copy(dst=y, src=b2)
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
    nisa.dma_copy(dst=o2, src=x)
    return out


@nki.jit
def silu_mul_kernel(g, u):
    """silu(g) * u."""
    out = nl.ndarray(g.shape, g.dtype, buffer=nl.shared_hbm)
    g2, u2, o2 = _spread(g), _spread(u), _spread(out)
    x = nl.ndarray(g2.shape, g.dtype, buffer=nl.sbuf)
    y = nl.ndarray(g2.shape, g.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=g2)
    nisa.dma_copy(dst=y, src=u2)
    a = nl.ndarray(g2.shape, nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=a, op=nl.silu, data=x)
    nisa.tensor_tensor(dst=x, data1=a, data2=y, op=nl.multiply)
    nisa.dma_copy(dst=o2, src=x)
    return out


@nki.jit
def embedding_kernel(table, ids):
    """table[ids] for a [1, S] int32 id tensor: one register-offset row DMA per token."""
    S = ids.shape[1]
    D = table.shape[1]
    out = nl.ndarray((1, S, D), table.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((1, S), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=ids)
    for s in range(S):
        r = nisa.register_alloc()
        nisa.register_load(r, t[0:1, s : s + 1])
        nisa.dma_copy(
            dst=out[0, s : s + 1, :],
            src=table.ap(pattern=[[D, 1], [1, D]], offset=0, scalar_offset=r, indirect_dim=0),
        )
    return out


def linear(x, w):
    """x @ w.T for an nn.Linear weight: a plain projection kernel (qkv without extras)."""
    return nki.estimate(qkv, input=x, fused_qkv_weights=w, weight_layout=OUT_IN).total_us


# ---------------------------------------------------------------------------------------------


def decode_estimates(cfg, dtype=torch.bfloat16) -> dict:
    """Estimated Trainium2 microseconds of one decode step (B=1, S=1) per variant."""
    torch.manual_seed(0)
    H, I, Hq, Hkv, d, L, V, Smax = (
        cfg.dim,
        cfg.ffn_dim,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        cfg.n_layers,
        cfg.vocab_size,
        cfg.max_seq_len,
    )
    x = torch.randn(1, 1, H, dtype=dtype)
    w = lambda o, i: torch.randn(o, i, dtype=dtype) / math.sqrt(i)
    wq, wk, wv, wo = w(Hq * d, H), w(Hkv * d, H), w(Hkv * d, H), w(H, Hq * d)
    wg, wu, wd = w(I, H), w(I, H), w(H, I)
    gamma = torch.ones(H, dtype=dtype)
    q = torch.randn(1, Hq, 1, d, dtype=dtype)
    kv = torch.randn(1, Hkv, 1, d, dtype=dtype)
    kc = torch.zeros(1, Hkv, Smax, d, dtype=dtype)
    pid = torch.tensor([[Smax // 2]], dtype=torch.int32)
    cos = torch.rand(1, d // 2)
    inter = torch.randn(1, 1, I, dtype=dtype)

    ops = {
        "rmsnorm": nki.estimate(rmsnorm, input=x, gamma=gamma).total_us,
        "q_proj": linear(x, wq),
        "k_proj": linear(x, wk),
        "v_proj": linear(x, wv),
        "rope": nki.estimate(
            rope_hf, q=q, k=kv, q_out=torch.empty_like(q), k_out=torch.empty_like(kv), cos=cos, sin=cos
        ).total_us,
        "cache_write": nki.estimate(
            update_kv_cache, k_cache=kc, v_cache=kc, k=kv, v=kv, position_ids=pid
        ).total_us,
        "attention": nki.estimate(
            attention_decode_hf, q=q, k_active=kv, v_active=kv, k_prior=kc, v_prior=kc, position_ids=pid
        ).total_us,
        "o_proj": linear(x, wo),
        "residual_add": nki.estimate(add_kernel, x, x).total_us,
        "gate_proj": linear(x, wg),
        "up_proj": linear(x, wu),
        "silu_mul": nki.estimate(silu_mul_kernel, inter, inter).total_us,
        "down_proj": linear(inter, wd),
        "attention_tkg_with_cache_update": nki.estimate(
            attention_decode_hf,
            q=q,
            k_active=kv,
            v_active=kv,
            k_prior=kc,
            v_prior=kc,
            position_ids=pid,
            update_cache=True,
        ).total_us,
        "nkilib_mlp": nki.estimate(
            mlp,
            hidden_tensor=x,
            gate_proj_weights_tensor=wg,
            up_proj_weights_tensor=wu,
            down_proj_weights_tensor=wd,
            weight_layout=OUT_IN,
        ).total_us,
    }
    table = torch.randn(V, H, dtype=dtype) / 10
    shared = {
        "embedding": nki.estimate(embedding_kernel, table, torch.tensor([[5]], dtype=torch.int32)).total_us,
        "final_norm": ops["rmsnorm"],
        "lm_head": linear(x, table),
    }
    per_layer_base = (
        2 * ops["rmsnorm"]
        + ops["q_proj"]
        + ops["k_proj"]
        + ops["v_proj"]
        + ops["rope"]
        + ops["cache_write"]
        + ops["attention"]
        + ops["o_proj"]
        + 2 * ops["residual_add"]
        + ops["gate_proj"]
        + ops["up_proj"]
        + ops["silu_mul"]
        + ops["down_proj"]
    )
    per_layer_core = (
        2 * ops["rmsnorm"]
        + ops["q_proj"]
        + ops["k_proj"]
        + ops["v_proj"]
        + ops["rope"]
        + ops["attention_tkg_with_cache_update"]
        + ops["o_proj"]
        + 2 * ops["residual_add"]
        + ops["nkilib_mlp"]
    )
    layers = {
        "W_qkvs": [(wq, wk, wv)] * L,
        "W_outs": [wo] * L,
        "W_gates": [wg] * L,
        "W_ups": [wu] * L,
        "W_downs": [wd] * L,
        "W_gamma_qkvs": [gamma] * L,
        "W_gamma_mlps": [gamma] * L,
        "K_caches": [kc] * L,
        "V_caches": [kc] * L,
    }
    mk = nki.estimate(
        nki.jit(transformer_tkg),
        X=x,
        RoPE_cos=torch.rand(Smax, d // 2),
        RoPE_sin=torch.rand(Smax, d // 2),
        mask_cache=None,
        mask_active=None,
        position_ids=pid,
        num_layers=L,
        weight_layout=OUT_IN,
        **layers,
    )
    common = sum(shared.values())
    steps = {
        "base": L * per_layer_base + common,
        "core": L * per_layer_core + common,
        "experimental": mk.total_us + common,
    }
    return {
        "ops_us": ops,
        "shared_us": shared,
        "layers_us": {"base": L * per_layer_base, "core": L * per_layer_core, "experimental": mk.total_us},
        "megakernel": {
            "instructions": mk.instructions,
            "hbm_bytes": mk.hbm_read_bytes + mk.hbm_write_bytes,
            "utilization": mk.utilization,
        },
        "step_us": steps,
        "tok_s": {k: 1e6 / v for k, v in steps.items()},
        "vs_base": {k: steps["base"] / v for k, v in steps.items()},
        "kernel_launches_per_step": {"base": 15 * L + 3, "core": 11 * L + 3, "experimental": 4},
    }


# ---------------------------------------------------------------------------------------------


GUIDE_TOK_S = {"base": 359.0, "core": 435.3, "experimental": 537.4, "base sampling": 52.0}


def run_variant(variant: str, size: str, tokens: int, warmup: int, compile_: bool = False, greedy: bool = True) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [
        sys.executable,
        "run.py",
        "--model",
        variant,
        "--size",
        size,
        "--tokens",
        str(tokens),
        "--warmup",
        str(warmup),
    ] + (["--greedy"] if greedy else []) + (["--compile"] if compile_ else [])
    r = subprocess.run(cmd, cwd=LAB2, env=env, capture_output=True, text=True, timeout=3600, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    tps = float(re.search(r"Throughput\s*:\s*([\d.]+) tok/s", r.stdout).group(1))
    est = re.search(r"Trainium2 est\. : ([\d.]+) tok/s", r.stdout)
    ids = r.stdout.split("Generated IDs: ")[1].splitlines()[0]
    return {"tok_s": tps, "trn2_est_tok_s": float(est.group(1)) if est else None, "ids": ids}


def guide_runs(size: str) -> dict:
    """The guide's four Lab 2 runs (compiled, 50 tokens): host and estimated tok/s."""
    runs = {v: run_variant(v, size, 50, 3, compile_=True) for v in VARIANTS}
    runs["base sampling"] = run_variant("base", size, 50, 3, compile_=True, greedy=False)
    return runs


def draw_chart(runs: dict, path: str) -> str | None:
    """Bar chart: this host's and the estimated Trainium2 tok/s per run, guide figures as
    markers (log scale: the host is 10-30x slower). None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(runs)
    xs = range(len(names))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar([x - 0.2 for x in xs], [runs[n]["tok_s"] for n in names], 0.4, label="this host (measured)")
    ax.bar([x + 0.2 for x in xs], [runs[n]["trn2_est_tok_s"] or 0 for n in names], 0.4, label="Trainium2 (cost model)")
    ax.scatter([x + 0.2 for x in xs], [GUIDE_TOK_S.get(n, float("nan")) for n in names], marker="D", color="black",
               zorder=3, label="lab guide (trn2)")
    ax.set_xticks(list(xs), names)
    ax.set_yscale("log")
    ax.set_ylabel("tok/s")
    ax.set_title("Lab 2 run.py --compile: measured here vs estimated for Trainium2")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _layers_step(model, h, pos, cos, sin, kc, vc):
    """One decode step through model.layers (the base and core variants)."""

    def step():
        y = h
        for i, layer in enumerate(model.layers):
            y = layer(y, cos, sin, kc[i], vc[i], pos)
        return y

    return step


def _megakernel_step(model, h, pos, cos, sin, kc, vc):
    import nki_ops

    st = model._stack()
    eps = model.cfg.norm_eps
    return lambda: nki_ops.nki_transformer(h, pos, cos, sin, kc, vc, *st, eps)


def layer_stack_times(size: str, reps: int) -> dict:
    """Milliseconds of one decode step of the transformer layers (position 8), per variant on
    the neuron device, and PyTorch CPU eager peers on the same weights."""
    cfg = SIZES[size]
    dev = torch.device("neuron")
    res = {}
    for variant, modname in VARIANTS.items():
        mod = importlib.import_module(modname)
        torch.manual_seed(0)
        model = mod.Llama(cfg).to(device=dev, dtype=torch.bfloat16).eval()
        cos, sin = model.rope(dev, torch.float32)
        kc, vc = model.new_cache(1, dev, torch.bfloat16)
        h = torch.randn(1, 1, cfg.dim, dtype=torch.bfloat16, device=dev)
        pos = torch.tensor([8], dtype=torch.int32, device=dev)
        make = _megakernel_step if variant == "experimental" else _layers_step
        with torch.no_grad():
            res[variant] = _time(make(model, h, pos, cos, sin, kc, vc), dev, reps)
        if variant == "base":  # PyTorch CPU peers on the same weights
            for dt in (torch.float32, torch.bfloat16):
                cpu = model.to(device="cpu", dtype=dt)
                args = (h.cpu().to(dt), pos.cpu(), cos.cpu(), sin.cpu(), kc.cpu().to(dt), vc.cpu().to(dt))
                with torch.no_grad():
                    res[f"torch_cpu_{str(dt).split('.')[-1]}"] = _time(
                        _layers_step(cpu, *args), torch.device("cpu"), reps
                    )
    return res


def _time(fn, dev, reps: int) -> float:
    fn()
    if dev.type == "neuron":
        torch.neuron.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if dev.type == "neuron":
            torch.neuron.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--skip-run", action="store_true", help="skip the run.py measurements (slow: CPU fallbacks)"
    )
    args = ap.parse_args()
    cfg = SIZES[args.size]

    est = decode_estimates(cfg)
    stack = layer_stack_times(args.size, args.reps)
    runs = {} if args.skip_run else {v: run_variant(v, args.size, args.tokens, args.warmup) for v in VARIANTS}
    compiled = (
        {} if args.skip_run else {v: run_variant(v, args.size, args.tokens, args.warmup, True) for v in VARIANTS}
    )
    guide = {} if args.skip_run else guide_runs(args.size)
    host = os.cpu_count()
    bw = read_bandwidth()
    torch.manual_seed(0)
    probe = importlib.import_module(VARIANTS["base"]).Llama(cfg)
    param_bytes = 2 * sum(p.numel() for p in probe.parameters())  # bf16
    layer_bytes = 2 * sum(p.numel() for p in probe.layers.parameters())
    roof_tok_s = bw / param_bytes
    roof_layers_ms = layer_bytes / bw * 1e3
    payload = {
        "size": args.size,
        "tokens": args.tokens,
        "host_cpus": host,
        "run_py_eager_tok_s": {k: v["tok_s"] for k, v in runs.items()},
        "run_py_generated_ids": {k: v["ids"] for k, v in runs.items()},
        "run_py_compile_tok_s": {k: v["tok_s"] for k, v in compiled.items()},
        "run_py_compile_generated_ids": {k: v["ids"] for k, v in compiled.items()},
        "host_read_bandwidth_gb_s": bw / 1e9,
        "weight_bytes_per_token": param_bytes,
        "layer_weight_bytes": layer_bytes,
        "roofline_tok_s": roof_tok_s,
        "run_py_compile_roofline_fraction": {k: v["tok_s"] / roof_tok_s for k, v in compiled.items()},
        "decode_layers_ms": stack,
        "decode_layers_roofline_ms": roof_layers_ms,
        "decode_layers_roofline_fraction": {k: roof_layers_ms / v for k, v in stack.items()},
        "trainium2_estimate": est,
        "guide_runs": {
            k: {"host_tok_s": v["tok_s"], "trn2_est_tok_s": v["trn2_est_tok_s"], "guide_tok_s": GUIDE_TOK_S[k]}
            for k, v in guide.items()
        },
        "lab_claims_vs_base": {"core": 1.2, "experimental": 1.5},
    }
    path = write_result("lab2_bench", payload)
    chart = draw_chart(guide, os.path.join(os.path.dirname(path), "lab2_bench.png")) if guide else None

    print(f"Lab 2 ({args.size}) on neuron-emu, {host} host CPUs")
    if runs:
        print("run.py --greedy (eager), emulator throughput:")
        for k, v in runs.items():
            print(f"  {k:13} {v['tok_s']:8.1f} tok/s   ({v['tok_s'] / runs['base']['tok_s']:.2f}x base)")
        same = len({v["ids"] for v in runs.values()}) == 1
        print(f"  generated ids ({args.tokens} tokens) identical across variants: {same}")
    print(
        f"host roofline: {param_bytes / 1e6:.1f} MB of weights per token at {bw / 1e9:.1f} GB/s read "
        f"= {roof_tok_s:.0f} tok/s"
    )
    if compiled:
        print("run.py --compile --greedy, emulator throughput:")
        for k, v in compiled.items():
            print(
                f"  {k:13} {v['tok_s']:8.1f} tok/s   ({v['tok_s'] / compiled['base']['tok_s']:.2f}x base, "
                f"{v['tok_s'] / roof_tok_s:.0%} of roofline)"
            )
        same = len({v["ids"] for v in compiled.values()} | {v["ids"] for v in runs.values()}) == 1
        print(f"  generated ids ({args.tokens} tokens) identical across variants and modes: {same}")
    print("one decode step of the transformer layers (emulator, best of", args.reps, "):")
    for k, v in stack.items():
        print(f"  {k:17} {v:9.2f} ms   ({roof_layers_ms / v:.0%} of its {roof_layers_ms:.2f} ms roofline)")
    print("Trainium2 estimate of one decode step (cost model, one NeuronCore, device time only):")
    for k in ("base", "core", "experimental"):
        print(
            f"  {k:13} {est['step_us'][k]:8.1f} us  layers {est['layers_us'][k]:7.1f} us  "
            f"= {est['tok_s'][k]:7.0f} tok/s  ({est['vs_base'][k]:.2f}x base; lab claims "
            f"{ {'base': 1.0, 'core': 1.2, 'experimental': 1.5}[k] }x on hardware)"
        )
    if guide:
        print("run.py --compile (50 tokens): this host / Trainium2 estimate / lab guide:")
        for k, v in guide.items():
            print(f"  {k:14} {v['tok_s']:8.1f} / {v['trn2_est_tok_s'] or 0:8.1f} / {GUIDE_TOK_S[k]:6.1f} tok/s")
    print(f"results: {path}" + (f", chart: {chart}" if chart else ""))


if __name__ == "__main__":
    main()
