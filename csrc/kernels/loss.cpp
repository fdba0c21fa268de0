#include "loss.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "copy.h"
#include "dispatch.h"
#include "runtime/thread_pool.h"

namespace neuron::kernels {
namespace {

constexpr int64_t kBlock = 4096;  // positions per partial sum

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<float>(v);
  }
}

int64_t read_index(const TensorRef& t, int64_t n, int64_t r) {
  const char* p =
      static_cast<const char*>(t.data) +
      (n * t.strides[0] + r * t.strides[1]) * static_cast<int64_t>(element_size(t.dtype));
  switch (t.dtype) {
    case DType::Int64:
      return *reinterpret_cast<const int64_t*>(p);
    case DType::Int32:
      return *reinterpret_cast<const int32_t*>(p);
    case DType::UInt8:
      return *reinterpret_cast<const uint8_t*>(p);
    case DType::Int16:
      return *reinterpret_cast<const int16_t*>(p);
    case DType::Int8:
      return *reinterpret_cast<const int8_t*>(p);
    default:
      throw std::invalid_argument("nll_loss: target must be an integer tensor");
  }
}

void check(const NllLossArgs& a) {
  if (a.input.ndim != 3 || a.target.ndim != 2)
    throw std::invalid_argument("nll_loss: internal shape error");
  if (!is_floating(a.input.dtype))
    throw std::invalid_argument(std::string(a.op) + ": input must be floating");
}

[[noreturn]] void out_of_bounds(const NllLossArgs& a, int64_t t, int64_t C) {
  throw std::out_of_range(std::string(a.op) + ": Target " + std::to_string(t) +
                          " is out of bounds (number of classes: " + std::to_string(C) + ")");
}

template <typename T>
void forward_typed(const TensorRef& output, const TensorRef& total_weight, const NllLossArgs& a) {
  const int64_t N = a.input.sizes[0], C = a.input.sizes[1], R = a.input.sizes[2];
  const T* in = static_cast<const T*>(a.input.data);
  const T* w = static_cast<const T*>(a.weight.data);
  const int64_t ws = a.weight.ndim ? a.weight.strides[0] : 1;
  const int64_t total = N * R;
  auto value = [&](int64_t pos, double* weight_out) -> double {
    const int64_t n = pos / R, r = pos % R;
    const int64_t t = read_index(a.target, n, r);
    if (t == a.ignore_index) {
      *weight_out = 0.0;
      return 0.0;
    }
    if (t < 0 || t >= C) out_of_bounds(a, t, C);
    const double wt = w ? to_double(w[t * ws]) : 1.0;
    *weight_out = wt;
    const T x = in[n * a.input.strides[0] + t * a.input.strides[1] + r * a.input.strides[2]];
    return -wt * to_double(x);
  };
  if (a.reduction == Reduction::None) {
    T* out = static_cast<T*>(output.data);
    rt::parallel_for(0, total, 4096, [&](int64_t p0, int64_t p1) {
      for (int64_t pos = p0; pos < p1; ++pos) {
        double wt;
        const double v = value(pos, &wt);
        out[(pos / R) * output.strides[0] + (pos % R) * output.strides[1]] = convert<T>(v);
      }
    });
    if (total_weight.data) *static_cast<T*>(total_weight.data) = convert<T>(0.0);
    return;
  }
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  std::vector<double> loss(static_cast<size_t>(blocks)), wsum(static_cast<size_t>(blocks));
  rt::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double l = 0, ww = 0;
      for (int64_t pos = b * kBlock; pos < std::min(total, (b + 1) * kBlock); ++pos) {
        double wt;
        l += value(pos, &wt);
        ww += wt;
      }
      loss[static_cast<size_t>(b)] = l;
      wsum[static_cast<size_t>(b)] = ww;
    }
  });
  double l = 0, ww = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    l += loss[static_cast<size_t>(b)];
    ww += wsum[static_cast<size_t>(b)];
  }
  if (a.reduction == Reduction::Mean)
    l = l / ww;  // 0 / 0 = NaN when every target is ignored, like ATen
  *static_cast<T*>(output.data) = convert<T>(l);
  *static_cast<T*>(total_weight.data) = convert<T>(ww);
}

template <typename T>
void backward_typed(const TensorRef& grad_input, const TensorRef& grad_output,
                    const TensorRef& total_weight, const NllLossArgs& a) {
  const int64_t N = a.input.sizes[0], C = a.input.sizes[1], R = a.input.sizes[2];
  T zero = convert<T>(0.0);
  fill(grad_input, &zero);
  T* gi = static_cast<T*>(grad_input.data);
  const T* w = static_cast<const T*>(a.weight.data);
  const int64_t ws = a.weight.ndim ? a.weight.strides[0] : 1;
  const T* go = static_cast<const T*>(grad_output.data);
  double scale = 0.0;
  if (a.reduction != Reduction::None) {
    scale = to_double(*go);
    if (a.reduction == Reduction::Mean)
      scale /= to_double(*static_cast<const T*>(total_weight.data));
  }
  rt::parallel_for(0, N * R, 4096, [&](int64_t p0, int64_t p1) {
    for (int64_t pos = p0; pos < p1; ++pos) {
      const int64_t n = pos / R, r = pos % R;
      const int64_t t = read_index(a.target, n, r);
      if (t == a.ignore_index) continue;
      if (t < 0 || t >= C) out_of_bounds(a, t, C);
      const double wt = w ? to_double(w[t * ws]) : 1.0;
      const double g = a.reduction == Reduction::None
                           ? to_double(go[n * grad_output.strides[0] + r * grad_output.strides[1]])
                           : scale;
      gi[n * grad_input.strides[0] + t * grad_input.strides[1] + r * grad_input.strides[2]] =
          convert<T>(-wt * g);
    }
  });
}

template <typename F>
void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::BFloat16:
      return f(bf16{});
    case DType::Float16:
      return f(f16{});
    default:
      throw std::invalid_argument("nll_loss: unsupported dtype " + std::string(dtype_name(t)));
  }
}

}  // namespace

void nll_loss_forward(const TensorRef& output, const TensorRef& total_weight,
                      const NllLossArgs& a) {
  check(a);
  dispatch_float(a.input.dtype,
                 [&](auto tag) { forward_typed<decltype(tag)>(output, total_weight, a); });
}

void nll_loss_backward(const TensorRef& grad_input, const TensorRef& grad_output,
                       const TensorRef& total_weight, const NllLossArgs& a) {
  check(a);
  dispatch_float(a.input.dtype, [&](auto tag) {
    backward_typed<decltype(tag)>(grad_input, grad_output, total_weight, a);
  });
}

}  // namespace neuron::kernels
