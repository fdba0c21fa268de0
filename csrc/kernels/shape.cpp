#include "shape.h"

#include <cstring>
#include <stdexcept>

#include "dispatch.h"
#include "runtime/thread_pool.h"
#include "strided_loop.h"

namespace neuron::kernels {

void arange(const TensorRef& out, double start, double step, int64_t istart, int64_t istep) {
  const int64_t n = out.numel();
  const int64_t s = out.ndim ? out.strides[0] : 1;
  dispatch_all(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data);
    rt::parallel_for(0, n, 1 << 16, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        if constexpr (std::is_integral_v<T>) {
          o[i * s] = static_cast<T>(istart + i * istep);
        } else if constexpr (is_complex_v<T>) {
          o[i * s] = T(static_cast<typename T::value_type>(start + static_cast<double>(i) * step));
        } else {
          o[i * s] = convert<T>(start + static_cast<double>(i) * step);
        }
      }
    });
  });
}

void linspace(const TensorRef& out, double start, double end) {
  const int64_t n = out.numel();
  const int64_t s = out.ndim ? out.strides[0] : 1;
  if (n == 0) return;
  // One step gives `start` (ATen fills it); otherwise the first half counts up from start and
  // the second half down from end, like ATen's CPU kernel.
  const int64_t half = n == 1 ? 1 : n / 2;
  dispatch_all(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    // The step type of ATen's CPU kernel: double for integers and fp64, float otherwise.
    using S =
        std::conditional_t<std::is_integral_v<T> || std::is_same_v<T, double> || is_complex_v<T>,
                           double, float>;
    const S st = static_cast<S>(start), en = static_cast<S>(end);
    const S step = n > 1 ? (en - st) / static_cast<S>(n - 1) : S(0);
    T* o = static_cast<T*>(out.data);
    rt::parallel_for(0, n, 1 << 16, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const S v =
            i < half ? st + step * static_cast<S>(i) : en - step * static_cast<S>(n - i - 1);
        if constexpr (is_complex_v<T>) {
          o[i * s] = T(static_cast<typename T::value_type>(v), 0);
        } else {
          o[i * s] = convert<T>(v);
        }
      }
    });
  });
}

void triangle(const TensorRef& out, const TensorRef& in, int64_t diagonal, bool lower) {
  if (in.ndim < 2)
    throw std::invalid_argument("tril/triu: input tensor must have at least 2 dimensions");
  const int nd = in.ndim;
  const int64_t R = in.sizes[nd - 2], C = in.sizes[nd - 1];
  const int64_t batch = R && C ? in.numel() / (R * C) : 0;
  const size_t esz = element_size(in.dtype);
  const bool same = out.data == in.data;
  rt::parallel_for(0, batch * R, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) {
                       const int64_t b = r / R, i = r % R;
                       int64_t rem = b, oi = 0, oo = 0;
                       for (int d = nd - 3; d >= 0; --d) {
                         const int64_t c = rem % in.sizes[d];
                         rem /= in.sizes[d];
                         oi += c * in.strides[d];
                         oo += c * out.strides[d];
                       }
                       const char* src = static_cast<const char*>(in.data) +
                                         (oi + i * in.strides[nd - 2]) * static_cast<int64_t>(esz);
                       char* dst = static_cast<char*>(out.data) +
                                   (oo + i * out.strides[nd - 2]) * static_cast<int64_t>(esz);
                       for (int64_t j = 0; j < C; ++j) {
                         const bool keep = lower ? (j - i <= diagonal) : (j - i >= diagonal);
                         char* d = dst + j * out.strides[nd - 1] * static_cast<int64_t>(esz);
                         if (keep) {
                           if (!same)
                             std::memcpy(
                                 d, src + j * in.strides[nd - 1] * static_cast<int64_t>(esz), esz);
                         } else {
                           std::memset(d, 0, esz);
                         }
                       }
                     }
                   });
}

}  // namespace neuron::kernels
