// Softmax and normalisation kernels: the AVX2 paths against the portable paths and a double
// reference, for fp32 and bf16, contiguous and strided rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/simd.h"
#include "kernels/norm.h"
#include "kernels/softmax.h"

using namespace neuron::kernels;

namespace {

std::vector<float> random_vec(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g) * scale;
  return v;
}

TensorRef ref2(void* data, DType dt, int64_t r, int64_t c, int64_t rs, int64_t cs) {
  TensorRef t;
  t.data = data;
  t.dtype = dt;
  t.ndim = 2;
  t.sizes[0] = r;
  t.sizes[1] = c;
  t.strides[0] = rs;
  t.strides[1] = cs;
  return t;
}

// A contiguous fp32 [n, c, s] tensor (batch norm's layout).
TensorRef ncs_f32(float* data, int64_t n, int64_t c, int64_t s) {
  TensorRef t;
  t.data = data;
  t.dtype = DType::Float32;
  t.ndim = 3;
  t.sizes[0] = n;
  t.sizes[1] = c;
  t.sizes[2] = s;
  t.strides[0] = c * s;
  t.strides[1] = s;
  t.strides[2] = 1;
  return t;
}

TensorRef ref1(void* data, DType dt, int64_t n) {
  TensorRef t;
  t.data = data;
  t.dtype = dt;
  t.ndim = 1;
  t.sizes[0] = n;
  t.strides[0] = 1;
  return t;
}

}  // namespace

TEST(Softmax, MatchesDoubleReferenceBothIsasAndLayouts) {
  const int64_t R = 7, C = 333;
  auto x = random_vec(static_cast<size_t>(R * C), 1, 5.0f);
  for (bool log : {false, true})
    for (SimdLevel isa : {SimdLevel::Portable, simd_level()})
      for (int layout = 0; layout < 2; ++layout) {
        // layout 1: the softmax dim is strided (a column-major view).
        std::vector<float> in(x), out(x.size(), NAN);
        const TensorRef ti = layout ? ref2(in.data(), DType::Float32, R, C, 1, R)
                                    : ref2(in.data(), DType::Float32, R, C, C, 1);
        const TensorRef to = layout ? ref2(out.data(), DType::Float32, R, C, 1, R)
                                    : ref2(out.data(), DType::Float32, R, C, C, 1);
        softmax_forward(to, ti, 1, log, isa);
        for (int64_t r = 0; r < R; ++r) {
          auto at = [&](const std::vector<float>& v, int64_t c) {
            return v[static_cast<size_t>(layout ? c * R + r : r * C + c)];
          };
          double mx = -INFINITY, s = 0;
          for (int64_t c = 0; c < C; ++c) mx = std::max(mx, static_cast<double>(at(in, c)));
          for (int64_t c = 0; c < C; ++c) s += std::exp(at(in, c) - mx);
          for (int64_t c = 0; c < C; ++c) {
            const double ref = log ? at(in, c) - mx - std::log(s) : std::exp(at(in, c) - mx) / s;
            ASSERT_NEAR(at(out, c), ref, 2e-6 * (1 + std::fabs(ref)))
                << "isa " << simd_level_name(isa) << " log " << log;
          }
        }
      }
}

TEST(Softmax, BackwardAndBf16) {
  const int64_t R = 3, C = 100;
  auto x = random_vec(static_cast<size_t>(R * C), 2), g = random_vec(static_cast<size_t>(R * C), 3);
  std::vector<float> y(x.size()), gi(x.size()), gi2(x.size());
  const TensorRef tx = ref2(x.data(), DType::Float32, R, C, C, 1),
                  ty = ref2(y.data(), DType::Float32, R, C, C, 1);
  softmax_forward(ty, tx, 1, false);
  softmax_backward(ref2(gi.data(), DType::Float32, R, C, C, 1),
                   ref2(g.data(), DType::Float32, R, C, C, 1), ty, 1, false, SimdLevel::Portable);
  softmax_backward(ref2(gi2.data(), DType::Float32, R, C, C, 1),
                   ref2(g.data(), DType::Float32, R, C, C, 1), ty, 1, false, simd_level());
  for (int64_t r = 0; r < R; ++r) {
    double dot = 0;
    for (int64_t c = 0; c < C; ++c)
      dot += static_cast<double>(g[static_cast<size_t>(r * C + c)]) *
             y[static_cast<size_t>(r * C + c)];
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(r * C + c);
      const double ref = y[i] * (g[i] - dot);
      ASSERT_NEAR(gi[i], ref, 1e-6);
      ASSERT_NEAR(gi2[i], ref, 1e-6);
    }
  }
  // bf16 in, fp32 out (half_to_float): the same as fp32 softmax of the rounded inputs.
  std::vector<bf16> xb(x.size());
  std::vector<float> xr(x.size()), o1(x.size()), o2(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = bf16(x[i]);
    xr[i] = static_cast<float>(xb[i]);
  }
  softmax_forward(ref2(o1.data(), DType::Float32, R, C, C, 1),
                  ref2(xb.data(), DType::BFloat16, R, C, C, 1), 1, false);
  softmax_forward(ref2(o2.data(), DType::Float32, R, C, C, 1),
                  ref2(xr.data(), DType::Float32, R, C, C, 1), 1, false);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_FLOAT_EQ(o1[i], o2[i]);
}

