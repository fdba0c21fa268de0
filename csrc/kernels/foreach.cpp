#include "foreach.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "convert.h"
#include "dispatch.h"
#include "runtime/thread_pool.h"
#include "simd.h"
#include "simd/vec_avx2.h"

namespace neuron::kernels {

namespace {

constexpr int64_t kPiece = 1 << 16;  // elements per parallel piece of a contiguous tensor
constexpr int64_t kSub = 512;        // elements per register-friendly step of the optimizers

bool contiguous_or_scalar(const TensorRef& r) {
  if (r.data == nullptr) return true;
  bool all_zero = true;
  for (int d = 0; d < r.ndim; ++d) all_zero &= r.strides[d] == 0 || r.sizes[d] == 1;
  return all_zero || r.is_contiguous();
}

bool is_broadcast_scalar(const TensorRef& r) {
  for (int d = 0; d < r.ndim; ++d)
    if (r.strides[d] != 0 && r.sizes[d] != 1) return false;
  return true;
}

// A 1-d view of elements [begin, begin + n) of a contiguous (or scalar) operand.
TensorRef slice1d(const TensorRef& r, int64_t begin, int64_t n) {
  TensorRef s;
  s.dtype = r.dtype;
  s.ndim = 1;
  s.sizes[0] = n;
  if (is_broadcast_scalar(r)) {
    s.data = r.data;
    s.strides[0] = 0;
  } else {
    s.data = static_cast<char*>(r.data) + begin * static_cast<int64_t>(element_size(r.dtype));
    s.strides[0] = 1;
  }
  return s;
}

}  // namespace

void foreach_elementwise(EwOp op, DType compute, int num_operands,
                         const std::vector<ForeachItem>& items, const EwParams& shared,
                         const std::vector<EwParams>* params) {
  if (params && params->size() != items.size())
    throw std::invalid_argument("neuron foreach: one parameter set per tensor expected");
  struct Piece {
    int64_t item, begin, n;  // n < 0: the whole (strided) item
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForeachItem& it = items[i];
    const int64_t numel = it.refs[0].numel();
    if (numel == 0) continue;
    bool flat = true;
    for (int k = 0; k < num_operands; ++k) flat &= contiguous_or_scalar(it.refs[k]);
    flat &= !is_broadcast_scalar(it.refs[0]) || numel == 1;
    if (!flat) {
      pieces.push_back({static_cast<int64_t>(i), 0, -1});
      continue;
    }
    for (int64_t b = 0; b < numel; b += kPiece)
      pieces.push_back({static_cast<int64_t>(i), b, std::min(kPiece, numel - b)});
  }
  const int64_t np = static_cast<int64_t>(pieces.size());
  // Small pieces are batched so that a list of tiny tensors does not pay one pool task each.
  rt::parallel_for(0, np, np > 64 ? 8 : 1, [&](int64_t b, int64_t e) {
    for (int64_t pi = b; pi < e; ++pi) {
      const Piece& pc = pieces[static_cast<size_t>(pi)];
      const ForeachItem& it = items[static_cast<size_t>(pc.item)];
      const EwParams& p = params ? (*params)[static_cast<size_t>(pc.item)] : shared;
      if (pc.n < 0) {
        elementwise(op, compute, p, it.refs, num_operands);
      } else {
        TensorRef refs[4];
        for (int k = 0; k < num_operands; ++k) refs[k] = slice1d(it.refs[k], pc.begin, pc.n);
        elementwise(op, compute, p, refs, num_operands);
      }
    }
  });
}

namespace {

// Reads a 1-element tensor as double (any real dtype).
double read_scalar(const TensorRef& r) {
  double v = 0;
  const ConvertFn f = find_convert(DType::Float64, r.dtype);
  if (!f) throw std::invalid_argument("neuron optimizer: unsupported scalar tensor dtype");
  f(&v, 8, r.data, 0, 1);
  return v;
}

// Loads n elements of a contiguous tensor as compute type T, and stores them back.
template <typename T>
struct Lane {
  ConvertFn load, store;
  static Lane make(DType t) {
    Lane l{find_convert(dtype_of_t(), t), find_convert(t, dtype_of_t())};
    if (!l.load || !l.store) throw std::invalid_argument("neuron optimizer: unsupported dtype");
    return l;
  }
  static DType dtype_of_t() { return std::is_same_v<T, double> ? DType::Float64 : DType::Float32; }
};

template <typename T, typename Body>
void chunked(const std::vector<int64_t>& numels, Body&& body) {
  struct Piece {
    size_t item;
    int64_t begin, n;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < numels.size(); ++i)
    for (int64_t b = 0; b < numels[i]; b += kPiece)
      pieces.push_back({i, b, std::min(kPiece, numels[i] - b)});
  rt::parallel_for(0, static_cast<int64_t>(pieces.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k)
      body(pieces[static_cast<size_t>(k)].item, pieces[static_cast<size_t>(k)].begin,
           pieces[static_cast<size_t>(k)].n);
  });
}

char* at_elem(const TensorRef& r, int64_t i) {
  return static_cast<char*>(r.data) + i * static_cast<int64_t>(element_size(r.dtype));
}

// Per-tensor and shared coefficients of one Adam step, in fp32 (the vector path).
struct AdamVec {
  float beta1, beta2, c1, c2, wd, eps, decay, gscale, step_size, bc2s;
  bool amsgrad, maximize, decoupled, has_wd, scaled;
};

#if defined(__x86_64__) && defined(__GNUC__)
// Adam/AdamW on the first n - n % 8 elements of one piece, 8 lanes at a time, storage S (float,
// bf16 or f16). The same operations in the same order as the scalar loop (no FMA contraction),
// so fp32 results are bitwise identical to the portable path. Returns the elements done.
template <typename S>
NEURON_AVX2 int64_t adam_avx2(S* p, S* g, S* m, S* v, S* vmax, int64_t n, const AdamVec& c) {
  using namespace avx2;
  const __m256 beta1 = _mm256_set1_ps(c.beta1), beta2 = _mm256_set1_ps(c.beta2);
  const __m256 c1 = _mm256_set1_ps(c.c1), c2 = _mm256_set1_ps(c.c2), wd = _mm256_set1_ps(c.wd);
  const __m256 eps = _mm256_set1_ps(c.eps), decay = _mm256_set1_ps(c.decay);
  const __m256 gscale = _mm256_set1_ps(c.gscale), step_size = _mm256_set1_ps(c.step_size);
  const __m256 bc2s = _mm256_set1_ps(c.bc2s), sign = _mm256_set1_ps(-0.0f);
  const int64_t nv = n - n % 8;
  for (int64_t k = 0; k < nv; k += 8) {
    __m256 gr = load8(g + k);
    if (c.scaled) {
      gr = _mm256_mul_ps(gr, gscale);
      store8(g + k, gr);  // grads are unscaled in place, like ATen
    }
    if (c.maximize) gr = _mm256_xor_ps(gr, sign);
    __m256 pk = load8(p + k);
    if (c.has_wd) {
      if (c.decoupled) {
        pk = _mm256_mul_ps(pk, decay);
      } else {
        gr = _mm256_add_ps(gr, _mm256_mul_ps(pk, wd));
      }
    }
    const __m256 mk = _mm256_add_ps(_mm256_mul_ps(load8(m + k), beta1), _mm256_mul_ps(gr, c1));
    const __m256 vk =
        _mm256_add_ps(_mm256_mul_ps(load8(v + k), beta2), _mm256_mul_ps(_mm256_mul_ps(gr, gr), c2));
    __m256 denom_v = vk;
    if (c.amsgrad) {
      const __m256 old = load8(vmax + k);
      // std::max(old, v): v when old < v, else old (NaN in old stays).
      denom_v = _mm256_blendv_ps(old, vk, _mm256_cmp_ps(old, vk, _CMP_LT_OQ));
      store8(vmax + k, denom_v);
    }
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(denom_v), bc2s), eps);
    store8(p + k, _mm256_sub_ps(pk, _mm256_div_ps(_mm256_mul_ps(step_size, mk), denom)));
    store8(m + k, mk);
    store8(v + k, vk);
  }
  return nv;
}
#endif

