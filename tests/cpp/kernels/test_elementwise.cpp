// Elementwise kernels: accuracy of the fp32 math functions against the C library in double,
// agreement of the portable and AVX2 paths for every op, strides/broadcast/mixed dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/convert.h"
#include "kernels/elementwise.h"
#include "kernels/simd.h"
#include "kernels/simd/vmath.h"

using namespace neuron::kernels;

namespace {

TensorRef ref1d(void* data, DType t, int64_t n, int64_t stride = 1) {
  TensorRef r;
  r.data = data;
  r.dtype = t;
  r.ndim = 1;
  r.sizes[0] = n;
  r.strides[0] = stride;
  return r;
}

// Distance in units in the last place of the float nearest to `ref`.
double ulps(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : 1e9;
  if (std::isinf(ref)) return got == static_cast<float>(ref) ? 0 : 1e9;
  const float r = static_cast<float>(ref);
  if (std::isinf(r)) return std::isinf(got) && (got > 0) == (r > 0) ? 0 : 1e9;
  const double ulp =
      std::max(static_cast<double>(std::nextafter(std::fabs(r), INFINITY) - std::fabs(r)),
               static_cast<double>(std::numeric_limits<float>::denorm_min()));
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}

struct SimdGuard {
  SimdLevel saved = simd_level();
  ~SimdGuard() { set_simd_level(saved); }
};

std::vector<float> sample(float lo, float hi, int n, uint32_t seed = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

float bf16_or_f16_to_float(DType t, uint16_t v) {
  float f;
  find_convert(DType::Float32, t)(&f, 4, &v, 2, 1);
  return f;
}

}  // namespace

TEST(VMath, ScalarAccuracy) {
  double worst_exp = 0, worst_log = 0, worst_tanh = 0, worst_erf = 0, worst_log1p = 0,
         worst_expm1 = 0;
  for (float x : sample(-103.f, 88.7f, 200000))
    worst_exp = std::max(worst_exp, ulps(vm::exp(x), std::exp(double(x))));
  for (float x : sample(-10.f, 10.f, 200000, 2)) {
    worst_tanh = std::max(worst_tanh, ulps(vm::tanh(x), std::tanh(double(x))));
    worst_erf = std::max(worst_erf, ulps(vm::erf(x), std::erf(double(x))));
    worst_expm1 = std::max(worst_expm1, ulps(vm::expm1(x), std::expm1(double(x))));
  }
  for (float x : sample(-30.f, 30.f, 200000, 3)) {
    const float v = std::exp(x);
    worst_log = std::max(worst_log, ulps(vm::log(v), std::log(double(v))));
    worst_log1p =
        std::max(worst_log1p, ulps(vm::log1p(v - 0.999f), std::log1p(double(v - 0.999f))));
  }
  EXPECT_LE(worst_exp, 1.5);
  EXPECT_LE(worst_log, 1.0);
  EXPECT_LE(worst_tanh, 1.5);
  EXPECT_LE(worst_erf, 3.0);
  EXPECT_LE(worst_log1p, 2.5);
  EXPECT_LE(worst_expm1, 3.0);
}

TEST(VMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(vm::exp(-inf), 0.0f);
  EXPECT_EQ(vm::exp(inf), inf);
  EXPECT_EQ(vm::exp(89.0f), inf);
  EXPECT_TRUE(std::isnan(vm::exp(nan)));
  EXPECT_GT(vm::exp(-100.0f), 0.0f);  // subnormal results survive
  EXPECT_EQ(vm::log(0.0f), -inf);
  EXPECT_EQ(vm::log(inf), inf);
  EXPECT_TRUE(std::isnan(vm::log(-1.0f)));
  EXPECT_NEAR(vm::log(1e-42f), std::log(static_cast<double>(1e-42f)), 1e-5);  // subnormal input
  EXPECT_EQ(vm::tanh(inf), 1.0f);
  EXPECT_EQ(vm::tanh(-inf), -1.0f);
  EXPECT_EQ(vm::erf(inf), 1.0f);
  EXPECT_EQ(vm::erf(-5.0f), -1.0f);
  EXPECT_TRUE(std::isnan(vm::erf(nan)));
  EXPECT_EQ(vm::log1p(-1.0f), -inf);
}

// Every op and compute type: the AVX2 table agrees with the portable one (bit for bit for the
// ops without a vector body, within a few ulp for the vectorized transcendental ones).
TEST(Elementwise, PortableAndAvx2Agree) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "CPU without AVX2";
  SimdGuard guard;
  const int n = 1037;  // not a multiple of 8: exercises the vector tail
  std::vector<float> a = sample(-6.f, 6.f, n, 7), b = sample(0.25f, 4.f, n, 8),
                     c = sample(-2.f, 2.f, n, 9);
  a[3] = std::numeric_limits<float>::quiet_NaN();
  a[5] = std::numeric_limits<float>::infinity();
  a[6] = -0.0f;
  std::vector<uint8_t> cond(n);
  for (int i = 0; i < n; ++i) cond[i] = (i % 3) == 0;
  EwParams p;
  p.f[0] = 0.75;
  p.f[1] = 1.5;
  p.f[2] = 0.5;
  p.i[0] = 2;
  p.i[2] = 1;
  p.i[3] = 1;
  for (int o = 0; o < static_cast<int>(EwOp::kCount); ++o) {
    const EwOp op = static_cast<EwOp>(o);
    if (!elementwise_supports(op, DType::Float32)) continue;
    const int arity = ew_arity(op);
    std::vector<float> out[2];
    std::vector<uint8_t> bout[2];
    for (int pass = 0; pass < 2; ++pass) {
      set_simd_level(pass == 0 ? SimdLevel::Portable : SimdLevel::Avx2);
      out[pass].assign(n, 0.0f);
      bout[pass].assign(n, 0);
      // Predicates write bool; everything else fp32.
      const bool pred = op == EwOp::Eq || op == EwOp::Ne || op == EwOp::Lt || op == EwOp::Le ||
                        op == EwOp::Gt || op == EwOp::Ge || op == EwOp::IsNan ||
                        op == EwOp::IsInf || op == EwOp::IsFinite || op == EwOp::IsPosInf ||
                        op == EwOp::IsNegInf || op == EwOp::Signbit;
      TensorRef refs[4];
      refs[0] = pred ? ref1d(bout[pass].data(), DType::Bool, n)
                     : ref1d(out[pass].data(), DType::Float32, n);
      if (op == EwOp::Where) {
        refs[1] = ref1d(cond.data(), DType::Bool, n);
        refs[2] = ref1d(a.data(), DType::Float32, n);
        refs[3] = ref1d(b.data(), DType::Float32, n);
      } else {
        float* ins[3] = {a.data(), b.data(), c.data()};
        for (int k = 0; k < arity; ++k) refs[k + 1] = ref1d(ins[k], DType::Float32, n);
      }
      elementwise(op, DType::Float32, p, refs, arity + 1);
    }
    for (int i = 0; i < n; ++i) {
      const float x = out[0][i], y = out[1][i];
      if (std::isnan(x) || std::isnan(y)) {
        EXPECT_TRUE(std::isnan(x) && std::isnan(y))
            << ew_name(op) << " at " << i << ": " << x << " vs " << y;
      } else if (x != y) {
        const float tol = 4 * std::numeric_limits<float>::epsilon() * std::max(1.0f, std::fabs(x));
        EXPECT_NEAR(x, y, tol) << ew_name(op) << " at " << i << " a=" << a[i] << " b=" << b[i];
      }
      EXPECT_EQ(bout[0][i], bout[1][i]) << ew_name(op) << " at " << i;
    }
  }
}

