#include "pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "simd.h"
#include "simd/vec_avx2.h"
#include "runtime/thread_pool.h"

namespace neuron::kernels {
namespace {

template <typename F>
void dispatch_pool(DType t, F&& f) {
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
      throw std::invalid_argument("pooling: unsupported dtype " + std::string(dtype_name(t)));
  }
}

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Runs fn(plane) over the planes in parallel.
template <typename F>
void over_planes(const Pool2dArgs& a, int64_t plane_cost, F&& fn) {
  rt::parallel_for(0, a.planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(plane_cost, 1)),
                   [&](int64_t p0, int64_t p1) {
                     for (int64_t p = p0; p < p1; ++p) fn(p);
                   });
}

int64_t start_index(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
int64_t end_index(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

// The average-pooling window of output (oh, ow) and its divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};
AvgWindow avg_window(const Pool2dArgs& a, int64_t oh, int64_t ow, bool count_include_pad,
                     int64_t divisor_override) {
  int64_t h0 = oh * a.sH - a.pH, w0 = ow * a.sW - a.pW;
  int64_t h1 = std::min(h0 + a.kH, a.H + a.pH), w1 = std::min(w0 + a.kW, a.W + a.pW);
  const int64_t pool_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, a.H);
  w1 = std::min(w1, a.W);
  int64_t div;
  if (divisor_override != 0)  // any nonzero value, negative ones too (like ATen)
    div = divisor_override;
  else if (count_include_pad)
    div = pool_size;
  else
    div = (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, div};
}

// The max over output (oh, ow)'s window and its flat index (-1 if the window is all padding):
// the first maximum in (kh, kw) order, the first NaN if there is one.
template <typename T, typename C>
std::pair<C, int64_t> max_window(const Pool2dArgs& a, const T* x, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * a.sH - a.pH, w0 = ow * a.sW - a.pW;
  C best = -std::numeric_limits<C>::infinity();
  int64_t arg = -1;
  for (int64_t kh = 0; kh < a.kH; ++kh) {
    const int64_t h = h0 + kh * a.dH;
    if (h < 0 || h >= a.H) continue;
    for (int64_t kw = 0; kw < a.kW; ++kw) {
      const int64_t w = w0 + kw * a.dW;
      if (w < 0 || w >= a.W) continue;
      const C v = static_cast<C>(x[h * a.W + w]);
      if (arg < 0 || v > best || std::isnan(v)) {
        best = v;
        arg = h * a.W + w;
        if (std::isnan(v)) return {best, arg};
      }
    }
  }
  return {best, arg};
}

// Whether every window lies inside the input (no padding reached, any ceil_mode), and the plane
// is small enough for 32-bit offsets: then the vector path below applies.
bool windows_inside(const Pool2dArgs& a) {
  return a.pH == 0 && a.pW == 0 && (a.OH - 1) * a.sH + (a.kH - 1) * a.dH < a.H &&
         (a.OW - 1) * a.sW + (a.kW - 1) * a.dW < a.W && a.H * a.W < (int64_t{1} << 31);
}

#if NEURON_KERNELS_X86
// Eight outputs at a time of one fp32 plane: `base` holds each output's window origin and
// `delta` the offsets of the window's elements in (kh, kw) order. The same selection as
// max_window: a later element wins if it is greater or NaN while the best is not NaN yet.
// Returns how many leading outputs it wrote (a multiple of 8).
NEURON_AVX2 int64_t max_pool_plane_avx2(const float* x, float* y, int64_t* ind,
                                        const int32_t* base, int64_t n, const int32_t* delta,
                                        int64_t nwin) {
  int64_t o = 0;
  for (; o + 8 <= n; o += 8) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + o));
    __m256i arg = _mm256_add_epi32(b, _mm256_set1_epi32(delta[0]));
    __m256 best = _mm256_i32gather_ps(x, arg, 4);
    for (int64_t k = 1; k < nwin; ++k) {
      const __m256i i = _mm256_add_epi32(b, _mm256_set1_epi32(delta[k]));
      const __m256 v = _mm256_i32gather_ps(x, i, 4);
      const __m256 upd =
          _mm256_and_ps(_mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                                     _mm256_cmp_ps(v, v, _CMP_UNORD_Q)),
                        _mm256_cmp_ps(best, best, _CMP_ORD_Q));
      best = _mm256_blendv_ps(best, v, upd);
      arg = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(arg), _mm256_castsi256_ps(i), upd));
    }
    _mm256_storeu_ps(y + o, best);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ind + o),
                        _mm256_cvtepi32_epi64(_mm256_castsi256_si128(arg)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ind + o + 4),
                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256(arg, 1)));
  }
  return o;
}
#endif

}  // namespace

