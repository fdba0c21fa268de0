// Internals shared by the random driver (random.cpp) and its per-ISA value generators
// (random_portable.cpp, random_avx2.cpp).
#pragma once

#include <cstdint>

#include "random.h"

namespace neuron::kernels {

inline constexpr int64_t kGenChunk = 1024;  // elements generated per call

// How a fill maps Philox words to values.
struct GenSpec {
  RandOp op;
  int V;      // values per 4-word block
  DType buf;  // the dtype gen_values writes: Float32, Float64, Int64 or Bool
  RandParams p;
  uint32_t threshold = 0;  // Bernoulli/Dropout with a scalar p: keep when (word >> 8) < threshold
  uint64_t base = 0, modulus = 0;  // RandomRange/RandomDefault: base + bits % modulus (0: all bits)
};

namespace portable {
void gen_values(const GenSpec& g, uint64_t seed, uint64_t offset, uint64_t i0, int64_t m, void* dst,
                const double* prob);
}
namespace avx2 {
void gen_values(const GenSpec& g, uint64_t seed, uint64_t offset, uint64_t i0, int64_t m, void* dst,
                const double* prob);
}

}  // namespace neuron::kernels
