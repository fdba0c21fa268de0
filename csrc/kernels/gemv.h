// Products with a small side, C[b] = alpha * A[b] @ B[b] + beta * C[b] with few rows in A: the
// decode-time `x @ W^T` of a batch-1 linear layer. They are bound by the bandwidth of streaming
// B, so B is read once per block of up to four A rows, converted to fp32 in registers and
// accumulated in fp32, with the columns of C split over the host pool.
#pragma once

#include "simd.h"
#include "gemm.h"

namespace neuron::kernels {

// B must have a unit stride along k ("dot" form: the transpose of a row-major [n, k] weight)
// or along n ("axpy" form: a row-major [k, n] matrix); A and C may have any strides.
// Inputs Float32, BFloat16 or Float16; outputs as in gemm().
bool gemm_small_m_supported(const GemmProblem& p);

// Computes `p` with the given instruction set (SimdLevel::Portable is the reference the SIMD path is
// tested against). Requires gemm_small_m_supported(p).
void gemm_small_m(const GemmProblem& p, SimdLevel isa);

}  // namespace neuron::kernels
