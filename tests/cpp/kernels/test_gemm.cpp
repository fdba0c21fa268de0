#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/blas.h"
#include "kernels/gemm.h"
#include "runtime/thread_pool.h"

using namespace neuron::kernels;

namespace {

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Double-precision reference on row-major dense matrices.
std::vector<double> naive(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += static_cast<double>(a[i * k + kk]) * b[kk * n + j];
      c[i * n + j] = s;
    }
  return c;
}

}  // namespace

TEST(Gemm, BlasIsFound) {
  // The build records the torch library directory, so MKL must be resolvable.
  EXPECT_NE(blas::functions().sgemm, nullptr) << blas::functions().source;
}

TEST(Gemm, Fp32MatchesNaiveForShapesAndLayouts) {
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1}, {3, 5, 7}, {64, 33, 129}, {1, 300, 64}, {300, 1, 64}}) {
    auto a = random_vec(static_cast<size_t>(m * k), 1), b = random_vec(static_cast<size_t>(k * n), 2);
    auto ref = naive(a, b, m, n, k);
    for (int layout = 0; layout < 2; ++layout) {
      // layout 1: B given transposed in memory ([n, k] storage) via strides
      std::vector<float> bstore = b;
      GemmProblem p;
      p.m = m; p.n = n; p.k = k;
      p.a = a.data(); p.a_rs = k; p.a_cs = 1;
      if (layout == 1) {
        for (int64_t kk = 0; kk < k; ++kk)
          for (int64_t j = 0; j < n; ++j) bstore[j * k + kk] = b[kk * n + j];
        p.b = bstore.data(); p.b_rs = 1; p.b_cs = k;
      } else {
        p.b = bstore.data(); p.b_rs = n; p.b_cs = 1;
      }
      std::vector<float> c(static_cast<size_t>(m * n), NAN);
      p.c = c.data(); p.c_rs = n; p.c_cs = 1;
      gemm(p);
      std::vector<float> c2(static_cast<size_t>(m * n), NAN);
      p.c = c2.data();
      gemm_reference(p);
      for (size_t i = 0; i < c.size(); ++i) {
        ASSERT_NEAR(c[i], ref[i], 1e-3 * (1 + std::fabs(ref[i]))) << m << "x" << n << "x" << k << " layout " << layout;
        ASSERT_NEAR(c2[i], ref[i], 1e-3 * (1 + std::fabs(ref[i])));
      }
    }
  }
}

TEST(Gemm, AlphaBetaAndStridedOutput) {
  const int64_t m = 4, n = 6, k = 5;
  auto a = random_vec(m * k, 3), b = random_vec(k * n, 4);
  auto ref = naive(a, b, m, n, k);
  // C stored transposed (column-major) with existing contents.
  std::vector<float> c(static_cast<size_t>(m * n), 1.0f);
  GemmProblem p;
  p.m = m; p.n = n; p.k = k;
  p.a = a.data(); p.a_rs = k;
  p.b = b.data(); p.b_rs = n;
  p.c = c.data(); p.c_rs = 1; p.c_cs = m;
  p.alpha = 2.0f; p.beta = 0.5f;
  gemm(p);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(c[j * m + i], 2.0 * ref[i * n + j] + 0.5, 1e-3);
}

TEST(Gemm, Bf16AccumulatesInFp32) {
  const int64_t m = 8, n = 16, k = 512;
  auto af = random_vec(m * k, 5), bf = random_vec(k * n, 6);
  std::vector<bf16> a(af.size()), b(bf.size());
  for (size_t i = 0; i < af.size(); ++i) { a[i] = bf16(af[i]); af[i] = a[i]; }
  for (size_t i = 0; i < bf.size(); ++i) { b[i] = bf16(bf[i]); bf[i] = b[i]; }
  auto ref = naive(af, bf, m, n, k);
  for (DType out : {DType::Float32, DType::BFloat16}) {
    std::vector<float> c32(m * n);
    std::vector<bf16> c16(m * n);
    GemmProblem p;
    p.m = m; p.n = n; p.k = k;
    p.a = a.data(); p.a_rs = k;
    p.b = b.data(); p.b_rs = n;
    p.in_dtype = DType::BFloat16; p.out_dtype = out;
    p.c = out == DType::Float32 ? static_cast<void*>(c32.data()) : static_cast<void*>(c16.data());
    p.c_rs = n;
    gemm(p);
    for (int64_t i = 0; i < m * n; ++i) {
      const double got = out == DType::Float32 ? c32[i] : static_cast<float>(c16[i]);
      // fp32 accumulation: error well below bf16 rounding of the sum; bf16 output adds one rounding.
      const double tol = out == DType::Float32 ? 1e-3 * (1 + std::fabs(ref[i])) : 1e-2 * (1 + std::fabs(ref[i]));
      ASSERT_NEAR(got, ref[i], tol);
    }
  }
}

