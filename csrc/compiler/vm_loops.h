// The per-op inner loops of the fused-kernel VM and the compiler's dense kernels (GEMV, dot,
// axpy), as one self-contained unit: vm_loops_generic.cpp and vm_loops_avx2.cpp include the
// implementation part of this header (VM_LOOPS_IMPL) with different target flags, and
// loops() picks the best table for the running CPU once. Swapping these loops for other
// vectorized implementations only requires filling a LoopTable.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace neuron::cc::vm {

// Binary/ternary broadcast modes: bit i set = operand i is a scalar (one value).
using UnaryFn = void (*)(float* d, const float* a, int64_t n);
using BinaryFn = void (*)(float* d, const float* a, const float* b, int64_t n, int mode);
using IUnaryFn = void (*)(int64_t* d, const int64_t* a, int64_t n);
using IBinaryFn = void (*)(int64_t* d, const int64_t* a, const int64_t* b, int64_t n, int mode);
using ICmpFn = void (*)(float* d, const int64_t* a, const int64_t* b, int64_t n, int mode);
// Strided loads/stores with conversion; strides in bytes (== element size: contiguous).
using LoadFn = void (*)(float* d, const char* p, int64_t stride, int64_t n);
using LoadIFn = void (*)(int64_t* d, const char* p, int64_t stride, int64_t n);
using StoreFn = void (*)(char* p, int64_t stride, const float* s, int64_t n);
using StoreIFn = void (*)(char* p, int64_t stride, const int64_t* s, int64_t n);

constexpr int kNumDTypes = static_cast<int>(kernels::DType::Undefined);
constexpr int kMaxOpc = 128;

struct LoopTable {
  const char* isa = "generic";
  UnaryFn funary[kMaxOpc] = {};
  BinaryFn fbinary[kMaxOpc] = {};
  IUnaryFn iunary[kMaxOpc] = {};
  IBinaryFn ibinary[kMaxOpc] = {};
  ICmpFn icmp[kMaxOpc] = {};
  void (*where)(float* d, const float* c, const float* a, const float* b, int64_t n,
                int mode) = nullptr;
  void (*iwhere)(int64_t* d, const float* c, const int64_t* a, const int64_t* b, int64_t n,
                 int mode) = nullptr;
  void (*i2f)(float* d, const int64_t* a, int64_t n) = nullptr;
  void (*f2i)(int64_t* d, const float* a, int64_t n) = nullptr;
  float (*rsum)(const float* a, int64_t n) = nullptr;
  float (*rmax)(const float* a, int64_t n) = nullptr;  // NaN-propagating
  float (*rmin)(const float* a, int64_t n) = nullptr;
  float (*rprod)(const float* a, int64_t n) = nullptr;
  int64_t (*risum)(const int64_t* a, int64_t n) = nullptr;
  int64_t (*rimax)(const int64_t* a, int64_t n) = nullptr;
  int64_t (*rimin)(const int64_t* a, int64_t n) = nullptr;
  int64_t (*riprod)(const int64_t* a, int64_t n) = nullptr;
  // Updates (best, idx) with the first max (min) of a[0..n) at global index base + i; NaN wins.
  void (*rargmax)(const float* a, int64_t n, int64_t base, float* best, int64_t* idx) = nullptr;
  void (*rargmin)(const float* a, int64_t n, int64_t base, float* best, int64_t* idx) = nullptr;
  LoadFn load[kNumDTypes] = {};
  LoadIFn loadi[kNumDTypes] = {};
  StoreFn store[kNumDTypes] = {};
  StoreIFn storei[kNumDTypes] = {};
  void (*fill)(float* d, float v, int64_t n) = nullptr;
  void (*ifill)(int64_t* d, int64_t v, int64_t n) = nullptr;
  // Dense helpers for GEMV and attention.
  float (*dot)(const float* a, const float* b, int64_t n) = nullptr;
  void (*axpy)(float* y, float a, const float* x, int64_t n) = nullptr;  // y += a * x
  void (*scale)(float* y, float a, int64_t n) = nullptr;                 // y *= a
};

