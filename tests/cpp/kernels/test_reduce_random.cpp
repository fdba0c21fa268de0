// Reductions, scans, Philox and XORWOW RNGs and the list/optimizer kernels: results against naive
// fp64 references, the portable and AVX2 paths against each other, Philox against the
// Random123 known-answer vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/convert.h"
#include "kernels/dtype.h"
#include "kernels/foreach.h"
#include "kernels/random.h"
#include "kernels/reduce.h"
#include "kernels/simd.h"
#include "kernels/xorwow.h"

using namespace neuron::kernels;

namespace {

TensorRef ref(void* data, DType t, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}) {
  TensorRef r;
  r.data = data;
  r.dtype = t;
  r.ndim = static_cast<int>(sizes.size());
  int64_t s = 1;
  for (int d = r.ndim - 1; d >= 0; --d) {
    r.sizes[d] = sizes[d];
    r.strides[d] = strides.empty() ? s : strides[d];
    s *= sizes[d];
  }
  return r;
}

struct SimdGuard {
  SimdLevel saved = simd_level();
  ~SimdGuard() { set_simd_level(saved); }
};

std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace

// [R, C] reduced over dim 1 (contiguous rows) and dim 0 (strided columns).
TEST(Reduce, SumMaxArgmaxVarAgainstNaive) {
  const int R = 37, C = 1100;
  std::vector<float> x = randv(R * C, 1);
  std::vector<double> out_sum(C), out_var(R);
  std::vector<float> out_max(R);
  std::vector<int64_t> out_arg(C);
  // Sum over rows (dim 0) -> [1, C], output fp64.
  TensorRef in = ref(x.data(), DType::Float32, {R, C});
  TensorRef o = ref(out_sum.data(), DType::Float64, {1, C});
  reduce(ReduceOp::Sum, DType::Float32, {}, in, &o, 1);
  for (int c = 0; c < C; ++c) {
    double s = 0;
    for (int r = 0; r < R; ++r) s += x[r * C + c];
    EXPECT_NEAR(out_sum[c], s, 1e-4) << c;
  }
  o = ref(out_max.data(), DType::Float32, {R, 1});
  reduce(ReduceOp::Max, DType::Float32, {}, in, &o, 1);
  for (int r = 0; r < R; ++r)
    EXPECT_EQ(out_max[r], *std::max_element(x.begin() + r * C, x.begin() + (r + 1) * C));
  o = ref(out_arg.data(), DType::Int64, {1, C});
  reduce(ReduceOp::ArgMin, DType::Float32, {}, in, &o, 1);
  for (int c = 0; c < C; ++c) {
    int best = 0;
    for (int r = 1; r < R; ++r)
      if (x[r * C + c] < x[best * C + c]) best = r;
    EXPECT_EQ(out_arg[c], best);
  }
  ReduceParams p;
  p.correction = 1;
  o = ref(out_var.data(), DType::Float64, {R, 1});
  reduce(ReduceOp::Var, DType::Float32, p, in, &o, 1);
  for (int r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[r * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[r * C + c] - m) * (x[r * C + c] - m);
    EXPECT_NEAR(out_var[r], v / (C - 1), 1e-9);
  }
}

TEST(Reduce, NanPropagationAndFirstIndex) {
  std::vector<float> x = {
      1, 5, 5, std::numeric_limits<float>::quiet_NaN(), 2, std::numeric_limits<float>::quiet_NaN()};
  float mx;
  int64_t am;
  TensorRef in = ref(x.data(), DType::Float32, {6});
  TensorRef o = ref(&mx, DType::Float32, {1});
  reduce(ReduceOp::Max, DType::Float32, {}, in, &o, 1);
  EXPECT_TRUE(std::isnan(mx));
  o = ref(&am, DType::Int64, {1});
  reduce(ReduceOp::ArgMax, DType::Float32, {}, in, &o, 1);
  EXPECT_EQ(am, 3);  // the first NaN
  in = ref(x.data(), DType::Float32, {3});
  reduce(ReduceOp::ArgMax, DType::Float32, {}, in, &o, 1);
  EXPECT_EQ(am, 1);  // ties keep the first
}

