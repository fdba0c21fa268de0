// Convolution against a naive direct convolution (and the transposed convolution as its adjoint),
// pooling, indexing (scatter reduce, embedding gradient, advanced indexing), sort/topk and the
// counter-based sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "kernels/conv.h"
#include "kernels/index.h"
#include "kernels/pool.h"
#include "kernels/simd.h"
#include "kernels/sort.h"

using namespace neuron::kernels;

namespace {

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TensorRef dense(void* data, DType dt, std::vector<int64_t> sizes) {
  TensorRef t;
  t.data = data;
  t.dtype = dt;
  t.ndim = static_cast<int>(sizes.size());
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.sizes[i] = sizes[static_cast<size_t>(i)];
    t.strides[i] = s;
    s *= sizes[static_cast<size_t>(i)];
  }
  return t;
}

// Direct 2-d convolution in double: out[n, co, oh, ow].
std::vector<double> naive_conv2d(const ConvArgs& a, const std::vector<float>& x,
                                 const std::vector<float>& w) {
  const int64_t G = a.groups, cig = a.Cin / G, cog = a.Cout / G;
  std::vector<double> out(static_cast<size_t>(a.N * a.Cout * a.out[0] * a.out[1]));
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t co = 0; co < a.Cout; ++co)
      for (int64_t oh = 0; oh < a.out[0]; ++oh)
        for (int64_t ow = 0; ow < a.out[1]; ++ow) {
          double s = 0;
          const int64_t gi = co / cog;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t kh = 0; kh < a.k[0]; ++kh)
              for (int64_t kw = 0; kw < a.k[1]; ++kw) {
                const int64_t ih = oh * a.stride[0] - a.pad[0] + kh * a.dil[0];
                const int64_t iw = ow * a.stride[1] - a.pad[1] + kw * a.dil[1];
                if (ih < 0 || ih >= a.in[0] || iw < 0 || iw >= a.in[1]) continue;
                s += static_cast<double>(x[static_cast<size_t>(
                         ((n * a.Cin + gi * cig + ci) * a.in[0] + ih) * a.in[1] + iw)]) *
                     w[static_cast<size_t>(((co * cig + ci) * a.k[0] + kh) * a.k[1] + kw)];
              }
          out[static_cast<size_t>(((n * a.Cout + co) * a.out[0] + oh) * a.out[1] + ow)] = s;
        }
  return out;
}

}  // namespace

TEST(Conv, ForwardAndBackwardMatchDirectConvolution) {
  ConvArgs a;
  a.nsp = 2;
  a.N = 2;
  a.Cin = 4;
  a.Cout = 6;
  a.groups = 2;
  a.in[0] = 7;
  a.in[1] = 8;
  a.k[0] = 3;
  a.k[1] = 2;
  a.stride[0] = 2;
  a.stride[1] = 1;
  a.pad[0] = 1;
  a.pad[1] = 1;
  a.dil[0] = 1;
  a.dil[1] = 2;
  for (int i = 0; i < 2; ++i)
    a.out[i] = (a.in[i] + 2 * a.pad[i] - a.dil[i] * (a.k[i] - 1) - 1) / a.stride[i] + 1;
  const auto x = random_vec(static_cast<size_t>(a.N * a.Cin * a.in[0] * a.in[1]), 1);
  const auto w = random_vec(static_cast<size_t>(a.Cout * (a.Cin / a.groups) * a.k[0] * a.k[1]), 2);
  std::vector<float> out(static_cast<size_t>(a.N * a.Cout * a.out[0] * a.out[1]));
  conv_forward(a, x.data(), w.data(), nullptr, out.data());
  const auto ref = naive_conv2d(a, x, w);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4);

  // Backward: <dy, conv(x + e_i)> - <dy, conv(x)> = dy-weighted sums; check dx and dw through the
  // linearity of the convolution (gradient = adjoint applied to dy).
  const auto dy = random_vec(out.size(), 3);
  std::vector<float> dx(x.size()), dw(w.size()), dbias(static_cast<size_t>(a.Cout));
  conv_backward(a, dy.data(), x.data(), w.data(), dx.data(), dw.data(), dbias.data());
  for (size_t i = 0; i < x.size(); i += 7) {
    std::vector<float> e(x.size(), 0.0f);
    e[i] = 1.0f;
    const auto col = naive_conv2d(a, e, w);
    double s = 0;
    for (size_t j = 0; j < col.size(); ++j) s += col[j] * dy[j];
    ASSERT_NEAR(dx[i], s, 1e-4) << "dx " << i;
  }
  for (size_t i = 0; i < w.size(); i += 5) {
    std::vector<float> e(w.size(), 0.0f);
    e[i] = 1.0f;
    const auto col = naive_conv2d(a, x, e);
    double s = 0;
    for (size_t j = 0; j < col.size(); ++j) s += col[j] * dy[j];
    ASSERT_NEAR(dw[i], s, 1e-4) << "dw " << i;
  }
  for (int64_t c = 0; c < a.Cout; ++c) {
    double s = 0;
    for (int64_t n = 0; n < a.N; ++n)
      for (int64_t p = 0; p < a.out[0] * a.out[1]; ++p)
        s += dy[static_cast<size_t>((n * a.Cout + c) * a.out[0] * a.out[1] + p)];
    ASSERT_NEAR(dbias[static_cast<size_t>(c)], s, 1e-4);
  }
}

