"""Lab 1 "Additional: SFT fine-tuning": the two scripts, as the lab guide runs them (torchrun, 4
ranks, FSDP2 over the neuron backend), with fewer steps."""

import os
import re
import subprocess

import pytest
from repo_paths import REPO

pytest.importorskip("transformers")
pytest.importorskip("peft")

LAB1 = os.path.join(REPO, "examples", "lab1")


def run_script(name, out_dir, steps, port):
    env = dict(os.environ)
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