TEST(Reduce, PortableAndAvx2AgreeBitForBit) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "CPU without AVX2";
  SimdGuard guard;
  std::vector<float> x = randv(3 * 100003, 2);
  float res[2][3], mx[2][3];
  for (int pass = 0; pass < 2; ++pass) {
    set_simd_level(pass ? SimdLevel::Avx2 : SimdLevel::Portable);
    TensorRef in = ref(x.data(), DType::Float32, {3, 100003});
    TensorRef o = ref(res[pass], DType::Float32, {3, 1});
    reduce(ReduceOp::Sum, DType::Float32, {}, in, &o, 1);
    o = ref(mx[pass], DType::Float32, {3, 1});
    reduce(ReduceOp::Max, DType::Float32, {}, in, &o, 1);
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(res[0][r], res[1][r]);
    EXPECT_EQ(mx[0][r], mx[1][r]);
  }
}

TEST(Reduce, LargeSplitReductionIsAccurate) {
  const int64_t n = 1 << 21;  // split into blocks
  std::vector<float> x(n, 0.1f);
  double s;
  TensorRef in = ref(x.data(), DType::Float32, {n});
  TensorRef o = ref(&s, DType::Float64, {1});
  reduce(ReduceOp::Sum, DType::Float32, {}, in, &o, 1);
  // fp32 lanes within 1024-element blocks: fp32-level relative error, not the O(n) drift of
  // naive fp32 accumulation (which would be off by ~1%).
  EXPECT_NEAR(s, n * static_cast<double>(0.1f), 1e-6 * n * 0.1);
}

TEST(Scan, CumsumCumprodStrided) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<float> y(6);
  scan(ScanOp::CumSum, DType::Float32, ref(x.data(), DType::Float32, {2, 3}),
       ref(y.data(), DType::Float32, {2, 3}), 0);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 5, 7, 9}));
  scan(ScanOp::CumProd, DType::Float32, ref(x.data(), DType::Float32, {2, 3}),
       ref(y.data(), DType::Float32, {2, 3}), 1);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 6, 4, 20, 120}));
}

TEST(Philox, Random123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          {0xa4093822u, 0x299f31d0u}),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Splitmix64, KnownAnswers) {  // the stream of splitmix64 from state 0
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(splitmix64(0x3C6EF372FE94F82Aull), 0x06C45D188009454Full);
}

TEST(Xorwow, StepsByHand) {
  // x = 1, the rest 0: t = 1, v = 1 ^ 2 = 3, d = 362437; then t = 0, w = 3, v = 3 ^ 48 = 51.
  uint32_t s[kXorwowWords] = {1, 0, 0, 0, 0, 0};
  EXPECT_EQ(xorwow_next(s), 3u + 362437u);
  EXPECT_EQ(xorwow_next(s), 51u + 2 * 362437u);
  const uint32_t after[kXorwowWords] = {0, 0, 0, 3, 51, 2 * 362437u};
  for (int k = 0; k < kXorwowWords; ++k) EXPECT_EQ(s[k], after[k]) << k;
}

TEST(Xorwow, FillInterleavesGeneratorsAndSeedsAreDistinct) {
  uint32_t a[4 * kXorwowWords], b[4 * kXorwowWords];
  for (int g = 0; g < 4; ++g) xorwow_seed(static_cast<uint64_t>(g) + 100, a + g * kXorwowWords);
  std::memcpy(b, a, sizeof(a));
  std::vector<uint32_t> out(10);
  xorwow_fill(a, 4, out.data(), 10);
  for (int j = 0; j < 10; ++j) EXPECT_EQ(out[j], xorwow_next(b + (j % 4) * kXorwowWords)) << j;
  EXPECT_EQ(std::memcmp(a, b, sizeof(a)), 0);
  uint32_t z[kXorwowWords];
  xorwow_seed(7, z);
  for (int k = 0; k < kXorwowWords; ++k)
    EXPECT_EQ(z[k], static_cast<uint32_t>(splitmix64(7 + k * 0x9E3779B97F4A7C15ull) >> 32));
  EXPECT_NE(std::memcmp(a, a + kXorwowWords, kXorwowWords * 4), 0);
}