TEST(Conv, TransposedConvolutionIsTheAdjoint) {
  // <conv(x), y> == <x, conv_transpose(y)> for the same weights.
  ConvArgs a;
  a.nsp = 1;
  a.N = 2;
  a.Cin = 3;
  a.Cout = 4;
  a.in[0] = 9;
  a.k[0] = 3;
  a.stride[0] = 2;
  a.pad[0] = 1;
  a.out[0] = (9 + 2 - 2 - 1) / 2 + 1;
  const auto x = random_vec(static_cast<size_t>(2 * 3 * 9), 1),
             w = random_vec(static_cast<size_t>(4 * 3 * 3), 2);
  const auto y = random_vec(static_cast<size_t>(2 * 4 * a.out[0]), 3);
  std::vector<float> cx(y.size()), ty(x.size());
  conv_forward(a, x.data(), w.data(), nullptr, cx.data());
  ConvArgs t = a;  // transposed: input y [N, 4, out], weight [4, 3, k], output [N, 3, 9]
  t.transposed = true;
  t.Cin = 4;
  t.Cout = 3;
  t.in[0] = a.out[0];
  t.out[0] = 9;
  conv_forward(t, y.data(), w.data(), nullptr, ty.data());
  double l = 0, r = 0;
  for (size_t i = 0; i < y.size(); ++i) l += static_cast<double>(cx[i]) * y[i];
  for (size_t i = 0; i < x.size(); ++i) r += static_cast<double>(x[i]) * ty[i];
  EXPECT_NEAR(l, r, 1e-3);
}

TEST(Pool, MaxAndAveragePooling) {
  Pool2dArgs a;
  a.planes = 1;
  a.H = 4;
  a.W = 4;
  a.OH = a.OW = 2;
  a.kH = a.kW = 2;
  a.sH = a.sW = 2;
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 7) % 16);
  std::vector<float> out(4), avg(4);
  std::vector<int64_t> idx(4);
  max_pool2d_forward(a, x.data(), out.data(), idx.data());
  avg_pool2d_forward(a, true, 0, x.data(), avg.data());
  for (int oh = 0; oh < 2; ++oh)
    for (int ow = 0; ow < 2; ++ow) {
      float mx = -1, s = 0;
      int64_t arg = 0;
      for (int dh = 0; dh < 2; ++dh)
        for (int dw = 0; dw < 2; ++dw) {
          const int i = (2 * oh + dh) * 4 + 2 * ow + dw;
          s += x[static_cast<size_t>(i)];
          if (x[static_cast<size_t>(i)] > mx) {
            mx = x[static_cast<size_t>(i)];
            arg = i;
          }
        }
      EXPECT_EQ(out[static_cast<size_t>(oh * 2 + ow)], mx);
      EXPECT_EQ(idx[static_cast<size_t>(oh * 2 + ow)], arg);
      EXPECT_FLOAT_EQ(avg[static_cast<size_t>(oh * 2 + ow)], s / 4);
    }
  std::vector<float> g{1, 2, 3, 4}, gi(16);
  max_pool2d_backward(a, g.data(), idx.data(), gi.data());
  float total = 0;
  for (float v : gi) total += v;
  EXPECT_EQ(total, 10.0f);
  EXPECT_EQ(gi[static_cast<size_t>(idx[3])], 4.0f);
}

