// Run-time selection of the instruction set the kernels' hot loops use. Every vectorized
// kernel has a portable path (plain C++, any x86-64 or other CPU) and an AVX2+FMA+F16C clone
// compiled with a target attribute; simd_level() picks one per call, never the build CPU's.
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <cstdint>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define NEURON_KERNELS_X86 1
#else
#define NEURON_KERNELS_X86 0
#endif

namespace neuron::kernels {

enum class SimdLevel : uint8_t { Portable = 0, Avx2 = 1 };

// The best level this CPU supports (AVX2 needs avx2, fma and f16c).
SimdLevel simd_detected();
// The level kernels use: the detected one, lowered by NEURON_EMU_SIMD=portable or by
// set_simd_level().
SimdLevel simd_level();
// Forces a level for tests and benchmarks; a level above simd_detected() is clamped to it.
void set_simd_level(SimdLevel level);
const char* simd_level_name(SimdLevel level);

}  // namespace neuron::kernels
