// The Tensor Engine's thick-matmul micro-kernels (simd::matmul_f32: AVX-512 or AVX2 where the
// host has them) against their portable version and against kernels::gemm's BLAS route (what
// nc_matmul computed before the micro-kernel existed): the same bits on edge shapes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/simd.h"
#include "nki/simd.h"
#include "nki/simd_matmul.h"

namespace simd = neuron::nki::simd;
namespace kernels = neuron::kernels;

namespace {

// Values an on-chip operand can hold, widened to fp32: bf16 (8 significant bits), an fp8
// e4m3-like grid (4 bits, small range) or any fp32.
enum class Operand { Bf16, Fp8, Fp32 };

float quantize(float x, Operand t) {
  if (t == Operand::Fp32) return x;
  const int keep = t == Operand::Bf16 ? 7 : 3;  // explicit mantissa bits kept
  uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t drop = 23 - keep, half = 1u << (drop - 1);
  u = (u + half - 1 + ((u >> drop) & 1)) & ~((1u << drop) - 1);  // round to nearest even
  float y = std::bit_cast<float>(u);
  if (t == Operand::Fp8) y = std::fmax(-448.0f, std::fmin(448.0f, y));
  return y;
}

std::vector<float> random(int64_t n, Operand t, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = quantize(nd(rng), t);
  return v;
}

// C (+)= A^T B through kernels::gemm, laid out as the executor calls it.
void via_gemm(std::vector<float>& C, const std::vector<float>& A, const std::vector<float>& B,
              int64_t M, int64_t K, int64_t N, bool acc) {
  kernels::GemmProblem g;
  g.m = M;
  g.n = N;
  g.k = K;
  g.a = A.data();
  g.a_rs = 1;
  g.a_cs = M;
  g.b = B.data();
  g.b_rs = N;
  g.b_cs = 1;
  g.c = C.data();
  g.c_rs = N;
  g.c_cs = 1;
  g.beta = acc ? 1.0 : 0.0;
  kernels::gemm(g);
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y, std::string* where) {
  for (size_t i = 0; i < x.size(); ++i)
    if (std::bit_cast<uint32_t>(x[i]) != std::bit_cast<uint32_t>(y[i])) {
      *where = "element " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " +
               std::to_string(y[i]);
      return false;
    }
  return true;
}

simd::MatmulOperand f32(const std::vector<float>& v, int64_t cols) {
  return {reinterpret_cast<const uint8_t*>(v.data()), cols * 4, false};
}
simd::MatmulOperand bf16(const std::vector<uint16_t>& v, int64_t cols) {
  return {reinterpret_cast<const uint8_t*>(v.data()), cols * 2, true};
}
// The raw bf16 patterns of bf16-valued floats.
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v[i]) >> 16);
  return out;
}

struct Shape {
  int64_t M, K, N;
};

const Shape kShapes[] = {{1, 1, 1},     {5, 3, 17},     {7, 128, 63},   {6, 128, 64},
                         {13, 64, 100}, {17, 33, 129},  {128, 128, 512}, {128, 256, 512},
                         {127, 128, 511}, {64, 1, 80},  {64, 2, 80},    {40, 4, 33},
                         {32, 8, 40},   {128, 128, 48}, {3, 200, 300}};

}  // namespace

