// Reductions (sum, prod, mean, max/min with and without indices, any/all, var/std, norms,
// logsumexp) and scans (cumsum, cumprod) over strided tensors of any dtype.
//
// Reductions: every output has the input's ndim; a dim is reduced where the output's size is 1
// and the input's is not (keepdim form; the glue inserts the size-1 dims). Contiguous ("inner")
// and strided ("outer") reductions both vectorize; large reductions split into fixed-size blocks
// whose partial results combine in a fixed order, so results do not depend on the thread count.
// Accumulation: fp32 (and bf16/fp16, which compute in fp32) sums add blocks of up to 1024
// elements in fp32 lanes and the block sums in fp64; prod/var/norm/mean accumulate in fp64;
// integer sums and products in int64 with wraparound; max/min in the compute type.
#pragma once

#include <cstdint>

#include "tensor_ref.h"

namespace neuron::kernels {

enum class ReduceOp : uint8_t {
  Sum,
  NanSum,  // NaN counts as zero
  Prod,
  Mean,
  Max,  // NaN-propagating
  Min,
  ArgMax,  // outs[0]: int64 index (first occurrence; a NaN counts as the maximum)
  ArgMin,
  MaxWithIndex,  // outs[0]: value, outs[1]: int64 index
  MinWithIndex,
  Any,
  All,
  Var,      // outs[0]: variance with `correction` (or std when take_sqrt)
  VarMean,  // outs[0]: var (or std), outs[1]: mean
  Norm,     // vector p-norm: p = 0, 1, 2, +-inf or any other value
  LogSumExp,
  kCount
};

struct ReduceParams {
  double p = 2.0;           // Norm
  double correction = 1.0;  // Var, VarMean
  bool take_sqrt = false;   // Var, VarMean: std instead of var
};

// `compute` is the dtype the input is converted to before reducing (ATen's: the output dtype for
// sum/prod/mean, the input dtype for max/min/arg*); Any/All compute in bool.
bool reduce_supports(ReduceOp op, DType compute);
int reduce_outputs(ReduceOp op);

// Throws std::invalid_argument for unsupported combinations or mismatched shapes.
void reduce(ReduceOp op, DType compute, const ReduceParams& p, const TensorRef& in,
            const TensorRef* outs, int num_outs);

enum class ScanOp : uint8_t { CumSum, CumProd };

// out[..., k, ...] = in[..., 0, ...] op ... op in[..., k, ...] along `dim`; in and out share one
// shape. Floating scans accumulate in fp64, integer scans in int64 (like ATen's CPU kernels).
bool scan_supports(DType compute);
void scan(ScanOp op, DType compute, const TensorRef& in, const TensorRef& out, int dim);

}  // namespace neuron::kernels
