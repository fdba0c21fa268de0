// Runs a Program: one pass over its steps on the calling thread (a stream worker).
#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>

#include "dense.h"
#include "error.h"
#include "kernels/attention.h"
#include "kernels/copy.h"
#include "kernels/norm.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "program.h"
#include "runtime/env.h"
#include "staging.h"

namespace neuron::cc {

namespace {

void run_kernel(const Step& s, const Buffers& b) {
  std::vector<char*> bases(s.kernel_buffers.size());
  for (size_t o = 0; o < bases.size(); ++o)
    bases[o] =
        static_cast<char*>(resolve(s.tensors[static_cast<size_t>(s.kernel_buffers[o])], b).data);
  vm::run(*s.kernel, bases.data());
}

dense::PoolParams pool_params(const Step& s, bool maxp) {
  dense::PoolParams p;
  const auto& v = s.ints;
  p.kernel = {v[0], v[1]};
  p.stride = {v[2], v[3]};
  p.padding = {v[4], v[5]};
  if (maxp) {
    p.dilation = {v[6], v[7]};
    p.ceil_mode = v[8] != 0;
  } else {
    p.ceil_mode = v[6] != 0;
    p.count_include_pad = v[7] != 0;
    p.divisor = v[8];
  }
  return p;
}

void strides4(const kernels::TensorRef& t, const char* what, int64_t s[4]) {
  if (t.ndim != 4) throw ExecError(rt::str("attention: ", what, " must be 4-D"));
  for (int d = 0; d < 4; ++d) s[d] = t.strides[d];
}

// The kernels' attention arguments for q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]
// and an optional mask expanded to [B, Hq, Sq, Skv] (bool: true = attend, or additive).
kernels::AttentionArgs attention_args(const kernels::TensorRef& q, const kernels::TensorRef& k,
                                      const kernels::TensorRef& v, const kernels::TensorRef* mask,
                                      double scale, bool causal) {
  kernels::AttentionArgs a;
  strides4(q, "q", a.q_s);
  strides4(k, "k", a.k_s);
  strides4(v, "v", a.v_s);
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    throw ExecError("attention: q, k and v must have one dtype");
  a.B = q.sizes[0];
  a.Hq = q.sizes[1];
  a.Lq = q.sizes[2];
  a.D = q.sizes[3];
  a.Hkv = k.sizes[1];
  a.Lk = k.sizes[2];
  a.Dv = v.sizes[3];
  if (a.Hkv == 0 || a.Hq % a.Hkv != 0)
    throw ExecError("attention: query heads are not a multiple of kv heads");
  a.dtype = q.dtype;
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  if (mask) {
    strides4(*mask, "mask", a.mask_s);
    a.mask = mask->data;
    a.mask_dtype = mask->dtype;
  }
  a.causal = causal;
  a.scale = scale;
  return a;
}

// Every element of `t` = v (in t's dtype).
void fill_value(const kernels::TensorRef& t, double v) {
  if (t.numel() == 0) return;
  const float f = static_cast<float>(v);
  kernels::TensorRef src;
  src.data = const_cast<float*>(&f);
  src.dtype = kernels::DType::Float32;
  src.ndim = t.ndim;
  for (int d = 0; d < t.ndim; ++d) {
    src.sizes[d] = t.sizes[d];
    src.strides[d] = 0;
  }
  kernels::copy(t, src);
}

// A [N] parameter (weight, bias or their gradients) from the [1, N] rows view of its tensor.
kernels::TensorRef param_ref(const dense::StagedRows& p) {
  kernels::TensorRef r = p.rows();
  r.ndim = 1;
  r.sizes[0] = p.rows().sizes[1];
  r.strides[0] = p.rows().strides[1];
  return r;
}

// Layer norm on the kernels' routines (kernels/norm.h, what eager runs) over [rows, normalized]
// views of the step's tensors.
void layer_norm(const Step& s, const Buffers& b) {
  auto T = [&](size_t i) { return resolve(s.tensors.at(i), b); };
  const int axis = static_cast<int>(s.ints.at(0));
  size_t k = 0;
  dense::StagedRows x(T(k++), axis);
  std::optional<dense::StagedRows> w, bias;
  if (s.ints.at(1)) w.emplace(T(k++), 0);
  if (s.ints.at(2)) bias.emplace(T(k++), 0);
  dense::StagedRows out(T(k), axis), mean(T(k + 1), axis), rstd(T(k + 2), axis);
  if (x.rows().sizes[0] == 0) return;
  x.in();
  kernels::TensorRef wr, br;  // data == nullptr: no parameter
  if (w) {
    w->in();
    wr = param_ref(*w);
  }
  if (bias) {
    bias->in();
    br = param_ref(*bias);
  }
  kernels::layer_norm_forward(out.rows(), mean.column(), rstd.column(), x.rows(), wr, br,
                              s.floats.at(0));
  for (dense::StagedRows* t : {&out, &mean, &rstd}) t->done();
}

void layer_norm_backward(const Step& s, const Buffers& b) {
  auto T = [&](size_t i) { return resolve(s.tensors.at(i), b); };
  const int axis = static_cast<int>(s.ints.at(0));
  const bool has_w = s.ints.at(1) != 0;
  dense::StagedRows gy(T(0), axis), x(T(1), axis), mean(T(2), axis), rstd(T(3), axis);
  std::optional<dense::StagedRows> w;
  size_t k = 4;
  if (has_w) w.emplace(T(k++), 0);
  dense::StagedRows gx(T(k), axis), gw(T(k + 1), 0), gb(T(k + 2), 0);
  const bool want_gx = s.ints.at(3) != 0, want_gw = has_w && s.ints.at(4) != 0,
             want_gb = s.ints.at(5) != 0;
  if (x.rows().sizes[0] == 0 || x.rows().sizes[1] == 0) {
    const uint64_t zero = 0;
    for (dense::StagedRows* t : {&gw, &gb})
      if (t->dense().numel()) {
        kernels::fill(t->dense(), &zero);
        t->done();
      }
    return;
  }
  for (dense::StagedRows* t : {&gy, &x, &mean, &rstd}) t->in();
  kernels::TensorRef wr, gxr, gwr, gbr;  // data == nullptr: not given / not wanted
  if (w) {
    w->in();
    wr = param_ref(*w);
  }
  if (want_gx) gxr = gx.rows();
  if (want_gw) gwr = param_ref(gw);
  if (want_gb) gbr = param_ref(gb);
  kernels::layer_norm_backward(gxr, gwr, gbr, gy.rows(), x.rows(), mean.column(), rstd.column(),
                               wr);
  if (want_gx) gx.done();
  if (want_gw) gw.done();
  if (want_gb) gb.done();
}

// [N, C, ...] as [N, C, S] (the kernels' batch-norm layout): a view when the dims after C
// merge, else a dense temporary.
class StagedNcs : public dense::Staged {
 public:
  explicit StagedNcs(const kernels::TensorRef& t) : Staged(t, !mergeable(t)) {
    if (t.ndim < 2) throw ExecError("batch norm: input must be at least 2-D");
    ncs_ = d_;
    ncs_.ndim = 3;
    if (!dense::merge_dims(d_, 2, d_.ndim, &ncs_.sizes[2], &ncs_.strides[2]))
      throw ExecError("batch norm: spatial dims do not merge");
  }
  const kernels::TensorRef& ncs() const { return ncs_; }