TEST(Gemm, BatchedAndRejectsBadDtypes) {
  const int64_t bsz = 3, m = 2, n = 3, k = 4;
  auto a = random_vec(bsz * m * k, 7), b = random_vec(bsz * k * n, 8);
  std::vector<float> c(bsz * m * n);
  GemmProblem p;
  p.batch = bsz; p.m = m; p.n = n; p.k = k;
  p.a = a.data(); p.a_bs = m * k; p.a_rs = k;
  p.b = b.data(); p.b_bs = k * n; p.b_rs = n;
  p.c = c.data(); p.c_bs = m * n; p.c_rs = n;
  gemm(p);
  for (int64_t bi = 0; bi < bsz; ++bi) {
    std::vector<float> ab(a.begin() + bi * m * k, a.begin() + (bi + 1) * m * k);
    std::vector<float> bb(b.begin() + bi * k * n, b.begin() + (bi + 1) * k * n);
    auto ref = naive(ab, bb, m, n, k);
    for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(c[bi * m * n + i], ref[i], 1e-4);
  }
  p.in_dtype = DType::Int32;
  EXPECT_THROW(gemm(p), std::invalid_argument);
}

// Products large enough to be split into column (or row) blocks of C over the host pool, each
// block one single-threaded BLAS call: ragged blocks, both split directions, a strided output
// with alpha/beta (the buffered path) and 16-bit inputs. The split result equals one unsplit
// call (made from inside a parallel region, where gemm() never splits) bit for bit: every block
// is a whole number of 16-column groups, so the BLAS computes each element the same way.
TEST(Gemm, LargeProductsSplitOverThePoolMatchOneCall) {
  struct Shape { int64_t m, n, k; bool col_major_c; bool bf16_in; };
  for (const Shape s : std::vector<Shape>{{40, 520, 100, false, false}, {515, 48, 64, false, false},
                                          {33, 1030, 129, true, false}, {64, 384, 96, false, true}}) {
    auto af = random_vec(static_cast<size_t>(s.m * s.k), 11), bf = random_vec(static_cast<size_t>(s.k * s.n), 12);
    std::vector<bf16> a16(af.size()), b16(bf.size());
    if (s.bf16_in) {
      for (size_t i = 0; i < af.size(); ++i) { a16[i] = bf16(af[i]); af[i] = a16[i]; }
      for (size_t i = 0; i < bf.size(); ++i) { b16[i] = bf16(bf[i]); bf[i] = b16[i]; }
    }
    const auto ref = naive(af, bf, s.m, s.n, s.k);
    GemmProblem p;
    p.m = s.m; p.n = s.n; p.k = s.k;
    p.a = s.bf16_in ? static_cast<const void*>(a16.data()) : af.data(); p.a_rs = s.k;
    p.b = s.bf16_in ? static_cast<const void*>(b16.data()) : bf.data(); p.b_rs = s.n;
    p.in_dtype = s.bf16_in ? DType::BFloat16 : DType::Float32;
    p.out_dtype = DType::Float32;
    if (s.col_major_c) { p.c_rs = 1; p.c_cs = s.m; p.alpha = 0.5; p.beta = 2.0; } else { p.c_rs = s.n; }
    std::vector<float> split(static_cast<size_t>(s.m * s.n), 1.0f), one = split;
    p.c = split.data();
    gemm(p);
    p.c = one.data();
    neuron::rt::parallel_for(0, 1, 1, [&](int64_t, int64_t) { gemm(p); });
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        const size_t at = static_cast<size_t>(s.col_major_c ? j * s.m + i : i * s.n + j);
        const double want = p.alpha * ref[static_cast<size_t>(i * s.n + j)] + p.beta * 1.0;
        ASSERT_NEAR(split[at], want, 1e-3 * (1 + std::fabs(want))) << s.m << "x" << s.n << "x" << s.k;
        ASSERT_EQ(split[at], one[at]) << s.m << "x" << s.n << "x" << s.k << " at " << i << "," << j;
      }
  }
}
