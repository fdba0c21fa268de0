#include "norm.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "convert.h"
#include "runtime/thread_pool.h"
#include "simd/vec_avx2.h"

namespace neuron::kernels {
namespace {

constexpr int64_t kRowBlock = 32;  // rows per partial sum of the parameter gradients

// ---- element access for 1-d parameter / statistic refs ----

double get1(const TensorRef& t, int64_t i) {
  const int64_t s = t.ndim ? t.strides[0] : 1;
  return dispatch_all(t.dtype, [&](auto tag) -> double {
    using T = decltype(tag);
    if constexpr (is_complex_v<T>) {
      throw std::invalid_argument("norm: complex parameters are not supported");
    } else {
      return convert<double>(static_cast<const T*>(t.data)[i * s]);
    }
  });
}

void set1(const TensorRef& t, int64_t i, double v) {
  if (!t.data) return;
  const int64_t s = t.ndim ? t.strides[0] : 1;
  dispatch_all(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_complex_v<T>) {
      throw std::invalid_argument("norm: complex statistics are not supported");
    } else {
      static_cast<T*>(t.data)[i * s] = convert<T>(v);
    }
  });
}

template <typename C>
std::vector<C> param(const TensorRef& t, int64_t n) {
  std::vector<C> v;
  if (!t.data) return v;
  v.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<C>(get1(t, i));
  return v;
}

// ---- row primitives: portable (any compute type) ----

template <typename C>
void moments_portable(const C* x, int64_t n, C* mean, C* m2) {
  C s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const C mu = s / static_cast<C>(n);
  C q = 0;
  for (int64_t i = 0; i < n; ++i) q += (x[i] - mu) * (x[i] - mu);
  *mean = mu;
  *m2 = q;
}

template <typename C>
C sumsq_portable(const C* x, int64_t n) {
  C q = 0;
  for (int64_t i = 0; i < n; ++i) q += x[i] * x[i];
  return q;
}

template <typename C>
void apply_portable(const C* x, int64_t n, C mean, C rstd, const C* w, const C* b, C* y) {
  for (int64_t i = 0; i < n; ++i) {
    C v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

// dx = rstd * (g - [mean(g)] - xhat * mean(g * xhat)) with g = dy * w; dw += dy * xhat; db += dy.
template <typename C>
void backward_portable(const C* x, const C* dy, int64_t n, C mean, C rstd, const C* w, bool center,
                       C* dx, C* dw, C* db) {
  C sg = 0, sgx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const C g = w ? dy[i] * w[i] : dy[i];
    sg += g;
    sgx += g * (x[i] - mean) * rstd;
  }
  const C inv_n = C(1) / static_cast<C>(n);
  const C mg = center ? sg * inv_n : C(0), mgx = sgx * inv_n;
  for (int64_t i = 0; i < n; ++i) {
    const C xhat = (x[i] - mean) * rstd;
    if (dx) {
      const C g = w ? dy[i] * w[i] : dy[i];
      dx[i] = rstd * (g - mg - xhat * mgx);
    }
    if (dw) dw[i] += dy[i] * xhat;
    if (db) db[i] += dy[i];
  }
}

// ---- row primitives: AVX2 (fp32) ----

NEURON_AVX2 void moments_avx2(const float* x, int64_t n, float* mean, float* m2) {
  __m256 s = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + i));
  float sum = avx2::hsum(s);
  for (; i < n; ++i) sum += x[i];
  const float mu = sum / static_cast<float>(n);
  const __m256 vm = _mm256_set1_ps(mu);
  __m256 q = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
    q = _mm256_fmadd_ps(d, d, q);
  }
  float qs = avx2::hsum(q);
  for (; i < n; ++i) qs += (x[i] - mu) * (x[i] - mu);
  *mean = mu;
  *m2 = qs;
}

NEURON_AVX2 float sumsq_avx2(const float* x, int64_t n) {
  __m256 q = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    q = _mm256_fmadd_ps(v, v, q);
  }
  float s = avx2::hsum(q);
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

NEURON_AVX2 void apply_avx2(const float* x, int64_t n, float mean, float rstd, const float* w,
                            const float* b, float* y) {
  const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
    if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
    if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(y + i, v);
  }
  apply_portable(x + i, n - i, mean, rstd, w ? w + i : nullptr, b ? b + i : nullptr, y + i);
}

