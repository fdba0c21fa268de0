// Registers torch_neuronx._C._nki, the NeuronCore model bindings used by python/nki.
#pragma once

#include <pybind11/pybind11.h>

namespace neuron::torch_glue {

void register_nki(pybind11::module_& parent);

}  // namespace neuron::torch_glue
