#!/usr/bin/env bash
# `make demo`: runs the lab examples that exist so far, as the lab guide writes them.
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
