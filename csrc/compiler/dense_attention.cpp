// Fused attention: per (batch, head, query block) K/V are converted to fp32 once, then each
// query row runs an online softmax over key blocks (running max, running sum, rescaled
// accumulator), so the score matrix is never materialized.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dense.h"
#include "error.h"
#include "runtime/thread_pool.h"
#include "vm_loops.h"

namespace neuron::cc::dense {

namespace {
constexpr int64_t kQueryBlock = 16;
constexpr int64_t kKeyBlock = 128;

const char* at(const TensorRef& t, int64_t i0, int64_t i1, int64_t i2) {
  const int64_t off = i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2];
  return static_cast<const char*>(t.data) +
         off * static_cast<int64_t>(kernels::element_size(t.dtype));
}
}  // namespace

void attention(const AttentionArgs& A) {
  const TensorRef &q = A.q, &k = A.k, &v = A.v, &o = A.out;
  if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4 || o.ndim != 4)
    throw ExecError("attention: q, k, v, out must be 4-D");
  const int64_t B = q.sizes[0], Hq = q.sizes[1], Sq = q.sizes[2], D = q.sizes[3];
  const int64_t Hkv = k.sizes[1], Skv = k.sizes[2], Dv = v.sizes[3];
  if (Hkv == 0 || Hq % Hkv != 0)
    throw ExecError("attention: query heads are not a multiple of kv heads");
  if (B == 0 || Hq == 0 || Sq == 0) return;
  const int64_t group = Hq / Hkv;
  const int64_t qblocks = (Sq + kQueryBlock - 1) / kQueryBlock;
  const int64_t tasks = B * Hq * qblocks;
  const vm::LoopTable& L = vm::loops();
  const int qdt = static_cast<int>(q.dtype), kdt = static_cast<int>(k.dtype),
            vdt = static_cast<int>(v.dtype);
  const int64_t qes = static_cast<int64_t>(kernels::element_size(q.dtype));
  const int64_t kes = static_cast<int64_t>(kernels::element_size(k.dtype));
  const int64_t ves = static_cast<int64_t>(kernels::element_size(v.dtype));
  const TensorRef* mask = A.mask;
  const bool bool_mask = mask && mask->dtype == kernels::DType::Bool;
  if (mask && mask->ndim != 4) throw ExecError("attention: the mask must be expanded to 4-D");

  auto run = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> kf, vf, qf, sc, acc, mrow;
    kf.resize(static_cast<size_t>(std::max<int64_t>(Skv * D, 1)));
    vf.resize(static_cast<size_t>(std::max<int64_t>(Skv * Dv, 1)));
    qf.resize(static_cast<size_t>(std::max<int64_t>(D, 1)));
    sc.resize(static_cast<size_t>(kKeyBlock));
    acc.resize(static_cast<size_t>(std::max<int64_t>(Dv, 1)));
    mrow.resize(static_cast<size_t>(std::max<int64_t>(Skv, 1)));
    int64_t loaded_b = -1, loaded_h = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t qb = t % qblocks;
      const int64_t h = (t / qblocks) % Hq;
      const int64_t b = t / (qblocks * Hq);
      const int64_t kh = h / group;
      if (b != loaded_b || kh != loaded_h) {
        for (int64_t j = 0; j < Skv; ++j) {
          L.load[kdt](kf.data() + j * D, at(k, b, kh, j), k.strides[3] * kes, D);
          L.load[vdt](vf.data() + j * Dv, at(v, b, kh, j), v.strides[3] * ves, Dv);
        }
        loaded_b = b;
        loaded_h = kh;
      }
      const int64_t i_end = std::min(Sq, (qb + 1) * kQueryBlock);
      for (int64_t i = qb * kQueryBlock; i < i_end; ++i) {
        L.load[qdt](qf.data(), at(q, b, h, i), q.strides[3] * qes, D);
        const int64_t jmax = A.causal ? std::min(Skv, i + 1) : Skv;
        if (mask) {
          const char* mp = at(*mask, b, h, i);
          L.load[static_cast<int>(mask->dtype)](
              mrow.data(), mp,
              mask->strides[3] * static_cast<int64_t>(kernels::element_size(mask->dtype)), jmax);
        }
        float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
        std::fill(acc.begin(), acc.begin() + Dv, 0.0f);
        bool nan_row = false;
        for (int64_t j0 = 0; j0 < jmax; j0 += kKeyBlock) {
          const int64_t jn = std::min(kKeyBlock, jmax - j0);
          float bm = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < jn; ++j) {
            float s;
            if (bool_mask && mrow[static_cast<size_t>(j0 + j)] == 0.0f) {
              s = -std::numeric_limits<float>::infinity();
            } else {
              s = A.scale * L.dot(qf.data(), kf.data() + (j0 + j) * D, D);
              if (mask && !bool_mask) s += mrow[static_cast<size_t>(j0 + j)];
            }
            if (s != s) nan_row = true;
            sc[static_cast<size_t>(j)] = s;
            bm = std::max(bm, s);
          }
          if (bm == -std::numeric_limits<float>::infinity()) continue;
          const float nm = std::max(m, bm);
          if (m != -std::numeric_limits<float>::infinity() && nm != m) {
            const float corr = std::exp(m - nm);
            L.scale(acc.data(), corr, Dv);
            l *= corr;
          }
          m = nm;
          for (int64_t j = 0; j < jn; ++j) {
            const float s = sc[static_cast<size_t>(j)];
            if (s == -std::numeric_limits<float>::infinity()) continue;
            const float p = std::exp(s - m);
            l += p;
            L.axpy(acc.data(), p, vf.data() + (j0 + j) * Dv, Dv);
          }
        }
        char* op = const_cast<char*>(at(o, b, h, i));
        const int64_t oes = static_cast<int64_t>(kernels::element_size(o.dtype));
        if (nan_row || l == 0.0f) {
          const float fill = (l == 0.0f && !nan_row && A.zero_masked_rows)
                                 ? 0.0f
                                 : std::numeric_limits<float>::quiet_NaN();
          std::fill(acc.begin(), acc.begin() + Dv, fill);
        } else {
          L.scale(acc.data(), 1.0f / l, Dv);
        }
        L.store[static_cast<int>(o.dtype)](op, o.strides[3] * oes, acc.data(), Dv);
      }
    }
  };
  if (tasks == 1 || rt::in_parallel_region()) {
    run(0, tasks);
  } else {
    rt::parallel_for(0, tasks, 1, run);
  }
}

}  // namespace neuron::cc::dense