TEST(Random, ValuesDependOnlyOnSeedOffsetAndIndex) {
  SimdGuard guard;
  const int64_t n = 100003;
  std::vector<float> a(n), b(n), c(64);
  RandParams p;
  p.a = -1;
  p.b = 2;
  random_fill(RandOp::Uniform, p, 42, 7, ref(a.data(), DType::Float32, {n}));
  // The same elements drawn through a strided view of a larger buffer.
  std::vector<float> big(2 * n);
  random_fill(RandOp::Uniform, p, 42, 7, ref(big.data(), DType::Float32, {n}, {2}));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], big[2 * i]);
  for (float v : a) ASSERT_TRUE(v >= -1 && v < 2);
  // A different offset gives different values; the portable path gives the same ones.
  random_fill(RandOp::Uniform, p, 42, 8, ref(c.data(), DType::Float32, {64}));
  EXPECT_NE(std::memcmp(a.data(), c.data(), 64 * sizeof(float)), 0);
  set_simd_level(SimdLevel::Portable);
  random_fill(RandOp::Uniform, p, 42, 7, ref(b.data(), DType::Float32, {n}));
  EXPECT_EQ(a, b);
}

TEST(Random, NormalMomentsAndRandperm) {
  const int64_t n = 400000;
  std::vector<double> z(n);
  random_fill(RandOp::Normal, {}, 3, 0, ref(z.data(), DType::Float64, {n}));
  const double mean = std::accumulate(z.begin(), z.end(), 0.0) / n;
  double var = 0;
  for (double v : z) var += (v - mean) * (v - mean);
  var /= n;
  EXPECT_NEAR(mean, 0, 5 / std::sqrt(double(n)));
  EXPECT_NEAR(var, 1, 5 * std::sqrt(2.0 / n));
  std::vector<int64_t> perm(1000);
  randperm(1000, 9, 0, ref(perm.data(), DType::Int64, {1000}));
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(perm, sorted);
}

TEST(Foreach, ListElementwiseAndAdam) {
  std::vector<std::vector<float>> xs = {randv(10, 1), randv(100000, 2), randv(1, 3)};
  std::vector<std::vector<float>> ys = {randv(10, 4), randv(100000, 5), randv(1, 6)};
  std::vector<std::vector<float>> want = xs;
  std::vector<ForeachItem> items(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(xs[i].size());
    items[i].refs[0] = ref(xs[i].data(), DType::Float32, {n});
    items[i].refs[1] = ref(xs[i].data(), DType::Float32, {n});
    items[i].refs[2] = ref(ys[i].data(), DType::Float32, {n});
    for (int64_t k = 0; k < n; ++k) want[i][k] = want[i][k] + 0.5f * ys[i][k];
  }
  EwParams p;
  p.f[0] = 0.5;
  foreach_elementwise(EwOp::Add, DType::Float32, 3, items, p);
  for (size_t i = 0; i < xs.size(); ++i)
    for (size_t k = 0; k < xs[i].size(); ++k) ASSERT_FLOAT_EQ(xs[i][k], want[i][k]);

  // One Adam step against the textbook formula in double.
  std::vector<float> param = randv(777, 7), grad = randv(777, 8), m(777, 0.1f), v(777, 0.2f);
  const std::vector<float> p0 = param, m0 = m, v0 = v;
  float step = 3;
  AdamArgs a;
  a.lr = 0.01;
  a.weight_decay = 0.1;
  a.decoupled = true;
  std::vector<AdamTensors> list(1);
  list[0].param = ref(param.data(), DType::Float32, {777});
  list[0].grad = ref(grad.data(), DType::Float32, {777});
  list[0].exp_avg = ref(m.data(), DType::Float32, {777});
  list[0].exp_avg_sq = ref(v.data(), DType::Float32, {777});
  list[0].step = ref(&step, DType::Float32, {1});
  fused_adam(a, list);
  for (int k = 0; k < 777; ++k) {
    const double mm = 0.9 * m0[k] + 0.1 * grad[k];
    const double vv = 0.999 * v0[k] + 0.001 * double(grad[k]) * grad[k];
    const double pp = p0[k] * (1 - 0.01 * 0.1);
    const double bc1 = 1 - std::pow(0.9, 3), bc2 = 1 - std::pow(0.999, 3);
    const double want_p = pp - 0.01 / bc1 * mm / (std::sqrt(vv) / std::sqrt(bc2) + 1e-8);
    EXPECT_NEAR(param[k], want_p, 1e-5) << k;
    EXPECT_NEAR(m[k], mm, 1e-6);
  }
}