TEST(NkiSimd, MatmulTileMatchesPortableAndGemm) {
  std::mt19937 rng(11);
  for (Operand t : {Operand::Bf16, Operand::Fp8, Operand::Fp32})
    for (const Shape& s : kShapes)
      for (bool acc : {false, true}) {
        const auto A = random(s.K * s.M, t, rng), B = random(s.K * s.N, t, rng);
        const auto C0 = random(s.M * s.N, Operand::Fp32, rng);
        auto c_simd = C0, c_port = C0, c_gemm = C0;
        simd::matmul_f32(c_simd.data(), s.N, f32(A, s.M), f32(B, s.N), s.M, s.K, 0, s.N, acc);
        simd::matmul_f32_portable(c_port.data(), s.N, f32(A, s.M), f32(B, s.N), s.M, s.K, 0, s.N,
                                  acc);
        via_gemm(c_gemm, A, B, s.M, s.K, s.N, acc);
        const std::string what = "operand " + std::to_string(static_cast<int>(t)) + " shape " +
                                 std::to_string(s.M) + "x" + std::to_string(s.K) + "x" +
                                 std::to_string(s.N) + " accumulate " + std::to_string(acc);
        std::string where;
        EXPECT_TRUE(same_bits(c_simd, c_port, &where)) << what << " simd vs portable " << where;
        if (kernels::simd_detected() == kernels::SimdLevel::Avx2) {
          auto c_avx2 = C0;
          simd::matmul_f32_avx2(c_avx2.data(), s.N, f32(A, s.M), f32(B, s.N), s.M, s.K, 0, s.N,
                                acc);
          EXPECT_TRUE(same_bits(c_avx2, c_port, &where)) << what << " avx2 vs portable " << where;
        }
        if (t == Operand::Bf16) {  // bf16 tiles read in place: widened exactly while packed
          const auto Ab = to_bf16(A), Bb = to_bf16(B);
          auto c_b = C0, c_bp = C0, c_mixed = C0;
          simd::matmul_f32(c_b.data(), s.N, bf16(Ab, s.M), bf16(Bb, s.N), s.M, s.K, 0, s.N, acc);
          simd::matmul_f32_portable(c_bp.data(), s.N, bf16(Ab, s.M), bf16(Bb, s.N), s.M, s.K, 0,
                                    s.N, acc);
          simd::matmul_f32(c_mixed.data(), s.N, f32(A, s.M), bf16(Bb, s.N), s.M, s.K, 0, s.N, acc);
          EXPECT_TRUE(same_bits(c_simd, c_b, &where)) << what << " bf16 in place " << where;
          EXPECT_TRUE(same_bits(c_simd, c_bp, &where)) << what << " bf16 portable " << where;
          EXPECT_TRUE(same_bits(c_simd, c_mixed, &where)) << what << " fp32 x bf16 " << where;
        }
        // kernels::gemm takes its BLAS route where neither side is thin; that is the route
        // nc_matmul uses the micro-kernel for.
        kernels::GemmProblem shape;
        shape.m = s.M;
        shape.n = s.N;
        shape.k = s.K;
        // (K = 1 onto PSUM: the BLAS fuses the one product into C, fma(a, b, C), which fp32
        // operands show; nc_matmul keeps that case on kernels::gemm. Contractions beyond one
        // tile's 128 partitions (double_row matmuls) never take the BLAS: MKL on AMD Zen 4 splits
        // a 256-long k range into two chains.)
        if (std::string(kernels::gemm_route(shape)) == "blas" && !(s.K == 1 && acc) &&
            s.K <= 128) {
          EXPECT_TRUE(same_bits(c_simd, c_gemm, &where)) << what << " simd vs gemm " << where;
        }
      }
}

TEST(NkiSimd, MatmulTileColumnRangesWriteOnlyTheirColumns) {
  std::mt19937 rng(5);
  const int64_t M = 19, K = 40, N = 150;
  const auto A = random(K * M, Operand::Bf16, rng), B = random(K * N, Operand::Bf16, rng);
  const auto C0 = random(M * N, Operand::Fp32, rng);
  auto whole = C0;
  simd::matmul_f32(whole.data(), N, f32(A, M), f32(B, N), M, K, 0, N, true);
  auto split = C0;
  for (int64_t n0 : {0, 37, 64, 128}) {
    const int64_t n1 = n0 == 0 ? 37 : n0 == 37 ? 64 : n0 == 64 ? 128 : N;
    auto part = C0;
    simd::matmul_f32(part.data(), N, f32(A, M), f32(B, N), M, K, n0, n1, true);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const size_t e = static_cast<size_t>(i * N + j);
        if (j < n0 || j >= n1)
          EXPECT_EQ(std::bit_cast<uint32_t>(part[e]), std::bit_cast<uint32_t>(C0[e]))
              << i << " " << j;
        else
          split[e] = part[e];
      }
  }
  std::string where;
  EXPECT_TRUE(same_bits(whole, split, &where)) << where;
}

