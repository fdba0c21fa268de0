// Counter-based random numbers (Philox4x32-10): the value of element i of a random op depends
// only on (seed, offset, i), so a seed reproduces every tensor whatever the thread count or the
// chunking. Element i (in the tensor's logical row-major order) reads the 4x32-bit block number
// offset + i / V, word i % V * (4 / V), where V is the values per block of the op and dtype
// (rand_values_per_block). The caller advances its generator by rand_blocks(op, dtype, n).
#pragma once

#include <array>
#include <cstdint>

#include "tensor_ref.h"

namespace neuron::kernels {

// One output of splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", 2014) from state x: mixes x + 0x9E3779B97F4A7C15. Derives independent seeds.
uint64_t splitmix64(uint64_t x);

// Philox4x32-10 of a 128-bit counter under a 64-bit key (Random123's philox4x32_10).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
// The block the fills use: counter = (counter_lo, counter_hi, 0, 0), key = (seed_lo, seed_hi).
std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t counter);

enum class RandOp : uint8_t {
  Uniform,        // from = a, to = b
  Normal,         // mean = a, std = b (Box-Muller)
  Bernoulli,      // p = a (scalar) or prob[i] when a probability tensor is given
  RandomRange,    // base = ia, range = ib (uint64; 0 means the full 64-bit range)
  RandomDefault,  // random_(): [0, 2^digits] for floats, [0, max] for integers, {0,1} for bool
  Exponential,    // lambda = a
  Geometric,      // p = a
  Cauchy,         // median = a, sigma = b
  LogNormal,      // mean = a, std = b of the underlying normal
  Dropout,        // out = keep ? in * b : 0, mask = keep, keep with probability a
};

struct RandParams {
  double a = 0.0, b = 1.0;
  int64_t ia = 0;
  uint64_t ib = 0;
};

// 4, 2 or 1 values drawn from each Philox block for (op, dtype).
int rand_values_per_block(RandOp op, DType dtype);
// Blocks consumed by a fill of n elements.
uint64_t rand_blocks(RandOp op, DType dtype, int64_t n);
bool rand_supports(RandOp op, DType dtype);

// Fills `out` (any strides). `prob` (Bernoulli with a tensor p) and `in`/`mask` (Dropout) share
// out's shape (broadcast through zero strides). Unused refs may be null.
void random_fill(RandOp op, const RandParams& p, uint64_t seed, uint64_t offset,
                 const TensorRef& out, const TensorRef* prob = nullptr,
                 const TensorRef* in = nullptr, const TensorRef* mask = nullptr);

// A random permutation of [0, n) (Fisher-Yates; swap k draws block offset + k) into `out`
// (1-d, any integer or floating dtype that holds n). Consumes rand_blocks for n values of int64.
void randperm(int64_t n, uint64_t seed, uint64_t offset, const TensorRef& out);

}  // namespace neuron::kernels