// The AVX2 Adam loop does the scalar loop's operations in the same order: identical results for
// every flag combination, dtype and a length that leaves a scalar tail.
TEST(Foreach, AdamVectorPathMatchesPortable) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "CPU without AVX2";
  SimdGuard guard;
  const int64_t n = 70001;
  for (DType t : {DType::Float32, DType::BFloat16}) {
    for (int flags = 0; flags < 16; ++flags) {
      std::vector<float> out[2][5];
      for (int pass = 0; pass < 2; ++pass) {
        set_simd_level(pass ? SimdLevel::Avx2 : SimdLevel::Portable);
        const size_t es = t == DType::Float32 ? 4 : 2;
        std::vector<std::vector<char>> bufs(5, std::vector<char>(n * es));
        for (int b = 0; b < 5; ++b) {
          std::vector<float> x = randv(n, 10 + b);
          if (b >= 2) for (float& e : x) e = std::fabs(e);  // moments
          find_convert(t, DType::Float32)(bufs[b].data(), es, x.data(), 4, n);
        }
        float step = 5, scale = 4;
        AdamArgs a;
        a.lr = 0.02;
        a.weight_decay = flags & 1 ? 0.05 : 0.0;
        a.decoupled = flags & 2;
        a.amsgrad = flags & 4;
        a.maximize = flags & 8;
        if (flags & 1) a.grad_scale = ref(&scale, DType::Float32, {1});
        std::vector<AdamTensors> list(1);
        list[0].param = ref(bufs[0].data(), t, {n});
        list[0].grad = ref(bufs[1].data(), t, {n});
        list[0].exp_avg = ref(bufs[2].data(), t, {n});
        list[0].exp_avg_sq = ref(bufs[3].data(), t, {n});
        if (a.amsgrad) list[0].max_exp_avg_sq = ref(bufs[4].data(), t, {n});
        list[0].step = ref(&step, DType::Float32, {1});
        fused_adam(a, list);
        for (int b = 0; b < 5; ++b) {
          out[pass][b].resize(n);
          find_convert(DType::Float32, t)(out[pass][b].data(), 4, bufs[b].data(), es, n);
        }
      }
      for (int b = 0; b < 5; ++b)
        ASSERT_EQ(0, std::memcmp(out[0][b].data(), out[1][b].data(), n * 4))
            << "buffer " << b << " flags " << flags << " dtype " << static_cast<int>(t);
    }
  }
}

// bf16/fp16 rows are summed (maxed) straight from 16-bit memory on AVX2; the result must be
// bit-identical to the portable path on the widened values.
TEST(Reduce, Direct16BitSumAndMaxMatchPortable) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "CPU without AVX2";
  SimdGuard guard;
  const int R = 5, C = 4099;
  std::vector<float> x = randv(R * C, 3);
  for (DType t : {DType::BFloat16, DType::Float16}) {
    std::vector<uint16_t> h(x.size());
    const ConvertFn narrow = find_convert(t, DType::Float32);
    narrow(h.data(), 2, x.data(), 4, static_cast<int64_t>(x.size()));
    float res[4][2][R];
    const ReduceOp ops[4] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean};
    for (int pass = 0; pass < 2; ++pass) {
      set_simd_level(pass ? SimdLevel::Avx2 : SimdLevel::Portable);
      for (int k = 0; k < 4; ++k) {
        TensorRef in = ref(h.data(), t, {R, C});
        TensorRef o = ref(res[k][pass], DType::Float32, {R, 1});
        reduce(ops[k], DType::Float32, {}, in, &o, 1);
      }
    }
    for (int k = 0; k < 4; ++k)
      for (int r = 0; r < R; ++r) EXPECT_EQ(res[k][0][r], res[k][1][r]) << k << " row " << r;
  }
}

