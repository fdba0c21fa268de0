"""Python-side pieces of the eager neuron ops (the real package's ``torch_neuronx.python_ops``)."""
