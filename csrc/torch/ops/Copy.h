// Copies between CPU and neuron tensors and between neuron tensors (any strides, dtypes,
// broadcasting source), ordered on the device streams.
#pragma once

#include <ATen/ATen.h>

namespace neuron::torch_glue {

// dst <- src (src broadcasts to dst's shape); at least one of them is a neuron tensor.
void copy_into(const at::Tensor& dst, const at::Tensor& src, bool non_blocking);

}  // namespace neuron::torch_glue
