// The arithmetic of reducing collectives (all-reduce, reduce-scatter, reduce): combine the
// contributions of all ranks element by element, accumulating 16-bit floats in fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "dtype.h"

namespace neuron::kernels {

enum class CollectiveOp { Sum, Avg, Product, Min, Max, BAnd, BOr, BXor };

// dst[i] = op over r of srcs[r][i], for n contiguous elements of `dtype` (dst may alias one
// of the sources). Avg divides the sum by srcs.size(). Throws std::invalid_argument for a
// combination ATen rejects too (bitwise ops on floating types).
void collective_reduce(void* dst, const std::vector<const void*>& srcs, int64_t n, DType dtype, CollectiveOp op);

}  // namespace neuron::kernels