// Odd shapes as tiles hold them: 1..128 partitions of contraction and of stationary columns,
// moving widths that are no multiple of a vector or a panel, rows a padded SBUF pitch or a power
// of two apart, bf16
// and fp32 operands: every micro-kernel (and two threads sharing one product panel by panel)
// gives the scalar reference's bits.
TEST(NkiSimd, MatmulMicroKernelsMatchScalarOnOddShapes) {
  std::mt19937 rng(23);
  const Shape shapes[] = {{1, 1, 1},      {1, 128, 17},   {2, 5, 511},    {7, 1, 47},
                          {8, 2, 49},     {9, 127, 95},   {15, 64, 33},   {16, 3, 97},
                          {23, 128, 500}, {31, 17, 145},  {33, 100, 1},   {63, 128, 300},
                          {65, 9, 15},    {100, 33, 250}, {127, 128, 512}, {128, 1, 23},
                          {128, 128, 31}, {128, 128, 145}, {128, 77, 512}};
  const bool avx2 = kernels::simd_detected() == kernels::SimdLevel::Avx2;
  for (const Shape& s : shapes)
    for (bool use_bf16 : {true, false})
      for (bool acc : {false, true}) {
        const Operand t = use_bf16 ? Operand::Bf16 : Operand::Fp32;
        // Rows a padded pitch apart (not the packed width), as SBUF partitions are.
        // Every other shape: rows a power of two apart, as an HBM tensor read in place (the
        // AVX-512 kernel packs those panels instead of reading them in place).
        const bool pow2 = (s.M + s.N) % 2 == 0;
        const int64_t lda = s.M + 3, ldb = pow2 ? std::bit_ceil(static_cast<uint64_t>(s.N) + 32)
                                                : s.N + 5,
                      ldc = s.N + 7;
        const auto A = random(s.K * lda, t, rng), B = random(s.K * ldb, t, rng);
        const auto C0 = random(s.M * ldc, Operand::Fp32, rng);
        const auto Ab = to_bf16(A), Bb = to_bf16(B);
        const simd::MatmulOperand a = use_bf16 ? bf16(Ab, lda) : f32(A, lda);
        const simd::MatmulOperand b = use_bf16 ? bf16(Bb, ldb) : f32(B, ldb);
        auto ref = C0;  // the scalar chain, element by element
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j) {
            float v = 0.0f;
            for (int64_t k = 0; k < s.K; ++k) v = std::fma(A[k * lda + i], B[k * ldb + j], v);
            float& c = ref[static_cast<size_t>(i * ldc + j)];
            c = acc ? v + c : v;
          }
        const std::string what = std::string(use_bf16 ? "bf16 " : "fp32 ") + std::to_string(s.M) +
                                 "x" + std::to_string(s.K) + "x" + std::to_string(s.N) +
                                 " accumulate " + std::to_string(acc);
        std::string where;
        auto c = C0;
        simd::matmul_f32(c.data(), ldc, a, b, s.M, s.K, 0, s.N, acc);
        EXPECT_TRUE(same_bits(c, ref, &where)) << what << " " << simd::matmul_kernel() << " " << where;
        c = C0;
        simd::matmul_f32_portable(c.data(), ldc, a, b, s.M, s.K, 0, s.N, acc);
        EXPECT_TRUE(same_bits(c, ref, &where)) << what << " portable " << where;
        if (avx2) {
          c = C0;
          simd::matmul_f32_avx2(c.data(), ldc, a, b, s.M, s.K, 0, s.N, acc);
          EXPECT_TRUE(same_bits(c, ref, &where)) << what << " avx2 " << where;
        }
        c = C0;
        simd::MatmulPanels panels;
        std::thread helper(
            [&] { simd::matmul_f32_shared(c.data(), ldc, a, b, s.M, s.K, s.N, acc, panels); });
        simd::matmul_f32_shared(c.data(), ldc, a, b, s.M, s.K, s.N, acc, panels);
        helper.join();
        EXPECT_TRUE(same_bits(c, ref, &where)) << what << " shared by two threads " << where;
      }
}

TEST(NkiSimd, MatmulTileFollowsTheSimdLevel) {
  const auto saved = kernels::simd_level();
  kernels::set_simd_level(kernels::SimdLevel::Portable);
  EXPECT_FALSE(simd::matmul_uses_micro_kernel());
  EXPECT_STREQ(simd::matmul_kernel(), "portable");
  kernels::set_simd_level(saved);
  const char* expected = saved == kernels::SimdLevel::Portable ? "portable"
                         : simd::cpu_has_avx512()              ? "avx512"
                                                               : "avx2";
  EXPECT_STREQ(simd::matmul_kernel(), expected);
  EXPECT_EQ(simd::matmul_uses_micro_kernel(), saved != kernels::SimdLevel::Portable);
}
