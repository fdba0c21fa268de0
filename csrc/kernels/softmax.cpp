#include "softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "lines.h"
#include "convert.h"
#include "simd/vec_avx2.h"
#include "simd/vmath.h"

namespace neuron::kernels {
namespace {

// ---- fp32 rows (x and y may alias) ----
// exp and log are the kernels' (simd/vmath.h, simd/vec_avx2.h); a row's tail runs through the
// vector body too, so an element's result does not depend on where the row is split.

void softmax_row_portable(const float* x, float* y, int64_t n, bool log) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (std::isnan(mx)) {
    for (int64_t i = 0; i < n; ++i) mx = std::isnan(x[i]) ? x[i] : mx;
  }
  float sum = 0.0f;
  if (log) {
    for (int64_t i = 0; i < n; ++i) sum += vm::exp(x[i] - mx);
    const float lse = mx + vm::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - lse;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = vm::exp(x[i] - mx);
      sum += y[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

void softmax_bwd_row_portable(const float* g, const float* y, float* gi, int64_t n, bool log) {
  float s = 0.0f;
  if (log) {
    for (int64_t i = 0; i < n; ++i) s += g[i];
    for (int64_t i = 0; i < n; ++i) gi[i] = g[i] - vm::exp(y[i]) * s;
  } else {
    for (int64_t i = 0; i < n; ++i) s += g[i] * y[i];
    for (int64_t i = 0; i < n; ++i) gi[i] = y[i] * (g[i] - s);
  }
}

#if NEURON_KERNELS_X86
NEURON_AVX2_BEGIN
void softmax_row_avx2(const float* x, float* y, int64_t n, bool log) {
  using namespace avx2;
  const float ninf = -std::numeric_limits<float>::infinity();
  Vec8f vmax(ninf), vnan(0.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    const Vec8f v = select(first_lanes(m), load_first(x + i, m), Vec8f(ninf));
    vnan = vnan | isnan(v);
    vmax = _mm256_max_ps(vmax.v, v.v);
  }
  float mx = hmax(vmax);
  if (_mm256_movemask_ps(vnan.v)) mx = std::numeric_limits<float>::quiet_NaN();
  const Vec8f vm(mx);
  Vec8f vs(0.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    const Vec8f e = exp(load_first(x + i, m) - vm) & first_lanes(m);
    if (!log) store_first(y + i, e, m);
    vs = vs + e;
  }
  const float sum = hsum(vs);
  if (log) {
    const Vec8f vl(mx + vm::log(sum));
    for (int64_t i = 0; i < n; i += 8) {
      const int64_t m = std::min<int64_t>(8, n - i);
      store_first(y + i, load_first(x + i, m) - vl, m);
    }
    return;
  }
  const Vec8f vi(1.0f / sum);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    store_first(y + i, load_first(y + i, m) * vi, m);
  }
}

void softmax_bwd_row_avx2(const float* g, const float* y, float* gi, int64_t n, bool log) {
  using namespace avx2;
  Vec8f vs(0.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    vs = log ? vs + load_first(g + i, m) : fmadd(load_first(g + i, m), load_first(y + i, m), vs);
  }
  const Vec8f s(hsum(vs));
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = std::min<int64_t>(8, n - i);
    const Vec8f gv = load_first(g + i, m), yv = load_first(y + i, m);
    store_first(gi + i, log ? fnmadd(exp(yv), s, gv) : yv * (gv - s), m);
  }
}
NEURON_AVX2_END
#else
void softmax_row_avx2(const float* x, float* y, int64_t n, bool log) {
  softmax_row_portable(x, y, n, log);
}
void softmax_bwd_row_avx2(const float* g, const float* y, float* gi, int64_t n, bool log) {
  softmax_bwd_row_portable(g, y, gi, n, log);
}
#endif

// ---- fp64 rows ----

void softmax_row_f64(const double* x, int64_t xs, double* y, int64_t ys, int64_t n, bool log) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i)
    mx = std::isnan(x[i * xs]) || std::isnan(mx) ? NAN : std::max(mx, x[i * xs]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i * xs] - mx);
  if (log) {
    const double lse = mx + std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i * ys] = x[i * xs] - lse;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i * ys] = std::exp(x[i * xs] - mx) / sum;
  }
}

void softmax_bwd_row_f64(const double* g, int64_t gs, const double* y, int64_t ys, double* gi,
                         int64_t gis, int64_t n, bool log) {
  double s = 0.0;
  if (log) {
    for (int64_t i = 0; i < n; ++i) s += g[i * gs];
    for (int64_t i = 0; i < n; ++i) gi[i * gis] = g[i * gs] - std::exp(y[i * ys]) * s;
  } else {
    for (int64_t i = 0; i < n; ++i) s += g[i * gs] * y[i * ys];
    for (int64_t i = 0; i < n; ++i) gi[i * gis] = y[i * ys] * (g[i * gs] - s);
  }
}

