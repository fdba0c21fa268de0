"""Lab 1 "Additional: SFT fine-tuning": the two scripts, as the lab guide runs them (torchrun, 4
ranks, FSDP2 over the neuron backend), with fewer steps."""

import json
import os
import re
import subprocess
import sys

import pytest
from repo_paths import REPO

pytest.importorskip("transformers")
pytest.importorskip("peft")

LAB1 = os.path.join(REPO, "examples", "lab1")
sys.path.insert(0, LAB1)
import finetune_hf  # noqa: E402


def run_script(name, out_dir, steps, port, **extra_env):
    env = dict(os.environ)
    env.update(extra_env)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["OUTPUT_DIR"] = str(out_dir)
    env["MASTER_PORT"] = str(port)
    venv_bin = os.path.join(REPO, ".venv", "bin")
    env["PATH"] = venv_bin + os.pathsep + env["PATH"]
    r = subprocess.run([os.path.join(LAB1, name), "--steps", str(steps)], capture_output=True, text=True,
                       env=env, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout, r.stderr


def losses(stdout):
    return [float(m) for m in re.findall(r"^step=\d+/\d+ loss=([0-9.]+) tok/s=\d+ ms/step=[0-9.]+$", stdout, re.MULTILINE)]


def test_lora_finetune_script(tmp_path):
    out, err = run_script("run_lora_finetune_hf.sh", tmp_path / "lora", 30, 29611)
    ls = losses(out)
    assert len(ls) == 3 and ls[0] > ls[-1], out
    # Says what is trained before training.
    assert re.search(r"^Model   : Qwen3 architecture, random init, CPU-sized \(4 layers, hidden 256, 4 heads, "
                     r"vocab 259\), [0-9,]+ parameters .*; LORA fine-tuning, [0-9,]+ trainable$", out, re.M), out
    assert re.search(r"^Data    : built-in synthetic Python-coder corpus \(12 tasks, 512 examples per rank\), "
                     r"byte-level tokenizer; [0-9,]+ tokens in 512 sequences on rank 0, 30 steps x 2,048 tokens "
                     r"\(4 ranks\)$", out, re.M), out
    assert f"Output  : {tmp_path / 'lora'}\n" in out
    assert "Neuron backend does not support int64. Automatically casting to int32." in err
    assert f"Saving final model shards to {tmp_path / 'lora'}/shard-{{0..3}}" in out
    assert "Training complete\n" in out
    assert f"Training completed. LoRA adapter saved to: {tmp_path / 'lora'}" in out
    for r in range(4):
        assert (tmp_path / "lora" / f"shard-{r}" / "adapter_model.pt").exists()


def test_full_finetune_script(tmp_path):
    out, _ = run_script("run_full_finetune_hf.sh", tmp_path / "full", 20, 29612)
    ls = losses(out)
    assert len(ls) == 2 and ls[0] > ls[-1], out
    assert f"Saving final model to {tmp_path / 'full'}" in out
    assert f"Training completed. Model saved to: {tmp_path / 'full'}" in out
    assert (tmp_path / "full" / "model.safetensors").exists()
    from transformers import Qwen3ForCausalLM

    Qwen3ForCausalLM.from_pretrained(str(tmp_path / "full"))  # a loadable HF checkpoint


# ---------------------------------------------------------------------------------------------
# What is trained, and the data path


def test_outputs_are_named_after_what_was_trained():
    assert finetune_hf.output_name("lora", "Qwen3-tiny-random", "Python-Coder", False) == (
        "Qwen3-tiny-random-LoRA-Python-Coder")
    assert finetune_hf.output_name("full", "Qwen3-0.6B", "alpaca", False) == "Qwen3-0.6B-Full-Finetuned-alpaca"
    # The lab guide's names only for the lab's model.
    assert finetune_hf.output_name("lora", "x", "y", True) == "Qwen3-1.7B-LoRA-Python-Coder"
    assert finetune_hf.output_name("full", "x", "y", True) == "Qwen3-1.7B-Full-Finetuned-HF"


def test_the_lab_model_is_recognised_by_its_config():
    from transformers import Qwen3Config

    lab = Qwen3Config(hidden_size=2048, num_hidden_layers=28, intermediate_size=6144, num_attention_heads=16,
                      num_key_value_heads=8)
    assert finetune_hf.is_qwen3_1_7b(lab)
    assert not finetune_hf.is_qwen3_1_7b(finetune_hf.random_config(259, 128))


def test_dataset_files_are_read_in_the_usual_layouts(tmp_path):
    recs = [{"instruction": "add", "output": "a + b"}, {"prompt": "Q: ", "completion": "A"}, {"text": "plain"}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (tmp_path / "d.json").write_text(json.dumps(recs))
    (tmp_path / "d.txt").write_text("first line\n\nsecond line\n")
    (tmp_path / "d.csv").write_text("text\nhello\nworld\n")
    rows, how = finetune_hf.read_records(str(tmp_path / "d.jsonl"))
    assert rows == recs and ("built-in reader" in how or "datasets" in how)
    assert finetune_hf.read_records(str(tmp_path / "d.json"))[0] == recs
    assert [r["text"] for r in finetune_hf.read_records(str(tmp_path / "d.txt"))[0]] == ["first line", "second line"]
    assert [r["text"] for r in finetune_hf.read_records(str(tmp_path / "d.csv"))[0]] == ["hello", "world"]
    texts = [finetune_hf.record_text(r, None) for r in recs]
    assert texts == ["### Instruction:\nadd\n### Response:\na + b", "Q: A", "plain"]
    with pytest.raises(SystemExit, match="none of messages"):
        finetune_hf.record_text({"question": "?"}, None)
    with pytest.raises(SystemExit, match="expected a .jsonl"):
        finetune_hf.read_records(str(tmp_path / "d.xml"))


def make_tokenizer(path, texts):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]",
                            unk_token="[UNK]").save_pretrained(str(path))


def test_lora_on_a_local_dataset_with_a_local_tokenizer(tmp_path):
    recs = [{"instruction": f"Write a function that returns {i} times x.", "output": f"def f(x):\n    return {i} * x"}
            for i in range(64)]
    data = tmp_path / "times.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    make_tokenizer(tmp_path / "tok", [finetune_hf.record_text(r, None) for r in recs])
    out, _ = run_script("run_lora_finetune_hf.sh", tmp_path / "out", 20, 29613, DATASET_PATH=str(data),
                        TOKENIZER_PATH=str(tmp_path / "tok"))
    ls = losses(out)
    assert len(ls) == 2 and ls[0] > ls[-1], out
    assert f"Data    : {data} (64 records, read by " in out
    assert f"), tokenizer {tmp_path / 'tok'}; " in out
    assert "16 sequences on rank 0" in out  # 64 records over 4 ranks
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(str(tmp_path / "tok")))
    assert f"vocab {vocab})" in out  # the random model takes the tokenizer's vocabulary
