// The runtime-dispatched AXPY kernels of the executor against their portable versions.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/simd.h"
#include "nki/simd.h"

namespace simd = neuron::nki::simd;

namespace {

uint16_t to_bf16(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }

}  // namespace

TEST(NkiSimd, AxpyMatchesPortableForEveryLength) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 127, 512, 1000}) {
    std::vector<float> x(static_cast<size_t>(n)), y0(static_cast<size_t>(n)), y1, y2;
    std::vector<uint16_t> xb(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      x[i] = nd(rng);
      y0[i] = nd(rng);
      xb[i] = to_bf16(x[i]);
    }
    const float a = 0.37f;
    y1 = y0;
    y2 = y0;
    simd::axpy_f32(y1.data(), a, x.data(), n);
    simd::axpy_f32_portable(y2.data(), a, x.data(), n);
    // FMA (one rounding) vs multiply-then-add (two): at most an ulp apart.
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y1[i], y2[i], 1e-6f * (1 + std::fabs(y2[i]))) << n << " " << i;
    y1 = y0;
    y2 = y0;
    simd::axpy_bf16(y1.data(), a, xb.data(), n);
    simd::axpy_bf16_portable(y2.data(), a, xb.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(y1[i], y2[i], 1e-6f * (1 + std::fabs(y2[i]))) << n << " " << i;
      // the bf16 operand is the exact bf16 value of x (truncated bits)
      const float xv = std::bit_cast<float>(static_cast<uint32_t>(xb[i]) << 16);
      EXPECT_NEAR(y2[i], y0[i] + a * xv, 1e-6f * (1 + std::fabs(y2[i])));
    }
  }
}

TEST(NkiSimd, FollowsTheKernelsSimdLevel) {
  // AVX2 exactly when the kernels use it (the host has AVX2+FMA+F16C and NEURON_EMU_SIMD is not
  // `portable`).
  EXPECT_EQ(simd::using_avx2(), neuron::kernels::simd_level() == neuron::kernels::SimdLevel::Avx2);
  if (simd::using_avx512()) {
    EXPECT_TRUE(simd::using_avx2());
  }
}

// The GEMVs must compute exactly what K axpy calls into a zeroed accumulator compute (the
// executor's thin matmuls were AXPYs; results must not change by a bit), in every layout:
// row-contiguous, column-contiguous (a matrix read transposed in place) and strided.
TEST(NkiSimd, GemvIsBitIdenticalToAxpy) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  // K >= 32 and n >= 16 take the AVX-512 column-contiguous path where the CPU has it (32-k
  // steps, a scalar k tail, 16-column blocks, the AVX2 path for the last columns).
  for (int64_t K : {1, 5, 8, 13, 32, 45, 64, 128, 200}) {
    for (int64_t n : {1, 7, 8, 16, 31, 32, 64, 65, 80, 128, 200}) {
      // w stored [n, Kp] row-major (column-contiguous for the GEMV) and [K, np] (row-contiguous)
      const int64_t Kp = K + 3, np = n + 5;
      std::vector<float> coef(static_cast<size_t>(K)), wf(static_cast<size_t>(K * n));
      for (auto& c : coef) c = nd(rng);
      for (auto& v : wf) v = nd(rng);
      std::vector<uint16_t> colsT(static_cast<size_t>(n * Kp)), rows(static_cast<size_t>(K * np));
      std::vector<float> colsTf(static_cast<size_t>(n * Kp)), rowsf(static_cast<size_t>(K * np));
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < n; ++j) {
          const float v = wf[k * n + j];
          colsT[j * Kp + k] = rows[k * np + j] = to_bf16(v);
          colsTf[j * Kp + k] = rowsf[k * np + j] = v;
        }
      std::vector<float> ref(static_cast<size_t>(n), 0.0f), reff(static_cast<size_t>(n), 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        simd::axpy_bf16(ref.data(), coef[k], rows.data() + k * np, n);
        simd::axpy_f32(reff.data(), coef[k], rowsf.data() + k * np, n);
      }
      auto bytes = [](const auto& v) { return reinterpret_cast<const uint8_t*>(v.data()); };
      std::vector<float> out(static_cast<size_t>(n), -1.0f);
      simd::gemv_bf16(out.data(), coef.data(), bytes(rows), np * 2, 2, K, n);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(out[j], ref[j]) << "rows K=" << K << " n=" << n;
      simd::gemv_bf16(out.data(), coef.data(), bytes(colsT), 2, Kp * 2, K, n);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(out[j], ref[j]) << "colsT K=" << K << " j=" << j;
      simd::gemv_f32(out.data(), coef.data(), bytes(rowsf), np * 4, 4, K, n);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(out[j], reff[j]) << "f32 rows K=" << K;
      simd::gemv_f32(out.data(), coef.data(), bytes(colsTf), 4, Kp * 4, K, n);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(out[j], reff[j]) << "f32 colsT K=" << K;
      // the portable GEMV is the portable AXPY loop
      std::fill(ref.begin(), ref.end(), 0.0f);
      for (int64_t k = 0; k < K; ++k)
        simd::axpy_bf16_portable(ref.data(), coef[k], rows.data() + k * np, n);
      simd::gemv_bf16_portable(out.data(), coef.data(), bytes(colsT), 2, Kp * 2, K, n);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(out[j], ref[j]) << "portable K=" << K;
    }
  }
}

