// The portable elementwise op table (plain C++; the compiler may still auto-vectorize).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "elementwise_internal.h"
#include "simd/vmath.h"

namespace neuron::kernels::portable {
#define NEURON_EW_VEC 0
#include "elementwise_ops.inc"
#undef NEURON_EW_VEC
}  // namespace neuron::kernels::portable
