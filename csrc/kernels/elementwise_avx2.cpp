// The AVX2+FMA clone of the elementwise op table: the same op functors compiled for the AVX2
// target, with 8-lane fp32 bodies for the float ops that have one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "elementwise_internal.h"
#include "simd/vec_avx2.h"
#include "simd/vmath.h"

#if NEURON_KERNELS_X86
NEURON_AVX2_BEGIN
namespace neuron::kernels::avx2 {
#define NEURON_EW_VEC 1
#include "elementwise_ops.inc"
#undef NEURON_EW_VEC
}  // namespace neuron::kernels::avx2
NEURON_AVX2_END
#else
namespace neuron::kernels::avx2 {
const EwTable& table() { return portable::table(); }
}  // namespace neuron::kernels::avx2
#endif