// Several GEMVs over the same w (the thin operand's rows of a matmul) give, row by row, exactly
// what one GEMV per row gives, for every row count and layout.
TEST(NkiSimd, MultiRowGemvIsBitIdenticalToOneRowAtATime) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (int64_t rows : {1, 2, 3, 5, 8, 11, 16}) {
    for (int64_t n : {1, 7, 8, 16, 20, 40, 64, 130}) {
      const int64_t K = 37, np = n + 3;
      std::vector<float> coef(static_cast<size_t>(rows * K)), wf(static_cast<size_t>(K * np));
      for (auto& c : coef) c = nd(rng);
      for (auto& v : wf) v = nd(rng);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = to_bf16(wf[i]);
      const int64_t lda = n + 5;
      std::vector<float> got(static_cast<size_t>(rows * lda), -7.0f), ref(static_cast<size_t>(n));
      const auto* wb8 = reinterpret_cast<const uint8_t*>(wb.data());
      const auto* wf8 = reinterpret_cast<const uint8_t*>(wf.data());
      simd::gemv_rows_bf16(got.data(), lda, coef.data(), rows, wb8, np * 2, 2, K, n);
      for (int64_t r = 0; r < rows; ++r) {
        simd::gemv_bf16(ref.data(), coef.data() + r * K, wb8, np * 2, 2, K, n);
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got[r * lda + j], ref[j]) << rows << " " << n;
        ASSERT_EQ(got[r * lda + n], -7.0f);  // nothing written past the row
      }
      simd::gemv_rows_f32(got.data(), lda, coef.data(), rows, wf8, np * 4, 4, K, n);
      for (int64_t r = 0; r < rows; ++r) {
        simd::gemv_f32(ref.data(), coef.data() + r * K, wf8, np * 4, 4, K, n);
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got[r * lda + j], ref[j]) << "f32 " << rows;
      }
    }
  }
}

