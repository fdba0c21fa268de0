// Fills and masks that build tensors from positions: arange, linspace and the triangle masks of
// tril/triu. (Copies between views — cat, flip, roll, repeat — go through copy.h.)
#pragma once

#include "tensor_ref.h"

namespace neuron::kernels {

// out[i] = start + i * step (computed in double, or int64 for integer dtypes).
void arange(const TensorRef& out, double start, double step, int64_t istart, int64_t istep);
// out[i] = evenly spaced from start to end inclusive (ATen's symmetric formula).
void linspace(const TensorRef& out, double start, double end);
// out[..., i, j] = (lower ? j - i <= diagonal : j - i >= diagonal) ? in[..., i, j] : 0.
// out may be in (in-place).
void triangle(const TensorRef& out, const TensorRef& in, int64_t diagonal, bool lower);

}  // namespace neuron::kernels
