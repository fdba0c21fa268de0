#include "attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "convert.h"
#include "gemm.h"
#include "runtime/thread_pool.h"
#include "simd.h"
#include "simd/vec_avx2.h"
#include "simd/vmath.h"

namespace neuron::kernels {
namespace {

constexpr int64_t kBq = 64;   // queries per block
constexpr int64_t kBk = 256;  // keys per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Row helpers on fp32 scores; exp is the kernels' (simd/vmath.h, simd/vec_avx2.h), a row's tail
// runs through the vector body.

// s[j] = exp(s[j] - mx) (0 where s[j] is -inf); returns the sum.
float exp_sub_portable(float* s, int64_t n, float mx) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = vm::exp(s[j] - mx);
    sum += s[j];
  }
  return sum;
}

// max(init, s[0..n)) (NaN-free inputs: scores are finite or -inf).
float row_max_portable(const float* s, int64_t n, float init) {
  for (int64_t j = 0; j < n; ++j) init = std::max(init, s[j]);
  return init;
}

void scale_row_portable(float* x, int64_t n, float f) {
  for (int64_t j = 0; j < n; ++j) x[j] *= f;
}

// dP <- P * (dP - delta) for one row.
void ds_row_portable(const float* p, float* dp, int64_t n, float delta) {
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

#if NEURON_KERNELS_X86
NEURON_AVX2_BEGIN
float exp_sub_avx2(float* s, int64_t n, float mx) {
  using namespace avx2;
  const Vec8f vm(mx);
  Vec8f acc(0.0f);
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t m = std::min<int64_t>(8, n - j);
    const Vec8f e = exp(load_first(s + j, m) - vm) & first_lanes(m);
    store_first(s + j, e, m);
    acc = acc + e;
  }
  return hsum(acc);
}

float row_max_avx2(const float* s, int64_t n, float init) {
  using namespace avx2;
  Vec8f m(init);
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t k = std::min<int64_t>(8, n - j);
    m = _mm256_max_ps(m.v, select(first_lanes(k), load_first(s + j, k), Vec8f(init)).v);
  }
  return hmax(m);
}

void scale_row_avx2(float* x, int64_t n, float f) {
  using namespace avx2;
  const Vec8f v(f);
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t m = std::min<int64_t>(8, n - j);
    store_first(x + j, load_first(x + j, m) * v, m);
  }
}

void ds_row_avx2(const float* p, float* dp, int64_t n, float delta) {
  using namespace avx2;
  const Vec8f d(delta);
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t m = std::min<int64_t>(8, n - j);
    store_first(dp + j, load_first(p + j, m) * (load_first(dp + j, m) - d), m);
  }
}
NEURON_AVX2_END
#endif

bool use_avx2() { return NEURON_KERNELS_X86 && simd_level() == SimdLevel::Avx2; }

float exp_sub(float* s, int64_t n, float mx) {
#if NEURON_KERNELS_X86
  if (use_avx2()) return exp_sub_avx2(s, n, mx);
#endif
  return exp_sub_portable(s, n, mx);
}

float row_max(const float* s, int64_t n, float init) {
#if NEURON_KERNELS_X86
  if (use_avx2()) return row_max_avx2(s, n, init);
#endif
  return row_max_portable(s, n, init);
}

void scale_row(float* x, int64_t n, float f) {
#if NEURON_KERNELS_X86
  if (use_avx2()) return scale_row_avx2(x, n, f);
#endif
  scale_row_portable(x, n, f);
}

void ds_row(const float* p, float* dp, int64_t n, float delta) {
#if NEURON_KERNELS_X86
  if (use_avx2()) return ds_row_avx2(p, dp, n, delta);
#endif
  ds_row_portable(p, dp, n, delta);
}

// C[m, n] (ldc) = A @ B (+ C when accumulate), fp32, with A [m, k] given by (a, a_rs, a_cs) and
// B [k, n] by (b, b_rs, b_cs).
void mm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
        int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate, float alpha = 1.0f) {
  if (m == 0 || n == 0) return;
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a;
  p.a_rs = a_rs;
  p.a_cs = a_cs;
  p.b = b;
  p.b_rs = b_rs;
  p.b_cs = b_cs;
  p.c = c;
  p.c_rs = ldc;
  p.c_cs = 1;
  p.in_dtype = p.out_dtype = DType::Float32;
  p.alpha = alpha;
  p.beta = accumulate ? 1.0 : 0.0;
  gemm(p);
}

