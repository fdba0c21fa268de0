// Registers torch_neuronx._C._nki_launch, the launch of NKI kernels on neuron devices.
#pragma once

#include <pybind11/pybind11.h>

namespace neuron::torch_glue {

void register_nki_launch(pybind11::module_& m);

}  // namespace neuron::torch_glue