// The vectorized outer (strided) sum/max, argmax/max-with-index and the 2-norm give the
// same bits as the portable reducers; logsumexp agrees to rounding.
TEST(Reduce, VectorReducersMatchPortable) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "CPU without AVX2";
  SimdGuard guard;
  const int R = 67, C = 1031;
  std::vector<float> x = randv(R * C, 4);
  x[5 * C + 700] = 1e6f;  // a late maximum in row 5
  x[6 * C + 40] = 1e6f;   // ties in row 6: the first wins
  x[6 * C + 900] = 1e6f;
  x[7 * C + 300] = std::numeric_limits<float>::quiet_NaN();  // NaNs in row 7: the first wins
  x[7 * C + 800] = std::numeric_limits<float>::quiet_NaN();
  struct Out {
    std::vector<float> sum0, max0, min0, mx, lse;
    std::vector<double> nrm;
    std::vector<int64_t> am, mi, ami;
  } o[2];
  for (int pass = 0; pass < 2; ++pass) {
    set_simd_level(pass ? SimdLevel::Avx2 : SimdLevel::Portable);
    Out& r = o[pass];
    r.sum0.assign(C, 0);
    r.max0.assign(C, 0);
    r.min0.assign(C, 0);
    r.mx.assign(R, 0);
    r.lse.assign(R, 0);
    r.nrm.assign(R, 0);
    r.am.assign(R, 0);
    r.mi.assign(R, 0);
    r.ami.assign(R, 0);
    const TensorRef in = ref(x.data(), DType::Float32, {R, C});
    // Over dim 0 (outer mode): outputs [1, C].
    TensorRef o0 = ref(r.sum0.data(), DType::Float32, {1, C});
    reduce(ReduceOp::Sum, DType::Float32, {}, in, &o0, 1);
    o0 = ref(r.max0.data(), DType::Float32, {1, C});
    reduce(ReduceOp::Max, DType::Float32, {}, in, &o0, 1);
    o0 = ref(r.min0.data(), DType::Float32, {1, C});
    reduce(ReduceOp::Min, DType::Float32, {}, in, &o0, 1);
    // Over dim 1 (inner mode): outputs [R, 1].
    TensorRef o1 = ref(r.am.data(), DType::Int64, {R, 1});
    reduce(ReduceOp::ArgMax, DType::Float32, {}, in, &o1, 1);
    o1 = ref(r.ami.data(), DType::Int64, {R, 1});
    reduce(ReduceOp::ArgMin, DType::Float32, {}, in, &o1, 1);
    TensorRef two[2] = {ref(r.mx.data(), DType::Float32, {R, 1}),
                        ref(r.mi.data(), DType::Int64, {R, 1})};
    reduce(ReduceOp::MaxWithIndex, DType::Float32, {}, in, two, 2);
    ReduceParams np;
    np.p = 2.0;
    o1 = ref(r.nrm.data(), DType::Float64, {R, 1});
    reduce(ReduceOp::Norm, DType::Float32, np, in, &o1, 1);
    o1 = ref(r.lse.data(), DType::Float32, {R, 1});
    reduce(ReduceOp::LogSumExp, DType::Float32, {}, in, &o1, 1);
  }
  auto same = [](float a, float b) { return (a != a && b != b) || a == b; };
  for (int c = 0; c < C; ++c) {
    EXPECT_TRUE(same(o[0].sum0[c], o[1].sum0[c])) << c;
    EXPECT_TRUE(same(o[0].max0[c], o[1].max0[c])) << c;
    EXPECT_TRUE(same(o[0].min0[c], o[1].min0[c])) << c;
  }
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(o[0].am[r], o[1].am[r]) << r;
    EXPECT_EQ(o[0].ami[r], o[1].ami[r]) << r;
    EXPECT_EQ(o[0].mi[r], o[1].mi[r]) << r;
    EXPECT_TRUE(same(o[0].mx[r], o[1].mx[r])) << r;
    EXPECT_TRUE(o[0].nrm[r] == o[1].nrm[r] || (r == 7 && std::isnan(o[1].nrm[r]))) << r;
    if (r != 7) {
      EXPECT_NEAR(o[0].lse[r], o[1].lse[r], 1e-5f * std::fabs(o[0].lse[r])) << r;
    }
  }
  EXPECT_EQ(o[1].am[5], 700);
  EXPECT_EQ(o[1].am[6], 40);
  EXPECT_EQ(o[1].am[7], 300);
  EXPECT_EQ(o[1].mi[7], 300);
  EXPECT_TRUE(std::isnan(o[1].lse[7]));
}
