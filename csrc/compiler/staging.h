// Operands of kernels that want dense row-major (or [rows, cols]) buffers, made from the strided
// views of a program step: the view itself when its layout allows, else a dense temporary that
// in() fills from the view and done() copies back to it.
#pragma once

#include <cstdint>
#include <vector>

#include "error.h"
#include "kernels/copy.h"
#include "kernels/tensor_ref.h"

namespace neuron::cc::dense {

class Staged {
 public:
  explicit Staged(const kernels::TensorRef& t) : t_(t), d_(t) {
    if (!t.is_contiguous()) stage();
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  // Reads of the operand: the dense data (copied in when staged).
  const void* in() {
    if (staged()) kernels::copy(d_, t_);
    return d_.data;
  }
  // The buffer a kernel writes; done() publishes it to the view.
  void* out() { return d_.data; }
  void done() {
    if (staged()) kernels::copy(t_, d_);
  }
  const kernels::TensorRef& dense() const { return d_; }

 protected:
  Staged(const kernels::TensorRef& t, bool force) : t_(t), d_(t) {
    if (force) stage();
  }
  void stage() {
    const size_t bytes = static_cast<size_t>(t_.numel()) * kernels::element_size(t_.dtype);
    buf_.resize((bytes + 7) / 8);
    d_.data = buf_.data();
    int64_t s = 1;
    for (int i = t_.ndim - 1; i >= 0; --i) {
      d_.strides[i] = s;
      s *= t_.sizes[i];
    }
  }
  bool staged() const { return !buf_.empty(); }
  kernels::TensorRef t_, d_;
  std::vector<uint64_t> buf_;
};

// Dims [begin, end) of t as one dim when their strides allow (size-1 dims are skipped);
// false otherwise.
inline bool merge_dims(const kernels::TensorRef& t, int begin, int end, int64_t* size,
                       int64_t* stride) {
  int64_t n = 1, st = 1;
  bool first = true;
  for (int d = end - 1; d >= begin; --d) {
    if (t.sizes[d] == 1) continue;
    if (first) {
      st = t.strides[d];
      first = false;
    } else if (t.strides[d] != st * n) {
      return false;
    }
    n *= t.sizes[d];
  }
  if (n == 0) st = 1;
  *size = n;
  *stride = st;
  return true;
}

// t [d0, ..., d(r-1)] as a matrix [d0 * ... * d(axis-1), d(axis) * ...]: a view of t, or of a
// dense copy of it.
class StagedRows : public Staged {
 public:
  StagedRows(const kernels::TensorRef& t, int axis) : Staged(t, !mergeable(t, axis)) {
    if (axis < 0 || axis > t.ndim) throw ExecError("rows: axis out of range");
    rows_ = d_;
    rows_.ndim = 2;
    merge_dims(d_, 0, axis, &rows_.sizes[0], &rows_.strides[0]);
    merge_dims(d_, axis, d_.ndim, &rows_.sizes[1], &rows_.strides[1]);
  }
  // The [M, N] view of the dense data (in() or out() first).
  const kernels::TensorRef& rows() const { return rows_; }
  // The [M] view (the first dim of rows()), for per-row statistics.
  kernels::TensorRef column() const {
    kernels::TensorRef c = rows_;
    c.ndim = 1;
    return c;
  }

 private:
  static bool mergeable(const kernels::TensorRef& t, int axis) {
    int64_t a, b;
    return merge_dims(t, 0, axis, &a, &b) && merge_dims(t, axis, t.ndim, &a, &b);
  }
  kernels::TensorRef rows_;
};

}  // namespace neuron::cc::dense