// The vector max pooling (windows inside the input) gives the portable path's values and indices,
// bit for bit: ties keep the first maximum, the first NaN wins, overlapping and dilated windows,
// plane sizes with and without a scalar tail.
TEST(Pool, MaxPoolingVectorPathMatchesPortable) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const SimdLevel saved = simd_level();
  struct Shape {
    int64_t H, W, k, s, d;
  };
  for (const Shape sh : {Shape{16, 16, 2, 2, 1}, Shape{9, 11, 3, 2, 1}, Shape{8, 8, 3, 1, 2},
                         Shape{7, 13, 2, 1, 1}}) {
    Pool2dArgs a;
    a.planes = 5;
    a.H = sh.H;
    a.W = sh.W;
    a.kH = a.kW = sh.k;
    a.sH = a.sW = sh.s;
    a.dH = a.dW = sh.d;
    a.OH = (a.H - a.dH * (a.kH - 1) - 1) / a.sH + 1;
    a.OW = (a.W - a.dW * (a.kW - 1) - 1) / a.sW + 1;
    std::vector<float> x = random_vec(static_cast<size_t>(a.planes * a.H * a.W), 7);
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 5 == 0) x[i] = std::round(x[i]);  // ties
      if (i % 37 == 3) x[i] = std::nanf("");
      if (i % 41 == 9) x[i] = -std::numeric_limits<float>::infinity();
    }
    const size_t n = static_cast<size_t>(a.planes * a.OH * a.OW);
    std::vector<float> out[2] = {std::vector<float>(n), std::vector<float>(n)};
    std::vector<int64_t> idx[2] = {std::vector<int64_t>(n), std::vector<int64_t>(n)};
    for (int pass = 0; pass < 2; ++pass) {
      set_simd_level(pass ? SimdLevel::Avx2 : SimdLevel::Portable);
      max_pool2d_forward(a, x.data(), out[pass].data(), idx[pass].data());
    }
    set_simd_level(saved);
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), n * sizeof(float)), 0)
        << sh.H << "x" << sh.W;
    EXPECT_EQ(idx[0], idx[1]) << sh.H << "x" << sh.W;
    // Sanity: NaNs reached the output (the case is exercised).
    EXPECT_TRUE(std::any_of(out[1].begin(), out[1].end(), [](float v) { return std::isnan(v); }));
  }
}

TEST(Index, ScatterReduceMeanAndAmaxWithoutSelf) {
  std::vector<float> self{10, 20, 30}, src{1, 2, 3, 4};
  std::vector<int64_t> index{0, 0, 2, 0};
  auto t_self = dense(self.data(), DType::Float32, {3});
  scatter(t_self, 0, dense(index.data(), DType::Int64, {4}), dense(src.data(), DType::Float32, {4}),
          nullptr, ScatterReduce::Mean, true, "scatter_reduce");
  EXPECT_FLOAT_EQ(self[0], (10 + 1 + 2 + 4) / 4.0f);
  EXPECT_FLOAT_EQ(self[1], 20);
  EXPECT_FLOAT_EQ(self[2], (30 + 3) / 2.0f);
  std::vector<float> self2{10, 20, 30};
  scatter(dense(self2.data(), DType::Float32, {3}), 0, dense(index.data(), DType::Int64, {4}),
          dense(src.data(), DType::Float32, {4}), nullptr, ScatterReduce::Amax, false,
          "scatter_reduce");
  EXPECT_FLOAT_EQ(self2[0], 4);   // self's 10 is ignored
  EXPECT_FLOAT_EQ(self2[1], 20);  // untouched
  EXPECT_FLOAT_EQ(self2[2], 3);
  std::vector<int32_t> bad{0, 5};
  EXPECT_THROW(scatter(dense(self2.data(), DType::Float32, {3}), 0,
                       dense(bad.data(), DType::Int32, {2}), dense(src.data(), DType::Float32, {2}),
                       nullptr, ScatterReduce::Sum, true, "scatter_add"),
               std::out_of_range);
}

