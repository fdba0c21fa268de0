"""Lab 1, Additional: SFT fine-tuning of a Hugging Face Qwen3 model with PEFT LoRA (or all
parameters), FSDP2 over the NeuronCores with torchrun - the same training code a GPU user
writes, with device "neuron".

Run through run_lora_finetune_hf.sh / run_full_finetune_hf.sh (torchrun, 4 ranks).

What is trained is said before training starts (Model / Data / Output lines):
- Model: MODEL_PATH=<dir> (--model-path) loads a local Hugging Face checkpoint. Without it the
  model is the Qwen3 architecture (transformers' Qwen3ForCausalLM) at a CPU-sized scale with
  random weights: the lab's Qwen3-1.7B checkpoint is not on this machine, and 1.7B parameters do
  not train on a few CPU cores in lab time.
- Data: DATASET_PATH=<file> (--dataset) reads a local .jsonl/.json/.csv/.parquet/.txt file
  (with the `datasets` library when it is installed, else .jsonl/.json/.txt with the built-in
  reader) whose records have "messages", "prompt"/"completion", "instruction"/"output" or
  "text"; TOKENIZER_PATH=<dir> (--tokenizer, default: the checkpoint's own) loads
  transformers.AutoTokenizer. Without them: a built-in synthetic "Python coder" instruction set
  (prompt -> function), tokenized byte by byte.
- Output: named after what was trained (<model>-LoRA-<data> / <model>-Full-Finetuned-<data>);
  the lab guide's names (Qwen3-1.7B-LoRA-Python-Coder, Qwen3-1.7B-Full-Finetuned-HF) only for a
  Qwen3-1.7B checkpoint. OUTPUT_DIR (--output-dir) overrides.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field

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
SYNTHETIC_EXAMPLES = 512  # per rank
PAD, BOS, EOS = 0, 1, 2  # byte tokenizer: byte b is token b + 3
BYTE_VOCAB = 259
# The lab guide's model: Qwen3-1.7B (its config.json).
QWEN3_1_7B = {"model_type": "qwen3", "hidden_size": 2048, "num_hidden_layers": 28, "intermediate_size": 6144,
              "num_attention_heads": 16, "num_key_value_heads": 8}


def encode(text: str) -> list[int]:
    return [b + 3 for b in text.encode()]


@dataclass
class Data:
    examples: list[list[int]]  # token ids, padded / truncated to seq_len
    pad_id: int
    vocab_size: int
    description: str
    tag: str  # for the output name
    tokens: int = 0  # non-pad tokens over all examples
    notes: list[str] = field(default_factory=list)


def synthetic_data(seq_len: int, seed: int) -> Data:
    rng = random.Random(seed)
    out = []
    for _ in range(SYNTHETIC_EXAMPLES):
        task, code = rng.choice(TASKS)
        ids = [BOS] + encode(f"### Task: Write a Python function to {task}.\n### Code:\n{code}") + [EOS]
        out.append((ids + [PAD] * seq_len)[:seq_len])
    desc = (f"built-in synthetic Python-coder corpus ({len(TASKS)} tasks, {SYNTHETIC_EXAMPLES} examples per rank), "
            "byte-level tokenizer")
    return Data(out, PAD, BYTE_VOCAB, desc, "Python-Coder", sum(sum(t != PAD for t in e) for e in out))


def read_records(path: str) -> tuple[list[dict], str]:
    """The records of a local dataset file and how they were read."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    kind = {"jsonl": "json", "json": "json", "csv": "csv", "parquet": "parquet", "txt": "text"}.get(ext)
    if kind is None:
        raise SystemExit(f"--dataset {path}: expected a .jsonl, .json, .csv, .parquet or .txt file")
    try:
        import datasets
    except ImportError:
        datasets = None
    if datasets is not None:
        ds = datasets.load_dataset(kind, data_files=path, split="train")
        return [dict(r) for r in ds], f"datasets.load_dataset({kind!r})"
    if kind == "parquet":
        raise SystemExit(f"--dataset {path}: reading .parquet needs the `datasets` package (pip install datasets)")
    with open(path, encoding="utf-8") as f:
        if kind == "text":
            return [{"text": line.rstrip("\n")} for line in f if line.strip()], "built-in reader (datasets not installed)"
        if kind == "csv":
            return list(csv.DictReader(f)), "built-in reader (datasets not installed)"
        text = f.read()
    try:
        rows = json.loads(text)
        rows = rows if isinstance(rows, list) else [rows]
    except json.JSONDecodeError:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return rows, "built-in reader (datasets not installed)"


