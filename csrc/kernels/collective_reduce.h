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

// The dtype partial results of a reduction done in steps (e.g. within each host, then across
// hosts) are kept in: float32 for 16- and 8-bit floats, `dtype` itself otherwise. Rounding
// once at the end keeps a stepwise reduction as accurate as a one-step one.
DType collective_acc_dtype(DType dtype);

// One step of a stepwise reduction: dst (dst_dtype) = op over r of srcs[r] (src_dtype). The
// dtypes are equal, or one is collective_acc_dtype() of the other. For Avg, `avg_divisor`
// > 0 divides by it (the last step, with the number of contributions of all steps) and 0
// leaves the sum undivided (a partial result).
void collective_reduce_step(void* dst, DType dst_dtype, const std::vector<const void*>& srcs, DType src_dtype,
                            int64_t n, CollectiveOp op, int64_t avg_divisor);

}  // namespace neuron::kernels
