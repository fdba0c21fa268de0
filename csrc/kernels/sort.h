// Sorting and sampling along one dimension: sort (stable, ascending or descending), topk, and
// multinomial sampling. NaN compares greater than every number (last when ascending, first when
// descending), like ATen. Indices are written as int64 or int32.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor_ref.h"

namespace neuron::kernels {

// values/indices: same shape as self. Always stable (ties keep their input order).
void sort(const TensorRef& values, const TensorRef& indices, const TensorRef& self, int dim,
          bool descending);

// values/indices: self's shape with k along dim. `largest` picks the k largest (else smallest),
// best first when `sorted`. Ties come out exactly as from ATen's CPU kernel (same selection
// algorithm), so neuron and CPU results are equal element for element.
void topk(const TensorRef& values, const TensorRef& indices, const TensorRef& self, int dim,
          int64_t k, bool largest, bool sorted = true);

// out [rows, n] (int64): n category indices per row of probs [rows, C] (unnormalised, >= 0).
// Random numbers come from a counter-based generator keyed by `seed`, with counters starting
// at `offset` (the caller reserves rows * C counters), so results do not depend on the thread
// count. Throws std::invalid_argument for rows with negative/NaN/inf entries, a zero sum, or
// (without replacement) fewer than n non-zero categories.
void multinomial(const TensorRef& out, const TensorRef& probs, int64_t n, bool replacement,
                 uint64_t seed, uint64_t offset);

// torch.unique (sorted): the distinct elements of `self` (all of it, row-major), the index of
// each element's value among them, and the count of each. Two phases, because the result size
// depends on the data: unique_compute fills `r` (host scratch), unique_write copies it into
// outputs of r.count elements (inverse: self's shape, may be null; counts may be null).
struct UniqueResult {
  int64_t count = 0;
  std::vector<unsigned char> values;  // count elements of self's dtype
  std::vector<int64_t> inverse, counts;
};
void unique_compute(const TensorRef& self, bool want_inverse, bool want_counts, UniqueResult* r);
void unique_write(const UniqueResult& r, const TensorRef& values, const TensorRef& inverse,
                  const TensorRef& counts);

// The counter-based generator above (Philox 4x32, 10 rounds) as uniform doubles in [0, 1):
// value i of the stream (seed, offset).
double philox_uniform(uint64_t seed, uint64_t offset, uint64_t i);

}  // namespace neuron::kernels
