// The runtime-dispatched AXPY kernels of the executor against their portable versions.
#include <gtest/gtest.h>

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
}