// Loads rows [r0, r0 + n) of a [*, *, L, F] operand (at (b, h)) into dense fp32 [n, F].
void load_block(const void* base, DType dt, const int64_t s[4], int64_t b, int64_t h, int64_t r0,
                int64_t n, int64_t F, float* dst) {
  const int64_t esz = static_cast<int64_t>(element_size(dt));
  const char* p = static_cast<const char*>(base) + (b * s[0] + h * s[1] + r0 * s[2]) * esz;
  for (int64_t i = 0; i < n; ++i) strided_to_f32(p + i * s[2] * esz, dt, s[3], dst + i * F, F);
}

void store_block(const float* src, void* base, DType dt, const int64_t s[4], int64_t b, int64_t h,
                 int64_t r0, int64_t n, int64_t F) {
  const int64_t esz = static_cast<int64_t>(element_size(dt));
  char* p = static_cast<char*>(base) + (b * s[0] + h * s[1] + r0 * s[2]) * esz;
  for (int64_t i = 0; i < n; ++i) strided_from_f32(src + i * F, p + i * s[2] * esz, dt, s[3], F);
}

// Adds the mask (and causal -inf) to the scaled scores S [nq, nk] of queries q0.. and keys k0..
void apply_mask(const AttentionArgs& a, int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0,
                int64_t nk, float* S) {
  if (a.causal) {
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = std::max<int64_t>(0, q0 + i + 1 - k0); j < nk; ++j) S[i * nk + j] = kNegInf;
  }
  if (!a.mask) return;
  const int64_t esz = static_cast<int64_t>(element_size(a.mask_dtype));
  const char* mb = static_cast<const char*>(a.mask) + (b * a.mask_s[0] + h * a.mask_s[1]) * esz;
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(nk));
  for (int64_t i = 0; i < nq; ++i) {
    const char* mr = mb + ((q0 + i) * a.mask_s[2] + k0 * a.mask_s[3]) * esz;
    float* s = S + i * nk;
    if (a.mask_dtype == DType::Bool) {
      for (int64_t j = 0; j < nk; ++j)
        if (*reinterpret_cast<const bool*>(mr + j * a.mask_s[3] * esz) == a.mask_excludes)
          s[j] = kNegInf;
    } else {
      strided_to_f32(mr, a.mask_dtype, a.mask_s[3], row.data(), nk);
      for (int64_t j = 0; j < nk; ++j) s[j] += row[static_cast<size_t>(j)];
    }
  }
}

void validate(const AttentionArgs& a) {
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0)
    throw std::invalid_argument(
        "scaled_dot_product_attention: the number of query heads (" + std::to_string(a.Hq) +
        ") must be a multiple of the number of key/value heads (" + std::to_string(a.Hkv) + ")");
  if (a.dtype != DType::Float32 && a.dtype != DType::BFloat16 && a.dtype != DType::Float16)
    throw std::invalid_argument("scaled_dot_product_attention: unsupported dtype " +
                                std::string(dtype_name(a.dtype)));
}

// Keys [k0, k_end) a block of queries [q0, q0 + nq) can see under the causal mask.
int64_t key_end(const AttentionArgs& a, int64_t q0, int64_t nq) {
  return a.causal ? std::min(a.Lk, q0 + nq) : a.Lk;
}

}  // namespace

