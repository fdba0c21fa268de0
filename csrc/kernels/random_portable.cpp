// The portable random value generators.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "random_internal.h"
#include "simd/vmath.h"

namespace neuron::kernels::portable {
#define NEURON_RAND_VEC 0
#include "random_ops.inc"
#undef NEURON_RAND_VEC
}  // namespace neuron::kernels::portable
