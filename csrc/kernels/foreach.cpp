#include "foreach.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "convert.h"
#include "dispatch.h"
#include "runtime/thread_pool.h"

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
  chunked<T>(numels, [&](size_t i, int64_t b0, int64_t n0) {
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