TEST(Norm, LayerAndRmsNormForwardBackwardAgainstDouble) {
  const int64_t M = 5, N = 301;
  auto x = random_vec(static_cast<size_t>(M * N), 4, 3.0f),
       w = random_vec(static_cast<size_t>(N), 5), b = random_vec(static_cast<size_t>(N), 6),
       g = random_vec(static_cast<size_t>(M * N), 7);
  for (bool rms : {false, true})
    for (SimdLevel isa : {SimdLevel::Portable, simd_level()}) {
      std::vector<float> y(x.size()), mean(static_cast<size_t>(M)), rstd(static_cast<size_t>(M)),
          dx(x.size()), dw(static_cast<size_t>(N)), db(static_cast<size_t>(N));
      const TensorRef tx = ref2(x.data(), DType::Float32, M, N, N, 1),
                      ty = ref2(y.data(), DType::Float32, M, N, N, 1);
      const TensorRef tw = ref1(w.data(), DType::Float32, N),
                      tb = ref1(b.data(), DType::Float32, N);
      const TensorRef tm = ref1(mean.data(), DType::Float32, M),
                      tr = ref1(rstd.data(), DType::Float32, M);
      const TensorRef tg = ref2(g.data(), DType::Float32, M, N, N, 1),
                      tdx = ref2(dx.data(), DType::Float32, M, N, N, 1);
      const TensorRef tdw = ref1(dw.data(), DType::Float32, N),
                      tdb = ref1(db.data(), DType::Float32, N);
      if (rms) {
        rms_norm_forward(ty, tr, tx, tw, 1e-6, isa);
        rms_norm_backward(tdx, tdw, tg, tx, tr, tw, isa);
      } else {
        layer_norm_forward(ty, tm, tr, tx, tw, tb, 1e-5, isa);
        layer_norm_backward(tdx, tdw, tdb, tg, tx, tm, tr, tw, isa);
      }
      std::vector<double> rdw(static_cast<size_t>(N)), rdb(static_cast<size_t>(N));
      for (int64_t r = 0; r < M; ++r) {
        const float* xr = x.data() + r * N;
        const float* gr = g.data() + r * N;
        double mu = 0, var = 0;
        if (!rms) {
          for (int64_t c = 0; c < N; ++c) mu += xr[c];
          mu /= N;
        }
        for (int64_t c = 0; c < N; ++c) var += (xr[c] - mu) * (xr[c] - mu);
        var /= N;
        const double rs = 1.0 / std::sqrt(var + (rms ? 1e-6 : 1e-5));
        ASSERT_NEAR(rstd[static_cast<size_t>(r)], rs, 1e-5 * rs);
        double sg = 0, sgx = 0;
        for (int64_t c = 0; c < N; ++c) {
          const double xh = (xr[c] - mu) * rs;
          const double ref =
              xh * w[static_cast<size_t>(c)] + (rms ? 0.0 : b[static_cast<size_t>(c)]);
          ASSERT_NEAR(y[static_cast<size_t>(r * N + c)], ref, 1e-5 * (1 + std::fabs(ref)));
          const double gg = gr[c] * w[static_cast<size_t>(c)];
          sg += gg;
          sgx += gg * xh;
          rdw[static_cast<size_t>(c)] += gr[c] * xh;
          rdb[static_cast<size_t>(c)] += gr[c];
        }
        for (int64_t c = 0; c < N; ++c) {
          const double xh = (xr[c] - mu) * rs;
          const double gg = gr[c] * w[static_cast<size_t>(c)];
          const double ref = rs * (gg - (rms ? 0.0 : sg / N) - xh * sgx / N);
          ASSERT_NEAR(dx[static_cast<size_t>(r * N + c)], ref, 1e-4 * (1 + std::fabs(ref)))
              << (rms ? "rms" : "ln");
        }
      }
      for (int64_t c = 0; c < N; ++c) {
        ASSERT_NEAR(dw[static_cast<size_t>(c)], rdw[static_cast<size_t>(c)],
                    1e-4 * (1 + std::fabs(rdw[static_cast<size_t>(c)])));
        if (!rms) {
          ASSERT_NEAR(db[static_cast<size_t>(c)], rdb[static_cast<size_t>(c)],
                      1e-4 * (1 + std::fabs(rdb[static_cast<size_t>(c)])));
        }
      }
    }
}

