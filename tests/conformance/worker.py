"""A conformance worker process: reads OpInfo ids on stdin, runs each with harness.run_op, and
writes one JSON result per line on stdout. The sweep runs ops here so that an op which crashes
the interpreter (a segfault, an abort) costs one restart instead of the whole sweep."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    import torch  # noqa: F401  (autoloads torch_neuronx)
    from harness import op_id, run_op
    from torch.testing._internal.common_methods_invocations import op_db

    ops = {op_id(op): op for op in op_db}
    out = sys.stdout
    sys.stdout = sys.stderr  # keep stray prints out of the result channel
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        name, full = line.rstrip("\n").split("\t")
        r = run_op(ops[name], full == "1")
        out.write(json.dumps(dataclasses.asdict(r)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
