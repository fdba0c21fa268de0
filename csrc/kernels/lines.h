// Iteration over the "lines" of N same-shaped strided operands along one dimension: softmax,
// normalisation, sort and scan kernels process one line at a time. Lines run in parallel on the
// host pool.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "strided_loop.h"
#include "tensor_ref.h"

namespace neuron::kernels {

// Calls fn(ptrs, line_strides) for every line of the operands along `dim`, where ptrs are the
// byte addresses of each operand's first element of the line and line_strides are the element
// strides of each operand along `dim`. The operands must share ref[0]'s shape. `line_cost` is
// the approximate work per line in elements (for the parallel grain).
template <int N, typename F>
void for_each_line(const std::array<const TensorRef*, N>& ref, int dim, int64_t line_cost, F&& fn) {
  std::array<TensorRef, N> outer;
  std::array<const TensorRef*, N> outer_ptrs;
  std::array<int64_t, N> line_strides;
  for (int k = 0; k < N; ++k) {
    outer[k] = *ref[k];
    line_strides[k] = ref[k]->ndim ? ref[k]->strides[dim] : 1;
    if (outer[k].ndim) outer[k].sizes[dim] = 1;
    outer_ptrs[k] = &outer[k];
  }
  if (ref[0]->ndim && ref[0]->sizes[dim] == 0) return;
  const LoopPlan<N> plan = make_plan<N>(outer_ptrs);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, line_cost));
  // for_each_row's grain is in positions: scale so that one chunk holds `grain` lines.
  for_each_row(
      plan,
      [&](std::array<char*, N> p, int64_t n, const std::array<int64_t, N>& s) {
        for (int64_t i = 0; i < n; ++i) {
          std::array<char*, N> q;
          for (int k = 0; k < N; ++k) q[k] = p[k] + i * s[k];
          fn(q, line_strides);
        }
      },
      grain);
}

}  // namespace neuron::kernels
