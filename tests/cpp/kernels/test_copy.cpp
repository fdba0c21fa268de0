#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/copy.h"
#include "kernels/dtype.h"

using namespace neuron::kernels;

namespace {
TensorRef ref2d(void* data, DType t, int64_t r, int64_t c, int64_t rs, int64_t cs) {
  TensorRef x;
  x.data = data;
  x.dtype = t;
  x.ndim = 2;
  x.sizes[0] = r;
  x.sizes[1] = c;
  x.strides[0] = rs;
  x.strides[1] = cs;
  return x;
}
}  // namespace

TEST(Copy, TransposeAndBroadcast) {
  std::vector<float> src(12);
  for (int i = 0; i < 12; ++i) src[i] = static_cast<float>(i);
  std::vector<float> dst(12, -1);
  // dst[4,3] = src viewed as [3,4] transposed
  copy(ref2d(dst.data(), DType::Float32, 4, 3, 3, 1), ref2d(src.data(), DType::Float32, 4, 3, 1, 4));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(dst[i * 3 + j], src[j * 4 + i]);
  // broadcast a row (stride 0 along rows)
  copy(ref2d(dst.data(), DType::Float32, 4, 3, 3, 1), ref2d(src.data(), DType::Float32, 4, 3, 0, 1));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(dst[i * 3 + j], src[j]);
}

// The tiled transpose path (large, same dtype) and the dim reordering (column-major views copy
// in memory order), every tile edge included: 100 x 70 is no multiple of 8 or 32.
TEST(Copy, TiledTransposeAndColumnMajorViews) {
  const int64_t R = 100, C = 70;
  std::vector<uint16_t> src(R * C), dst(R * C);
  for (int64_t i = 0; i < R * C; ++i) src[i] = static_cast<uint16_t>(i * 7 + 3);
  // dst[C, R] row-major = src[R, C]^T
  copy(ref2d(dst.data(), DType::BFloat16, C, R, R, 1), ref2d(src.data(), DType::BFloat16, C, R, 1, C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < R; ++r) ASSERT_EQ(dst[c * R + r], src[r * C + c]) << c << "," << r;
  // Both column-major (strides [1, R]): a plain copy of the block.
  std::fill(dst.begin(), dst.end(), 0);
  copy(ref2d(dst.data(), DType::BFloat16, R, C, 1, R), ref2d(src.data(), DType::BFloat16, R, C, 1, R));
  EXPECT_EQ(dst, src);
  // fp32 with a conversion keeps the row loops: bf16 -> fp32 transposed.
  std::vector<float> f(R * C);
  copy(ref2d(f.data(), DType::Float32, C, R, R, 1), ref2d(src.data(), DType::BFloat16, C, R, 1, C));
  for (int64_t c = 0; c < C; ++c) {
    uint32_t bits = static_cast<uint32_t>(src[5 * C + c]) << 16;
    float want;
    std::memcpy(&want, &bits, 4);
    EXPECT_EQ(f[c * R + 5], want);
  }
}

TEST(Copy, ConversionsRoundLikeAten) {
  const float vals[] = {1.0f, 1.00390625f, 1.01171875f, -3.14159f, 65504.0f, 1e-8f, 0.0f};
  for (float v : vals) {
    bf16 b(v);
    f16 h(v);
    // bf16 keeps 8 mantissa bits with round-to-nearest-even
    uint32_t u;
    std::memcpy(&u, &v, 4);
    const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    float expect;
    std::memcpy(&expect, &rounded, 4);
    EXPECT_EQ(static_cast<float>(b), expect) << v;
    EXPECT_NEAR(static_cast<float>(h), v, std::fabs(v) * 1e-3 + 6e-8) << v;
  }
  EXPECT_TRUE(std::isinf(static_cast<float>(f16(70000.0f))));
  EXPECT_EQ(static_cast<float>(f8e4m3fn(448.0f)), 448.0f);
  EXPECT_TRUE(std::isnan(static_cast<float>(f8e4m3fn(1000.0f))));  // no infinities in e4m3fn
  EXPECT_EQ(static_cast<float>(f8e5m2(57344.0f)), 57344.0f);
  EXPECT_EQ(static_cast<float>(f8e4m3fn(0.1f)), 0.1015625f);
  std::vector<float> src = {1.5f, -2.5f, 300.7f, -0.0f};
  std::vector<int32_t> dst(4);
  TensorRef s;
  s.data = src.data(); s.dtype = DType::Float32; s.ndim = 1; s.sizes[0] = 4; s.strides[0] = 1;
  TensorRef d = s;
  d.data = dst.data(); d.dtype = DType::Int32;
  copy(d, s);
  EXPECT_EQ(dst, (std::vector<int32_t>{1, -2, 300, 0}));
}

TEST(Copy, FillPatterns) {
  std::vector<double> buf(10, 0);
  TensorRef d;
  d.data = buf.data(); d.dtype = DType::Float64; d.ndim = 1; d.sizes[0] = 5; d.strides[0] = 2;
  const double v = 2.5;
  fill(d, &v);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(buf[i], i % 2 == 0 ? 2.5 : 0.0);
}
