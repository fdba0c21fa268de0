"""Lab 1, Additional: SFT fine-tuning of a Hugging Face Qwen3 model with PEFT LoRA (or all
parameters), FSDP2 over the NeuronCores with torchrun - the same training code a GPU user
writes, with device "neuron".

Run through run_lora_finetune_hf.sh / run_full_finetune_hf.sh (torchrun, 4 ranks).

The lab fine-tunes Qwen3-1.7B. That checkpoint is not on this machine and a 1.7B model does not
train on a few CPU cores in lab time, so by default the model is the Qwen3 architecture
(transformers' Qwen3ForCausalLM) at a CPU-sized scale with random weights; MODEL_PATH=<dir>
loads a local Hugging Face checkpoint instead. The data is a small synthetic "Python coder"
instruction set (prompt -> function), tokenized byte by byte.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import Qwen3Config, Qwen3ForCausalLM

TASKS = [
    ("add two numbers", "def add(a, b):\n    return a + b\n"),
    ("multiply two numbers", "def mul(a, b):\n    return a * b\n"),
    ("reverse a string", "def reverse(s):\n    return s[::-1]\n"),
    ("check whether a number is even", "def is_even(n):\n    return n % 2 == 0\n"),
    ("sum a list", "def total(xs):\n    return sum(xs)\n"),
    ("find the maximum of a list", "def largest(xs):\n    return max(xs)\n"),
    ("count the vowels in a string", "def vowels(s):\n    return sum(c in 'aeiou' for c in s)\n"),
    ("square every element of a list", "def squares(xs):\n    return [x * x for x in xs]\n"),
    ("compute a factorial", "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)\n"),
    ("join words with spaces", "def join(words):\n    return ' '.join(words)\n"),
    ("keep the positive numbers", "def positives(xs):\n    return [x for x in xs if x > 0]\n"),
    ("capitalize a word", "def cap(w):\n    return w[:1].upper() + w[1:]\n"),
]
PAD, BOS, EOS = 0, 1, 2  # byte b is token b + 3


def encode(text: str) -> list[int]:
    return [b + 3 for b in text.encode()]


def examples(seq_len: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(512):
        task, code = rng.choice(TASKS)
        ids = [BOS] + encode(f"### Task: Write a Python function to {task}.\n### Code:\n{code}") + [EOS]
        out.append((ids + [PAD] * seq_len)[:seq_len])
    return out


def build_model(args) -> Qwen3ForCausalLM:
    if args.model_path:
        return Qwen3ForCausalLM.from_pretrained(args.model_path, torch_dtype=torch.float32)
    cfg = Qwen3Config(vocab_size=259, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                      max_position_embeddings=args.seq_len, tie_word_embeddings=True)
    return Qwen3ForCausalLM(cfg)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["lora", "full"], default="lora")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--steps", type=int, default=92)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--model-path", default=os.environ.get("MODEL_PATH"))
    args = p.parse_args()

    device = torch.device("neuron", int(os.environ.get("LOCAL_RANK", "0")))
    torch.neuron.set_device(device)
    dist.init_process_group("neuron", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    model = build_model(args)
    if args.mode == "lora":
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                                 target_modules=targets, task_type="CAUSAL_LM"))
    model.to(device)
    layers = model.base_model.model.model.layers if args.mode == "lora" else model.model.layers
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    params = [q for q in model.parameters() if q.requires_grad]
    lr = args.lr if args.lr is not None else (3e-3 if args.mode == "lora" else 1e-3)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

    data = examples(args.seq_len, seed=rank)
    tokens_per_step = args.batch_size * args.seq_len * world
    t_last, loss_sum, n_loss = time.perf_counter(), 0.0, 0
    for step in range(1, args.steps + 1):
        i = (step - 1) * args.batch_size % len(data)
        batch = torch.tensor(data[i:i + args.batch_size]).to(device)  # int64 ids, as HF data is
        labels = batch.masked_fill(batch == PAD, -100)
        loss = model(input_ids=batch, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_sum += loss.detach()
        n_loss += 1
        if step % 10 == 0:
            avg = loss_sum / n_loss
            dist.all_reduce(avg)
            avg = avg.item() / world
            dt = (time.perf_counter() - t_last) / n_loss
            if rank == 0:
                print(f"step={step}/{args.steps} loss={avg:.4f} tok/s={tokens_per_step / dt:.0f} "
                      f"ms/step={dt * 1e3:.1f}", flush=True)
            t_last, loss_sum, n_loss = time.perf_counter(), 0.0, 0

    out = args.output_dir
    if args.mode == "lora":
        # Each rank keeps its shard of the adapter weights (FSDP2 DTensors, local parts).
        if rank == 0:
            print(f"Saving final model shards to {out}/shard-{{0..{world - 1}}}", flush=True)
        shard_dir = os.path.join(out, f"shard-{rank}")
        os.makedirs(shard_dir, exist_ok=True)
        state = {k: v.to_local().cpu() if hasattr(v, "to_local") else v.cpu()
                 for k, v in model.state_dict().items() if "lora_" in k}
        torch.save(state, os.path.join(shard_dir, "adapter_model.pt"))
        dist.barrier()
        if rank == 0:
            print("Training complete", flush=True)
    else:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            print(f"Saving final model to {out}", flush=True)
            cpu_model = build_model(args)
            cpu_model.load_state_dict(full)
            cpu_model.save_pretrained(out)
        dist.barrier()
        if rank == 0:
            print("Training completed", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