// A GEMV chain (the matmuls of one projection over consecutive k ranges) gives each member
// exactly what its own GEMV gives: every chain length (4-lane groups and their remainders),
// column count (16-column blocks and the tail) and k tail, members adjacent in memory (one
// weight matrix's k chunks) or not.
TEST(NkiSimd, GemvChainIsBitIdenticalToOneGemvPerMember) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd;
  for (int64_t L : {1, 2, 3, 4, 5, 8, 9}) {
    for (int64_t n : {7, 16, 31, 64, 200}) {
      for (int64_t K : {8, 32, 45, 128}) {
        for (int layout = 0; layout < 4; ++layout) {
          // [n, row] bf16 rows; member l reads k range [l * K, l * K + K) of each row (adjacent)
          // or row range of its own matrix (not adjacent); short (K + 5 or L * K + 3) and long
          // (>= 2 KiB) rows, K >= 32 through the chain kernel, K = 8 one GEMV per member.
          const bool adjacent = layout % 2 == 0, long_rows = layout >= 2;
          const int64_t row = std::max<int64_t>(adjacent ? L * K + 3 : K + 5, long_rows ? 1030 : 0);
          const int64_t mats = adjacent ? 1 : L;
          std::vector<uint16_t> w(static_cast<size_t>(mats * n * row));
          for (auto& v : w) v = to_bf16(nd(rng));
          std::vector<float> coef(static_cast<size_t>(L * K));
          for (auto& c : coef) c = nd(rng);
          const auto* w8 = reinterpret_cast<const uint8_t*>(w.data());
          std::vector<float> got(static_cast<size_t>(L * (n + 1)), -7.0f), ref(static_cast<size_t>(n));
          std::vector<float*> acc(static_cast<size_t>(L));
          std::vector<const float*> cf(static_cast<size_t>(L));
          std::vector<const uint8_t*> wp(static_cast<size_t>(L));
          for (int64_t l = 0; l < L; ++l) {
            acc[l] = got.data() + l * (n + 1);
            cf[l] = coef.data() + l * K;
            wp[l] = adjacent ? w8 + l * K * 2 : w8 + l * n * row * 2;
          }
          simd::gemv_chain_bf16(acc.data(), cf.data(), wp.data(), L, 2, row * 2, K, n);
          for (int64_t l = 0; l < L; ++l) {
            simd::gemv_bf16(ref.data(), cf[l], wp[l], 2, row * 2, K, n);
            for (int64_t j = 0; j < n; ++j)
              ASSERT_EQ(acc[l][j], ref[j]) << "L=" << L << " n=" << n << " K=" << K << " l=" << l;
            ASSERT_EQ(acc[l][n], -7.0f);  // nothing written past the member's columns
          }
          // The first h columns, prefetching the weights of the others (the next work item's):
          // the same bits, nothing written past column h.
          const int64_t h = n / 2;
          std::fill(got.begin(), got.end(), -7.0f);
          simd::gemv_chain_bf16(acc.data(), cf.data(), wp.data(), L, 2, row * 2, K, h, n - h);
          for (int64_t l = 0; l < L; ++l) {
            simd::gemv_bf16(ref.data(), cf[l], wp[l], 2, row * 2, K, n);
            for (int64_t j = 0; j < h; ++j)
              ASSERT_EQ(acc[l][j], ref[j]) << "ahead L=" << L << " n=" << n << " K=" << K;
            ASSERT_EQ(acc[l][h], -7.0f);
          }
        }
      }
    }
  }
}

// A GEMV that prefetches the next GEMV's weights (the next item of a matmul run) gives the bits
// of the plain one: every column count (16-column blocks, the tail), k tail, and next
// weights elsewhere in the same matrix, in another buffer or none.
TEST(NkiSimd, GemvThenIsBitIdenticalToGemv) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  for (int64_t n : {7, 16, 64, 100, 128}) {
    for (int64_t K : {8, 32, 45, 128}) {
      const int64_t row = 4 * K + 3;  // [n, row] bf16, read transposed: ks = 2, js = row * 2
      std::vector<uint16_t> w(static_cast<size_t>(n * row)), other(static_cast<size_t>(n * row));
      for (auto& v : w) v = to_bf16(nd(rng));
      for (auto& v : other) v = to_bf16(nd(rng));
      std::vector<float> coef(static_cast<size_t>(K));
      for (auto& c : coef) c = nd(rng);
      const auto* w8 = reinterpret_cast<const uint8_t*>(w.data());
      const auto* o8 = reinterpret_cast<const uint8_t*>(other.data());
      std::vector<float> ref(static_cast<size_t>(n));
      simd::gemv_bf16(ref.data(), coef.data(), w8, 2, row * 2, K, n);
      for (const uint8_t* next : {static_cast<const uint8_t*>(nullptr), w8 + K * 2, o8, o8 + 6}) {
        std::vector<float> got(static_cast<size_t>(n + 1), -7.0f);
        simd::gemv_bf16_then(got.data(), coef.data(), w8, row * 2, K, n, next);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(got[j], ref[j]) << "n=" << n << " K=" << K << " j=" << j;
        ASSERT_EQ(got[n], -7.0f);
      }
    }
  }
}