NEURON_AVX2 void backward_avx2(const float* x, const float* dy, int64_t n, float mean, float rstd,
                               const float* w, bool center, float* dx, float* dw, float* db) {
  const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
  __m256 sg = _mm256_setzero_ps(), sgx = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(dy + i);
    if (w) g = _mm256_mul_ps(g, _mm256_loadu_ps(w + i));
    const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
    sg = _mm256_add_ps(sg, g);
    sgx = _mm256_fmadd_ps(g, xh, sgx);
  }
  float s_g = avx2::hsum(sg), s_gx = avx2::hsum(sgx);
  for (int64_t t = i; t < n; ++t) {
    const float g = w ? dy[t] * w[t] : dy[t];
    s_g += g;
    s_gx += g * (x[t] - mean) * rstd;
  }
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mg = center ? s_g * inv_n : 0.0f, mgx = s_gx * inv_n;
  const __m256 vmg = _mm256_set1_ps(mg), vmgx = _mm256_set1_ps(mgx);
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_loadu_ps(dy + i);
    const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
    if (dx) {
      const __m256 g = w ? _mm256_mul_ps(d, _mm256_loadu_ps(w + i)) : d;
      _mm256_storeu_ps(
          dx + i, _mm256_mul_ps(vr, _mm256_sub_ps(_mm256_sub_ps(g, vmg), _mm256_mul_ps(xh, vmgx))));
    }
    if (dw) _mm256_storeu_ps(dw + i, _mm256_fmadd_ps(d, xh, _mm256_loadu_ps(dw + i)));
    if (db) _mm256_storeu_ps(db + i, _mm256_add_ps(d, _mm256_loadu_ps(db + i)));
  }
  for (; i < n; ++i) {
    const float xh = (x[i] - mean) * rstd;
    if (dx) {
      const float g = w ? dy[i] * w[i] : dy[i];
      dx[i] = rstd * (g - mg - xh * mgx);
    }
    if (dw) dw[i] += dy[i] * xh;
    if (db) db[i] += dy[i];
  }
}

template <typename C>
struct RowOps {
  void (*moments)(const C*, int64_t, C*, C*);
  C (*sumsq)(const C*, int64_t);
  void (*apply)(const C*, int64_t, C, C, const C*, const C*, C*);
  void (*backward)(const C*, const C*, int64_t, C, C, const C*, bool, C*, C*, C*);
};

template <typename C>
RowOps<C> row_ops(SimdLevel isa) {
  if constexpr (std::is_same_v<C, float>) {
    if (isa == SimdLevel::Avx2) return {moments_avx2, sumsq_avx2, apply_avx2, backward_avx2};
  }
  return {moments_portable<C>, sumsq_portable<C>, apply_portable<C>, backward_portable<C>};
}

// ---- row I/O in the compute type ----

template <typename C>
void load_row(const TensorRef& t, int64_t row, C* dst, int64_t n) {
  const char* base = static_cast<const char*>(t.data) +
                     row * t.strides[0] * static_cast<int64_t>(element_size(t.dtype));
  const int64_t s = t.ndim > 1 ? t.strides[1] : 1;
  if constexpr (std::is_same_v<C, float>) {
    strided_to_f32(base, t.dtype, s, dst, n);
  } else {
    const double* p = reinterpret_cast<const double*>(base);
    for (int64_t i = 0; i < n; ++i) dst[i] = p[i * s];
  }
}

template <typename C>
void store_row(const TensorRef& t, int64_t row, const C* src, int64_t n) {
  char* base =
      static_cast<char*>(t.data) + row * t.strides[0] * static_cast<int64_t>(element_size(t.dtype));
  const int64_t s = t.ndim > 1 ? t.strides[1] : 1;
  if constexpr (std::is_same_v<C, float>) {
    strided_from_f32(src, base, t.dtype, s, n);
  } else {
    double* p = reinterpret_cast<double*>(base);
    for (int64_t i = 0; i < n; ++i) p[i * s] = src[i];
  }
}

void check_row_dtype(const char* op, const TensorRef& t) {
  if (t.data &&
      (!is_floating(t.dtype) || t.dtype == DType::Float8_e4m3fn || t.dtype == DType::Float8_e5m2))
    throw std::invalid_argument(std::string(op) + ": unsupported dtype " +
                                std::string(dtype_name(t.dtype)));
}

