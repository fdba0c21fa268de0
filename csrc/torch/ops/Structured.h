// Running ATen's structured meta functions on neuron tensors. ATen ships the "meta" half of
// every structured op (shape inference, type promotion, argument checks; for elementwise ops the
// TensorIterator build) as at::meta::structured_<op>. We derive from it the three variants the
// codegen makes for CPU and CUDA (functional, in-place, out=), so neuron kernels inherit the
// exact ATen semantics and only implement the compute.
#pragma once

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/native/Resize.h>

#include <array>
#include <type_traits>

namespace neuron::torch_glue {

namespace structured_detail {

inline void check_inplace(const at::Tensor& self, c10::IntArrayRef sizes,
                          const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == self.dtype(), "Bad in-place call: input tensor dtype ",
              self.dtype(), " and output tensor dtype ", options.dtype(), " should match");
  TORCH_CHECK(options.device() == self.device(), "Bad in-place call: input tensor device ",
              self.device(), " and output tensor device ", options.device(), " should match");
  TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: input tensor size ", self.sizes(),
              " and output tensor size ", sizes, " should match");
}

inline void resize_out(const at::Tensor& out, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ", options.dtype(),
              ", but got ", out.dtype(), " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ",
              options.device(), ", but got ", out.device(), " instead");
  const bool resized = at::native::resize_output(out, sizes);
  // Only restride when a resize happened; otherwise the meta function's strides are advisory.
  if (resized) {
    if (!strides.empty()) {
      TORCH_INTERNAL_ASSERT(!options.memory_format_opt().has_value());
      out.as_strided_(sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
    }
  }
}

}  // namespace structured_detail

// The functional variant: outputs are allocated on the neuron device with the meta function's
// sizes and strides.
template <class Meta, int N = 1>
struct Functional final : Meta {
  std::array<at::Tensor, N> outputs_;
  const at::Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }

 private:
  void set(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides, at::TensorOptions options) {
    // Empty strides mean "contiguous" (with the options' memory format, if any).
    outputs_[i] =
        strides.empty() ? at::empty(sizes, options) : at::empty_strided(sizes, strides, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }
};

// The in-place variant: output 0 is `self`, checked against the meta function's result.
template <class Meta, int N = 1>
struct Inplace final : Meta {
  explicit Inplace(const at::Tensor& self) : self_(self) {}
  const at::Tensor& self_;
  const at::Tensor& maybe_get_output(int64_t) override { return self_; }
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }

 private:
  void set(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides, at::TensorOptions options) {
    structured_detail::check_inplace(self_, sizes, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }
};

// The out= variant: the given outputs are checked and resized like ATen's resize_output.
template <class Meta, int N = 1>
struct Out final : Meta {
  template <class... T>
  explicit Out(T&... outs) : outputs_{std::cref(outs)...} {}
  std::array<std::reference_wrapper<const at::Tensor>, N> outputs_;
  const at::Tensor& maybe_get_output(int64_t i) override { return outputs_[i].get(); }
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }

 private:
  void set(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides, at::TensorOptions options) {
    structured_detail::resize_out(outputs_[i].get(), sizes, strides, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }
};

}  // namespace neuron::torch_glue
