"""Helpers of the workload tests: twin models on neuron and CPU, and comparisons."""

import copy

import torch
import torch_neuronx


def twin(model: torch.nn.Module) -> torch.nn.Module:
    """A neuron copy of a CPU model with identical parameters and buffers."""
    return copy.deepcopy(model).to("neuron")


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.state_dict().items()}


def assert_close_dicts(actual: dict, expected: dict, rtol: float, atol: float, what: str) -> None:
    assert actual.keys() == expected.keys(), f"{what}: different names"
    for name, value in expected.items():
        torch.testing.assert_close(actual[name], value, rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"{what} {name}: {m}")


def assert_no_fallback() -> None:
    ops = torch_neuronx.get_fallback_ops()
    assert ops == [], f"ops fell back to the CPU: {ops}"