 private:
  static bool mergeable(const kernels::TensorRef& t) {
    int64_t n, s;
    return t.ndim >= 2 && dense::merge_dims(t, 2, t.ndim, &n, &s);
  }
  kernels::TensorRef ncs_;
};

// Training batch norm on the eager kernel (kernels/norm.h): the running statistics are copied
// into their new versions, which the kernel then updates in place, as eager updates the
// module's buffers.
void batch_norm(const Step& s, const Buffers& b) {
  auto T = [&](size_t i) { return resolve(s.tensors.at(i), b); };
  const bool has_w = s.ints.at(0) != 0, has_b = s.ints.at(1) != 0, has_r = s.ints.at(2) != 0;
  size_t k = 0;
  StagedNcs x(T(k++));
  kernels::BatchNormArgs a;
  if (has_w) a.weight = T(k++);
  if (has_b) a.bias = T(k++);
  kernels::TensorRef rm, rv;
  if (has_r) {
    rm = T(k++);
    rv = T(k++);
  }
  StagedNcs out(T(k));
  const kernels::TensorRef save_mean = T(k + 1), save_invstd = T(k + 2);
  if (has_r) {
    a.running_mean = T(k + 3);
    a.running_var = T(k + 4);
    kernels::copy(a.running_mean, rm);
    kernels::copy(a.running_var, rv);
  }
  if (x.dense().numel() == 0) return;
  x.in();
  a.input = x.ncs();
  a.training = true;
  a.momentum = s.floats.at(0);
  a.eps = s.floats.at(1);
  kernels::batch_norm_forward(out.ncs(), save_mean, save_invstd, a);
  out.done();
}

void batch_norm_backward(const Step& s, const Buffers& b) {
  auto T = [&](size_t i) { return resolve(s.tensors.at(i), b); };
  const bool has_w = s.ints.at(0) != 0;
  StagedNcs gy(T(0)), x(T(1));
  const kernels::TensorRef save_mean = T(2), save_invstd = T(3);
  kernels::BatchNormArgs a;
  size_t k = 4;
  if (has_w) a.weight = T(k++);
  StagedNcs gx(T(k));
  const kernels::TensorRef gw = T(k + 1), gb = T(k + 2);
  const bool want_gx = s.ints.at(1) != 0, want_gw = s.ints.at(2) != 0, want_gb = s.ints.at(3) != 0;
  if (x.dense().numel() == 0) {
    for (const kernels::TensorRef* t : {&gw, &gb}) fill_value(*t, 0.0);
    return;
  }
  gy.in();
  x.in();
  a.input = x.ncs();
  a.training = true;
  a.eps = s.floats.at(0);
  kernels::batch_norm_backward(want_gx ? gx.ncs() : kernels::TensorRef{},
                               want_gw ? gw : kernels::TensorRef{},
                               want_gb ? gb : kernels::TensorRef{}, gy.ncs(), save_mean,
                               save_invstd, a);
  if (want_gx) gx.done();
}

void run_step(const Step& s, const Buffers& b) {
  auto T = [&](size_t i) { return resolve(s.tensors.at(i), b); };
  switch (s.kind) {
    case StepKind::Fused:
      run_kernel(s, b);
      return;
    case StepKind::Gemm:
      dense::matmul(T(0), T(1), T(2));
      if (s.kernel) run_kernel(s, b);
      return;
    case StepKind::Attention: {
      const bool has_mask = s.ints.at(2) != 0, has_lse = s.ints.at(3) != 0;
      const kernels::TensorRef mask = has_mask ? T(4) : kernels::TensorRef{};
      kernels::AttentionArgs a = attention_args(T(0), T(1), T(2), has_mask ? &mask : nullptr,
                                                s.floats.at(0), s.ints.at(0) != 0);
      a.nan_masked_rows = s.ints.at(1) == 0;
      const kernels::TensorRef out = T(3);
      int64_t os[4];
      strides4(out, "out", os);
      kernels::TensorRef lse;
      int64_t ls[3] = {};
      if (has_lse) {
        lse = T(has_mask ? 5 : 4);
        if (lse.ndim != 3 || lse.dtype != kernels::DType::Float32)
          throw ExecError("attention: lse must be f32 [B, Hq, Sq]");
        for (int d = 0; d < 3; ++d) ls[d] = lse.strides[d];
      }
      if (out.numel() == 0) return;
      if (a.Lk == 0 || a.D == 0) {  // no keys: zero rows (SDPA) and -inf log-sum-exp
        fill_value(out, a.nan_masked_rows ? std::numeric_limits<double>::quiet_NaN() : 0.0);
        if (has_lse) fill_value(lse, -std::numeric_limits<double>::infinity());
        return;
      }
      kernels::attention_forward(a, out.data, os, has_lse ? static_cast<float*>(lse.data) : nullptr,
                                 ls);
      return;
    }
    case StepKind::AttentionBackward: {
      const bool has_mask = s.ints.at(1) != 0;
      const kernels::TensorRef mask = has_mask ? T(9) : kernels::TensorRef{};
      const kernels::AttentionArgs a = attention_args(
          T(1), T(2), T(3), has_mask ? &mask : nullptr, s.floats.at(0), s.ints.at(0) != 0);
      const kernels::TensorRef dout = T(0), out = T(4), lse = T(5), dq = T(6), dk = T(7),
                               dv = T(8);
      if (lse.ndim != 3 || lse.dtype != kernels::DType::Float32)
        throw ExecError("attention backward: lse must be f32 [B, Hq, Sq]");
      for (const kernels::TensorRef* t : {&dout, &out, &dq, &dk, &dv})
        if (t->dtype != a.dtype)
          throw ExecError("attention backward: gradients must have the dtype of q, k, v");
      if (a.B == 0 || a.Hq == 0 || a.Lq == 0 || a.Lk == 0 || a.D == 0) {
        for (const kernels::TensorRef* t : {&dq, &dk, &dv}) fill_value(*t, 0.0);
        return;
      }
      kernels::AttentionGrads g;
      g.dout = dout.data;
      strides4(dout, "dout", g.dout_s);
      g.out = out.data;
      strides4(out, "out", g.out_s);
      g.lse = static_cast<const float*>(lse.data);
      for (int d = 0; d < 3; ++d) g.lse_s[d] = lse.strides[d];
      g.dq = dq.data;
      strides4(dq, "dq", g.dq_s);
      g.dk = dk.data;
      strides4(dk, "dk", g.dk_s);
      g.dv = dv.data;
      strides4(dv, "dv", g.dv_s);
      kernels::attention_backward(a, g);
      return;
    }
    case StepKind::Index: {
      std::vector<kernels::TensorRef> idx;
      std::vector<int> dims;
      for (size_t i = 2; i < s.tensors.size(); ++i) {
        idx.push_back(T(i));
        dims.push_back(static_cast<int>(s.ints.at(i - 2)));
      }
      dense::index(T(0), T(1), idx, dims);
      return;
    }
    case StepKind::IndexPut: {
      std::vector<kernels::TensorRef> idx;
      std::vector<int> dims;
      for (size_t i = 3; i < s.tensors.size(); ++i) {
        idx.push_back(T(i));
        dims.push_back(static_cast<int>(s.ints.at(i - 1)));
      }
      dense::index_put(T(0), T(1), T(2), idx, dims, s.ints.at(0) != 0, s.ints.at(1) != 0);
      return;
    }
    case StepKind::Gather:
      dense::gather(T(0), T(1), T(2), static_cast<int>(s.ints.at(0)));
      return;
    case StepKind::Scatter:
      dense::scatter(T(0), T(1), T(2), T(3), static_cast<int>(s.ints.at(0)), s.ints.at(1) != 0,
                     s.ints.at(2) != 0);
      return;
    case StepKind::SliceScatter:
      dense::slice_scatter(T(0), T(1), T(2), static_cast<int>(s.ints.at(0)), s.ints.at(1),
                           s.ints.at(2), s.ints.at(3), s.ints.at(4) != 0);
      return;
    case StepKind::Copy:
      kernels::copy(T(1), T(0));
      return;
    case StepKind::Conv:
    case StepKind::ConvBackward: {
      const size_t nsp = static_cast<size_t>(s.ints.at(0));
      dense::ConvParams p;
      for (size_t i = 0; i < nsp; ++i) {
        p.stride.push_back(s.ints.at(1 + i));
        p.padding.push_back(s.ints.at(1 + nsp + i));
        p.dilation.push_back(s.ints.at(1 + 2 * nsp + i));
      }
      p.groups = s.ints.at(1 + 3 * nsp);
      if (s.kind == StepKind::Conv) {
        const bool has_bias = s.ints.at(2 + 3 * nsp) != 0;
        kernels::TensorRef bias;
        if (has_bias) bias = T(2);
        dense::conv(T(0), T(1), has_bias ? &bias : nullptr, T(has_bias ? 3 : 2), p);
      } else {
        kernels::TensorRef gi = T(3), gw = T(4), gb = T(5);
        const size_t m = 2 + 3 * nsp;
        dense::conv_backward(T(0), T(1), T(2), s.ints.at(m) ? &gi : nullptr,
                             s.ints.at(m + 1) ? &gw : nullptr, s.ints.at(m + 2) ? &gb : nullptr, p);
      }
      return;
    }
    case StepKind::MaxPool:
      dense::max_pool(T(0), T(1), T(2), pool_params(s, true));
      return;
    case StepKind::MaxPoolBackward:
      dense::max_pool_backward(T(0), T(1), T(2));
      return;
    case StepKind::AvgPool:
      dense::avg_pool(T(0), T(1), pool_params(s, false));
      return;
    case StepKind::AvgPoolBackward:
      dense::avg_pool_backward(T(0), T(1), pool_params(s, false));
      return;
    case StepKind::Softmax:
      kernels::softmax_forward(T(1), T(0), static_cast<int>(s.ints.at(0)), s.ints.at(1) != 0);
      return;
    case StepKind::SoftmaxBackward:
      kernels::softmax_backward(T(2), T(0), T(1), static_cast<int>(s.ints.at(0)),
                                s.ints.at(1) != 0);
      return;
    case StepKind::Reduce: {
      static constexpr kernels::ReduceOp kOps[] = {kernels::ReduceOp::Sum, kernels::ReduceOp::Mean,
                                                   kernels::ReduceOp::Prod, kernels::ReduceOp::Max,
                                                   kernels::ReduceOp::Min};
      const int64_t op = s.ints.at(0);
      if (op < 0 || op > 4) throw ExecError("reduce: unknown reduction");
      const kernels::TensorRef in = T(0), out = T(1);
      // The dtype eager reduces in: the result's for sum/mean/prod, the input's for max/min.
      const kernels::DType compute = op <= 2 ? out.dtype : in.dtype;
      try {
        kernels::reduce(kOps[op], compute, {}, in, &out, 1);
      } catch (const std::invalid_argument& e) {
        throw ExecError(rt::str("reduce: ", e.what()));
      }
      return;
    }
    case StepKind::LayerNorm:
      return layer_norm(s, b);
    case StepKind::LayerNormBackward:
      return layer_norm_backward(s, b);
    case StepKind::BatchNorm:
      return batch_norm(s, b);
    case StepKind::BatchNormBackward:
      return batch_norm_backward(s, b);
    case StepKind::Custom: {
      const size_t nin = static_cast<size_t>(s.ints.at(0));
      std::vector<kernels::TensorRef> ins, outs;
      for (size_t i = 0; i < s.tensors.size(); ++i) (i < nin ? ins : outs).push_back(T(i));
      dense::custom_kernel(s.text)(ins, outs, s.payload);
      return;
    }
  }
  throw ExecError("unknown step kind");
}

constexpr int kKinds = kNumStepKinds;
std::atomic<int> g_profiling{-1};  // -1: not read from the environment yet
std::mutex g_prof_mu;
std::array<std::pair<int64_t, double>, kKinds> g_prof{};

bool profiling() {
  int v = g_profiling.load(std::memory_order_relaxed);
  if (v < 0) {
    v = rt::getenv_bool("NEURON_EMU_PROFILE_COMPILED", false) ? 1 : 0;
    g_profiling.store(v, std::memory_order_relaxed);
  }
  return v != 0;
}

}  // namespace

void set_step_profiling(bool on) { g_profiling.store(on ? 1 : 0); }

std::vector<std::pair<std::string, std::pair<int64_t, double>>> step_profile(bool reset) {
  std::lock_guard<std::mutex> lock(g_prof_mu);
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> r;
  for (int k = 0; k < kKinds; ++k)
    if (g_prof[static_cast<size_t>(k)].first)
      r.push_back({step_kind_name(static_cast<StepKind>(k)), g_prof[static_cast<size_t>(k)]});
  if (reset) g_prof = {};
  return r;
}

void execute(const Program& p, const Buffers& b) {
  if (b.inputs.size() != p.inputs.size() || b.outputs.size() != p.outputs.size() ||
      b.constants.size() != p.constants.size())
    throw ExecError("compiled program: buffer count mismatch");
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    try {
      if (profiling()) {
        const auto t0 = std::chrono::steady_clock::now();
        run_step(s, b);
        const double dt =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(g_prof_mu);
        auto& e = g_prof[static_cast<size_t>(s.kind)];
        ++e.first;
        e.second += dt;
      } else {
        run_step(s, b);
      }
    } catch (const std::exception& e) {
      throw ExecError(rt::str("compiled graph step #", i, " ", step_kind_name(s.kind), " (", s.name,
                              "): ", e.what()));
    }
  }
}

}  // namespace neuron::cc
