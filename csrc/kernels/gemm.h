// Matrix multiplication for every layer (eager ops, compiled graphs, NKI nc_matmul):
//   C[b] = alpha * A[b] @ B[b] + beta * C[b]      for b in [0, batch)
// with arbitrary element strides, fp32 accumulation for 16-bit inputs, and the output in the
// input dtype or fp32. Uses the host BLAS (blas.h) when it is available and the portable
// kernel otherwise.
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
  void* c = nullptr;        // [batch, m, n]
  int64_t c_bs = 0, c_rs = 0, c_cs = 1;
  DType in_dtype = DType::Float32;   // Float32, Float64, BFloat16 or Float16 (A and B)
  DType out_dtype = DType::Float32;  // in_dtype, or Float32 for 16-bit inputs
  float alpha = 1.0f;
  float beta = 0.0f;  // beta == 0 ignores C's previous contents (NaNs included), like BLAS
};

// Throws std::invalid_argument for unsupported dtype combinations or negative sizes.
void gemm(const GemmProblem& p);

// The portable kernel (no BLAS); same contract. Tests compare gemm() against it.
void gemm_reference(const GemmProblem& p);

}  // namespace neuron::kernels
