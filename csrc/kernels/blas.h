// The narrow interface to the host BLAS: MKL inside the torch wheel (libtorch_cpu.so),
// resolved at run time with dlsym so the kernels layer needs no torch header and no link-time
// dependency. Column-major (Fortran) conventions, 32-bit indices. Every entry may be null
// (BLAS not found): callers then use the portable kernels.
#pragma once

#include <cstdint>

namespace neuron::kernels::blas {

using sgemm_fn = void (*)(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                          const float* alpha, const float* a, const int* lda, const float* b,
                          const int* ldb, const float* beta, float* c, const int* ldc);
using dgemm_fn = void (*)(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                          const double* alpha, const double* a, const int* lda, const double* b,
                          const int* ldb, const double* beta, double* c, const int* ldc);
// bf16 x bf16 -> fp32 and fp16 x fp16 -> fp32 (MKL extensions), inputs as raw 16-bit words.
using gemm16_fn = void (*)(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                           const float* alpha, const uint16_t* a, const int* lda, const uint16_t* b,
                           const int* ldb, const float* beta, float* c, const int* ldc);

// Sets the number of BLAS threads for calls made from the calling thread (0 = the global
// setting) and returns the previous value (MKL's C entry MKL_Set_Num_Threads_Local; the
// lower-case symbol is the Fortran one, taking a pointer).
using set_threads_fn = int (*)(int);

struct Functions {
  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  gemm16_fn gemm_bf16 = nullptr;
  gemm16_fn gemm_f16 = nullptr;
  set_threads_fn set_num_threads_local = nullptr;
  const char* source = "none";  // library the symbols came from
};

// Resolved once (thread-safe). Looks in an already loaded libtorch_cpu.so first, then in
// $NEURON_EMU_BLAS_LIB, then in the torch library directory recorded at build time.
// NEURON_EMU_DISABLE_BLAS=1 forces the portable kernels (for testing them).
const Functions& functions();

}  // namespace neuron::kernels::blas
