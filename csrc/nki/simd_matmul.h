// The Tensor Engine's thick matmul on the host: fp32 tile products with the PE array's
// arithmetic (every output element one chain of fused multiply-adds over k in order, from zero,
// then added to the PSUM value when accumulating), register-blocked for AVX-512 or AVX2+FMA
// (whichever the host runs), with a portable version that tests compare them to.
// Thread-safety: pure functions of their arguments (each thread packs into its own buffers);
// threads sharing one MatmulPanels counter split one product between them.
#pragma once

#include <atomic>
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
// The AVX2+FMA micro-kernel itself, for tests on hosts that also have AVX-512 (call it only
// where kernels::simd_detected() is Avx2).
void matmul_f32_avx2(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                     int64_t M, int64_t K, int64_t n0, int64_t n1, bool accumulate);

// The same product over columns [0, N), split into panels of matmul_panel_columns() that the
// calling threads claim from `next` (a counter every caller shares, starting at 0): each thread
// packs A once and computes whichever panels it claims, so a late or preempted thread leaves its
// share to the others. Every element gets the bits matmul_f32 gives it.
struct MatmulPanels {
  std::atomic<int64_t> next{0};
};
void matmul_f32_shared(float* C, int64_t ldc, const MatmulOperand& A, const MatmulOperand& B,
                       int64_t M, int64_t K, int64_t N, bool accumulate, MatmulPanels& panels);
// Columns per claimed panel (the register block's width times its panel count).
int64_t matmul_panel_columns();

// Which micro-kernel matmul_f32 uses: "avx512" (the host has AVX-512 F/BW/DQ), "avx2" (AVX2+FMA)
// or "portable" (neither, or NEURON_EMU_SIMD=portable).
const char* matmul_kernel();
// Whether matmul_f32 runs a register-blocked micro-kernel (AVX-512 or AVX2) rather than the
// portable loops.
bool matmul_uses_micro_kernel();

}  // namespace neuron::nki::simd