void check_float(const char* what, DType t) {
  if (!is_floating(t) || t == DType::Float8_e4m3fn || t == DType::Float8_e5m2)
    throw std::invalid_argument(std::string(what) + ": expected a floating dtype, got " +
                                std::string(dtype_name(t)));
}

void check_same_shape(const char* what, const TensorRef& a, const TensorRef& b) {
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.sizes[i] == b.sizes[i];
  if (!same) throw std::invalid_argument(std::string(what) + ": operands must have the same shape");
}

}  // namespace

void softmax_forward(const TensorRef& out, const TensorRef& in, int dim, bool log, SimdLevel isa) {
  check_same_shape("softmax", out, in);
  check_float("softmax", in.dtype);
  check_float("softmax", out.dtype);
  const int64_t n = in.ndim ? in.sizes[dim] : 1;
  if (in.dtype == DType::Float64 || out.dtype == DType::Float64) {
    if (in.dtype != out.dtype)
      throw std::invalid_argument("softmax: float64 needs a float64 output");
    for_each_line<2>({&out, &in}, dim, 4 * n,
                     [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s) {
                       softmax_row_f64(reinterpret_cast<const double*>(p[1]), s[1],
                                       reinterpret_cast<double*>(p[0]), s[0], n, log);
                     });
    return;
  }
  auto row = isa == SimdLevel::Avx2 ? softmax_row_avx2 : softmax_row_portable;
  const bool f32 = in.dtype == DType::Float32 && out.dtype == DType::Float32;
  for_each_line<2>(
      {&out, &in}, dim, 4 * n, [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s) {
        if (f32 && s[0] == 1 && s[1] == 1) {
          row(reinterpret_cast<const float*>(p[1]), reinterpret_cast<float*>(p[0]), n, log);
          return;
        }
        thread_local std::vector<float> buf;
        buf.resize(static_cast<size_t>(n));
        strided_to_f32(p[1], in.dtype, s[1], buf.data(), n);
        row(buf.data(), buf.data(), n, log);
        strided_from_f32(buf.data(), p[0], out.dtype, s[0], n);
      });
}

void softmax_backward(const TensorRef& grad_in, const TensorRef& grad_out, const TensorRef& out,
                      int dim, bool log, SimdLevel isa) {
  check_same_shape("softmax_backward", grad_in, grad_out);
  check_same_shape("softmax_backward", grad_in, out);
  check_float("softmax_backward", grad_in.dtype);
  check_float("softmax_backward", grad_out.dtype);
  check_float("softmax_backward", out.dtype);
  const int64_t n = out.ndim ? out.sizes[dim] : 1;
  if (grad_in.dtype == DType::Float64 || grad_out.dtype == DType::Float64 ||
      out.dtype == DType::Float64) {
    if (grad_in.dtype != DType::Float64 || grad_out.dtype != DType::Float64 ||
        out.dtype != DType::Float64)
      throw std::invalid_argument("softmax_backward: float64 operands must all be float64");
    for_each_line<3>({&grad_in, &grad_out, &out}, dim, 4 * n,
                     [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s) {
                       softmax_bwd_row_f64(reinterpret_cast<const double*>(p[1]), s[1],
                                           reinterpret_cast<const double*>(p[2]), s[2],
                                           reinterpret_cast<double*>(p[0]), s[0], n, log);
                     });
    return;
  }
  auto row = isa == SimdLevel::Avx2 ? softmax_bwd_row_avx2 : softmax_bwd_row_portable;
  const bool f32 = grad_in.dtype == DType::Float32 && grad_out.dtype == DType::Float32 &&
                   out.dtype == DType::Float32;
  for_each_line<3>({&grad_in, &grad_out, &out}, dim, 4 * n,
                   [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s) {
                     if (f32 && s[0] == 1 && s[1] == 1 && s[2] == 1) {
                       row(reinterpret_cast<const float*>(p[1]),
                           reinterpret_cast<const float*>(p[2]), reinterpret_cast<float*>(p[0]), n,
                           log);
                       return;
                     }
                     thread_local std::vector<float> g, y;
                     g.resize(static_cast<size_t>(n));
                     y.resize(static_cast<size_t>(n));
                     strided_to_f32(p[1], grad_out.dtype, s[1], g.data(), n);
                     strided_to_f32(p[2], out.dtype, s[2], y.data(), n);
                     row(g.data(), y.data(), g.data(), n, log);
                     strided_from_f32(g.data(), p[0], grad_in.dtype, s[0], n);
                   });
}

}  // namespace neuron::kernels