void max_pool2d_forward(const Pool2dArgs& a, const void* in, void* out, int64_t* indices) {
  const int64_t n = a.OH * a.OW;
#if NEURON_KERNELS_X86
  if (a.dtype == DType::Float32 && simd_level() == SimdLevel::Avx2 && n >= 8 &&
      windows_inside(a)) {
    std::vector<int32_t> base(static_cast<size_t>(n)), delta(static_cast<size_t>(a.kH * a.kW));
    for (int64_t oh = 0; oh < a.OH; ++oh)
      for (int64_t ow = 0; ow < a.OW; ++ow)
        base[static_cast<size_t>(oh * a.OW + ow)] =
            static_cast<int32_t>(oh * a.sH * a.W + ow * a.sW);
    for (int64_t kh = 0; kh < a.kH; ++kh)
      for (int64_t kw = 0; kw < a.kW; ++kw)
        delta[static_cast<size_t>(kh * a.kW + kw)] =
            static_cast<int32_t>(kh * a.dH * a.W + kw * a.dW);
    over_planes(a, n * a.kH * a.kW, [&](int64_t p) {
      const float* x = static_cast<const float*>(in) + p * a.H * a.W;
      float* y = static_cast<float*>(out) + p * n;
      int64_t* ind = indices + p * n;
      for (int64_t o = max_pool_plane_avx2(x, y, ind, base.data(), n, delta.data(), a.kH * a.kW);
           o < n; ++o) {
        const auto [best, arg] = max_window<float, float>(a, x, o / a.OW, o % a.OW);
        y[o] = best;
        ind[o] = arg;
      }
    });
    return;
  }
#endif
  dispatch_pool(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    over_planes(a, n * a.kH * a.kW, [&](int64_t p) {
      const T* x = static_cast<const T*>(in) + p * a.H * a.W;
      T* y = static_cast<T*>(out) + p * n;
      int64_t* ind = indices + p * n;
      for (int64_t oh = 0; oh < a.OH; ++oh)
        for (int64_t ow = 0; ow < a.OW; ++ow) {
          const auto [best, arg] = max_window<T, C>(a, x, oh, ow);
          y[oh * a.OW + ow] = T(best);
          ind[oh * a.OW + ow] = arg < 0 ? 0 : arg;
        }
    });
  });
}

void max_pool2d_backward(const Pool2dArgs& a, const void* grad_out, const int64_t* indices,
                         void* grad_in) {
  dispatch_pool(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    // fp32/fp64 accumulate straight into grad_input; 16-bit floats through an fp32 plane.
    constexpr bool in_place = std::is_same_v<T, C>;
    over_planes(a, a.H * a.W + a.OH * a.OW, [&](int64_t p) {
      T* gi = static_cast<T*>(grad_in) + p * a.H * a.W;
      std::vector<C> buf(in_place ? 0 : static_cast<size_t>(a.H * a.W));
      C* acc = in_place ? reinterpret_cast<C*>(gi) : buf.data();
      std::fill(acc, acc + a.H * a.W, C(0));
      const T* g = static_cast<const T*>(grad_out) + p * a.OH * a.OW;
      const int64_t* ind = indices + p * a.OH * a.OW;
      for (int64_t o = 0; o < a.OH * a.OW; ++o) {
        const int64_t i = ind[o];
        if (i < 0 || i >= a.H * a.W)
          throw std::out_of_range("max_pool2d_backward: index " + std::to_string(i) +
                                  " is out of bounds for an input of " + std::to_string(a.H * a.W) +
                                  " elements");
        acc[i] += static_cast<C>(g[o]);
      }
      if constexpr (!in_place)
        for (int64_t i = 0; i < a.H * a.W; ++i) gi[i] = T(acc[i]);
    });
  });
}