TEST(Elementwise, BroadcastStridesAndMixedDtypes) {
  // out[3,4] (int64) = a[3,1] (int32, broadcast over columns) + b[4] (transposed-ish strides, bf16)
  std::vector<int32_t> a = {1, 2, 3};
  std::vector<uint16_t> b(8);
  for (int j = 0; j < 4; ++j) b[2 * j] = bf16(static_cast<float>(10 * (j + 1))).x;  // stride 2
  std::vector<float> out(12, -1.f);
  TensorRef o, ra, rb;
  o.data = out.data();
  o.dtype = DType::Float32;
  o.ndim = 2;
  o.sizes[0] = 3;
  o.sizes[1] = 4;
  o.strides[0] = 4;
  o.strides[1] = 1;
  ra = o;
  ra.data = a.data();
  ra.dtype = DType::Int32;
  ra.strides[0] = 1;
  ra.strides[1] = 0;
  rb = o;
  rb.data = b.data();
  rb.dtype = DType::BFloat16;
  rb.strides[0] = 0;
  rb.strides[1] = 2;
  EwParams p;
  p.f[0] = 2.0;
  p.i[0] = 2;
  const TensorRef refs[3] = {o, ra, rb};
  elementwise(EwOp::Add, DType::Float32, p, refs, 3);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(out[i * 4 + j], float(a[i] + 2 * 10 * (j + 1)));
}

