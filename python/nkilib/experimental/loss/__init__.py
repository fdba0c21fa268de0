"""nkilib.experimental.loss: cross-entropy loss kernels (forward and backward)."""

from .cross_entropy import cross_entropy_backward, cross_entropy_forward

__all__ = ["cross_entropy_backward", "cross_entropy_forward"]
