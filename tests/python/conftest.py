import os
import subprocess
import sys
import textwrap

import pytest
import torch
from repo_paths import REPO


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


@pytest.fixture
def fresh_compile(tmp_path, monkeypatch):
    """torch.compile tests: a private NEFF cache, empty in-memory caches, Dynamo and the
    neuron compile metrics reset, warnings re-armed."""
    from torch_neuronx import _C
    from torch_neuronx.neuron_dynamo_backend import backend

    cache = tmp_path / "neff_cache"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache))
    monkeypatch.delenv("TORCH_NEURONX_DEBUG_DIR", raising=False)
    monkeypatch.delenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", raising=False)
    torch._dynamo.reset()
    _C._cc.clear_memory_cache()
    torch.neuron.reset_dynamo_metrics()
    backend._warned.clear()
    yield cache
    torch._dynamo.reset()


@pytest.fixture(autouse=True, scope="session")
def _native_kernels():
    """These tests exercise neuron-emu's own kernels, also for the ops the real torch-neuronx
    runs on the CPU (argmax, sort, multinomial; see RealStackFallback.h)."""
    import torch_neuronx

    torch_neuronx._C._set_fallback_model("native")
    yield


@pytest.fixture(scope="session")
def lab1_one_node():
    """Lab 1 Step 5 as the lab guide runs it (torchrun, 4 ranks on one host); shared by the
    one-node test and the two-node test that compares its losses."""
    from dist_launch import torchrun

    return torchrun("distributed_fsdp.py", os.path.join(REPO, "examples", "lab1"),
                    {"NEURON_RT_VIRTUAL_CORE_SIZE": "2", "NEURON_RT_NUM_CORES": "4"})
