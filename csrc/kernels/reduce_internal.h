// Internals shared by the reduction driver (reduce.cpp) and its per-ISA instantiations
// (reduce_portable.cpp, reduce_avx2.cpp).
#pragma once

#include <cstdint>

#include "reduce.h"
#include "tensor_ref.h"

namespace neuron::kernels {

struct RedGeometry;

namespace portable {
bool reduce_entry(ReduceOp op, DType compute, const ReduceParams& p, const RedGeometry& g,
                  const TensorRef& in, const TensorRef* outs, int nouts, bool dry);
}
namespace avx2 {
bool reduce_entry(ReduceOp op, DType compute, const ReduceParams& p, const RedGeometry& g,
                  const TensorRef& in, const TensorRef* outs, int nouts, bool dry);
}

// The reduction geometry: kept and reduced dims of size > 1 (outermost first), strides in bytes.
struct RedGeometry {
  int nk = 0, nr = 0;
  int64_t ksize[kMaxDims] = {}, kin[kMaxDims] = {}, kout[2][kMaxDims] = {};
  int64_t rsize[kMaxDims] = {}, rin[kMaxDims] = {};
  int64_t M = 1, L = 1;  // number of outputs / elements reduced into each
};

}  // namespace neuron::kernels