// The table for the running CPU (AVX2+FMA+F16C when available); NEURON_EMU_SIMD=portable
// (kernels::simd_level()) forces the generic one.
const LoopTable& loops();
const LoopTable& loops_generic();
const LoopTable* loops_avx2();  // nullptr when the CPU lacks AVX2/FMA/F16C

}  // namespace neuron::cc::vm

#ifdef VM_LOOPS_IMPL
// ======================================================================================
// Implementation, compiled once per target in its own namespace (VM_LOOPS_NS) so the two
// translation units never share a symbol.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <stdexcept>
#include <string>

#include "kernels/convert.h"
#include "kernels/elementwise.h"
#include "vm.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace neuron::cc::vm::VM_LOOPS_NS {
namespace {

using kernels::DType;

inline float as_f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t as_u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float fmin_(float a, float b) { return a < b ? a : b; }
inline float fmax_(float a, float b) { return a > b ? a : b; }

// ---- fp32 math: the eager ops' own loops (kernels/elementwise.h), so that compiled and eager
// transcendental math give the same bits; the AVX2 build takes the kernels' AVX2 clone.

#if defined(__AVX2__)
constexpr bool kAvx2Clone = true;
#else
constexpr bool kAvx2Clone = false;
#endif

template <kernels::EwOp Op>
void u_eager(float* d, const float* a, int64_t n) {
  static const kernels::EwF32Fn fn = [] {
    const kernels::EwF32Fn f = kernels::ew_f32_kernel(Op, kAvx2Clone);
    if (!f) throw std::logic_error(std::string("VM: no fp32 kernel for ") + kernels::ew_name(Op));
    return f;
  }();
  const void* in[1] = {a};
  fn(kernels::EwParams{}, d, in, n);
}

// Binary eager loop; a broadcast scalar operand (mode 1: a, 2: b, 3: both) is splatted into a
// block so the kernel always sees two dense inputs.
template <kernels::EwOp Op>
void b_eager(float* d, const float* a, const float* b, int64_t n, int mode) {
  static const kernels::EwF32Fn fn = [] {
    const kernels::EwF32Fn f = kernels::ew_f32_kernel(Op, kAvx2Clone);
    if (!f) throw std::logic_error(std::string("VM: no fp32 kernel for ") + kernels::ew_name(Op));
    return f;
  }();
  if (mode == 0) {
    const void* in[2] = {a, b};
    fn(kernels::EwParams{}, d, in, n);
    return;
  }
  constexpr int64_t kBlock = 256;
  float sa[kBlock], sb[kBlock];
  if (mode & 1) std::fill(sa, sa + kBlock, a[0]);
  if (mode & 2) std::fill(sb, sb + kBlock, b[0]);
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    const void* in[2] = {(mode & 1) ? sa : a + i, (mode & 2) ? sb : b + i};
    fn(kernels::EwParams{}, d + i, in, m);
  }
}


// ---- loop templates ----

template <typename F>
inline void un_loop(float* d, const float* a, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i]);
}
template <typename F>
inline void bin_loop(float* d, const float* a, const float* b, int64_t n, int mode, F f) {
  if (mode == 0) {
    for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
  } else if (mode == 2) {
    const float bb = b[0];
    for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], bb);
  } else if (mode == 1) {
    const float aa = a[0];
    for (int64_t i = 0; i < n; ++i) d[i] = f(aa, b[i]);
  } else {
    const float r = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) d[i] = r;
  }
}
template <typename F>
inline void ibin_loop(int64_t* d, const int64_t* a, const int64_t* b, int64_t n, int mode, F f) {
  if (mode == 0) {
    for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
  } else if (mode == 2) {
    const int64_t bb = b[0];
    for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], bb);
  } else if (mode == 1) {
    const int64_t aa = a[0];
    for (int64_t i = 0; i < n; ++i) d[i] = f(aa, b[i]);
  } else {
    const int64_t r = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) d[i] = r;
  }
}
template <typename F>
inline void icmp_loop(float* d, const int64_t* a, const int64_t* b, int64_t n, int mode, F f) {
  if (mode == 0) {
    for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]) ? 1.0f : 0.0f;
  } else if (mode == 2) {
    const int64_t bb = b[0];
    for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], bb) ? 1.0f : 0.0f;
  } else if (mode == 1) {
    const int64_t aa = a[0];
    for (int64_t i = 0; i < n; ++i) d[i] = f(aa, b[i]) ? 1.0f : 0.0f;
  } else {
    const float r = f(a[0], b[0]) ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; ++i) d[i] = r;
  }
}

