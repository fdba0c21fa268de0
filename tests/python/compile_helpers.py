"""Helpers of the torch.compile tests (the `fresh_compile` fixture lives in conftest.py)."""

from __future__ import annotations

import os
import sys

import torch

WORKLOADS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads")
if WORKLOADS not in sys.path:
    sys.path.insert(0, WORKLOADS)


def to_neuron(x):
    return x.to("neuron") if isinstance(x, torch.Tensor) else x
