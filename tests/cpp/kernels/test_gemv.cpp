// The small-side GEMM kernels (decode-time GEMV): the AVX2 path against the portable path and
// a double-precision reference, for both operand layouts, every supported dtype, odd sizes,
// strided outputs, alpha/beta and batches; and gemm()'s routing to them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/simd.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"

using namespace neuron::kernels;

namespace {

template <typename T>
std::vector<T> random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(g));
  return v;
}

struct Case {
  int64_t batch, m, n, k;
  bool dot;  // B given as the transpose of a row-major [n, k] matrix
};

template <typename T>
void check_case(const Case& cs, DType dt, DType out_dt, double alpha, double beta) {
  const int64_t B = cs.batch, m = cs.m, n = cs.n, k = cs.k;
  auto a = random_vec<T>(static_cast<size_t>(B * m * k), 1);
  auto b = random_vec<T>(static_cast<size_t>(B * k * n), 2);
  GemmProblem p;
  p.batch = B;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a.data();
  p.a_bs = m * k;
  p.a_rs = k;
  p.a_cs = 1;
  p.b = b.data();
  p.b_bs = k * n;
  if (cs.dot) {
    p.b_rs = 1;
    p.b_cs = k;
  } else {
    p.b_rs = n;
    p.b_cs = 1;
  }
  // C with a padded row stride, pre-filled so that beta matters.
  const int64_t ldc = n + 3;
  p.c_bs = m * ldc;
  p.c_rs = ldc;
  p.c_cs = 1;
  p.in_dtype = dt;
  p.out_dtype = out_dt;
  p.alpha = alpha;
  p.beta = beta;
  ASSERT_TRUE(gemm_small_m_supported(p));
  const size_t csize = static_cast<size_t>(B * m * ldc);
  auto run = [&](SimdLevel isa) {
    std::vector<float> c32(csize, 0.5f);
    std::vector<T> c16(csize, T(0.5f));
    if (out_dt == DType::Float32) {
      p.c = c32.data();
    } else {
      p.c = c16.data();
    }
    gemm_small_m(p, isa);
    std::vector<double> r(csize);
    for (size_t i = 0; i < csize; ++i)
      r[i] = out_dt == DType::Float32 ? c32[i] : static_cast<float>(c16[i]);
    return r;
  };
  const auto portable = run(SimdLevel::Portable);
  const auto best = run(simd_level());
  // Reference in double from the (already rounded) inputs.
  const double out_eps = out_dt == DType::BFloat16  ? 1.0 / 128
                         : out_dt == DType::Float16 ? 1.0 / 1024
                                                    : 1e-6;
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double av = static_cast<float>(a[static_cast<size_t>(bi * m * k + i * k + kk)]);
          const double bv = static_cast<float>(
              b[static_cast<size_t>(bi * k * n + (cs.dot ? j * k + kk : kk * n + j))]);
          s += av * bv;
          mag += std::fabs(av * bv);
        }
        const double ref = alpha * s + beta * 0.5;
        const size_t idx = static_cast<size_t>(bi * m * ldc + i * ldc + j);
        // fp32 accumulation error grows with sqrt(k) * |terms|; plus output rounding.
        const double tol =
            1e-5 * mag * std::sqrt(static_cast<double>(k)) + out_eps * std::fabs(ref) + 1e-5;
        ASSERT_NEAR(best[idx], ref, tol)
            << "b" << bi << " i" << i << " j" << j << " " << m << "x" << n << "x" << k;
        ASSERT_NEAR(portable[idx], ref, tol);
        ASSERT_NEAR(best[idx], portable[idx], 2 * tol);
      }
  // The padding columns of C are never written.
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = n; j < ldc; ++j)
        ASSERT_EQ(best[static_cast<size_t>(bi * m * ldc + i * ldc + j)], 0.5);
}

const std::vector<Case> kCases = {
    {1, 1, 1, 1, true},     {1, 1, 37, 13, true},     {1, 3, 70, 100, true}, {2, 5, 33, 129, true},
    {1, 8, 17, 8, true},    {1, 1, 2048, 512, true},  {1, 1, 37, 13, false}, {1, 2, 130, 9, false},
    {3, 5, 200, 31, false}, {1, 1, 1000, 300, false},
};

}  // namespace

TEST(Gemv, Bf16MatchesReferenceBothLayouts) {
  for (const auto& c : kCases) check_case<bf16>(c, DType::BFloat16, DType::BFloat16, 1.0, 0.0);
}

TEST(Gemv, Bf16ToFp32WithAlphaBeta) {
  for (const auto& c : kCases) check_case<bf16>(c, DType::BFloat16, DType::Float32, 0.5, 2.0);
}

TEST(Gemv, Fp16AndFp32) {
  for (const auto& c : kCases) {
    check_case<f16>(c, DType::Float16, DType::Float16, 1.0, 1.0);
    check_case<float>(c, DType::Float32, DType::Float32, 1.5, 0.0);
  }
}

TEST(Gemv, GemmRoutesSmallSidesToTheGemvKernels) {
  std::vector<bf16> a(4 * 64), w(256 * 64), c(4 * 256);
  GemmProblem p;
  p.m = 4;
  p.n = 256;
  p.k = 64;
  p.a = a.data();
  p.a_rs = 64;
  p.b = w.data();
  p.b_rs = 1;
  p.b_cs = 64;
  p.c = c.data();
  p.c_rs = 256;
  p.in_dtype = p.out_dtype = DType::BFloat16;
  EXPECT_STREQ(gemm_route(p), "small");
  // W @ x^T: the small side is n; gemm() transposes the problem.
  GemmProblem q;
  q.m = 256;
  q.n = 1;
  q.k = 64;
  q.a = w.data();
  q.a_rs = 64;
  q.b = a.data();
  q.b_rs = 1;
  q.b_cs = 64;
  q.c = c.data();
  q.c_rs = 1;
  q.c_cs = 1;
  q.in_dtype = q.out_dtype = DType::BFloat16;
  EXPECT_STREQ(gemm_route(q), "small");
  p.m = 300;
  p.n = 300;
  EXPECT_STRNE(gemm_route(p), "small");
  p.in_dtype = p.out_dtype = DType::Float64;
  p.m = 1;
  EXPECT_STRNE(gemm_route(p), "small");
}

TEST(Gemv, TransposedRouteMatchesReference) {
  // y[n, 1] = W[n, k] @ x[k, 1] through gemm() (routed as the transpose) vs gemm_reference.
  const int64_t n = 300, k = 77;
  auto w = random_vec<bf16>(static_cast<size_t>(n * k), 5);
  auto x = random_vec<bf16>(static_cast<size_t>(k), 6);
  std::vector<float> y1(static_cast<size_t>(n)), y2(static_cast<size_t>(n));
  GemmProblem p;
  p.m = n;
  p.n = 1;
  p.k = k;
  p.a = w.data();
  p.a_rs = k;
  p.a_cs = 1;
  p.b = x.data();
  p.b_rs = 1;
  p.b_cs = 1;
  p.c = y1.data();
  p.c_rs = 1;
  p.c_cs = 1;
  p.in_dtype = DType::BFloat16;
  p.out_dtype = DType::Float32;
  gemm(p);
  p.c = y2.data();
  gemm_reference(p);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(y1[static_cast<size_t>(i)], y2[static_cast<size_t>(i)], 1e-3);
}
