// A strided view of device memory handed from the glue to a kernel: pointer, dtype, sizes
// and strides in elements. Plain data, cheap to copy into a queued task.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace neuron::kernels {

constexpr int kMaxDims = 25;  // same limit as ATen's TensorIterator

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::Undefined;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements; 0 means broadcast along that dim

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
  bool is_contiguous() const {
    int64_t expect = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (sizes[i] != 1 && strides[i] != expect) return false;
      expect *= sizes[i];
    }
    return true;
  }
};

}  // namespace neuron::kernels
