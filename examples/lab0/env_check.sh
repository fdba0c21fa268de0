#!/usr/bin/env bash
# Lab 0: environment check (the lab guide's 0-1 ... 0-4; the packages carry the real stack's names).
# Run from the repository root after `make build` (or `make demo`).
set -euo pipefail
cd "$(dirname "$0")/../.."

echo "== 0-1. Trainium2 hardware check: neuron-ls =="
.venv/bin/neuron-ls

echo
echo "== 0-2. Python virtual environment: source .venv/bin/activate =="
# shellcheck disable=SC1091
source .venv/bin/activate
echo "active venv: ${VIRTUAL_ENV}"

echo
echo "== 0-3. Neuron SDK packages: pip list | grep -e neuron -e torch -e nki =="
pip list 2>/dev/null | grep -e neuron -e torch -e nki

echo
echo "== 0-4. PyTorch import check =="
python -c "import torch; print(torch.__version__); t = torch.randn(2,2).to('neuron'); print(t)"