TEST(Norm, BatchNormTrainingStatistics) {
  const int64_t Nn = 3, C = 2, S = 5;
  auto x = random_vec(static_cast<size_t>(Nn * C * S), 8, 2.0f);
  std::vector<float> y(x.size()), sm(2), si(2), rm{0.5f, -0.5f}, rv{1.0f, 2.0f};
  BatchNormArgs a;
  TensorRef in = ncs_f32(x.data(), Nn, C, S);
  a.input = in;
  a.running_mean = ref1(rm.data(), DType::Float32, C);
  a.running_var = ref1(rv.data(), DType::Float32, C);
  a.momentum = 0.1;
  TensorRef out = in;
  out.data = y.data();
  batch_norm_forward(out, ref1(sm.data(), DType::Float32, C), ref1(si.data(), DType::Float32, C),
                     a);
  for (int64_t c = 0; c < C; ++c) {
    double mu = 0, q = 0;
    for (int64_t n = 0; n < Nn; ++n)
      for (int64_t s = 0; s < S; ++s) mu += x[static_cast<size_t>(n * C * S + c * S + s)];
    mu /= Nn * S;
    for (int64_t n = 0; n < Nn; ++n)
      for (int64_t s = 0; s < S; ++s)
        q += std::pow(x[static_cast<size_t>(n * C * S + c * S + s)] - mu, 2);
    EXPECT_NEAR(sm[static_cast<size_t>(c)], mu, 1e-6);
    EXPECT_NEAR(si[static_cast<size_t>(c)], 1.0 / std::sqrt(q / (Nn * S) + 1e-5), 1e-4);
    EXPECT_NEAR(rm[static_cast<size_t>(c)], 0.9 * (c ? -0.5 : 0.5) + 0.1 * mu, 1e-6);
    EXPECT_NEAR(rv[static_cast<size_t>(c)], 0.9 * (c ? 2.0 : 1.0) + 0.1 * q / (Nn * S - 1), 1e-5);
  }
}

// The AVX2 batch-norm statistics (eight double lanes, rows longer than a vector with a tail)
// agree with the portable element-order sums to within an fp32 ulp or two, forward and backward.
TEST(Norm, BatchNormVectorStatisticsMatchPortable) {
  if (simd_detected() != SimdLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const SimdLevel saved = simd_level();
  const int64_t Nn = 4, C = 3, S = 37;
  const size_t total = static_cast<size_t>(Nn * C * S);
  auto x = random_vec(total, 11, 2.0f);
  for (float& v : x) v += 3.0f;  // a mean far from zero: the centered sums matter
  const auto dy = random_vec(total, 12);
  std::vector<float> w{0.5f, 1.5f, -2.0f}, b{0.1f, 0.2f, 0.3f};
  const TensorRef in = ncs_f32(x.data(), Nn, C, S);
  std::vector<float> y[2], sm[2], si[2], gx[2], gw[2], gb[2];
  for (int pass = 0; pass < 2; ++pass) {
    set_simd_level(pass ? SimdLevel::Avx2 : SimdLevel::Portable);
    y[pass].resize(total);
    gx[pass].resize(total);
    sm[pass].resize(C);
    si[pass].resize(C);
    gw[pass].resize(C);
    gb[pass].resize(C);
    BatchNormArgs a;
    a.input = in;
    a.weight = ref1(w.data(), DType::Float32, C);
    a.bias = ref1(b.data(), DType::Float32, C);
    TensorRef out = in, g = in, gi = in;
    out.data = y[pass].data();
    g.data = const_cast<float*>(dy.data());
    gi.data = gx[pass].data();
    const TensorRef m = ref1(sm[pass].data(), DType::Float32, C),
                    s = ref1(si[pass].data(), DType::Float32, C);
    batch_norm_forward(out, m, s, a);
    batch_norm_backward(gi, ref1(gw[pass].data(), DType::Float32, C),
                        ref1(gb[pass].data(), DType::Float32, C), g, m, s, a);
  }
  set_simd_level(saved);
  for (size_t i = 0; i < total; ++i) {
    EXPECT_FLOAT_EQ(y[0][i], y[1][i]) << i;
    EXPECT_FLOAT_EQ(gx[0][i], gx[1][i]) << i;
  }
  for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
    EXPECT_FLOAT_EQ(sm[0][c], sm[1][c]);
    EXPECT_FLOAT_EQ(si[0][c], si[1][c]);
    EXPECT_FLOAT_EQ(gw[0][c], gw[1][c]);
    EXPECT_FLOAT_EQ(gb[0][c], gb[1][c]);
  }
}
