// The portable instantiation of the reductions (plain C++).
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
#include "simd/vmath.h"

namespace neuron::kernels::portable {
#define NEURON_RED_VEC 0
#include "reduce_ops.inc"
#undef NEURON_RED_VEC
}  // namespace neuron::kernels::portable
