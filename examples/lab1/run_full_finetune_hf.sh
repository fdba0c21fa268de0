#!/usr/bin/env bash
# Lab 1, Additional: full fine-tuning (every parameter) of a Qwen3 model on 4 NeuronCores
# (FSDP2, torchrun).
set -euo pipefail
cd "$(dirname "$0")"
OUTPUT_DIR=${OUTPUT_DIR:-Qwen3-1.7B-Full-Finetuned-HF}
NEURON_RT_VIRTUAL_CORE_SIZE=2 NEURON_RT_NUM_CORES=4 \
torchrun --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint localhost:${MASTER_PORT:-29512} \
  finetune_hf.py --mode full --output-dir "$OUTPUT_DIR" "$@"
echo "=========================================="
echo "Training completed. Model saved to: $OUTPUT_DIR"
echo "=========================================="