TEST(Elementwise, IntegerSemantics) {
  std::vector<int32_t> a = {7, -7, 7, -7, std::numeric_limits<int32_t>::min()};
  std::vector<int32_t> b = {2, 2, -2, -2, -1};
  std::vector<int32_t> out(5);
  auto run = [&](EwOp op) {
    const TensorRef refs[3] = {ref1d(out.data(), DType::Int32, 5), ref1d(a.data(), DType::Int32, 5),
                               ref1d(b.data(), DType::Int32, 5)};
    elementwise(op, DType::Int32, EwParams{}, refs, 3);
    return out;
  };
  EXPECT_EQ(run(EwOp::DivFloor),
            (std::vector<int32_t>{3, -4, -4, 3, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(run(EwOp::DivTrunc),
            (std::vector<int32_t>{3, -3, -3, 3, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(run(EwOp::Remainder), (std::vector<int32_t>{1, 1, -1, -1, 0}));
  EXPECT_EQ(run(EwOp::Fmod), (std::vector<int32_t>{1, -1, 1, -1, 0}));
  b[1] = 0;
  EXPECT_THROW(run(EwOp::DivFloor), std::domain_error);
}

TEST(Convert, Bf16AndF16PathsAgree) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "CPU without AVX2";
  SimdGuard guard;
  std::vector<float> src = sample(-70000.f, 70000.f, 1003, 11);
  src[1] = std::numeric_limits<float>::quiet_NaN();
  src[2] = 1.00390625f;  // a bf16 tie
  src[3] = 3e-8f;        // fp16 subnormal
  for (DType t : {DType::BFloat16, DType::Float16}) {
    std::vector<uint16_t> h[2];
    std::vector<float> back[2];
    for (int pass = 0; pass < 2; ++pass) {
      set_simd_level(pass == 0 ? SimdLevel::Portable : SimdLevel::Avx2);
      h[pass].assign(src.size(), 0);
      back[pass].assign(src.size(), 0);
      find_convert(t, DType::Float32)(h[pass].data(), 2, src.data(), 4,
                                      static_cast<int64_t>(src.size()));
      find_convert(DType::Float32, t)(back[pass].data(), 4, h[pass].data(), 2,
                                      static_cast<int64_t>(src.size()));
    }
    for (size_t i = 0; i < src.size(); ++i) {
      if (std::isnan(src[i])) {
        EXPECT_TRUE(std::isnan(back[0][i]) && std::isnan(back[1][i]));
        continue;
      }
      EXPECT_EQ(h[0][i], h[1][i]) << dtype_name(t) << " " << src[i];
      EXPECT_EQ(back[0][i], back[1][i]);
    }
  }
}

// Contiguous all-bf16 (fp16) operands take the direct 16-bit path; a strided operand forces
// the converting buffers. Both must give the same bits.
TEST(Elementwise, Direct16BitPathMatchesBufferedPath) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "CPU without AVX2";
  SimdGuard guard;
  set_simd_level(SimdLevel::Avx2);
  const int n = 1029;
  std::vector<float> fa = sample(-6.f, 6.f, n, 21), fb = sample(0.25f, 4.f, n, 22),
                     fc = sample(-2.f, 2.f, n, 23);
  EwParams p;
  p.f[0] = 0.75;
  p.f[1] = 1.5;
  p.f[2] = 0.5;
  p.i[0] = 2;
  p.i[2] = 1;
  p.i[3] = 1;
  for (DType t : {DType::BFloat16, DType::Float16}) {
    // Inputs in 16 bits: contiguous copies and stride-2 copies of the same values.
    std::vector<uint16_t> in[3], in2[3];
    const std::vector<float>* src[3] = {&fa, &fb, &fc};
    for (int k = 0; k < 3; ++k) {
      in[k].assign(n, 0);
      in2[k].assign(2 * n, 0);
      find_convert(t, DType::Float32)(in[k].data(), 2, src[k]->data(), 4, n);
      find_convert(t, DType::Float32)(in2[k].data(), 4, src[k]->data(), 4, n);
    }
    int checked = 0;
    for (int o = 0; o < static_cast<int>(EwOp::kCount); ++o) {
      const EwOp op = static_cast<EwOp>(o);
      if (op == EwOp::Where || !elementwise_supports(op, DType::Float32)) continue;
      const int arity = ew_arity(op);
      const bool pred = op == EwOp::Eq || op == EwOp::Ne || op == EwOp::Lt || op == EwOp::Le ||
                        op == EwOp::Gt || op == EwOp::Ge || op == EwOp::IsNan ||
                        op == EwOp::IsInf || op == EwOp::IsFinite || op == EwOp::IsPosInf ||
                        op == EwOp::IsNegInf || op == EwOp::Signbit;
      if (pred) continue;
      std::vector<uint16_t> out[2] = {std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
      for (int pass = 0; pass < 2; ++pass) {
        TensorRef refs[4];
        refs[0] = ref1d(out[pass].data(), t, n);
        for (int k = 0; k < arity; ++k)
          refs[k + 1] = pass == 0 ? ref1d(in[k].data(), t, n) : ref1d(in2[k].data(), t, n, 2);
        elementwise(op, DType::Float32, p, refs, arity + 1);
      }
      for (int i = 0; i < n; ++i) {
        const bool nan0 = std::isnan(bf16_or_f16_to_float(t, out[0][i]));
        const bool nan1 = std::isnan(bf16_or_f16_to_float(t, out[1][i]));
        if (nan0 || nan1) {
          EXPECT_TRUE(nan0 && nan1) << ew_name(op) << " at " << i;
        } else {
          ASSERT_EQ(out[0][i], out[1][i]) << ew_name(op) << " " << dtype_name(t) << " at " << i;
        }
      }
      ++checked;
    }
    EXPECT_GT(checked, 40);
  }
}