// libm fallback for rarely used functions (correct, not vectorized).
#define VM_LIBM(name, expr)                        \
  void name(float* d, const float* a, int64_t n) { \
    for (int64_t i = 0; i < n; ++i) {              \
      const float x = a[i];                        \
      d[i] = (expr);                               \
    }                                              \
  }

void u_copy(float* d, const float* a, int64_t n) {
  if (d != a) std::memmove(d, a, static_cast<size_t>(n) * sizeof(float));
}
void u_neg(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return -x; });
}
void u_abs(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return std::fabs(x); });
}
void u_sqrt(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return std::sqrt(x); });
}
void u_rsqrt(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return 1.0f / std::sqrt(x); });
}
void u_recip(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return 1.0f / x; });
}
void u_relu(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return x < 0.0f ? 0.0f : x; });
}
void u_floor(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return std::floor(x); });
}
void u_ceil(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return std::ceil(x); });
}
void u_round(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return std::nearbyint(x); });
}
void u_trunc(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return std::trunc(x); });
}
void u_sign(float* d, const float* a, int64_t n) {
  un_loop(d, a, n,
          [](float x) { return x != x ? x : static_cast<float>((x > 0.0f) - (x < 0.0f)); });
}
void u_not(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return x == 0.0f ? 1.0f : 0.0f; });
}
void u_isnan(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return x != x ? 1.0f : 0.0f; });
}
void u_isinf(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) {
    return std::fabs(x) == std::numeric_limits<float>::infinity() ? 1.0f : 0.0f;
  });
}
void u_tobool(float* d, const float* a, int64_t n) {
  un_loop(d, a, n, [](float x) { return x != 0.0f ? 1.0f : 0.0f; });
}
// Rounding to bf16 is the kernels' conversion (convert.h), there and back.
void u_round_bf16(float* d, const float* a, int64_t n) {
  uint16_t buf[1024];
  for (int64_t i = 0; i < n; i += 1024) {
    const int64_t m = std::min<int64_t>(1024, n - i);
    kernels::row_from_f32(a + i, buf, DType::BFloat16, m);
    kernels::row_to_f32(buf, DType::BFloat16, d + i, m);
  }
}
void u_round_f16(float* d, const float* a, int64_t n) {
#if defined(__AVX2__)
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(a + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) d[i] = kernels::f16_to_f32(kernels::f32_to_f16(a[i]));
#else
  for (int64_t i = 0; i < n; ++i) d[i] = kernels::f16_to_f32(kernels::f32_to_f16(a[i]));
#endif
}
VM_LIBM(u_round_f8e4m3, kernels::f8e4m3fn_to_f32(kernels::f32_to_f8e4m3fn(x)))
VM_LIBM(u_round_f8e5m2, kernels::f8e5m2_to_f32(kernels::f32_to_f8e5m2(x)))

inline float floordiv_f(float a, float b) {
  if (b == 0.0f) return a / b;
  const float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) div -= 1.0f;
  if (div == 0.0f) return std::copysign(0.0f, a / b);
  float fl = std::floor(div);
  if (div - fl > 0.5f) fl += 1.0f;
  return fl;
}
inline float rem_f(float a, float b) {
  float m = std::fmod(a, b);
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) m += b;
  return m;
}

#define VM_BIN(name, expr)                                                   \
  void name(float* d, const float* a, const float* b, int64_t n, int mode) { \
    bin_loop(d, a, b, n, mode, [](float x, float y) { return (expr); });     \
  }
