// The AVX2+FMA instantiation of the reductions: the same reducers, with 8-lane fp32 sum/max/min.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "convert.h"
#include "dtype.h"
#include "reduce_internal.h"
#include "runtime/thread_pool.h"
#include "simd/vec_avx2.h"
#include "simd/vmath.h"

// No implicit multiply-add contraction: the vector reducers must round like the portable ones.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if NEURON_KERNELS_X86
NEURON_AVX2_BEGIN
namespace neuron::kernels::avx2 {
#define NEURON_RED_VEC 1
#include "reduce_ops.inc"
#undef NEURON_RED_VEC
}  // namespace neuron::kernels::avx2
NEURON_AVX2_END
#else
namespace neuron::kernels::avx2 {
bool reduce_entry(ReduceOp op, DType compute, const ReduceParams& p, const RedGeometry& g,
                  const TensorRef& in, const TensorRef* outs, int nouts, bool dry) {
  return portable::reduce_entry(op, compute, p, g, in, outs, nouts, dry);
}
}  // namespace neuron::kernels::avx2
#endif
