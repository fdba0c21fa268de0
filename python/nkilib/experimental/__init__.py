"""Experimental fused kernels of the NKI Library (multi-layer decode megakernel)."""
