#!/usr/bin/env bash
# Lab 1, Additional: LoRA fine-tuning (PEFT) of a Qwen3 model on 4 NeuronCores (FSDP2, torchrun).
set -euo pipefail
cd "$(dirname "$0")"
OUTPUT_DIR=${OUTPUT_DIR:-Qwen3-1.7B-LoRA-Python-Coder}
NEURON_RT_VIRTUAL_CORE_SIZE=2 NEURON_RT_NUM_CORES=4 \
torchrun --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint localhost:${MASTER_PORT:-29511} \
  finetune_hf.py --mode lora --output-dir "$OUTPUT_DIR" "$@"
echo "=========================================="
echo "Training completed. LoRA adapter saved to: $OUTPUT_DIR"
echo "=========================================="
