"""PyTorch reference of nkilib.core.rmsnorm.rmsnorm.rmsnorm."""

from ..subkernels.rmsnorm_torch import rmsnorm_torch

__all__ = ["rmsnorm_torch"]
