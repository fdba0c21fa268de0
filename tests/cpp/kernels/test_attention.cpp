// The fused attention kernels against a naive double-precision implementation: causal and
// non-causal, Lq != Lk, grouped-query heads, boolean and additive masks, fully masked rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention.h"

using namespace neuron::kernels;

namespace {

struct Case {
  int64_t B, Hq, Hkv, Lq, Lk, D, Dv;
  bool causal;
  int mask;  // 0 none, 1 bool, 2 additive
};

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void dense_strides(int64_t H, int64_t L, int64_t F, int64_t s[4]) {
  s[3] = 1;
  s[2] = F;
  s[1] = L * F;
  s[0] = H * L * F;
}

void run_case(const Case& c) {
  const auto q = random_vec(static_cast<size_t>(c.B * c.Hq * c.Lq * c.D), 1);
  const auto k = random_vec(static_cast<size_t>(c.B * c.Hkv * c.Lk * c.D), 2);
  const auto v = random_vec(static_cast<size_t>(c.B * c.Hkv * c.Lk * c.Dv), 3);
  const auto dout = random_vec(static_cast<size_t>(c.B * c.Hq * c.Lq * c.Dv), 4);
  std::vector<unsigned char> bmask(static_cast<size_t>(c.Lq * c.Lk));
  std::vector<float> fmask = random_vec(static_cast<size_t>(c.Lq * c.Lk), 5);
  std::mt19937 g(6);
  for (auto& m : bmask) m = (g() % 4) != 0;
  if (c.Lq > 1)
    for (int64_t j = 0; j < c.Lk; ++j)
      bmask[static_cast<size_t>(1 * c.Lk + j)] = 0;  // a fully masked row
  AttentionArgs a;
  a.B = c.B;
  a.Hq = c.Hq;
  a.Hkv = c.Hkv;
  a.Lq = c.Lq;
  a.Lk = c.Lk;
  a.D = c.D;
  a.Dv = c.Dv;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  dense_strides(c.Hq, c.Lq, c.D, a.q_s);
  dense_strides(c.Hkv, c.Lk, c.D, a.k_s);
  dense_strides(c.Hkv, c.Lk, c.Dv, a.v_s);
  if (c.mask) {  // [Lq, Lk] broadcast over batch and heads
    a.mask = c.mask == 1 ? static_cast<const void*>(bmask.data()) : fmask.data();
    a.mask_dtype = c.mask == 1 ? DType::Bool : DType::Float32;
    a.mask_s[0] = a.mask_s[1] = 0;
    a.mask_s[2] = c.Lk;
    a.mask_s[3] = 1;
  }
  a.causal = c.causal;
  a.scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  std::vector<float> out(dout.size()), lse(static_cast<size_t>(c.B * c.Hq * c.Lq));
  int64_t os[4];
  dense_strides(c.Hq, c.Lq, c.Dv, os);
  const int64_t ls[3] = {c.Hq * c.Lq, c.Lq, 1};
  attention_forward(a, out.data(), os, lse.data(), ls);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  AttentionGrads gr;
  gr.dout = dout.data();
  dense_strides(c.Hq, c.Lq, c.Dv, gr.dout_s);
  gr.out = out.data();
  dense_strides(c.Hq, c.Lq, c.Dv, gr.out_s);
  gr.lse = lse.data();
  for (int i = 0; i < 3; ++i) gr.lse_s[i] = ls[i];
  gr.dq = dq.data();
  dense_strides(c.Hq, c.Lq, c.D, gr.dq_s);
  gr.dk = dk.data();
  dense_strides(c.Hkv, c.Lk, c.D, gr.dk_s);
  gr.dv = dv.data();
  dense_strides(c.Hkv, c.Lk, c.Dv, gr.dv_s);
  attention_backward(a, gr);

  // Naive reference in double.
  std::vector<double> rdq(q.size()), rdk(k.size()), rdv(v.size());
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t hk = h / group;
      const float* Q = q.data() + (b * c.Hq + h) * c.Lq * c.D;
      const float* K = k.data() + (b * c.Hkv + hk) * c.Lk * c.D;
      const float* V = v.data() + (b * c.Hkv + hk) * c.Lk * c.Dv;
      const float* dO = dout.data() + (b * c.Hq + h) * c.Lq * c.Dv;
      for (int64_t i = 0; i < c.Lq; ++i) {
        std::vector<double> s(static_cast<size_t>(c.Lk)), p(static_cast<size_t>(c.Lk));
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Lk; ++j) {
          double d = 0;
          for (int64_t e = 0; e < c.D; ++e)
            d += static_cast<double>(Q[i * c.D + e]) * K[j * c.D + e];
          d *= a.scale;
          if (c.mask == 2) d += fmask[static_cast<size_t>(i * c.Lk + j)];
          if ((c.mask == 1 && !bmask[static_cast<size_t>(i * c.Lk + j)]) || (c.causal && j > i))
            d = -INFINITY;
          s[static_cast<size_t>(j)] = d;
          mx = std::max(mx, d);
        }
        double sum = 0;
        for (int64_t j = 0; j < c.Lk; ++j)
          sum += (p[static_cast<size_t>(j)] =
                      mx == -INFINITY ? 0 : std::exp(s[static_cast<size_t>(j)] - mx));
        for (auto& x : p) x = sum > 0 ? x / sum : 0;
        double delta = 0;
        for (int64_t e = 0; e < c.Dv; ++e) {
          double o = 0;
          for (int64_t j = 0; j < c.Lk; ++j) o += p[static_cast<size_t>(j)] * V[j * c.Dv + e];
          const size_t oi = static_cast<size_t>(((b * c.Hq + h) * c.Lq + i) * c.Dv + e);
          ASSERT_NEAR(out[oi], o, 2e-5) << "out b" << b << " h" << h << " i" << i;
          delta += o * dO[i * c.Dv + e];
        }
        for (int64_t j = 0; j < c.Lk; ++j) {
          double dp = 0;
          for (int64_t e = 0; e < c.Dv; ++e) {
            dp += static_cast<double>(dO[i * c.Dv + e]) * V[j * c.Dv + e];
            rdv[static_cast<size_t>(((b * c.Hkv + hk) * c.Lk + j) * c.Dv + e)] +=
                p[static_cast<size_t>(j)] * dO[i * c.Dv + e];
          }
          const double ds = p[static_cast<size_t>(j)] * (dp - delta) * a.scale;
          for (int64_t e = 0; e < c.D; ++e) {
            rdq[static_cast<size_t>(((b * c.Hq + h) * c.Lq + i) * c.D + e)] += ds * K[j * c.D + e];
            rdk[static_cast<size_t>(((b * c.Hkv + hk) * c.Lk + j) * c.D + e)] +=
                ds * Q[i * c.D + e];
          }
        }
      }
    }
  for (size_t i = 0; i < dq.size(); ++i) ASSERT_NEAR(dq[i], rdq[i], 1e-4) << "dq " << i;
  for (size_t i = 0; i < dk.size(); ++i) ASSERT_NEAR(dk[i], rdk[i], 1e-4) << "dk " << i;
  for (size_t i = 0; i < dv.size(); ++i) ASSERT_NEAR(dv[i], rdv[i], 1e-4) << "dv " << i;
}

}  // namespace

TEST(Attention, MatchesNaiveReference) {
  for (const Case& c : std::vector<Case>{{1, 1, 1, 1, 1, 4, 4, false, 0},
                                         {2, 2, 2, 5, 7, 8, 6, false, 0},
                                         {1, 2, 2, 70, 70, 16, 16, true, 0},
                                         {1, 2, 2, 300, 9, 8, 8, true, 0},
                                         {1, 2, 2, 9, 300, 8, 8, true, 0},
                                         {1, 4, 2, 33, 40, 8, 8, false, 0},
                                         {2, 2, 1, 9, 11, 8, 8, false, 1},
                                         {1, 2, 2, 9, 11, 8, 8, true, 2}})
    run_case(c);
}

TEST(Attention, RejectsBadHeadCounts) {
  AttentionArgs a;
  a.Hq = 3;
  a.Hkv = 2;
  EXPECT_THROW(attention_forward(a, nullptr, nullptr, nullptr, nullptr), std::invalid_argument);
}