def record_text(rec: dict, tokenizer) -> str:
    """One training text from the usual SFT record layouts."""
    if "messages" in rec and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(rec["messages"], tokenize=False)
    if "messages" in rec:
        return "\n".join(f"### {m['role']}:\n{m['content']}" for m in rec["messages"])
    if "prompt" in rec and "completion" in rec:
        return f"{rec['prompt']}{rec['completion']}"
    if "instruction" in rec and "output" in rec:
        inp = f"\n### Input:\n{rec['input']}" if rec.get("input") else ""
        return f"### Instruction:\n{rec['instruction']}{inp}\n### Response:\n{rec['output']}"
    if "text" in rec:
        return str(rec["text"])
    raise SystemExit(f"dataset record has none of messages / prompt+completion / instruction+output / text: "
                     f"{sorted(rec)}")


def file_data(path: str, tokenizer, tokenizer_desc: str, seq_len: int, rank: int, world: int) -> Data:
    records, how = read_records(path)
    if not records:
        raise SystemExit(f"--dataset {path}: no records")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise SystemExit(f"tokenizer {tokenizer_desc}: no pad or eos token to pad sequences with")
    texts = [record_text(r, tokenizer) for r in records]
    mine = texts[rank::world] or texts  # each rank its share (all of them when there are fewer records)
    examples = []
    for t in mine:
        ids = tokenizer(t, truncation=True, max_length=seq_len)["input_ids"]
        if tokenizer.eos_token_id is not None and len(ids) < seq_len:
            ids = ids + [tokenizer.eos_token_id]
        examples.append((ids + [pad] * seq_len)[:seq_len])
    desc = f"{path} ({len(records)} records, read by {how}), tokenizer {tokenizer_desc}"
    tag = os.path.splitext(os.path.basename(path.rstrip("/")))[0]
    n_tokens = sum(sum(1 for t in e if t != pad) for e in examples)
    return Data(examples, pad, len(tokenizer), desc, tag, n_tokens)


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def has_tokenizer(path: str | None) -> bool:
    names = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    return bool(path) and any(os.path.exists(os.path.join(path, n)) for n in names)


def random_config(vocab_size: int, seq_len: int) -> Qwen3Config:
    return Qwen3Config(vocab_size=vocab_size, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                       max_position_embeddings=max(seq_len, 128), tie_word_embeddings=True)


def build_model(args, vocab_size: int) -> Qwen3ForCausalLM:
    if args.model_path:
        return Qwen3ForCausalLM.from_pretrained(args.model_path, torch_dtype=torch.float32)
    return Qwen3ForCausalLM(random_config(vocab_size, args.seq_len))


def is_qwen3_1_7b(config) -> bool:
    return all(getattr(config, k, None) == v for k, v in QWEN3_1_7B.items())


def model_description(args, model) -> tuple[str, str]:
    """What the model is (for the Model line) and its tag (for the output name)."""
    c = model.config
    shape = (f"{c.num_hidden_layers} layers, hidden {c.hidden_size}, {c.num_attention_heads} heads, "
             f"vocab {c.vocab_size}")
    n = sum(p.numel() for p in model.parameters())
    if args.model_path:
        name = os.path.basename(os.path.normpath(args.model_path))
        return f"{c.model_type} checkpoint {args.model_path} ({shape}), {n:,} parameters", name
    return (f"Qwen3 architecture, random init, CPU-sized ({shape}), {n:,} parameters "
            "(not the lab's Qwen3-1.7B: set MODEL_PATH to a checkpoint)", "Qwen3-tiny-random")


def output_name(mode: str, model_tag: str, data_tag: str, lab_model: bool) -> str:
    if lab_model:  # the lab guide's names
        return "Qwen3-1.7B-LoRA-Python-Coder" if mode == "lora" else "Qwen3-1.7B-Full-Finetuned-HF"
    return f"{model_tag}-LoRA-{data_tag}" if mode == "lora" else f"{model_tag}-Full-Finetuned-{data_tag}"


def progress(msg: str) -> None:
    """Long silent phases, on stderr (stdout keeps the lab guide's lines)."""
    print(msg, file=sys.stderr, flush=True)


try:  # notes on stderr when a phase takes more than a few seconds
    from torch_neuronx._progress import slow_step