void attention_forward(const AttentionArgs& a, void* out, const int64_t out_s[4], float* lse,
                       const int64_t lse_s[3]) {
  validate(a);
  if (a.B == 0 || a.Hq == 0 || a.Lq == 0 || a.Dv == 0) return;
  const int64_t group = a.Hq / a.Hkv;
  const int64_t nqb = (a.Lq + kBq - 1) / kBq;
  const int64_t units = a.B * a.Hq * nqb;
  const float scale = static_cast<float>(a.scale);
  rt::parallel_for(0, units, 1, [&](int64_t u0, int64_t u1) {
    std::vector<float> Q(static_cast<size_t>(kBq * a.D)), K(static_cast<size_t>(kBk * a.D)),
        V(static_cast<size_t>(kBk * a.Dv)), S(static_cast<size_t>(kBq * kBk)),
        O(static_cast<size_t>(kBq * a.Dv)), m(static_cast<size_t>(kBq)),
        l(static_cast<size_t>(kBq));
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / (a.Hq * nqb), h = (u / nqb) % a.Hq, qb = u % nqb;
      const int64_t hk = h / group;
      const int64_t q0 = qb * kBq, nq = std::min(kBq, a.Lq - q0);
      load_block(a.q, a.dtype, a.q_s, b, h, q0, nq, a.D, Q.data());
      std::fill(O.begin(), O.end(), 0.0f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t kend = key_end(a, q0, nq);
      for (int64_t k0 = 0; k0 < kend; k0 += kBk) {
        const int64_t nk = std::min(kBk, kend - k0);
        load_block(a.k, a.dtype, a.k_s, b, hk, k0, nk, a.D, K.data());
        load_block(a.v, a.dtype, a.v_s, b, hk, k0, nk, a.Dv, V.data());
        // S = scale * Q K^T
        mm(nq, nk, a.D, Q.data(), a.D, 1, K.data(), 1, a.D, S.data(), nk, false, scale);
        apply_mask(a, b, h, q0, nq, k0, nk, S.data());
        for (int64_t i = 0; i < nq; ++i) {
          float* s = S.data() + i * nk;
          const float mx = row_max(s, nk, m[static_cast<size_t>(i)]);
          if (mx == kNegInf) {  // nothing visible yet in this row
            std::fill(s, s + nk, 0.0f);
            continue;
          }
          const float corr = vm::exp(m[static_cast<size_t>(i)] - mx);
          const float sum = exp_sub(s, nk, mx);
          l[static_cast<size_t>(i)] = l[static_cast<size_t>(i)] * corr + sum;
          m[static_cast<size_t>(i)] = mx;
          if (corr != 1.0f) scale_row(O.data() + i * a.Dv, a.Dv, corr);
        }
        // O += P V
        mm(nq, a.Dv, nk, S.data(), nk, 1, V.data(), a.Dv, 1, O.data(), a.Dv, true);
      }
      for (int64_t i = 0; i < nq; ++i) {
        const float li = l[static_cast<size_t>(i)];
        if (li == 0 && a.nan_masked_rows)
          std::fill(O.data() + i * a.Dv, O.data() + (i + 1) * a.Dv,
                    std::numeric_limits<float>::quiet_NaN());
        else
          scale_row(O.data() + i * a.Dv, a.Dv, li > 0 ? 1.0f / li : 0.0f);
        if (lse)
          lse[b * lse_s[0] + h * lse_s[1] + (q0 + i) * lse_s[2]] =
              li > 0 ? m[static_cast<size_t>(i)] + vm::log(li) : kNegInf;
      }
      store_block(O.data(), out, a.dtype, out_s, b, h, q0, nq, a.Dv);
    }
  });
}

namespace {

// P = exp(S - lse) for the visible scores (0 for masked entries and fully masked rows).
void probabilities(float* S, int64_t nq, int64_t nk, const float* lse_rows) {
  for (int64_t i = 0; i < nq; ++i) {
    float* s = S + i * nk;
    const float L = lse_rows[i];
    if (L == kNegInf) {
      std::fill(s, s + nk, 0.0f);
      continue;
    }
    exp_sub(s, nk, L);  // exp(-inf - L) = 0 for masked scores
  }
}

}  // namespace

