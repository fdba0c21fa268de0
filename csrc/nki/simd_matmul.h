// The Tensor Engine's thick matmul on the host: fp32 tile products with the PE array's
// arithmetic (every output element one chain of fused multiply-adds over k in order, from zero,
// then added to the PSUM value when accumulating), register-blocked for AVX-512 when the host
// has it, with a portable version that tests compare it to.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

namespace neuron::nki::simd {

// One matmul operand [K, cols]: row k at base + k * row_bytes, its elements contiguous, fp32 or
// bf16 (raw patterns, widened exactly).
struct MatmulOperand {
  const uint8_t* base = nullptr;
  int64_t row_bytes = 0;
  bool bf16 = false;
};

// C[i, j] (+)= sum over k = 0..K-1, in order, of A[k, i] * B[k, j], for i < M and n0 <= j < n1,
// C [M, N] with rows ldc floats apart. Each sum is one fp32 FMA chain starting from 0;
// `accumulate` then adds C's old value (acc + C).
void matmul_f32(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B, int64_t M,
                int64_t K, int64_t n0, int64_t n1, bool accumulate);
void matmul_f32_portable(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                         int64_t M, int64_t K, int64_t n0, int64_t n1, bool accumulate);
// Whether matmul_f32 uses the AVX-512 micro-kernel (the host has AVX-512F and the kernels'
// SIMD level is not lowered to portable; NEURON_EMU_SIMD=avx2 or portable turns it off).
bool matmul_uses_avx512();

}  // namespace neuron::nki::simd
