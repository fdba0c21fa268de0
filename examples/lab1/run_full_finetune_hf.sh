#!/usr/bin/env bash
# Lab 1, Additional: full fine-tuning (every parameter) of a Qwen3 model on 4 NeuronCores
# (FSDP2, torchrun).
# Model and data: MODEL_PATH (a local checkpoint; default a CPU-sized random Qwen3),
# DATASET_PATH + TOKENIZER_PATH (local files; default a built-in synthetic corpus), OUTPUT_DIR
# (default: named after what is trained). finetune_hf.py prints which are used, and the
# "Training completed" banner with where the model went.
set -euo pipefail
cd "$(dirname "$0")"
NEURON_RT_VIRTUAL_CORE_SIZE=2 NEURON_RT_NUM_CORES=4 \
torchrun --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint localhost:${MASTER_PORT:-29512} \
  finetune_hf.py --mode full "$@"
