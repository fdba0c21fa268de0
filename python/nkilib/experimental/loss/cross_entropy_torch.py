"""PyTorch references of the cross-entropy kernels (fp32)."""

import torch
import torch.nn.functional as F


def cross_entropy_forward_torch_ref(logits: torch.Tensor, targets: torch.Tensor):
    """(loss [N], lse [N]) of logits [N, V] and int targets [N]."""
    x = logits.float()
    return F.cross_entropy(x, targets.long(), reduction="none"), torch.logsumexp(x, dim=1)


def cross_entropy_backward_torch_ref(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"):
    """d cross_entropy(logits, targets, reduction) / d logits, [N, V]."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"unknown reduction {reduction!r} (use 'mean' or 'sum')")
    x = logits.detach().float().requires_grad_(True)
    F.cross_entropy(x, targets.long(), reduction=reduction).backward()
    return x.grad