// A row as a dense array of the compute type: the tensor's memory when it already is one, else
// a conversion into `buf`.
template <typename C>
const C* row_view(const TensorRef& t, int64_t row, C* buf, int64_t n) {
  const int64_t s = t.ndim > 1 ? t.strides[1] : 1;
  if (s == 1 && t.dtype == (std::is_same_v<C, float> ? DType::Float32 : DType::Float64))
    return static_cast<const C*>(t.data) + row * t.strides[0];
  load_row(t, row, buf, n);
  return buf;
}

template <typename C>
C* out_row(const TensorRef& t, int64_t row, C* buf) {
  const int64_t s = t.ndim > 1 ? t.strides[1] : 1;
  if (s == 1 && t.dtype == (std::is_same_v<C, float> ? DType::Float32 : DType::Float64))
    return static_cast<C*>(t.data) + row * t.strides[0];
  return buf;
}

template <typename C>
void norm_forward(const TensorRef& out, const TensorRef& mean, const TensorRef& rstd,
                  const TensorRef& input, const TensorRef& weight, const TensorRef& bias,
                  double eps, bool center, SimdLevel isa) {
  const int64_t M = input.sizes[0], N = input.sizes[1];
  const auto w = param<C>(weight, N), b = param<C>(bias, N);
  const RowOps<C> ops = row_ops<C>(isa);
  rt::parallel_for(0, M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)),
                   [&](int64_t r0, int64_t r1) {
                     std::vector<C> xb(static_cast<size_t>(N)), yb(static_cast<size_t>(N));
                     for (int64_t r = r0; r < r1; ++r) {
                       const C* x = row_view(input, r, xb.data(), N);
                       C mu = 0, var = 0;
                       if (N > 0) {
                         if (center) {
                           C m2;
                           ops.moments(x, N, &mu, &m2);
                           var = m2 / static_cast<C>(N);
                         } else {
                           var = ops.sumsq(x, N) / static_cast<C>(N);
                         }
                       }
                       const C rs = static_cast<C>(1.0 / std::sqrt(static_cast<double>(var) + eps));
                       C* y = out_row(out, r, yb.data());
                       ops.apply(x, N, mu, rs, w.empty() ? nullptr : w.data(),
                                 b.empty() ? nullptr : b.data(), y);
                       if (y == yb.data()) store_row(out, r, y, N);
                       if (center) set1(mean, r, mu);
                       set1(rstd, r, rs);
                     }
                   });
}

template <typename C>
void norm_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                   const TensorRef& grad_bias, const TensorRef& grad_out, const TensorRef& input,
                   const TensorRef& mean, const TensorRef& rstd, const TensorRef& weight,
                   bool center, SimdLevel isa) {
  const int64_t M = input.sizes[0], N = input.sizes[1];
  const auto w = param<C>(weight, N);
  const RowOps<C> ops = row_ops<C>(isa);
  const bool want_dw = grad_weight.data != nullptr, want_db = grad_bias.data != nullptr;
  const int64_t blocks = (M + kRowBlock - 1) / kRowBlock;
  std::vector<C> pw(want_dw ? static_cast<size_t>(blocks * N) : 0),
      pb(want_db ? static_cast<size_t>(blocks * N) : 0);
  rt::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<C> x(static_cast<size_t>(N)), dy(static_cast<size_t>(N)),
        dx(static_cast<size_t>(N));
    for (int64_t blk = b0; blk < b1; ++blk) {
      C* dw = want_dw ? pw.data() + blk * N : nullptr;
      C* db = want_db ? pb.data() + blk * N : nullptr;
      for (int64_t r = blk * kRowBlock; r < std::min(M, (blk + 1) * kRowBlock); ++r) {
        load_row(input, r, x.data(), N);
        load_row(grad_out, r, dy.data(), N);
        const C mu = center ? static_cast<C>(get1(mean, r)) : C(0);
        const C rs = static_cast<C>(get1(rstd, r));
        ops.backward(x.data(), dy.data(), N, mu, rs, w.empty() ? nullptr : w.data(), center,
                     grad_input.data ? dx.data() : nullptr, dw, db);
        if (grad_input.data) store_row(grad_input, r, dx.data(), N);
      }
    }
  });
  auto reduce = [&](const std::vector<C>& partial, const TensorRef& dst) {
    rt::parallel_for(0, N, 1024, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        C s = 0;
        for (int64_t blk = 0; blk < blocks; ++blk) s += partial[static_cast<size_t>(blk * N + j)];
        set1(dst, j, s);
      }
    });
  };
  if (want_dw) reduce(pw, grad_weight);
  if (want_db) reduce(pb, grad_bias);
}

bool use_f64(const TensorRef& input) { return input.dtype == DType::Float64; }

}  // namespace

