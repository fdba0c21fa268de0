import os
import subprocess
import sys
import textwrap

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code: str, env: dict | None = None, timeout: float = 120, cwd: str | None = None):
    """Runs `code` in a fresh interpreter (same venv, this checkout on PYTHONPATH)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd or REPO,
    )


@pytest.fixture
def py():
    return run_python


@pytest.fixture(autouse=True)
def _clean_state():
    import torch_neuronx

    torch_neuronx.clear_op_tracking()
    yield
    torch.neuron.synchronize()
