// Copy with dtype conversion between two strided views of the same shape (the source may
// broadcast through zero strides), and fill with a scalar. Runs on the calling thread
// (a stream worker), parallelised through the runtime's host pool.
#pragma once

#include "tensor_ref.h"

namespace neuron::kernels {

// dst[i] = convert<dst.dtype>(src[i]) for every index of dst's shape. Shapes must match
// (same ndim and sizes). Overlapping dst and src is allowed only when they are identical.
void copy(const TensorRef& dst, const TensorRef& src);

// Every element of dst becomes the element whose bytes are at `value` (element_size(dst.dtype)
// bytes, already in dst's dtype).
void fill(const TensorRef& dst, const void* value);

}  // namespace neuron::kernels
