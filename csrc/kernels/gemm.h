// Matrix multiplication for every layer (eager ops, compiled graphs, NKI nc_matmul):
//   C[b] = alpha * A[b] @ B[b] + beta * C[b]      for b in [0, batch)
// with arbitrary element strides, fp32 accumulation for 16-bit inputs, and the output in the
// input dtype or fp32. Routing (measured, see benchmarks/eager_ops.py):
//  - a small side (decode-time `x @ W^T`, min(m, n) <= 16) on 16-bit or fp32 inputs: the
//    bandwidth-bound kernels of gemv.h (AVX2 when the host has it);
//  - otherwise the host BLAS (MKL from the torch wheel, blas.h) with one BLAS thread per call:
//    batches of products side by side on the host pool, a large single product split into
//    column (or row) blocks of C (MKL's OpenMP team would spin on the pool's cores);
//  - integer dtypes, or no BLAS: the portable kernel.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace neuron::kernels {

struct GemmProblem {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // [batch, m, k]
  int64_t a_bs = 0, a_rs = 0, a_cs = 1;
  const void* b = nullptr;  // [batch, k, n]
  int64_t b_bs = 0, b_rs = 0, b_cs = 1;
  void* c = nullptr;  // [batch, m, n]; must not overlap A or B
  int64_t c_bs = 0, c_rs = 0, c_cs = 1;
  // Float32, Float64, BFloat16, Float16, or an integer dtype (portable kernel, exact modular
  // arithmetic like ATen's) for A and B.
  DType in_dtype = DType::Float32;
  DType out_dtype = DType::Float32;  // in_dtype, or Float32 for 16-bit inputs
  double alpha = 1.0;
  double beta = 0.0;  // beta == 0 ignores C's previous contents (NaNs included), like BLAS
};

// True for the dtype pairs gemm() accepts.
bool gemm_supports(DType in, DType out);

// Throws std::invalid_argument for unsupported dtype combinations or negative sizes.
void gemm(const GemmProblem& p);

// The portable kernel (no BLAS, no SIMD); same contract. Tests compare gemm() against it.
void gemm_reference(const GemmProblem& p);

// Which implementation gemm() picks for `p`: "small", "blas" or "reference".
const char* gemm_route(const GemmProblem& p);

}  // namespace neuron::kernels
