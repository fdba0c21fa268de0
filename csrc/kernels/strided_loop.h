// The iteration engine shared by kernels over strided operands: drops size-1 dims, merges
// dims that are contiguous for every operand, and walks the result row by row (the innermost
// dim is the row), splitting rows over the host thread pool when the work is large.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "runtime/thread_pool.h"
#include "tensor_ref.h"

namespace neuron::kernels {

// N operands of the same shape; strides in bytes.
template <int N>
struct LoopPlan {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
  std::array<char*, N> base{};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
};

// Builds a plan over operands that share `ref[0]`'s shape (element strides are converted to
// bytes with each operand's own element size).
template <int N>
LoopPlan<N> make_plan(const std::array<const TensorRef*, N>& ref) {
  LoopPlan<N> p;
  const TensorRef& shape = *ref[0];
  for (int k = 0; k < N; ++k) p.base[k] = static_cast<char*>(ref[k]->data);
  // Drop size-1 dims, keep order (outermost first).
  for (int d = 0; d < shape.ndim; ++d) {
    if (shape.sizes[d] == 1) continue;
    p.sizes[p.ndim] = shape.sizes[d];
    for (int k = 0; k < N; ++k)
      p.strides[k][p.ndim] = ref[k]->strides[d] * static_cast<int64_t>(element_size(ref[k]->dtype));
    ++p.ndim;
  }
  if (shape.ndim > 0 && p.ndim == 0) {  // all dims were 1: one element
    for (int d = 0; d < shape.ndim; ++d)
      if (shape.sizes[d] == 0) {
        p.ndim = 1;
        p.sizes[0] = 0;
        return p;
      }
  }
  // Merge dim d-1 into d when every operand is contiguous across them.
  int out = p.ndim ? 1 : 0;
  for (int d = 1; d < p.ndim; ++d) {
    bool mergeable = true;
    for (int k = 0; k < N; ++k)
      if (p.strides[k][out - 1] != p.strides[k][d] * p.sizes[d]) mergeable = false;
    if (mergeable) {
      p.sizes[out - 1] *= p.sizes[d];
      for (int k = 0; k < N; ++k) p.strides[k][out - 1] = p.strides[k][d];
    } else {
      p.sizes[out] = p.sizes[d];
      for (int k = 0; k < N; ++k) p.strides[k][out] = p.strides[k][d];
      ++out;
    }
  }
  p.ndim = out;
  return p;
}

// Calls row(ptrs, n, inner_strides) for every row of the plan; `grain` is the number of
// elements below which the work runs on one thread.
template <int N, typename Row>
void for_each_row(const LoopPlan<N>& p, Row&& row, int64_t grain = 32768) {
  const int64_t total = p.numel();
  if (total == 0) return;
  if (p.ndim == 0) {  // scalar
    std::array<char*, N> ptrs = p.base;
    std::array<int64_t, N> s{};
    row(ptrs, int64_t{1}, s);
    return;
  }
  const int inner = p.ndim - 1;
  const int64_t n = p.sizes[inner];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = p.strides[k][inner];
  const int64_t rows = total / n;

  auto run_rows = [&](int64_t r0, int64_t r1) {
    // Decompose r0 into outer coordinates.
    int64_t idx[kMaxDims] = {};
    int64_t rem = r0;
    for (int d = inner - 1; d >= 0; --d) {
      idx[d] = rem % p.sizes[d];
      rem /= p.sizes[d];
    }
    std::array<char*, N> ptrs;
    for (int k = 0; k < N; ++k) {
      char* b = p.base[k];
      for (int d = 0; d < inner; ++d) b += idx[d] * p.strides[k][d];
      ptrs[k] = b;
    }
    for (int64_t r = r0; r < r1; ++r) {
      row(ptrs, n, inner_strides);
      // Advance the odometer.
      for (int d = inner - 1; d >= 0; --d) {
        for (int k = 0; k < N; ++k) ptrs[k] += p.strides[k][d];
        if (++idx[d] < p.sizes[d]) break;
        for (int k = 0; k < N; ++k) ptrs[k] -= p.strides[k][d] * p.sizes[d];
        idx[d] = 0;
      }
    }
  };

  if (total < grain || rt::in_parallel_region()) {
    run_rows(0, rows);
    return;
  }
  if (rows == 1) {
    // One long row: split it into pieces.
    std::array<char*, N> base = p.base;
    rt::parallel_for(0, n, std::max<int64_t>(grain, 1), [&](int64_t b, int64_t e) {
      std::array<char*, N> ptrs;
      for (int k = 0; k < N; ++k) ptrs[k] = base[k] + b * inner_strides[k];
      row(ptrs, e - b, inner_strides);
    });
    return;
  }
  const int64_t row_grain = std::max<int64_t>(1, grain / n);
  rt::parallel_for(0, rows, row_grain, run_rows);
}

}  // namespace neuron::kernels