template <typename S>
int64_t adam_vec_typed(const AdamTensors& t, int64_t b, int64_t n, const AdamVec& c) {
#if defined(__x86_64__) && defined(__GNUC__)
  auto at = [b](const TensorRef& r) { return r.data ? static_cast<S*>(r.data) + b : nullptr; };
  return adam_avx2<S>(at(t.param), at(t.grad), at(t.exp_avg), at(t.exp_avg_sq), at(t.max_exp_avg_sq),
                      n, c);
#else
  return 0;
#endif
}

// The vector path for [b, b + n) of one fp32/bf16/fp16 tensor when the host has AVX2; returns
// how many elements it did (the rest goes through the scalar loop).
int64_t adam_vec(DType dt, const AdamTensors& t, int64_t b, int64_t n, const AdamVec& c) {
  if (simd_level() != SimdLevel::Avx2) return 0;
  switch (dt) {
    case DType::Float32:
      return adam_vec_typed<float>(t, b, n, c);
    case DType::BFloat16:
      return adam_vec_typed<bf16>(t, b, n, c);
    case DType::Float16:
      return adam_vec_typed<f16>(t, b, n, c);
    default:
      return 0;
  }
}

template <typename T>
void adam_impl(const AdamArgs& a, const std::vector<AdamTensors>& list) {
  if (a.found_inf.data && read_scalar(a.found_inf) != 0.0) return;
  const double lr = a.lr_tensor.data ? read_scalar(a.lr_tensor) : a.lr;
  const double inv_scale = a.grad_scale.data ? 1.0 / read_scalar(a.grad_scale) : 1.0;
  const DType dt = list.empty() ? DType::Float32 : list[0].param.dtype;
  const Lane<T> lane = Lane<T>::make(dt);
  struct Coef {
    T step_size, bc2_sqrt;
  };
  std::vector<Coef> coef(list.size());
  std::vector<int64_t> numels(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const double step = read_scalar(list[i].step);
    const double bc1 = 1.0 - std::pow(a.beta1, step);
    const double bc2 = 1.0 - std::pow(a.beta2, step);
    coef[i] = {static_cast<T>(lr / bc1), static_cast<T>(std::sqrt(bc2))};
    numels[i] = list[i].param.numel();
  }
  const T beta1 = static_cast<T>(a.beta1), beta2 = static_cast<T>(a.beta2);
  const T c1 = static_cast<T>(1.0 - a.beta1), c2 = static_cast<T>(1.0 - a.beta2);
  const T wd = static_cast<T>(a.weight_decay), eps = static_cast<T>(a.eps);
  const T decay = static_cast<T>(1.0 - lr * a.weight_decay);
  const T gscale = static_cast<T>(inv_scale);
  const bool scaled = a.grad_scale.data != nullptr;
  AdamVec vc{static_cast<float>(a.beta1), static_cast<float>(a.beta2), static_cast<float>(c1),
             static_cast<float>(c2), static_cast<float>(wd), static_cast<float>(eps),
             static_cast<float>(decay), static_cast<float>(gscale), 0.0f, 0.0f, a.amsgrad,
             a.maximize, a.decoupled, a.weight_decay != 0, scaled};
  chunked<T>(numels, [&](size_t i, int64_t b0, int64_t n0) {
    if constexpr (std::is_same_v<T, float>) {
      AdamVec c = vc;
      c.step_size = coef[i].step_size;
      c.bc2s = coef[i].bc2_sqrt;
      const int64_t done = adam_vec(dt, list[i], b0, n0, c);
      b0 += done;
      n0 -= done;
    }
    for (int64_t b = b0; b < b0 + n0; b += kSub) {
      const int64_t n = std::min(kSub, b0 + n0 - b);
      const AdamTensors& t = list[i];
      T p[kSub], g[kSub], m[kSub], v[kSub], vmax[kSub];
      const int64_t es = static_cast<int64_t>(sizeof(T));
      const int64_t ds = static_cast<int64_t>(element_size(dt));
      lane.load(p, es, at_elem(t.param, b), ds, n);
      lane.load(g, es, at_elem(t.grad, b), ds, n);
      lane.load(m, es, at_elem(t.exp_avg, b), ds, n);
      lane.load(v, es, at_elem(t.exp_avg_sq, b), ds, n);
      if (a.amsgrad) lane.load(vmax, es, at_elem(t.max_exp_avg_sq, b), ds, n);
      if (scaled) {
        for (int64_t k = 0; k < n; ++k) g[k] = g[k] * gscale;
        lane.store(at_elem(t.grad, b), ds, g, es, n);  // grads are unscaled in place, like ATen
      }
      const T step_size = coef[i].step_size, bc2s = coef[i].bc2_sqrt;
      for (int64_t k = 0; k < n; ++k) {
        T gr = a.maximize ? -g[k] : g[k];
        T pk = p[k];
        if (a.weight_decay != 0) {
          if (a.decoupled) {
            pk = pk * decay;
          } else {
            gr = gr + pk * wd;
          }
        }
        m[k] = m[k] * beta1 + gr * c1;
        v[k] = v[k] * beta2 + gr * gr * c2;
        T denom;
        if (a.amsgrad) {
          vmax[k] = std::max(vmax[k], v[k]);
          denom = std::sqrt(vmax[k]) / bc2s + eps;
        } else {
          denom = std::sqrt(v[k]) / bc2s + eps;
        }
        p[k] = pk - step_size * m[k] / denom;
      }
      lane.store(at_elem(t.param, b), ds, p, es, n);
      lane.store(at_elem(t.exp_avg, b), ds, m, es, n);
      lane.store(at_elem(t.exp_avg_sq, b), ds, v, es, n);
      if (a.amsgrad) lane.store(at_elem(t.max_exp_avg_sq, b), ds, vmax, es, n);
    }
  });
}

