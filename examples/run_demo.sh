#!/usr/bin/env bash
# `make demo`: runs the lab examples as the lab guide writes them (Lab 0, Lab 1 Steps 1-5 and
# the SFT fine-tuning, Lab 2).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

echo "################ Lab 0: environment check ################"
bash examples/lab0/env_check.sh

echo
echo "################ Lab 1, Step 1: device & tensor basics ################"
(cd examples/lab1 && ../../$PY step1_device_basics.py)

echo
echo "################ Lab 1, Step 2: eager mode training ################"
(cd examples/lab1 && ../../$PY eager_mode.py)

echo
echo "################ Lab 1, Step 3: torch.compile(backend=\"neuron\") ################"
(cd examples/lab1 && ../../$PY torch_compile.py)
echo "---- Step 3 Additional: eager vs compiled, synchronize + 100 calls (this host and Trainium2 est.)"
(cd examples/lab1 && ../../$PY compile_speedup.py)

echo
echo "################ Lab 1, Step 4: NKI kernel as a PyTorch op (@nki_op) ################"
(cd examples/lab1 && ../../$PY nki_integration.py)

echo
echo "################ Lab 1, Step 5: FSDP with torchrun (4 NeuronCores) ################"
(cd examples/lab1 && NEURON_RT_VIRTUAL_CORE_SIZE=2 NEURON_RT_NUM_CORES=4 \
  ../../.venv/bin/torchrun --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint localhost:29500 \
  distributed_fsdp.py 2> >(grep -v -E "Warning|warnings.warn|return func|OMP_NUM_THREADS|^\*+$|^W[0-9]" >&2))

echo
echo "################ Lab 1, Additional: SFT fine-tuning (LoRA, then full) ################"
for script in run_lora_finetune_hf.sh run_full_finetune_hf.sh; do
  (cd examples/lab1 && PATH=$PWD/../../.venv/bin:$PATH ./$script \
    2> >(grep -v -E "Warning|warnings.warn|return func|OMP_NUM_THREADS|^\*+$|^W[0-9]" >&2))
done

for model in base core experimental; do
  echo
  echo "################ Lab 2: python run.py --model $model --compile --greedy ################"
  (cd examples/lab2 && ../../$PY run.py --model $model --compile --greedy)
done