void layer_norm_forward(const TensorRef& out, const TensorRef& mean, const TensorRef& rstd,
                        const TensorRef& input, const TensorRef& weight, const TensorRef& bias,
                        double eps, SimdLevel isa) {
  check_row_dtype("layer_norm", input);
  if (use_f64(input))
    return norm_forward<double>(out, mean, rstd, input, weight, bias, eps, true, isa);
  norm_forward<float>(out, mean, rstd, input, weight, bias, eps, true, isa);
}

void layer_norm_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                         const TensorRef& grad_bias, const TensorRef& grad_out,
                         const TensorRef& input, const TensorRef& mean, const TensorRef& rstd,
                         const TensorRef& weight, SimdLevel isa) {
  check_row_dtype("layer_norm_backward", input);
  if (use_f64(input))
    return norm_backward<double>(grad_input, grad_weight, grad_bias, grad_out, input, mean, rstd,
                                 weight, true, isa);
  norm_backward<float>(grad_input, grad_weight, grad_bias, grad_out, input, mean, rstd, weight,
                       true, isa);
}

void rms_norm_forward(const TensorRef& out, const TensorRef& rstd, const TensorRef& input,
                      const TensorRef& weight, double eps, SimdLevel isa) {
  check_row_dtype("rms_norm", input);
  const TensorRef none;
  if (use_f64(input))
    return norm_forward<double>(out, none, rstd, input, weight, none, eps, false, isa);
  norm_forward<float>(out, none, rstd, input, weight, none, eps, false, isa);
}

void rms_norm_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                       const TensorRef& grad_out, const TensorRef& input, const TensorRef& rstd,
                       const TensorRef& weight, SimdLevel isa) {
  check_row_dtype("rms_norm_backward", input);
  const TensorRef none;
  if (use_f64(input))
    return norm_backward<double>(grad_input, grad_weight, none, grad_out, input, none, rstd, weight,
                                 false, isa);
  norm_backward<float>(grad_input, grad_weight, none, grad_out, input, none, rstd, weight, false,
                       isa);
}

// ---- batch norm ----

namespace {

// Row (n, c) of an [N, C, S] ref as a 2-d row index usable by load_row/store_row.
TensorRef channel_rows(const TensorRef& t, int64_t c) {
  // [N, S] view of channel c.
  TensorRef r;
  r.data =
      static_cast<char*>(t.data) + c * t.strides[1] * static_cast<int64_t>(element_size(t.dtype));
  r.dtype = t.dtype;
  r.ndim = 2;
  r.sizes[0] = t.sizes[0];
  r.sizes[1] = t.sizes[2];
  r.strides[0] = t.strides[0];
  r.strides[1] = t.strides[2];
  return r;
}

// The batch-norm statistics of one row, accumulated in double: sum x, sum (x - mu)^2 and
// (sum dy, sum dy * (x - mu)). The portable loops add in element order; the AVX2 ones keep
// eight double lanes (element i in lane i % 8) and add the lanes at the end, which differs
// from element order only in the last bits of a double (the fp32 results almost never move).
template <typename C>
struct BnSums {
  double (*sum)(const C*, int64_t);
  double (*sq_dev)(const C*, int64_t, double);
  void (*dot)(const C* dy, const C* x, int64_t, double mu, double* s_dy, double* s_dyx);
};

template <typename C>
double bn_sum_portable(const C* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}

template <typename C>
double bn_sq_dev_portable(const C* x, int64_t n, double mu) {
  double q = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mu;
    q += d * d;
  }
  return q;
}

template <typename C>
void bn_dot_portable(const C* dy, const C* x, int64_t n, double mu, double* s_dy, double* s_dyx) {
  double r1 = 0, r2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(dy[i]);
    r1 += d;
    r2 += d * (static_cast<double>(x[i]) - mu);
  }
  *s_dy = r1;
  *s_dyx = r2;
}

#if NEURON_KERNELS_X86
NEURON_AVX2 double hsum_pd(__m256d lo, __m256d hi) {
  const __m256d s = _mm256_add_pd(lo, hi);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

NEURON_AVX2 double bn_sum_avx2(const float* x, int64_t n) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  return hsum_pd(lo, hi) + bn_sum_portable(x + i, n - i);
}