template <typename T>
void sgd_impl(const SgdArgs& a, const std::vector<SgdTensors>& list) {
  if (a.found_inf.data && read_scalar(a.found_inf) != 0.0) return;
  const double lr = a.lr_tensor.data ? read_scalar(a.lr_tensor) : a.lr;
  const double inv_scale = a.grad_scale.data ? 1.0 / read_scalar(a.grad_scale) : 1.0;
  const DType dt = list.empty() ? DType::Float32 : list[0].param.dtype;
  const Lane<T> lane = Lane<T>::make(dt);
  std::vector<int64_t> numels(list.size());
  for (size_t i = 0; i < list.size(); ++i) numels[i] = list[i].param.numel();
  const T tlr = static_cast<T>(lr), wd = static_cast<T>(a.weight_decay),
          mom = static_cast<T>(a.momentum);
  const T damp = static_cast<T>(1.0 - a.dampening), gscale = static_cast<T>(inv_scale);
  const bool scaled = a.grad_scale.data != nullptr;
  const bool use_mom = a.momentum != 0.0;
  chunked<T>(numels, [&](size_t i, int64_t b0, int64_t n0) {
    for (int64_t b = b0; b < b0 + n0; b += kSub) {
      const int64_t n = std::min(kSub, b0 + n0 - b);
      const SgdTensors& t = list[i];
      T p[kSub], g[kSub], buf[kSub];
      const int64_t es = static_cast<int64_t>(sizeof(T));
      const int64_t ds = static_cast<int64_t>(element_size(dt));
      lane.load(p, es, at_elem(t.param, b), ds, n);
      lane.load(g, es, at_elem(t.grad, b), ds, n);
      if (use_mom && !a.is_first_step) lane.load(buf, es, at_elem(t.momentum_buffer, b), ds, n);
      if (scaled) {
        for (int64_t k = 0; k < n; ++k) g[k] = g[k] * gscale;
        lane.store(at_elem(t.grad, b), ds, g, es, n);
      }
      for (int64_t k = 0; k < n; ++k) {
        T gr = a.maximize ? -g[k] : g[k];
        if (a.weight_decay != 0) gr = gr + p[k] * wd;
        if (use_mom) {
          buf[k] = a.is_first_step ? gr : buf[k] * mom + damp * gr;
          gr = a.nesterov ? gr + mom * buf[k] : buf[k];
        }
        p[k] = p[k] - tlr * gr;
      }
      lane.store(at_elem(t.param, b), ds, p, es, n);
      if (use_mom) lane.store(at_elem(t.momentum_buffer, b), ds, buf, es, n);
    }
  });
}

}  // namespace

void fused_adam(const AdamArgs& args, const std::vector<AdamTensors>& list) {
  if (list.empty()) return;
  if (list[0].param.dtype == DType::Float64) return adam_impl<double>(args, list);
  adam_impl<float>(args, list);
}

void fused_sgd(const SgdArgs& args, const std::vector<SgdTensors>& list) {
  if (list.empty()) return;
  if (list[0].param.dtype == DType::Float64) return sgd_impl<double>(args, list);
  sgd_impl<float>(args, list);
}

}  // namespace neuron::kernels
