// Host CPU features for run-time kernel selection: the build never assumes the build machine's
// CPU, so SIMD paths are compiled with per-function target attributes and chosen here.
#pragma once

#include <cstdint>

namespace neuron::kernels {

enum class Isa : uint8_t {
  Portable,  // plain C++ (what the tests compare the SIMD paths to)
  Avx2,      // AVX2 + FMA + F16C
};

// The best instruction set of this host, or Portable when NEURON_EMU_DISABLE_SIMD=1.
// Computed once; thread-safe.
Isa best_isa();
const char* isa_name(Isa isa);

}  // namespace neuron::kernels