TEST(Index, EmbeddingBackwardSumsInIndexOrderAndSkipsPadding) {
  const int64_t V = 5, D = 3;
  std::vector<float> grad{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
  std::vector<int32_t> idx{1, 3, 1, 0};
  std::vector<float> gw(static_cast<size_t>(V * D), -1.0f);
  embedding_backward(dense(gw.data(), DType::Float32, {V, D}),
                     dense(grad.data(), DType::Float32, {4, D}),
                     dense(idx.data(), DType::Int32, {4}), /*padding_idx=*/0, /*scale=*/true);
  EXPECT_FLOAT_EQ(gw[1 * 3], (1 + 3) / 2.0f);  // row 1: two uses, scaled by their count
  EXPECT_FLOAT_EQ(gw[3 * 3], 2.0f);
  EXPECT_FLOAT_EQ(gw[0], 0.0f);      // padding row
  EXPECT_FLOAT_EQ(gw[2 * 3], 0.0f);  // unused row
}

TEST(Index, NonzeroAndMaskedSelectAcrossBlocks) {
  const int64_t n = 100000;
  std::vector<unsigned char> m(static_cast<size_t>(n));
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    m[static_cast<size_t>(i)] = (i % 7) == 3;
    x[static_cast<size_t>(i)] = static_cast<float>(i);
  }
  const auto tm = dense(m.data(), DType::Bool, {n});
  const int64_t count = count_nonzero(tm);
  ASSERT_EQ(count, (n - 4) / 7 + 1);
  std::vector<int64_t> coords(static_cast<size_t>(count));
  nonzero(dense(coords.data(), DType::Int64, {count, 1}), tm);
  std::vector<float> sel(static_cast<size_t>(count));
  masked_select(dense(sel.data(), DType::Float32, {count}), dense(x.data(), DType::Float32, {n}),
                tm);
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(coords[static_cast<size_t>(i)], 7 * i + 3);
    ASSERT_EQ(sel[static_cast<size_t>(i)], static_cast<float>(7 * i + 3));
  }
}

TEST(Sort, StableWithNaNsLastAndTopk) {
  std::vector<float> x{3, NAN, 1, 3, 0, 1};
  std::vector<float> v(6);
  std::vector<int64_t> i(6);
  sort(dense(v.data(), DType::Float32, {6}), dense(i.data(), DType::Int64, {6}),
       dense(x.data(), DType::Float32, {6}), 0, false);
  EXPECT_EQ(i, (std::vector<int64_t>{4, 2, 5, 0, 3, 1}));
  EXPECT_TRUE(std::isnan(v[5]));
  sort(dense(v.data(), DType::Float32, {6}), dense(i.data(), DType::Int64, {6}),
       dense(x.data(), DType::Float32, {6}), 0, true);
  EXPECT_EQ(i, (std::vector<int64_t>{1, 0, 3, 2, 5, 4}));
  std::vector<float> tv(2);
  std::vector<int64_t> ti(2);
  std::vector<float> y{3, 9, 1, 9, 0};
  topk(dense(tv.data(), DType::Float32, {2}), dense(ti.data(), DType::Int64, {2}),
       dense(y.data(), DType::Float32, {5}), 0, 2, true);
  EXPECT_EQ(ti, (std::vector<int64_t>{1, 3}));
}

TEST(Sort, CounterBasedSamplerIsReproducibleAndUniform) {
  double s = 0;
  std::set<double> seen;
  for (uint64_t i = 0; i < 10000; ++i) {
    const double u = philox_uniform(42, 7, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(u, philox_uniform(42, 7, i));
    s += u;
    seen.insert(u);
  }
  EXPECT_NEAR(s / 10000, 0.5, 0.01);
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_NE(philox_uniform(42, 7, 0), philox_uniform(43, 7, 0));
  EXPECT_NE(philox_uniform(42, 7, 0), philox_uniform(42, 8, 0));
  // Multinomial without replacement never draws a zero-probability category.
  std::vector<float> p{0.5f, 0.0f, 0.25f, 0.25f};
  std::vector<int64_t> out(3);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    multinomial(dense(out.data(), DType::Int64, {3}), dense(p.data(), DType::Float32, {4}), 3,
                false, seed, 0);
    std::set<int64_t> s3(out.begin(), out.end());
    ASSERT_EQ(s3.size(), 3u);
    ASSERT_EQ(s3.count(1), 0u);
  }
}
