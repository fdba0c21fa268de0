"""Lab 2 entry point: pick a model variant, optionally compile it, generate tokens, report throughput.

    python run.py --model base --compile --greedy
    python run.py --model core --compile --greedy
    python run.py --model experimental --compile --greedy
    python run.py --model base --compile            # top-p sampling instead of greedy
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import time

import torch
import torch_neuronx  # noqa: F401  (get_fallback_ops)
from llama_base.config import SIZES

try:  # progress notes on stderr for the long first run (stdout stays the lab's report)
    from torch_neuronx._progress import slow_step
except ImportError:
    def slow_step(what):
        return contextlib.nullcontext()

VARIANTS = {
    "base": "llama_base.llama",
    "core": "llama_nki_core.llama_nki",
    "experimental": "llama_nki_experimental.llama_nki",
}
PROMPT = [1, 415, 2936, 9060, 285, 1142, 461, 10575]  # a fixed 8-token prompt


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(VARIANTS), default="base")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--compile", action="store_true", help='torch.compile(backend="neuron")')
    p.add_argument("--greedy", action="store_true", help="greedy decoding (default: top-p sampling)")
    p.add_argument("--tokens", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--temperature", type=float, default=0.8)
    return p.parse_args()


def pick_greedy(logits: torch.Tensor) -> torch.Tensor:
    return torch.argmax(logits, dim=-1)


def pick_top_p(logits: torch.Tensor, top_p: float, temperature: float) -> torch.Tensor:
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    cum = torch.cumsum(sorted_probs, dim=-1)
    sorted_probs = sorted_probs.masked_fill(cum - sorted_probs > top_p, 0.0)
    choice = torch.multinomial(sorted_probs / sorted_probs.sum(-1, keepdim=True), 1)
    return torch.gather(order, -1, choice).squeeze(-1)


def main() -> None:
    args = parse_args()
    cfg = SIZES[args.size]
    device = torch.device("neuron")
    dtype = torch.bfloat16
    module = importlib.import_module(VARIANTS[args.model])

    torch.manual_seed(0)
    model = module.Llama(cfg).to(device=device, dtype=dtype).eval()
    n_params = sum(p.numel() for p in model.parameters())
    cos, sin = model.rope(device, torch.float32)
    k_cache, v_cache = model.new_cache(1, device, dtype)
    step = torch.compile(model, backend="neuron") if args.compile else model

    print(f"Model   : {args.model} — {module.DESCRIPTION}")
    print(f"Size    : {args.size}")
    print(f"Compile : {args.compile}")
    print(f"Tokens  : {args.tokens}")
    print()
    print(f"Params  : {n_params:,}  ({n_params * 2 / 2**20:.1f} MB {str(dtype).split('.')[-1]})")
    print()

    prompt_ids = [t % cfg.vocab_size for t in PROMPT]  # the "tiny" size has a 1024-token vocabulary
    prompt = torch.tensor([prompt_ids], dtype=torch.int32, device=device)
    prompt_pos = torch.arange(len(PROMPT), dtype=torch.int32, device=device)
    positions = [torch.tensor([len(PROMPT) + i], dtype=torch.int32, device=device) for i in range(args.tokens)]

    def pick(logits):
        if args.greedy:
            return pick_greedy(logits)
        return pick_top_p(logits, args.top_p, args.temperature)

    @torch.no_grad()
    def generate(n: int) -> list[int]:
        k_cache.zero_()
        v_cache.zero_()
        tok = pick(step(prompt, prompt_pos, cos, sin, k_cache, v_cache))
        ids = [tok]
        for i in range(n - 1):
            tok = pick(step(tok[:, None].to(torch.int32), positions[i], cos, sin, k_cache, v_cache))
            ids.append(tok)
        return [int(t.item()) for t in ids]

    print("Warmup...", flush=True)
    first = []
    if args.compile:
        first.append('compiles the prefill and decode graphs with torch.compile(backend="neuron")')
    if args.model != "base":
        first.append("traces the NKI kernels")
    for i in range(args.warmup):
        what = f"warm-up run {i + 1}/{args.warmup} ({args.tokens} tokens"
        what += f"; the first run {' and '.join(first)})" if i == 0 and first else ")"
        with slow_step(what):
            generate(args.tokens)
            torch.neuron.synchronize()
    print("Timing...")
    # neuron-emu's cost model estimates the same run on Trainium2 (absent on real hardware).
    estimate = getattr(torch.neuron, "estimated_time", contextlib.nullcontext)
    with estimate() as est:
        t0 = time.perf_counter()
        ids = generate(args.tokens)
        torch.neuron.synchronize()
        elapsed = time.perf_counter() - t0
    print(f"Total time      : {elapsed:.3f}s")
    print(f"Tokens generated: {len(ids)}")
    print(f"Throughput      : {len(ids) / elapsed:.1f} tok/s")
    if est is not None and est.wall_s > 0:
        print(f"Trainium2 est. : {len(ids) / est.wall_s:.1f} tok/s  (cost model; this host: {len(ids) / elapsed:.1f} tok/s)")
    print(f"\nGenerated IDs: {ids}")


if __name__ == "__main__":
    main()