void attention_backward(const AttentionArgs& a, const AttentionGrads& g) {
  validate(a);
  if (a.B == 0 || a.Hq == 0) return;
  const int64_t group = a.Hq / a.Hkv;
  const float scale = static_cast<float>(a.scale);
  // Delta[b, h, i] = sum_d dO * O, and the log-sum-exp rows, as dense fp32.
  std::vector<float> delta(static_cast<size_t>(a.B * a.Hq * a.Lq)),
      lse(static_cast<size_t>(a.B * a.Hq * a.Lq));
  rt::parallel_for(0, a.B * a.Hq, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> x(static_cast<size_t>(a.Dv)), y(static_cast<size_t>(a.Dv));
    const int64_t esz = static_cast<int64_t>(element_size(a.dtype));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / a.Hq, h = p % a.Hq;
      for (int64_t i = 0; i < a.Lq; ++i) {
        strided_to_f32(static_cast<const char*>(g.dout) +
                           (b * g.dout_s[0] + h * g.dout_s[1] + i * g.dout_s[2]) * esz,
                       a.dtype, g.dout_s[3], x.data(), a.Dv);
        strided_to_f32(static_cast<const char*>(g.out) +
                           (b * g.out_s[0] + h * g.out_s[1] + i * g.out_s[2]) * esz,
                       a.dtype, g.out_s[3], y.data(), a.Dv);
        float s = 0;
        for (int64_t d = 0; d < a.Dv; ++d)
          s += x[static_cast<size_t>(d)] * y[static_cast<size_t>(d)];
        delta[static_cast<size_t>(p * a.Lq + i)] = s;
        lse[static_cast<size_t>(p * a.Lq + i)] =
            g.lse[b * g.lse_s[0] + h * g.lse_s[1] + i * g.lse_s[2]];
      }
    }
  });

  // Pass 1: dK and dV, one task per (batch, kv head, key block), looping over the query heads of
  // its group and every query block that can see it.
  const int64_t nkb = (a.Lk + kBk - 1) / kBk, nqb = (a.Lq + kBq - 1) / kBq;
  if (g.dk || g.dv) {
    rt::parallel_for(0, a.B * a.Hkv * nkb, 1, [&](int64_t u0, int64_t u1) {
      std::vector<float> Q(static_cast<size_t>(kBq * a.D)), dO(static_cast<size_t>(kBq * a.Dv)),
          K(static_cast<size_t>(kBk * a.D)), V(static_cast<size_t>(kBk * a.Dv)),
          S(static_cast<size_t>(kBq * kBk)), dP(static_cast<size_t>(kBq * kBk)),
          dK(static_cast<size_t>(kBk * a.D)), dV(static_cast<size_t>(kBk * a.Dv));
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / (a.Hkv * nkb), hk = (u / nkb) % a.Hkv, kb = u % nkb;
        const int64_t k0 = kb * kBk, nk = std::min(kBk, a.Lk - k0);
        load_block(a.k, a.dtype, a.k_s, b, hk, k0, nk, a.D, K.data());
        load_block(a.v, a.dtype, a.v_s, b, hk, k0, nk, a.Dv, V.data());
        std::fill(dK.begin(), dK.end(), 0.0f);
        std::fill(dV.begin(), dV.end(), 0.0f);
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          for (int64_t qb = 0; qb < nqb; ++qb) {
            const int64_t q0 = qb * kBq, nq = std::min(kBq, a.Lq - q0);
            if (a.causal && q0 + nq - 1 < k0)
              continue;  // every query of the block is before these keys
            load_block(a.q, a.dtype, a.q_s, b, h, q0, nq, a.D, Q.data());
            load_block(g.dout, a.dtype, g.dout_s, b, h, q0, nq, a.Dv, dO.data());
            mm(nq, nk, a.D, Q.data(), a.D, 1, K.data(), 1, a.D, S.data(), nk, false, scale);
            apply_mask(a, b, h, q0, nq, k0, nk, S.data());
            const float* L = lse.data() + (b * a.Hq + h) * a.Lq + q0;
            const float* Dl = delta.data() + (b * a.Hq + h) * a.Lq + q0;
            probabilities(S.data(), nq, nk, L);
            // dV += P^T dO
            mm(nk, a.Dv, nq, S.data(), 1, nk, dO.data(), a.Dv, 1, dV.data(), a.Dv, true);
            // dP = dO V^T ; dS = P * (dP - delta)
            mm(nq, nk, a.Dv, dO.data(), a.Dv, 1, V.data(), 1, a.Dv, dP.data(), nk, false);
            for (int64_t i = 0; i < nq; ++i)
              ds_row(S.data() + i * nk, dP.data() + i * nk, nk, Dl[i]);
            // dK += scale * dS^T Q
            mm(nk, a.D, nq, dP.data(), 1, nk, Q.data(), a.D, 1, dK.data(), a.D, true, scale);
          }
        }
        if (g.dk) store_block(dK.data(), g.dk, a.dtype, g.dk_s, b, hk, k0, nk, a.D);
        if (g.dv) store_block(dV.data(), g.dv, a.dtype, g.dv_s, b, hk, k0, nk, a.Dv);
      }
    });
  }

  // Pass 2: dQ (and the mask gradient), one task per (batch, q head, query block).
  if (g.dq || g.dmask) {
    rt::parallel_for(0, a.B * a.Hq * nqb, 1, [&](int64_t u0, int64_t u1) {
      std::vector<float> Q(static_cast<size_t>(kBq * a.D)), dO(static_cast<size_t>(kBq * a.Dv)),
          K(static_cast<size_t>(kBk * a.D)), V(static_cast<size_t>(kBk * a.Dv)),
          S(static_cast<size_t>(kBq * kBk)), dP(static_cast<size_t>(kBq * kBk)),
          dQ(static_cast<size_t>(kBq * a.D));
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / (a.Hq * nqb), h = (u / nqb) % a.Hq, qb = u % nqb;
        const int64_t hk = h / group;
        const int64_t q0 = qb * kBq, nq = std::min(kBq, a.Lq - q0);
        load_block(a.q, a.dtype, a.q_s, b, h, q0, nq, a.D, Q.data());
        load_block(g.dout, a.dtype, g.dout_s, b, h, q0, nq, a.Dv, dO.data());
        std::fill(dQ.begin(), dQ.end(), 0.0f);
        const float* L = lse.data() + (b * a.Hq + h) * a.Lq + q0;
        const float* Dl = delta.data() + (b * a.Hq + h) * a.Lq + q0;
        if (g.dmask) {
          for (int64_t i = 0; i < nq; ++i)
            std::fill(g.dmask + ((b * a.Hq + h) * a.Lq + q0 + i) * a.Lk,
                      g.dmask + ((b * a.Hq + h) * a.Lq + q0 + i + 1) * a.Lk, 0.0f);
        }
        const int64_t kend = key_end(a, q0, nq);
        for (int64_t k0 = 0; k0 < kend; k0 += kBk) {
          const int64_t nk = std::min(kBk, kend - k0);
          load_block(a.k, a.dtype, a.k_s, b, hk, k0, nk, a.D, K.data());
          load_block(a.v, a.dtype, a.v_s, b, hk, k0, nk, a.Dv, V.data());
          mm(nq, nk, a.D, Q.data(), a.D, 1, K.data(), 1, a.D, S.data(), nk, false, scale);
          apply_mask(a, b, h, q0, nq, k0, nk, S.data());
          probabilities(S.data(), nq, nk, L);
          mm(nq, nk, a.Dv, dO.data(), a.Dv, 1, V.data(), 1, a.Dv, dP.data(), nk, false);
          for (int64_t i = 0; i < nq; ++i) ds_row(S.data() + i * nk, dP.data() + i * nk, nk, Dl[i]);
          if (g.dmask) {
            for (int64_t i = 0; i < nq; ++i)
              std::copy(dP.data() + i * nk, dP.data() + (i + 1) * nk,
                        g.dmask + ((b * a.Hq + h) * a.Lq + q0 + i) * a.Lk + k0);
          }
          // dQ += scale * dS K
          if (g.dq)
            mm(nq, a.D, nk, dP.data(), nk, 1, K.data(), a.D, 1, dQ.data(), a.D, true, scale);
        }
        if (g.dq) store_block(dQ.data(), g.dq, a.dtype, g.dq_s, b, h, q0, nq, a.D);
      }
    });
  }
  // Keys that no query can see get zero gradients (pass 1 wrote every key block it owns).
}

}  // namespace neuron::kernels
