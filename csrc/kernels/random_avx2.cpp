// The AVX2 random value generators: 8 Philox blocks per step, vectorized Box-Muller.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "random_internal.h"
#include "simd/vec_avx2.h"
#include "simd/vmath.h"

#if NEURON_KERNELS_X86
NEURON_AVX2_BEGIN
// No implicit multiply-add contraction: the scalar mappings (uniform, exponential, ...) must
// round exactly like the portable build so that both paths give the same bits.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif
namespace neuron::kernels::avx2 {
#define NEURON_RAND_VEC 1
#include "random_ops.inc"
#undef NEURON_RAND_VEC
}  // namespace neuron::kernels::avx2
NEURON_AVX2_END
#else
namespace neuron::kernels::avx2 {
void gen_values(const GenSpec& g, uint64_t seed, uint64_t offset, uint64_t i0, int64_t m, void* dst,
                const double* prob) {
  portable::gen_values(g, seed, offset, i0, m, dst, prob);
}
}  // namespace neuron::kernels::avx2
#endif
