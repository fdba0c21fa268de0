"""NKI: the Neuron Kernel Interface (neuron-emu)."""