void avg_pool2d_forward(const Pool2dArgs& a, bool count_include_pad, int64_t divisor_override,
                        const void* in, void* out) {
  dispatch_pool(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    over_planes(a, a.OH * a.OW * a.kH * a.kW, [&](int64_t p) {
      const T* x = static_cast<const T*>(in) + p * a.H * a.W;
      T* y = static_cast<T*>(out) + p * a.OH * a.OW;
      for (int64_t oh = 0; oh < a.OH; ++oh)
        for (int64_t ow = 0; ow < a.OW; ++ow) {
          const AvgWindow w = avg_window(a, oh, ow, count_include_pad, divisor_override);
          C s = 0;
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t ww = w.w0; ww < w.w1; ++ww) s += static_cast<C>(x[h * a.W + ww]);
          y[oh * a.OW + ow] = w.divisor ? T(s / static_cast<C>(w.divisor)) : T(C(0));
        }
    });
  });
}

void avg_pool2d_backward(const Pool2dArgs& a, bool count_include_pad, int64_t divisor_override,
                         const void* grad_out, void* grad_in) {
  dispatch_pool(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    over_planes(a, a.H * a.W + a.OH * a.OW * a.kH * a.kW, [&](int64_t p) {
      std::vector<C> acc(static_cast<size_t>(a.H * a.W), C(0));
      const T* g = static_cast<const T*>(grad_out) + p * a.OH * a.OW;
      for (int64_t oh = 0; oh < a.OH; ++oh)
        for (int64_t ow = 0; ow < a.OW; ++ow) {
          const AvgWindow w = avg_window(a, oh, ow, count_include_pad, divisor_override);
          if (!w.divisor) continue;
          const C v = static_cast<C>(g[oh * a.OW + ow]) / static_cast<C>(w.divisor);
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t ww = w.w0; ww < w.w1; ++ww) acc[static_cast<size_t>(h * a.W + ww)] += v;
        }
      T* gi = static_cast<T*>(grad_in) + p * a.H * a.W;
      for (int64_t i = 0; i < a.H * a.W; ++i) gi[i] = T(acc[static_cast<size_t>(i)]);
    });
  });
}

void adaptive_avg_pool2d_forward(const Pool2dArgs& a, const void* in, void* out) {
  dispatch_pool(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    over_planes(a, a.H * a.W, [&](int64_t p) {
      const T* x = static_cast<const T*>(in) + p * a.H * a.W;
      T* y = static_cast<T*>(out) + p * a.OH * a.OW;
      for (int64_t oh = 0; oh < a.OH; ++oh) {
        const int64_t h0 = start_index(oh, a.H, a.OH), h1 = end_index(oh, a.H, a.OH);
        for (int64_t ow = 0; ow < a.OW; ++ow) {
          const int64_t w0 = start_index(ow, a.W, a.OW), w1 = end_index(ow, a.W, a.OW);
          C s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += static_cast<C>(x[h * a.W + w]);
          y[oh * a.OW + ow] = T(s / static_cast<C>((h1 - h0) * (w1 - w0)));
        }
      }
    });
  });
}

void adaptive_avg_pool2d_backward(const Pool2dArgs& a, const void* grad_out, void* grad_in) {
  dispatch_pool(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    over_planes(a, a.H * a.W, [&](int64_t p) {
      std::vector<C> acc(static_cast<size_t>(a.H * a.W), C(0));
      const T* g = static_cast<const T*>(grad_out) + p * a.OH * a.OW;
      for (int64_t oh = 0; oh < a.OH; ++oh) {
        const int64_t h0 = start_index(oh, a.H, a.OH), h1 = end_index(oh, a.H, a.OH);
        for (int64_t ow = 0; ow < a.OW; ++ow) {
          const int64_t w0 = start_index(ow, a.W, a.OW), w1 = end_index(ow, a.W, a.OW);
          const C v = static_cast<C>(g[oh * a.OW + ow]) / static_cast<C>((h1 - h0) * (w1 - w0));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) acc[static_cast<size_t>(h * a.W + w)] += v;
        }
      }
      T* gi = static_cast<T*>(grad_in) + p * a.H * a.W;
      for (int64_t i = 0; i < a.H * a.W; ++i) gi[i] = T(acc[static_cast<size_t>(i)]);
    });
  });
}

}  // namespace neuron::kernels