VM_BIN(b_add, x + y)
VM_BIN(b_sub, x - y)
VM_BIN(b_mul, x* y)
VM_BIN(b_div, x / y)
VM_BIN(b_floordiv, floordiv_f(x, y))
VM_BIN(b_rem, rem_f(x, y))
VM_BIN(b_fmod, std::fmod(x, y))
VM_BIN(b_pow, std::pow(x, y))
VM_BIN(b_max, x != x ? x : (y != y ? y : (x > y ? x : y)))
VM_BIN(b_min, x != x ? x : (y != y ? y : (x < y ? x : y)))
VM_BIN(b_atan2, std::atan2(x, y))
VM_BIN(b_eq, x == y ? 1.0f : 0.0f)
VM_BIN(b_ne, x != y ? 1.0f : 0.0f)
VM_BIN(b_lt, x < y ? 1.0f : 0.0f)
VM_BIN(b_le, x <= y ? 1.0f : 0.0f)
VM_BIN(b_gt, x > y ? 1.0f : 0.0f)
VM_BIN(b_ge, x >= y ? 1.0f : 0.0f)
VM_BIN(b_and, (x != 0.0f && y != 0.0f) ? 1.0f : 0.0f)
VM_BIN(b_or, (x != 0.0f || y != 0.0f) ? 1.0f : 0.0f)
VM_BIN(b_xor, ((x != 0.0f) != (y != 0.0f)) ? 1.0f : 0.0f)

void iu_copy(int64_t* d, const int64_t* a, int64_t n) {
  if (d != a) std::memmove(d, a, static_cast<size_t>(n) * sizeof(int64_t));
}
void iu_neg(int64_t* d, const int64_t* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int64_t>(0ull - static_cast<uint64_t>(a[i]));
}
void iu_abs(int64_t* d, const int64_t* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    d[i] = a[i] < 0 ? static_cast<int64_t>(0ull - static_cast<uint64_t>(a[i])) : a[i];
}
void iu_bitnot(int64_t* d, const int64_t* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = ~a[i];
}
void iu_sign(int64_t* d, const int64_t* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = (a[i] > 0) - (a[i] < 0);
}

inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
// Division by zero is checked by the VM before these run.
inline int64_t ifloordiv(int64_t a, int64_t b) {
  if (b == -1) return wrap_sub(0, a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t irem(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
inline int64_t ifmod(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }

#define VM_IBIN(name, expr)                                                        \
  void name(int64_t* d, const int64_t* a, const int64_t* b, int64_t n, int mode) { \
    ibin_loop(d, a, b, n, mode, [](int64_t x, int64_t y) { return (expr); });      \
  }
VM_IBIN(ib_add, wrap_add(x, y))
VM_IBIN(ib_sub, wrap_sub(x, y))
VM_IBIN(ib_mul, wrap_mul(x, y))
VM_IBIN(ib_floordiv, ifloordiv(x, y))
VM_IBIN(ib_rem, irem(x, y))
VM_IBIN(ib_fmod, ifmod(x, y))
VM_IBIN(ib_max, x > y ? x : y)
VM_IBIN(ib_min, x < y ? x : y)
VM_IBIN(ib_and, x& y)
VM_IBIN(ib_or, x | y)
VM_IBIN(ib_xor, x ^ y)

#define VM_ICMP(name, expr)                                                      \
  void name(float* d, const int64_t* a, const int64_t* b, int64_t n, int mode) { \
    icmp_loop(d, a, b, n, mode, [](int64_t x, int64_t y) { return (expr); });    \
  }
VM_ICMP(ic_eq, x == y)
VM_ICMP(ic_ne, x != y)
VM_ICMP(ic_lt, x < y)
VM_ICMP(ic_le, x <= y)
VM_ICMP(ic_gt, x > y)
VM_ICMP(ic_ge, x >= y)

// Branch-free selects (the compiler vectorizes them; a data-dependent branch per element, e.g.
// a ReLU mask, mispredicts half the time). A scalar operand is read once.
template <typename T, bool C, bool A, bool B>
void where_loop(T* d, const float* c, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float cv = C ? c[0] : c[i];
    const T av = A ? a[0] : a[i];
    const T bv = B ? b[0] : b[i];
    d[i] = cv != 0.0f ? av : bv;
  }
}
template <typename T>
void where_any(T* d, const float* c, const T* a, const T* b, int64_t n, int mode) {
  switch (mode & 7) {
    case 0:
      return where_loop<T, false, false, false>(d, c, a, b, n);
    case 1:
      return where_loop<T, true, false, false>(d, c, a, b, n);
    case 2:
      return where_loop<T, false, true, false>(d, c, a, b, n);
    case 3:
      return where_loop<T, true, true, false>(d, c, a, b, n);
    case 4:
      return where_loop<T, false, false, true>(d, c, a, b, n);
    case 5:
      return where_loop<T, true, false, true>(d, c, a, b, n);
    case 6:
      return where_loop<T, false, true, true>(d, c, a, b, n);
    default:
      return where_loop<T, true, true, true>(d, c, a, b, n);
  }
}
void where_f(float* d, const float* c, const float* a, const float* b, int64_t n, int mode) {
  where_any<float>(d, c, a, b, n, mode);
}
void where_i(int64_t* d, const float* c, const int64_t* a, const int64_t* b, int64_t n, int mode) {
  where_any<int64_t>(d, c, a, b, n, mode);
}
void i2f(float* d, const int64_t* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(a[i]);
}
void f2i(int64_t* d, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    d[i] = x != x                ? 0
           : x >= 9.2233720e18f  ? std::numeric_limits<int64_t>::max()
           : x <= -9.2233720e18f ? std::numeric_limits<int64_t>::min()
                                 : static_cast<int64_t>(x);
  }
}

// ---- reductions ----

float r_sum(const float* a, int64_t n) {
#if defined(__AVX2__)
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
         s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  float t[8];
  _mm256_storeu_ps(t, s);
  float r = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  for (; i < n; ++i) r += a[i];
  return r;
#else
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k];
  float r = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) r += a[i];
  return r;
#endif
}
float r_max(const float* a, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    nan |= x != x;
    m = x > m ? x : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}
float r_min(const float* a, int64_t n) {
  float m = std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    nan |= x != x;
    m = x < m ? x : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}
float r_prod(const float* a, int64_t n) {
  float p = 1.0f;
  for (int64_t i = 0; i < n; ++i) p *= a[i];
  return p;
}
int64_t ri_sum(const int64_t* a, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<uint64_t>(a[i]);
  return static_cast<int64_t>(s);
}
int64_t ri_max(const int64_t* a, int64_t n) {
  int64_t m = std::numeric_limits<int64_t>::min();
  for (int64_t i = 0; i < n; ++i) m = a[i] > m ? a[i] : m;
  return m;
}
int64_t ri_min(const int64_t* a, int64_t n) {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < n; ++i) m = a[i] < m ? a[i] : m;
  return m;
}
int64_t ri_prod(const int64_t* a, int64_t n) {
  int64_t p = 1;
  for (int64_t i = 0; i < n; ++i) p = wrap_mul(p, a[i]);
  return p;
}
void r_argmax(const float* a, int64_t n, int64_t base, float* best, int64_t* idx) {
  float b = *best;
  int64_t k = *idx;
  if (b != b) return;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    if (x != x) {
      *best = x;
      *idx = base + i;
      return;
    }
    if (x > b) {
      b = x;
      k = base + i;
    }
  }
  *best = b;
  *idx = k;
}
void r_argmin(const float* a, int64_t n, int64_t base, float* best, int64_t* idx) {
  float b = *best;
  int64_t k = *idx;
  if (b != b) return;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    if (x != x) {
      *best = x;
      *idx = base + i;
      return;
    }
    if (x < b) {
      b = x;
      k = base + i;
    }
  }
  *best = b;
  *idx = k;
}

// ---- loads and stores ----

