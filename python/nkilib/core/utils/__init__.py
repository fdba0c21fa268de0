"""Shared pieces of the NKI Library: enums (common_types), argument checks (kernel_assert),
tiling helpers (kernel_helpers, tiled_range) and the on-chip building blocks the kernels are
made of (tile_ops)."""
