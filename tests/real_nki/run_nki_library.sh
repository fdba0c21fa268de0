#!/bin/bash
# Runs the public NKI Library's own test suite (aws-neuron/nki-library, Apache-2.0) in its
# simulation mode (`--test-mode simulation`, nki.cpu_simulate) against this checkout's `nki`.
# Not part of `make test`: it needs a checkout of the public repository and network access for
# the suite's Python dependencies. Nothing of the library is copied into this project.
#
#   tests/real_nki/run_nki_library.sh <nki-library checkout> [test files...]   (default: all)
#
# Writes one log per test file and summary.txt under $OUT (default build/real-nki/); the suite's
# per-test artifacts are deleted after each file (they reach tens of GB).
# The harness needs three things the public repository does not ship, written here:
#   - nki_cpu_simulator: the simulator package its conftest imports; an alias of our nki;
#   - test/utils/scripts/remote_lock_scripts.py and test/utils/perf_analysis_private.py,
#     private modules for remote hardware hosts, unused in simulation mode;
#   - Orchestrator._compiled_kernel is read before it is set when compilation is skipped.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
LIB=$(cd "${1:?usage: $0 <nki-library checkout> [test files...]}" && pwd)
shift
OUT=${OUT:-$REPO/build/real-nki}
DEPS=$OUT/deps
SHIM=$OUT/shim
PY=$REPO/.venv/bin/python
mkdir -p "$OUT" "$SHIM/nki_cpu_simulator"
if [ ! -e "$DEPS/.done" ]; then
  "$PY" -m pip install -q --target "$DEPS" pandas boto3 fabric2 filelock plotext pytest-xdist \
    pytest-metadata pytest-html allpairspy aws-embedded-metrics scipy
  rm -rf "$DEPS"/numpy "$DEPS"/numpy-* "$DEPS"/numpy.libs "$DEPS"/torch "$DEPS"/pytest "$DEPS"/_pytest "$DEPS"/pytest-[0-9]*
  touch "$DEPS/.done"
fi
cat > "$SHIM/nki_cpu_simulator/__init__.py" <<'PY'
"""The NKI Library's simulation mode imports nki_cpu_simulator.nki.*: neuron-emu's nki."""
import importlib
import sys
import types

import nki as _nki

nki = _nki
sys.modules[__name__ + ".nki"] = _nki
for _m in ("language", "isa", "isa.constants", "typing", "compiler", "tensor"):
    sys.modules[f"{__name__}.nki.{_m}"] = importlib.import_module("nki." + _m)
sys.modules[__name__ + ".nki.language.dtypes"] = sys.modules["nki.language"]
if not hasattr(sys.modules["nki.language"], "dtypes"):
    sys.modules["nki.language"].dtypes = sys.modules["nki.language"]
_nki.builtin = getattr(_nki, "builtin", None) or types.ModuleType("nki.builtin")
sys.modules[__name__ + ".nki.builtin"] = _nki.builtin
PY
mkdir -p "$LIB/test/utils/scripts"
[ -e "$LIB/test/utils/scripts/remote_lock_scripts.py" ] || cat > "$LIB/test/utils/scripts/remote_lock_scripts.py" <<'PY'
import enum
import json


class LockStatus(enum.Enum):
    ALLOCATED = 0
    DRAINED = 1
    FLOCK_TIMEOUT = 2

    @property
    def exit_code(self):
        return self.value

    @classmethod
    def from_exit_code(cls, rc):
        return cls(rc)


class LockResult(dict):
    @classmethod
    def from_json(cls, s):
        return cls(json.loads(s))
PY
touch "$LIB/test/utils/scripts/__init__.py"
[ -e "$LIB/test/utils/perf_analysis_private.py" ] || printf 'def analyze_trace(*args, **kwargs):\n    return None\n' > "$LIB/test/utils/perf_analysis_private.py"
sed -i 's/if not self._compiled_kernel or/if not getattr(self, "_compiled_kernel", None) or/' "$LIB/test/utils/test_orchestrator.py"

cd "$LIB"
if [ $# -eq 0 ]; then set -- $(git ls-files test/integration | grep '/test_.*\.py$'); fi
: > "$OUT/summary.txt"
for f in "$@"; do
  log=$OUT/$(echo "$f" | tr / _).log
  PYTHONPATH=$SHIM:$REPO/python:$LIB/src:$DEPS TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
    timeout "${TIMEOUT:-900}" "$PY" -m pytest -p no:cacheprovider -q --test-mode simulation \
    --output-directory "$OUT/artifacts" "$f" > "$log" 2>&1 || true
  # The suite dumps every test's inputs and outputs (tens of GB for the whole suite): keep none.
  rm -rf "$OUT/artifacts" "$LIB/neuron_test_output"
  echo "$f: $(tail -1 "$log")" | tee -a "$OUT/summary.txt"
done