template <typename T>
inline float to_f(T v) {
  if constexpr (std::is_same_v<T, kernels::bf16>) {
    return as_f(static_cast<uint32_t>(v.x) << 16);
  } else if constexpr (std::is_same_v<T, kernels::f16>) {
    return kernels::f16_to_f32(v.x);
  } else if constexpr (std::is_same_v<T, kernels::f8e4m3fn>) {
    return kernels::f8e4m3fn_to_f32(v.x);
  } else if constexpr (std::is_same_v<T, kernels::f8e5m2>) {
    return kernels::f8e5m2_to_f32(v.x);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? 1.0f : 0.0f;
  } else {
    return static_cast<float>(v);
  }
}

template <typename T>
void load_t(float* d, const char* p, int64_t stride, int64_t n) {
  if (stride == static_cast<int64_t>(sizeof(T))) {
    const T* s = reinterpret_cast<const T*>(p);
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(d, s, static_cast<size_t>(n) * 4);
    } else if constexpr (std::is_same_v<T, kernels::bf16>) {
      const uint16_t* u = reinterpret_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < n; ++i) d[i] = as_f(static_cast<uint32_t>(u[i]) << 16);
    } else if constexpr (std::is_same_v<T, kernels::f16>) {
#if defined(__AVX2__)
      const uint16_t* u = reinterpret_cast<const uint16_t*>(p);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u + i))));
      for (; i < n; ++i) d[i] = kernels::f16_to_f32(u[i]);
#else
      for (int64_t i = 0; i < n; ++i) d[i] = to_f(s[i]);
#endif
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = to_f(s[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * stride, sizeof(T));
    d[i] = to_f(v);
  }
}

template <typename T>
inline int64_t to_i(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 1 : 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<int64_t>(v);
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(v);
  } else {
    return static_cast<int64_t>(to_f(v));
  }
}

template <typename T>
void loadi_t(int64_t* d, const char* p, int64_t stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * stride, sizeof(T));
    d[i] = to_i(v);
  }
}

template <typename T>
inline T from_f(float f) {
  if constexpr (std::is_same_v<T, bool>) {
    return f != 0.0f;
  } else if constexpr (std::is_same_v<T, kernels::bf16>) {
    return kernels::bf16(f);
  } else if constexpr (std::is_same_v<T, kernels::f16>) {
    return kernels::f16::from_bits(kernels::f32_to_f16(f));
  } else if constexpr (std::is_same_v<T, kernels::f8e4m3fn>) {
    T r;
    r.x = kernels::f32_to_f8e4m3fn(f);
    return r;
  } else if constexpr (std::is_same_v<T, kernels::f8e5m2>) {
    T r;
    r.x = kernels::f32_to_f8e5m2(f);
    return r;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(f);
  } else if constexpr (std::is_unsigned_v<T>) {
    return static_cast<T>(static_cast<int64_t>(f));
  } else {
    return static_cast<T>(f);
  }
}

template <typename T>
void store_t(char* p, int64_t stride, const float* s, int64_t n) {
  if (stride == static_cast<int64_t>(sizeof(T))) {
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(p, s, static_cast<size_t>(n) * 4);
      return;
    } else if constexpr (std::is_same_v<T, kernels::bf16>) {
      kernels::row_from_f32(s, p, DType::BFloat16, n);  // the kernels' rounding
      return;
    } else if constexpr (std::is_same_v<T, kernels::f16>) {
#if defined(__AVX2__)
      uint16_t* u = reinterpret_cast<uint16_t*>(p);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(u + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
      for (; i < n; ++i) u[i] = kernels::f32_to_f16(s[i]);
      return;
#endif
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const T v = from_f<T>(s[i]);
    std::memcpy(p + i * stride, &v, sizeof(T));
  }
}

template <typename T>
void storei_t(char* p, int64_t stride, const int64_t* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    if constexpr (std::is_same_v<T, bool>) {
      v = s[i] != 0;
    } else if constexpr (std::is_integral_v<T>) {
      v = static_cast<T>(s[i]);
    } else {
      v = from_f<T>(static_cast<float>(s[i]));
    }
    std::memcpy(p + i * stride, &v, sizeof(T));
  }
}

void fill_f(float* d, float v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = v;
}
void fill_i(int64_t* d, int64_t v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = v;
}

