"""NKI Library kernels (neuron-emu)."""