NEURON_AVX2 double bn_sq_dev_avx2(const float* x, int64_t n, double mu) {
  const __m256d m = _mm256_set1_pd(mu);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d a = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m);
    const __m256d b = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m);
    lo = _mm256_fmadd_pd(a, a, lo);
    hi = _mm256_fmadd_pd(b, b, hi);
  }
  return hsum_pd(lo, hi) + bn_sq_dev_portable(x + i, n - i, mu);
}

NEURON_AVX2 void bn_dot_avx2(const float* dy, const float* x, int64_t n, double mu, double* s_dy,
                             double* s_dyx) {
  const __m256d m = _mm256_set1_pd(mu);
  __m256d s_lo = _mm256_setzero_pd(), s_hi = _mm256_setzero_pd();
  __m256d p_lo = _mm256_setzero_pd(), p_hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(dy + i), v = _mm256_loadu_ps(x + i);
    const __m256d g_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
    const __m256d g_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
    s_lo = _mm256_add_pd(s_lo, g_lo);
    s_hi = _mm256_add_pd(s_hi, g_hi);
    const __m256d x_lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m);
    const __m256d x_hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m);
    p_lo = _mm256_fmadd_pd(g_lo, x_lo, p_lo);
    p_hi = _mm256_fmadd_pd(g_hi, x_hi, p_hi);
  }
  double t1, t2;
  bn_dot_portable(dy + i, x + i, n - i, mu, &t1, &t2);
  *s_dy = hsum_pd(s_lo, s_hi) + t1;
  *s_dyx = hsum_pd(p_lo, p_hi) + t2;
}
#endif

template <typename C>
BnSums<C> bn_sums() {
#if NEURON_KERNELS_X86
  if constexpr (std::is_same_v<C, float>) {
    if (simd_level() == SimdLevel::Avx2) return {bn_sum_avx2, bn_sq_dev_avx2, bn_dot_avx2};
  }
#endif
  return {bn_sum_portable<C>, bn_sq_dev_portable<C>, bn_dot_portable<C>};
}

template <typename C>
void bn_forward(const TensorRef& out, const TensorRef& save_mean, const TensorRef& save_invstd,
                const BatchNormArgs& a) {
  const int64_t N = a.input.sizes[0], Cn = a.input.sizes[1], S = a.input.sizes[2];
  const double count = static_cast<double>(N * S);
  std::vector<double> mean(static_cast<size_t>(Cn)), invstd(static_cast<size_t>(Cn));
  const BnSums<C> ops = bn_sums<C>();
  if (a.training) {
    rt::parallel_for(0, Cn, 1, [&](int64_t c0, int64_t c1) {
      std::vector<C> x(static_cast<size_t>(S));
      for (int64_t c = c0; c < c1; ++c) {
        const TensorRef rows = channel_rows(a.input, c);
        double s = 0;
        for (int64_t n = 0; n < N; ++n) {
          s += ops.sum(row_view(rows, n, x.data(), S), S);
        }
        const double mu = s / count;
        double q = 0;
        for (int64_t n = 0; n < N; ++n) {
          q += ops.sq_dev(row_view(rows, n, x.data(), S), S, mu);
        }
        const double var = q / count;
        mean[static_cast<size_t>(c)] = mu;
        invstd[static_cast<size_t>(c)] = 1.0 / std::sqrt(var + a.eps);
        set1(save_mean, c, mu);
        set1(save_invstd, c, invstd[static_cast<size_t>(c)]);
        if (a.running_mean.data)
          set1(a.running_mean, c, (1 - a.momentum) * get1(a.running_mean, c) + a.momentum * mu);
        if (a.running_var.data) {
          const double unbiased = count > 1 ? q / (count - 1) : q;
          set1(a.running_var, c, (1 - a.momentum) * get1(a.running_var, c) + a.momentum * unbiased);
        }
      }
    });
  } else {
    for (int64_t c = 0; c < Cn; ++c) {
      mean[static_cast<size_t>(c)] = get1(a.running_mean, c);
      invstd[static_cast<size_t>(c)] = 1.0 / std::sqrt(get1(a.running_var, c) + a.eps);
    }
  }
  // y = x * scale + shift per channel.
  std::vector<C> scale(static_cast<size_t>(Cn)), shift(static_cast<size_t>(Cn));
  for (int64_t c = 0; c < Cn; ++c) {
    const double w = a.weight.data ? get1(a.weight, c) : 1.0;
    const double b = a.bias.data ? get1(a.bias, c) : 0.0;
    scale[static_cast<size_t>(c)] = static_cast<C>(invstd[static_cast<size_t>(c)] * w);
    shift[static_cast<size_t>(c)] =
        static_cast<C>(b - mean[static_cast<size_t>(c)] * invstd[static_cast<size_t>(c)] * w);
  }
  rt::parallel_for(0, N * Cn, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)),
                   [&](int64_t p0, int64_t p1) {
                     std::vector<C> x(static_cast<size_t>(S));
                     for (int64_t p = p0; p < p1; ++p) {
                       const int64_t n = p / Cn, c = p % Cn;
                       load_row(channel_rows(a.input, c), n, x.data(), S);
                       const C sc = scale[static_cast<size_t>(c)],
                               sh = shift[static_cast<size_t>(c)];
                       for (auto& v : x) v = v * sc + sh;
                       store_row(channel_rows(out, c), n, x.data(), S);
                     }
                   });
}