// ---- dense helpers ----

float dot_f(const float* a, const float* b, int64_t n) {
#if defined(__AVX2__)
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(s0, s1));
  float r = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
#else
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float r = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
#endif
}
void axpy_f(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void scale_f(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

LoopTable make_table(const char* isa) {
  LoopTable t;
  t.isa = isa;
  auto U = [&](Opc o, UnaryFn f) { t.funary[static_cast<int>(o)] = f; };
  auto B = [&](Opc o, BinaryFn f) { t.fbinary[static_cast<int>(o)] = f; };
  U(Opc::Copy, u_copy);
  U(Opc::Neg, u_neg);
  U(Opc::Abs, u_abs);
  U(Opc::Exp, u_eager<kernels::EwOp::Exp>);
  U(Opc::Exp2, u_eager<kernels::EwOp::Exp2>);
  U(Opc::Expm1, u_eager<kernels::EwOp::Expm1>);
  U(Opc::Log, u_eager<kernels::EwOp::Log>);
  U(Opc::Log2, u_eager<kernels::EwOp::Log2>);
  U(Opc::Log10, u_eager<kernels::EwOp::Log10>);
  U(Opc::Log1p, u_eager<kernels::EwOp::Log1p>);
  U(Opc::Sqrt, u_sqrt);
  U(Opc::Rsqrt, u_rsqrt);
  U(Opc::Recip, u_recip);
  U(Opc::Sin, u_eager<kernels::EwOp::Sin>);
  U(Opc::Cos, u_eager<kernels::EwOp::Cos>);
  U(Opc::Tan, u_eager<kernels::EwOp::Tan>);
  U(Opc::Asin, u_eager<kernels::EwOp::Asin>);
  U(Opc::Acos, u_eager<kernels::EwOp::Acos>);
  U(Opc::Atan, u_eager<kernels::EwOp::Atan>);
  U(Opc::Sinh, u_eager<kernels::EwOp::Sinh>);
  U(Opc::Cosh, u_eager<kernels::EwOp::Cosh>);
  U(Opc::Tanh, u_eager<kernels::EwOp::Tanh>);
  U(Opc::Asinh, u_eager<kernels::EwOp::Asinh>);
  U(Opc::Acosh, u_eager<kernels::EwOp::Acosh>);
  U(Opc::Atanh, u_eager<kernels::EwOp::Atanh>);
  U(Opc::Sigmoid, u_eager<kernels::EwOp::Sigmoid>);
  U(Opc::Relu, u_relu);
  U(Opc::Gelu, u_eager<kernels::EwOp::Gelu>);
  U(Opc::GeluTanh, u_eager<kernels::EwOp::GeluTanh>);
  U(Opc::Silu, u_eager<kernels::EwOp::Silu>);
  U(Opc::Erf, u_eager<kernels::EwOp::Erf>);
  U(Opc::Erfc, u_eager<kernels::EwOp::Erfc>);
  U(Opc::Floor, u_floor);
  U(Opc::Ceil, u_ceil);
  U(Opc::Round, u_round);
  U(Opc::Trunc, u_trunc);
  U(Opc::Sign, u_sign);
  U(Opc::Not, u_not);
  U(Opc::IsNan, u_isnan);
  U(Opc::IsInf, u_isinf);
  U(Opc::ToBool, u_tobool);
  U(Opc::RoundBF16, u_round_bf16);
  U(Opc::RoundF16, u_round_f16);
  U(Opc::RoundF8E4M3, u_round_f8e4m3);
  U(Opc::RoundF8E5M2, u_round_f8e5m2);
  B(Opc::Add, b_add);
  B(Opc::Sub, b_sub);
  B(Opc::Mul, b_mul);
  B(Opc::Div, b_div);
  B(Opc::FloorDiv, b_floordiv);
  B(Opc::Rem, b_rem);
  B(Opc::Fmod, b_fmod);
  B(Opc::Pow, b_pow);
  B(Opc::Max, b_max);
  B(Opc::Min, b_min);
  B(Opc::Atan2, b_atan2);
  B(Opc::GeluBackward, b_eager<kernels::EwOp::GeluBackward>);
  B(Opc::GeluTanhBackward, b_eager<kernels::EwOp::GeluTanhBackward>);
  B(Opc::SiluBackward, b_eager<kernels::EwOp::SiluBackward>);
  B(Opc::Eq, b_eq);
  B(Opc::Ne, b_ne);
  B(Opc::Lt, b_lt);
  B(Opc::Le, b_le);
  B(Opc::Gt, b_gt);
  B(Opc::Ge, b_ge);
  B(Opc::And, b_and);
  B(Opc::Or, b_or);
  B(Opc::Xor, b_xor);
  auto IU = [&](Opc o, IUnaryFn f) { t.iunary[static_cast<int>(o)] = f; };
  auto IB = [&](Opc o, IBinaryFn f) { t.ibinary[static_cast<int>(o)] = f; };
  auto IC = [&](Opc o, ICmpFn f) { t.icmp[static_cast<int>(o)] = f; };
  IU(Opc::ICopy, iu_copy);
  IU(Opc::INeg, iu_neg);
  IU(Opc::IAbs, iu_abs);
  IU(Opc::IBitNot, iu_bitnot);
  IU(Opc::ISign, iu_sign);
  IB(Opc::IAdd, ib_add);
  IB(Opc::ISub, ib_sub);
  IB(Opc::IMul, ib_mul);
  IB(Opc::IFloorDiv, ib_floordiv);
  IB(Opc::IRem, ib_rem);
  IB(Opc::IFmod, ib_fmod);
  IB(Opc::IMax, ib_max);
  IB(Opc::IMin, ib_min);
  IB(Opc::IBitAnd, ib_and);
  IB(Opc::IBitOr, ib_or);
  IB(Opc::IBitXor, ib_xor);
  IC(Opc::IEq, ic_eq);
  IC(Opc::INe, ic_ne);
  IC(Opc::ILt, ic_lt);
  IC(Opc::ILe, ic_le);
  IC(Opc::IGt, ic_gt);
  IC(Opc::IGe, ic_ge);
  t.where = where_f;
  t.iwhere = where_i;
  t.i2f = i2f;
  t.f2i = f2i;
  t.rsum = r_sum;
  t.rmax = r_max;
  t.rmin = r_min;
  t.rprod = r_prod;
  t.risum = ri_sum;
  t.rimax = ri_max;
  t.rimin = ri_min;
  t.riprod = ri_prod;
  t.rargmax = r_argmax;
  t.rargmin = r_argmin;
#define VM_DT(D, T)                                 \
  t.load[static_cast<int>(DType::D)] = load_t<T>;   \
  t.loadi[static_cast<int>(DType::D)] = loadi_t<T>; \
  t.store[static_cast<int>(DType::D)] = store_t<T>; \
  t.storei[static_cast<int>(DType::D)] = storei_t<T>;
  VM_DT(Bool, bool)
  VM_DT(UInt8, uint8_t)
  VM_DT(Int8, int8_t)
  VM_DT(Int16, int16_t) VM_DT(Int32, int32_t) VM_DT(Int64, int64_t) VM_DT(UInt16, uint16_t)
      VM_DT(UInt32, uint32_t) VM_DT(UInt64, uint64_t) VM_DT(Float16, kernels::f16)
          VM_DT(BFloat16, kernels::bf16) VM_DT(Float32, float) VM_DT(Float64, double)
              VM_DT(Float8_e4m3fn, kernels::f8e4m3fn) VM_DT(Float8_e5m2, kernels::f8e5m2)
#undef VM_DT
                  t.fill = fill_f;
  t.ifill = fill_i;
  t.dot = dot_f;
  t.axpy = axpy_f;
  t.scale = scale_f;
  return t;
}

}  // namespace

const LoopTable& table() {
  static const LoopTable t = make_table(VM_LOOPS_ISA);
  return t;
}

}  // namespace neuron::cc::vm::VM_LOOPS_NS
#endif  // VM_LOOPS_IMPL