except ImportError:
    def slow_step(what):
        return contextlib.nullcontext()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["lora", "full"], default="lora")
    p.add_argument("--output-dir", default=os.environ.get("OUTPUT_DIR") or None,
                   help="default: named after the model and data trained")
    p.add_argument("--steps", type=int, default=92)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--model-path", default=os.environ.get("MODEL_PATH") or None)
    p.add_argument("--tokenizer", default=os.environ.get("TOKENIZER_PATH") or None,
                   help="a local tokenizer directory (default: the checkpoint's)")
    p.add_argument("--dataset", default=os.environ.get("DATASET_PATH") or None,
                   help="a local .jsonl/.json/.csv/.parquet/.txt file")
    args = p.parse_args()

    device = torch.device("neuron", int(os.environ.get("LOCAL_RANK", "0")))
    torch.neuron.set_device(device)
    dist.init_process_group("neuron", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    say = print if rank == 0 else (lambda *a, **k: None)
    note = progress if rank == 0 else (lambda *a, **k: None)

    tok_path = args.tokenizer or (args.model_path if has_tokenizer(args.model_path) else None)
    if args.dataset:
        if not tok_path:
            raise SystemExit("--dataset needs a tokenizer: --tokenizer <dir> (or a MODEL_PATH checkpoint with one)")
        data = file_data(args.dataset, load_tokenizer(tok_path), tok_path, args.seq_len, rank, world)
    else:
        data = synthetic_data(args.seq_len, seed=rank)
        if tok_path:
            data.notes.append(f"tokenizer {tok_path} unused: the synthetic corpus is byte-tokenized "
                              "(set DATASET_PATH to train on a dataset with it)")

    t0 = time.perf_counter()
    note(f"[rank 0] loading the model ({args.model_path or 'random init'}) ...")
    model = build_model(args, data.vocab_size)
    if model.config.vocab_size < data.vocab_size:
        raise SystemExit(f"the tokenizer has {data.vocab_size} tokens, the model's vocabulary only "
                         f"{model.config.vocab_size}")
    model_desc, model_tag = model_description(args, model)
    if args.mode == "lora":
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                                 target_modules=targets, task_type="CAUSAL_LM"))
    trainable = sum(q.numel() for q in model.parameters() if q.requires_grad)
    out = args.output_dir or output_name(args.mode, model_tag, data.tag, is_qwen3_1_7b(model.config))
    tokens_per_step = args.batch_size * args.seq_len * world
    say(f"Model   : {model_desc}; {args.mode.upper() if args.mode == 'lora' else 'full'} fine-tuning, "
        f"{trainable:,} trainable")
    say(f"Data    : {data.description}; {data.tokens:,} tokens in {len(data.examples)} sequences on rank 0, "
        f"{args.steps} steps x {tokens_per_step:,} tokens ({world} ranks)")
    for n in data.notes:
        say(f"Note    : {n}")
    say(f"Output  : {out}", flush=True)

    model.to(device)
    layers = model.base_model.model.model.layers if args.mode == "lora" else model.model.layers
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    note(f"[rank 0] model ready on {device} ({time.perf_counter() - t0:.1f} s); training ...")
    params = [q for q in model.parameters() if q.requires_grad]
    lr = args.lr if args.lr is not None else (3e-3 if args.mode == "lora" else 1e-3)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

    examples = data.examples
    def train_step(rows):
        batch = torch.tensor(rows).to(device)  # int64 ids, as HF data is
        labels = batch.masked_fill(batch == data.pad_id, -100)
        loss = model(input_ids=batch, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t_last, loss_sum, n_loss = time.perf_counter(), 0.0, 0
    for step in range(1, args.steps + 1):
        i = (step - 1) * args.batch_size % len(examples)
        rows = (examples * (args.batch_size // len(examples) + 2))[i:i + args.batch_size]
        if step == 1:
            with slow_step("first training step (one-time set-up: kernels, allocator, collectives)"):
                loss = train_step(rows)
                loss.item()
        else:
            loss = train_step(rows)
        loss_sum += loss
        n_loss += 1
        if step % 10 == 0:
            avg = loss_sum / n_loss
            dist.all_reduce(avg)
            avg = avg.item() / world
            dt = (time.perf_counter() - t_last) / n_loss
            say(f"step={step}/{args.steps} loss={avg:.4f} tok/s={tokens_per_step / dt:.0f} "
                f"ms/step={dt * 1e3:.1f}", flush=True)
            t_last, loss_sum, n_loss = time.perf_counter(), 0.0, 0

    if args.mode == "lora":
        # Each rank keeps its shard of the adapter weights (FSDP2 DTensors, local parts).
        say(f"Saving final model shards to {out}/shard-{{0..{world - 1}}}", flush=True)
        shard_dir = os.path.join(out, f"shard-{rank}")
        os.makedirs(shard_dir, exist_ok=True)
        state = {k: v.to_local().cpu() if hasattr(v, "to_local") else v.cpu()
                 for k, v in model.state_dict().items() if "lora_" in k}
        torch.save(state, os.path.join(shard_dir, "adapter_model.pt"))
        dist.barrier()
        say("Training complete", flush=True)
        banner = f"Training completed. LoRA adapter saved to: {out}"
    else:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            print(f"Saving final model to {out}", flush=True)
            cpu_model = build_model(args, data.vocab_size)
            cpu_model.load_state_dict(full)
            cpu_model.save_pretrained(out)
        dist.barrier()
        say("Training completed", flush=True)
        banner = f"Training completed. Model saved to: {out}"
    say("==========================================")
    say(banner)
    say("==========================================", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