template <typename C>
void bn_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                 const TensorRef& grad_bias, const TensorRef& grad_out, const TensorRef& save_mean,
                 const TensorRef& save_invstd, const BatchNormArgs& a) {
  const int64_t N = a.input.sizes[0], Cn = a.input.sizes[1], S = a.input.sizes[2];
  const double count = static_cast<double>(N * S);
  const BnSums<C> ops = bn_sums<C>();
  rt::parallel_for(0, Cn, 1, [&](int64_t c0, int64_t c1) {
    std::vector<C> x(static_cast<size_t>(S)), dy(static_cast<size_t>(S));
    for (int64_t c = c0; c < c1; ++c) {
      const double mu = a.training ? get1(save_mean, c) : get1(a.running_mean, c);
      const double is =
          a.training ? get1(save_invstd, c) : 1.0 / std::sqrt(get1(a.running_var, c) + a.eps);
      const double w = a.weight.data ? get1(a.weight, c) : 1.0;
      const TensorRef xin = channel_rows(a.input, c), g = channel_rows(grad_out, c);
      double sdy = 0, sdyx = 0;
      for (int64_t n = 0; n < N; ++n) {
        double r1, r2;
        ops.dot(row_view(g, n, dy.data(), S), row_view(xin, n, x.data(), S), S, mu, &r1, &r2);
        sdy += r1;
        sdyx += r2;
      }
      set1(grad_weight, c, sdyx * is);
      set1(grad_bias, c, sdy);
      if (!grad_input.data) continue;
      const TensorRef gi = channel_rows(grad_input, c);
      // train: dx = w * is * (dy - mean(dy) - xhat * mean(dy * xhat)); eval: dx = w * is * dy.
      const double k1 = a.training ? sdy / count : 0.0;
      const double k2 = a.training ? sdyx * is * is / count : 0.0;
      for (int64_t n = 0; n < N; ++n) {
        load_row(xin, n, x.data(), S);
        load_row(g, n, dy.data(), S);
        for (int64_t i = 0; i < S; ++i) {
          const double xc = static_cast<double>(x[static_cast<size_t>(i)]) - mu;
          dy[static_cast<size_t>(i)] = static_cast<C>(
              w * is * (static_cast<double>(dy[static_cast<size_t>(i)]) - k1 - xc * k2));
        }
        store_row(gi, n, dy.data(), S);
      }
    }
  });
}

void check_bn(const BatchNormArgs& a) {
  if (a.input.ndim != 3) throw std::invalid_argument("batch_norm: internal shape error");
  check_row_dtype("batch_norm", a.input);
  if (!a.training && (!a.running_mean.data || !a.running_var.data))
    throw std::invalid_argument(
        "batch_norm: running_mean and running_var must be defined in evaluation mode");
}

}  // namespace

void batch_norm_forward(const TensorRef& out, const TensorRef& save_mean,
                        const TensorRef& save_invstd, const BatchNormArgs& a) {
  check_bn(a);
  if (use_f64(a.input)) return bn_forward<double>(out, save_mean, save_invstd, a);
  bn_forward<float>(out, save_mean, save_invstd, a);
}

void batch_norm_backward(const TensorRef& grad_input, const TensorRef& grad_weight,
                         const TensorRef& grad_bias, const TensorRef& grad_out,
                         const TensorRef& save_mean, const TensorRef& save_invstd,
                         const BatchNormArgs& a) {
  check_bn(a);
  if (use_f64(a.input))
    return bn_backward<double>(grad_input, grad_weight, grad_bias, grad_out, save_mean, save_invstd,
                               a);
  bn_backward<float>(grad_input, grad_weight, grad_bias, grad_out, save_mean, save_invstd, a);
}

}  // namespace neuron::kernels
