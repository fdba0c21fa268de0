"""The Python packages are installed as the real stack's distributions: torch-neuronx, nki and
neuronx-cc (Lab 0-3: `pip list | grep -e neuron -e torch -e nki`)."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys

import nki
import torch_neuronx
from packaging.requirements import Requirement


def test_versions_are_the_packages_own():
    assert md.version("torch-neuronx") == torch_neuronx.__version__ == "2.11.3+neuronemu"
    assert md.version("nki") == nki.__version__
    assert md.version("nki").startswith("0.5.0+neuronemu")
    assert md.version("neuronx-cc") == "2.26.0+neuronemu"


def test_each_package_belongs_to_its_distribution():
    owners = md.packages_distributions()
    assert owners["torch_neuronx"] == ["torch-neuronx"]
    assert owners["nki"] == ["nki"]
    assert owners["nkilib"] == ["neuronx-cc"]


def test_no_distribution_named_neuron_emu():
    names = {d.metadata["Name"] for d in md.distributions()}
    assert "neuron-emu" not in names


def test_requirements_are_met():
    for dist in ("torch-neuronx", "nki", "neuronx-cc"):
        for line in md.requires(dist) or []:
            req = Requirement(line)
            installed = md.version(req.name)
            assert req.specifier.contains(installed, prereleases=True), f"{dist}: {line} (installed {installed})"


def test_entry_points_registered_once():
    backends = [e for e in md.entry_points(group="torch.backends") if e.name == "torch_neuronx"]
    assert [e.value for e in backends] == ["torch_neuronx:_autoload"]
    dynamo = [e for e in md.entry_points(group="torch_dynamo_backends") if e.name == "neuron"]
    assert len(dynamo) == 1


def test_pip_list_reads_like_the_lab_guide():
    out = subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines() if any(k in line for k in ("neuron", "torch", "nki"))]
    assert sorted(r[0] for r in rows) == ["neuronx-cc", "nki", "torch", "torch-neuronx"]
