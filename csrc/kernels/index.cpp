#include "index.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "copy.h"
#include "dispatch.h"
#include "lines.h"
#include "convert.h"
#include "runtime/thread_pool.h"
#include "strided_loop.h"

namespace neuron::kernels {
namespace {

int64_t load_index(const char* p, DType t) {
  switch (t) {
    case DType::Int64:
      return *reinterpret_cast<const int64_t*>(p);
    case DType::Int32:
      return *reinterpret_cast<const int32_t*>(p);
    case DType::Int16:
      return *reinterpret_cast<const int16_t*>(p);
    case DType::Int8:
      return *reinterpret_cast<const int8_t*>(p);
    case DType::UInt8:
      return *reinterpret_cast<const uint8_t*>(p);
    default:
      throw std::invalid_argument("index tensors must be integer tensors, got " +
                                  std::string(dtype_name(t)));
  }
}

[[noreturn]] void out_of_bounds(const char* op, int64_t v, int dim, int64_t size) {
  throw std::out_of_range(std::string(op) + ": index " + std::to_string(v) +
                          " is out of bounds for dimension " + std::to_string(dim) + " with size " +
                          std::to_string(size));
}

TensorRef drop_dim(const TensorRef& t, int dim) {
  TensorRef r = t;
  if (t.ndim == 0) return r;
  for (int d = dim; d + 1 < t.ndim; ++d) {
    r.sizes[d] = t.sizes[d + 1];
    r.strides[d] = t.strides[d + 1];
  }
  r.ndim = t.ndim - 1;
  return r;
}

// 1-d index accessor (0-d allowed).
struct Index1d {
  const char* p;
  int64_t stride_bytes;
  DType dtype;
  int64_t n;
  explicit Index1d(const TensorRef& t)
      : p(static_cast<const char*>(t.data)),
        stride_bytes((t.ndim ? t.strides[0] : 0) * static_cast<int64_t>(element_size(t.dtype))),
        dtype(t.dtype),
        n(t.ndim ? t.sizes[0] : 1) {}
  int64_t operator[](int64_t i) const { return load_index(p + i * stride_bytes, dtype); }
};

void copy_bytes_rows(const LoopPlan<2>& plan, size_t esz) {
  for_each_row(
      plan,
      [esz](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
        const auto e = static_cast<int64_t>(esz);
        if (s[0] == e && s[1] == e) {
          std::memcpy(p[0], p[1], static_cast<size_t>(n) * esz);
        } else {
          for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], esz);
        }
      },
      1 << 16);
}

// Runs fn(i) for i in [0, n): in parallel over i when there are many small slices, else in
// order (each slice then parallelises internally).
template <typename F>
void over_slices(int64_t n, int64_t slice_numel, F&& fn) {
  if (n >= 2 * rt::num_threads() && slice_numel < (1 << 15)) {
    rt::parallel_for(0, n, std::max<int64_t>(1, 16384 / std::max<int64_t>(slice_numel, 1)),
                     [&](int64_t a, int64_t b) {
                       for (int64_t i = a; i < b; ++i) fn(i);
                     });
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

template <typename T>
T add_scaled(T a, T b, double alpha) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || (b && alpha != 0);
  } else if constexpr (is_complex_v<T>) {
    return a + b * static_cast<typename T::value_type>(alpha);
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(a + b * static_cast<T>(alpha));
  } else if constexpr (std::is_same_v<T, double>) {
    return a + alpha * b;
  } else {
    return T(static_cast<float>(a) + static_cast<float>(alpha) * static_cast<float>(b));
  }
}

}  // namespace

void index_select(const TensorRef& out, const TensorRef& src, int dim, const TensorRef& index,
                  const char* op) {
  const Index1d idx(index);
  const size_t esz = element_size(src.dtype);
  if (out.dtype != src.dtype)
    throw std::invalid_argument(std::string(op) + ": out and self dtypes differ");
  const int64_t size = src.ndim ? src.sizes[dim] : 1;
  const int64_t os = out.ndim ? out.strides[dim] : 0, ss = src.ndim ? src.strides[dim] : 0;
  const TensorRef so = drop_dim(out, dim), sr = drop_dim(src, dim);
  const LoopPlan<2> plan = make_plan<2>({&so, &sr});
  const int64_t slice = so.numel();
  // Validate every index first so that no partial result is written for a bad one.
  for (int64_t i = 0; i < idx.n; ++i) {
    const int64_t v = idx[i];
    if (v < 0 || v >= size) out_of_bounds(op, v, dim, size);
  }
  const auto e = static_cast<int64_t>(esz);
  if (plan.ndim <= 1 && (plan.ndim == 0 || (plan.strides[0][0] == e && plan.strides[1][0] == e))) {
    // Dense slices (embedding rows): one memcpy each.
    const size_t bytes = static_cast<size_t>(slice) * esz;
    char* o = plan.base[0];
    const char* sp = plan.base[1];
    rt::parallel_for(
        0, idx.n,
        std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, static_cast<int64_t>(bytes))),
        [&](int64_t a, int64_t b) {
          for (int64_t i = a; i < b; ++i) std::memcpy(o + i * os * e, sp + idx[i] * ss * e, bytes);
        });
    return;
  }
  over_slices(idx.n, slice, [&](int64_t i) {
    LoopPlan<2> p = plan;
    p.base[0] += i * os * e;
    p.base[1] += idx[i] * ss * e;
    copy_bytes_rows(p, esz);
  });
}

void index_update(const TensorRef& self, int dim, const TensorRef& index, const TensorRef& source,
                  IndexUpdate mode, double alpha, const void* fill_value, const char* op) {
  const Index1d idx(index);
  const size_t esz = element_size(self.dtype);
  const int64_t size = self.ndim ? self.sizes[dim] : 1;
  const int64_t ds = self.ndim ? self.strides[dim] : 0;
  std::vector<int64_t> target(static_cast<size_t>(idx.n));
  for (int64_t i = 0; i < idx.n; ++i) {
    int64_t v = idx[i];
    if (mode == IndexUpdate::Fill && v < 0) v += size;
    if (v < 0 || v >= size) out_of_bounds(op, idx[i], dim, size);
    target[static_cast<size_t>(i)] = v;
  }
  const TensorRef st = drop_dim(self, dim);
  if (mode == IndexUpdate::Fill) {
    over_slices(idx.n, st.numel(), [&](int64_t i) {
      TensorRef s = st;
      s.data = static_cast<char*>(self.data) +
               target[static_cast<size_t>(i)] * ds * static_cast<int64_t>(esz);
      fill(s, fill_value);
    });
    return;
  }
  if (source.dtype != self.dtype)
    throw std::invalid_argument(std::string(op) + ": self and source dtypes differ");
  const int64_t srcs = source.ndim ? source.strides[dim] : 0;
  const TensorRef sr = drop_dim(source, dim);
  const LoopPlan<2> plan = make_plan<2>({&st, &sr});
  if (mode == IndexUpdate::Copy) {
    const auto e = static_cast<int64_t>(esz);
    if (plan.ndim <= 1 &&
        (plan.ndim == 0 || (plan.strides[0][0] == e && plan.strides[1][0] == e)) &&
        st.numel() * e < (1 << 16)) {
      const size_t bytes = static_cast<size_t>(st.numel()) * esz;
      for (int64_t i = 0; i < idx.n; ++i)  // in order: the last of duplicate indices wins
        std::memcpy(plan.base[0] + target[static_cast<size_t>(i)] * ds * e,
                    plan.base[1] + i * srcs * e, bytes);
      return;
    }
    over_slices(idx.n, st.numel(), [&](int64_t i) {
      LoopPlan<2> p = plan;
      p.base[0] += target[static_cast<size_t>(i)] * ds * static_cast<int64_t>(esz);
      p.base[1] += i * srcs * static_cast<int64_t>(esz);
      copy_bytes_rows(p, esz);
    });
    return;
  }
  // Add: parallel over slice positions, the updates of one position in index order.
  dispatch_all(self.dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = idx.n;
    for_each_row(
        plan,
        [&](std::array<char*, 2> p, int64_t len, const std::array<int64_t, 2>& s) {
          for (int64_t i = 0; i < n; ++i) {
            char* d = p[0] + target[static_cast<size_t>(i)] * ds * static_cast<int64_t>(esz);
            const char* sp = p[1] + i * srcs * static_cast<int64_t>(esz);
            for (int64_t j = 0; j < len; ++j) {
              T* dj = reinterpret_cast<T*>(d + j * s[0]);
              *dj = add_scaled(*dj, *reinterpret_cast<const T*>(sp + j * s[1]), alpha);
            }
          }
        },
        std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)));
  });
}

void embedding_backward(const TensorRef& grad_weight, const TensorRef& grad,
                        const TensorRef& indices, int64_t padding_idx, bool scale_grad_by_freq) {
  const int64_t V = grad_weight.sizes[0], D = grad_weight.sizes[1];
  const Index1d idx(indices);
  const int64_t n = idx.n;
  std::vector<int64_t> value(static_cast<size_t>(n)), order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = idx[i];
    if (v < 0 || v >= V) out_of_bounds("embedding_backward", v, 0, V);
    value[static_cast<size_t>(i)] = v;
  }
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return value[static_cast<size_t>(a)] < value[static_cast<size_t>(b)];
  });
  std::vector<int64_t> group_start;  // runs of equal indices in `order`
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || value[static_cast<size_t>(order[static_cast<size_t>(i)])] !=
                      value[static_cast<size_t>(order[static_cast<size_t>(i - 1)])])
      group_start.push_back(i);
  const int64_t groups = static_cast<int64_t>(group_start.size());
  group_start.push_back(n);

  std::vector<unsigned char> zero(element_size(grad_weight.dtype), 0);
  fill(grad_weight, zero.data());
  const bool f64 = grad_weight.dtype == DType::Float64;
  const size_t gesz = element_size(grad.dtype), wesz = element_size(grad_weight.dtype);
  rt::parallel_for(
      0, groups, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)), [&](int64_t g0, int64_t g1) {
        std::vector<float> acc(f64 ? 0 : static_cast<size_t>(D)),
            row(f64 ? 0 : static_cast<size_t>(D));
        std::vector<double> accd(f64 ? static_cast<size_t>(D) : 0);
        for (int64_t g = g0; g < g1; ++g) {
          const int64_t b = group_start[static_cast<size_t>(g)],
                        e = group_start[static_cast<size_t>(g + 1)];
          const int64_t v = value[static_cast<size_t>(order[static_cast<size_t>(b)])];
          if (v == padding_idx) continue;
          char* dst = static_cast<char*>(grad_weight.data) +
                      v * grad_weight.strides[0] * static_cast<int64_t>(wesz);
          const double scale = scale_grad_by_freq ? 1.0 / static_cast<double>(e - b) : 1.0;
          if (f64) {
            std::fill(accd.begin(), accd.end(), 0.0);
            for (int64_t t = b; t < e; ++t) {
              const auto* src = reinterpret_cast<const double*>(
                  static_cast<const char*>(grad.data) +
                  order[static_cast<size_t>(t)] * grad.strides[0] * static_cast<int64_t>(gesz));
              for (int64_t j = 0; j < D; ++j)
                accd[static_cast<size_t>(j)] += src[j * grad.strides[1]];
            }
            auto* d = reinterpret_cast<double*>(dst);
            for (int64_t j = 0; j < D; ++j)
              d[j * grad_weight.strides[1]] = accd[static_cast<size_t>(j)] * scale;
            continue;
          }
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t t = b; t < e; ++t) {
            const char* src = static_cast<const char*>(grad.data) + order[static_cast<size_t>(t)] *
                                                                        grad.strides[0] *
                                                                        static_cast<int64_t>(gesz);
            strided_to_f32(src, grad.dtype, grad.strides[1], row.data(), D);
            for (int64_t j = 0; j < D; ++j)
              acc[static_cast<size_t>(j)] += row[static_cast<size_t>(j)];
          }
          if (scale != 1.0)
            for (auto& a : acc) a = static_cast<float>(a * scale);
          strided_from_f32(acc.data(), dst, grad_weight.dtype, grad_weight.strides[1], D);
        }
      });
}

void embedding_renorm(const TensorRef& weight, const TensorRef& indices, double max_norm,
                      double norm_type) {
  const int64_t V = weight.sizes[0], D = weight.sizes[1];
  const Index1d idx(indices);
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(idx.n));
  for (int64_t i = 0; i < idx.n; ++i) {
    const int64_t v = idx[i];
    if (v < 0 || v >= V) out_of_bounds("embedding_renorm_", v, 0, V);
    rows.push_back(v);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const size_t esz = element_size(weight.dtype);
  dispatch_all(weight.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_complex_v<T> || std::is_integral_v<T>) {
      throw std::invalid_argument("embedding_renorm_: expected a floating weight");
    } else {
      rt::parallel_for(
          0, static_cast<int64_t>(rows.size()),
          std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              T* w = reinterpret_cast<T*>(static_cast<char*>(weight.data) +
                                          rows[static_cast<size_t>(r)] * weight.strides[0] *
                                              static_cast<int64_t>(esz));
              const int64_t ws = weight.strides[1];
              double norm = 0;
              for (int64_t j = 0; j < D; ++j) {
                const double x = std::fabs(convert<double>(w[j * ws]));
                if (norm_type == 1)
                  norm += x;
                else if (norm_type == 2)
                  norm += x * x;
                else if (std::isinf(norm_type))
                  norm = std::max(norm, x);
                else
                  norm += std::pow(x, norm_type);
              }
              if (norm_type == 2)
                norm = std::sqrt(norm);
              else if (norm_type != 1 && !std::isinf(norm_type))
                norm = std::pow(norm, 1.0 / norm_type);
              if (norm > max_norm) {
                const double scale = max_norm / (norm + 1e-7);
                for (int64_t j = 0; j < D; ++j)
                  w[j * ws] = convert<T>(convert<double>(w[j * ws]) * scale);
              }
            }
          });
    }
  });
}

void gather(const TensorRef& out, const TensorRef& self, int dim, const TensorRef& index,
            const char* op) {
  if (out.dtype != self.dtype)
    throw std::invalid_argument(std::string(op) + ": out and self dtypes differ");
  TensorRef sr = self;
  const int64_t size = self.ndim ? self.sizes[dim] : 1;
  const int64_t ds = self.ndim ? self.strides[dim] : 0;
  for (int d = 0; d < index.ndim; ++d) sr.sizes[d] = index.sizes[d];
  if (sr.ndim) sr.strides[dim] = 0;
  const LoopPlan<3> plan = make_plan<3>({&out, &index, &sr});
  const size_t esz = element_size(self.dtype);
  const DType it = index.dtype;
  for_each_row(plan, [&](std::array<char*, 3> p, int64_t n, const std::array<int64_t, 3>& s) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = load_index(p[1] + j * s[1], it);
      if (v < 0 || v >= size) out_of_bounds(op, v, dim, size);
      std::memcpy(p[0] + j * s[0], p[2] + j * s[2] + v * ds * static_cast<int64_t>(esz), esz);
    }
  });
}

namespace {

template <typename T>
T combine(ScatterReduce r, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (r) {
      case ScatterReduce::Sum:
      case ScatterReduce::Amax:
        return a || b;
      case ScatterReduce::Prod:
      case ScatterReduce::Amin:
        return a && b;
      default:
        return b;
    }
  } else if constexpr (is_complex_v<T>) {
    switch (r) {
      case ScatterReduce::Sum:
      case ScatterReduce::Mean:
        return a + b;
      case ScatterReduce::Prod:
        return a * b;
      default:
        throw std::invalid_argument(
            "scatter_reduce: amax/amin are not defined for complex numbers");
    }
  } else {
    using C = std::conditional_t<std::is_floating_point_v<T> || std::is_integral_v<T>, T, float>;
    const C x = static_cast<C>(a), y = static_cast<C>(b);
    switch (r) {
      case ScatterReduce::Sum:
      case ScatterReduce::Mean:
        return static_cast<T>(x + y);
      case ScatterReduce::Prod:
        return static_cast<T>(x * y);
      case ScatterReduce::Amax:
        if constexpr (!std::is_integral_v<C>) {
          if (std::isnan(x)) return a;
          if (std::isnan(y)) return b;
        }
        return x >= y ? a : b;
      case ScatterReduce::Amin:
        if constexpr (!std::is_integral_v<C>) {
          if (std::isnan(x)) return a;
          if (std::isnan(y)) return b;
        }
        return x <= y ? a : b;
      default:
        return b;
    }
  }
}

template <typename T>
T divide_count(T a, int64_t count) {
  if constexpr (std::is_same_v<T, bool>) {
    return a;
  } else if constexpr (is_complex_v<T>) {
    return a / static_cast<typename T::value_type>(count);
  } else if constexpr (std::is_integral_v<T>) {
    // floor division like ATen's integer scatter_reduce mean
    const T c = static_cast<T>(count);
    T q = static_cast<T>(a / c);
    if constexpr (std::is_signed_v<T>) {
      if ((a % c != 0) && ((a < 0) != (c < 0))) q = static_cast<T>(q - 1);
    }
    return q;
  } else {
    return static_cast<T>(static_cast<double>(a) / static_cast<double>(count));
  }
}

}  // namespace

void scatter(const TensorRef& self, int dim, const TensorRef& index, const TensorRef& src,
             const void* value, ScatterReduce reduce, bool include_self, const char* op) {
  const int64_t size = self.ndim ? self.sizes[dim] : 1;
  const int64_t ds = self.ndim ? self.strides[dim] : 0;
  if (index.numel() == 0) return;
  TensorRef sr = self;
  for (int d = 0; d < index.ndim; ++d) sr.sizes[d] = index.sizes[d];
  if (sr.ndim) sr.strides[dim] = 0;
  TensorRef vr;
  if (src.data) {
    if (src.dtype != self.dtype)
      throw std::invalid_argument(std::string(op) + ": self and src dtypes differ");
    vr = src;
    for (int d = 0; d < index.ndim; ++d) vr.sizes[d] = index.sizes[d];
  } else {
    vr = index;
    vr.data = const_cast<void*>(value);
    vr.dtype = self.dtype;
    for (int d = 0; d < vr.ndim; ++d) vr.strides[d] = 0;
  }
  const int64_t L = index.ndim ? index.sizes[dim] : 1;
  const size_t esz = element_size(self.dtype), isz = element_size(index.dtype);
  const bool counted =
      reduce == ScatterReduce::Mean || (!include_self && reduce != ScatterReduce::Assign);
  dispatch_all(self.dtype, [&](auto tag) {
    using T = decltype(tag);
    for_each_line<3>(
        {&index, &vr, &sr}, dim, L, [&](std::array<char*, 3> p, const std::array<int64_t, 3>& ls) {
          thread_local std::vector<int64_t> count;
          thread_local std::vector<int64_t> touched;
          if (counted && static_cast<int64_t>(count.size()) < size)
            count.assign(static_cast<size_t>(size), 0);
          touched.clear();
          for (int64_t j = 0; j < L; ++j) {
            const int64_t v = load_index(p[0] + j * ls[0] * static_cast<int64_t>(isz), index.dtype);
            if (v < 0 || v >= size) {
              for (int64_t t : touched) count[static_cast<size_t>(t)] = 0;
              out_of_bounds(op, v, dim, size);
            }
            T* d = reinterpret_cast<T*>(p[2] + v * ds * static_cast<int64_t>(esz));
            const T x = *reinterpret_cast<const T*>(p[1] + j * ls[1] * static_cast<int64_t>(esz));
            if (reduce == ScatterReduce::Assign) {
              *d = x;
              continue;
            }
            if (counted) {
              int64_t& c = count[static_cast<size_t>(v)];
              if (c == 0) {
                touched.push_back(v);
                if (!include_self) {
                  *d = x;
                  c = 1;
                  continue;
                }
                c = 1;  // self's own value counts once for the mean
              }
              ++c;
            }
            *d = combine(reduce, *d, x);
          }
          if (counted) {
            for (int64_t t : touched) {
              int64_t& c = count[static_cast<size_t>(t)];
              if (reduce == ScatterReduce::Mean) {
                T* d = reinterpret_cast<T*>(p[2] + t * ds * static_cast<int64_t>(esz));
                // c counts the updates, plus one for self's own value when include_self.
                *d = divide_count(*d, c);
              }
              c = 0;
            }
          }
        });
  });
}

// ---- advanced indexing ----

namespace {

constexpr int kAdvOperands = 2 + kMaxIndexTensors;

// `rows(other, data, n, other_stride, data_stride)` applies the op to n elements of a row.
// Where the indices are constant along a row (x[idx] over rows: embeddings, their gradients,
// KV-cache writes) their offset is computed once per row, and the op sees the whole row;
// otherwise each element is its own one-element row. The order of the elements is the same
// either way.
template <typename Rows>
void advanced(const TensorRef& data, const TensorRef& other, const AdvancedIndexRef& ai,
              bool serial, const char* op, Rows&& rows) {
  static const int64_t zero_index = 0;
  std::array<TensorRef, kAdvOperands> refs;
  refs[0] = other;  // the operand with the result's shape: out (gather) or values (put)
  refs[1] = data;   // src (gather) or dst (put), restrided
  for (int k = 0; k < kMaxIndexTensors; ++k) {
    if (k < ai.nidx) {
      refs[static_cast<size_t>(2 + k)] = ai.index[k];
    } else {
      TensorRef z = other;
      z.data = const_cast<int64_t*>(&zero_index);
      z.dtype = DType::Int64;
      for (int d = 0; d < z.ndim; ++d) z.strides[d] = 0;
      refs[static_cast<size_t>(2 + k)] = z;
    }
  }
  std::array<const TensorRef*, kAdvOperands> ptrs;
  for (int k = 0; k < kAdvOperands; ++k)
    ptrs[static_cast<size_t>(k)] = &refs[static_cast<size_t>(k)];
  const LoopPlan<kAdvOperands> plan = make_plan<kAdvOperands>(ptrs);
  const auto esz = static_cast<int64_t>(element_size(data.dtype));
  for_each_row(
      plan,
      [&](std::array<char*, kAdvOperands> p, int64_t n,
          const std::array<int64_t, kAdvOperands>& s) {
        auto offset = [&](int64_t j) {
          int64_t off = 0;
          for (int k = 0; k < ai.nidx; ++k) {
            int64_t v =
                load_index(p[static_cast<size_t>(2 + k)] + j * s[static_cast<size_t>(2 + k)],
                           ai.index[k].dtype);
            const int64_t size = ai.indexed_sizes[k];
            if (v < -size || v >= size) out_of_bounds(op, v, k, size);
            if (v < 0) v += size;
            off += v * ai.indexed_strides[k];
          }
          return off * esz;
        };
        bool row_constant = true;
        for (int k = 0; k < ai.nidx; ++k)
          if (s[static_cast<size_t>(2 + k)] != 0) row_constant = false;
        if (row_constant) {
          rows(p[0], p[1] + offset(0), n, s[0], s[1]);
          return;
        }
        for (int64_t j = 0; j < n; ++j) rows(p[0] + j * s[0], p[1] + j * s[1] + offset(j), 1, 0, 0);
      },
      serial ? std::numeric_limits<int64_t>::max() : 32768);
}

}  // namespace

void index_gather(const TensorRef& out, const TensorRef& src, const AdvancedIndexRef& ai,
                  const char* op) {
  if (out.dtype != src.dtype)
    throw std::invalid_argument(std::string(op) + ": out and self dtypes differ");
  if (ai.nidx > kMaxIndexTensors)
    throw std::invalid_argument(std::string(op) + ": too many index tensors");
  const auto esz = static_cast<int64_t>(element_size(src.dtype));
  advanced(src, out, ai, false, op,
           [esz](char* o, const char* s, int64_t n, int64_t os, int64_t ss) {
             if (n == 1 || (os == esz && ss == esz)) {
               std::memcpy(o, s, static_cast<size_t>(n * esz));
               return;
             }
             for (int64_t j = 0; j < n; ++j)
               std::memcpy(o + j * os, s + j * ss, static_cast<size_t>(esz));
           });
}

void index_put(const TensorRef& dst, const TensorRef& values, const AdvancedIndexRef& ai,
               bool accumulate, const char* op) {
  if (dst.dtype != values.dtype)
    throw std::invalid_argument(std::string(op) + ": self and values dtypes differ");
  if (ai.nidx > kMaxIndexTensors)
    throw std::invalid_argument(std::string(op) + ": too many index tensors");
  const auto esz = static_cast<int64_t>(element_size(dst.dtype));
  if (!accumulate) {
    advanced(dst, values, ai, false, op,
             [esz](char* v, const char* d, int64_t n, int64_t vs, int64_t ds) {
               char* dd = const_cast<char*>(d);
               if (n == 1 || (vs == esz && ds == esz)) {
                 std::memmove(dd, v, static_cast<size_t>(n * esz));
                 return;
               }
               for (int64_t j = 0; j < n; ++j)
                 std::memcpy(dd + j * ds, v + j * vs, static_cast<size_t>(esz));
             });
    return;
  }
  dispatch_all(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Serial: updates of one destination apply in index order, like ATen's CPU kernel.
    advanced(dst, values, ai, true, op,
             [](char* v, const char* d, int64_t n, int64_t vs, int64_t ds) {
               char* dd = const_cast<char*>(d);
               for (int64_t j = 0; j < n; ++j) {
                 T* x = reinterpret_cast<T*>(dd + j * ds);
                 *x = add_scaled(*x, *reinterpret_cast<const T*>(v + j * vs), 1.0);
               }
             });
  });
}

// ---- masks and nonzero ----

void masked_fill(const TensorRef& self, const TensorRef& mask, const void* value) {
  const LoopPlan<2> plan = make_plan<2>({&self, &mask});
  const size_t esz = element_size(self.dtype), msz = element_size(mask.dtype);
  unsigned char v[16];
  std::memcpy(v, value, esz);
  for_each_row(plan, [&](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
    for (int64_t j = 0; j < n; ++j) {
      const char* m = p[1] + j * s[1];
      bool on = false;
      for (size_t b = 0; b < msz; ++b) on |= m[b] != 0;
      if (on) std::memcpy(p[0] + j * s[0], v, esz);
    }
  });
}

namespace {

// Visits the elements [b, e) (row-major linear order) of N same-shaped operands:
// fn(linear_index, coords, ptrs).
template <int N, typename F>
void visit_range(const std::array<const TensorRef*, N>& ref, int64_t b, int64_t e, F&& fn) {
  const TensorRef& shape = *ref[0];
  const int nd = shape.ndim;
  int64_t coord[kMaxDims] = {};
  int64_t rem = b;
  for (int d = nd - 1; d >= 0; --d) {
    coord[d] = shape.sizes[d] ? rem % shape.sizes[d] : 0;
    rem = shape.sizes[d] ? rem / shape.sizes[d] : 0;
  }
  std::array<const char*, N> p;
  for (int k = 0; k < N; ++k) {
    const char* base = static_cast<const char*>(ref[k]->data);
    for (int d = 0; d < nd; ++d)
      base += coord[d] * ref[k]->strides[d] * static_cast<int64_t>(element_size(ref[k]->dtype));
    p[k] = base;
  }
  for (int64_t i = b; i < e; ++i) {
    fn(i, coord, p);
    for (int d = nd - 1; d >= 0; --d) {
      for (int k = 0; k < N; ++k)
        p[k] += ref[k]->strides[d] * static_cast<int64_t>(element_size(ref[k]->dtype));
      if (++coord[d] < shape.sizes[d]) break;
      for (int k = 0; k < N; ++k)
        p[k] -=
            ref[k]->strides[d] * shape.sizes[d] * static_cast<int64_t>(element_size(ref[k]->dtype));
      coord[d] = 0;
    }
  }
}

bool nonzero_bytes(const char* p, size_t esz, DType t) {
  // -0.0 is zero for floating types.
  switch (t) {
    case DType::Float32:
      return *reinterpret_cast<const float*>(p) != 0.0f;
    case DType::Float64:
      return *reinterpret_cast<const double*>(p) != 0.0;
    case DType::BFloat16:
    case DType::Float16:
      return (*reinterpret_cast<const uint16_t*>(p) & 0x7fff) != 0;
    case DType::Complex64:
      return reinterpret_cast<const float*>(p)[0] != 0.0f ||
             reinterpret_cast<const float*>(p)[1] != 0.0f;
    case DType::Complex128:
      return reinterpret_cast<const double*>(p)[0] != 0.0 ||
             reinterpret_cast<const double*>(p)[1] != 0.0;
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2:
      return (*reinterpret_cast<const uint8_t*>(p) & 0x7f) != 0;
    default:
      for (size_t b = 0; b < esz; ++b)
        if (p[b] != 0) return true;
      return false;
  }
}

constexpr int64_t kScanBlock = 1 << 15;

// Per-block counts of the elements where pred(ptrs) holds, then calls emit(block, offset) for
// each block with the number of hits before it.
template <int N, typename Pred, typename Emit>
void scan_blocks(const std::array<const TensorRef*, N>& ref, Pred&& pred, Emit&& emit) {
  const int64_t total = ref[0]->numel();
  const int64_t blocks = (total + kScanBlock - 1) / kScanBlock;
  std::vector<int64_t> counts(static_cast<size_t>(blocks));
  rt::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bl = b0; bl < b1; ++bl) {
      int64_t c = 0;
      visit_range<N>(ref, bl * kScanBlock, std::min(total, (bl + 1) * kScanBlock),
                     [&](int64_t, const int64_t*, const std::array<const char*, N>& p) {
                       c += pred(p) ? 1 : 0;
                     });
      counts[static_cast<size_t>(bl)] = c;
    }
  });
  std::vector<int64_t> offsets(static_cast<size_t>(blocks));
  int64_t acc = 0;
  for (int64_t bl = 0; bl < blocks; ++bl) {
    offsets[static_cast<size_t>(bl)] = acc;
    acc += counts[static_cast<size_t>(bl)];
  }
  emit(acc, [&](auto&& per_block) {
    rt::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bl = b0; bl < b1; ++bl)
        per_block(bl * kScanBlock, std::min(total, (bl + 1) * kScanBlock),
                  offsets[static_cast<size_t>(bl)]);
    });
  });
}

}  // namespace

int64_t count_nonzero(const TensorRef& t) {
  const size_t esz = element_size(t.dtype);
  std::atomic<int64_t> total{0};
  const LoopPlan<1> plan = make_plan<1>({&t});
  for_each_row(plan, [&](std::array<char*, 1> p, int64_t n, const std::array<int64_t, 1>& s) {
    int64_t c = 0;
    for (int64_t j = 0; j < n; ++j) c += nonzero_bytes(p[0] + j * s[0], esz, t.dtype) ? 1 : 0;
    total.fetch_add(c, std::memory_order_relaxed);
  });
  return total.load();
}

void nonzero(const TensorRef& out, const TensorRef& self) {
  const size_t esz = element_size(self.dtype);
  const int nd = self.ndim;
  const bool i32 = out.dtype == DType::Int32;
  auto is_hit = [&](const std::array<const char*, 1>& p) {
    return nonzero_bytes(p[0], esz, self.dtype);
  };
  scan_blocks<1>({&self}, is_hit, [&](int64_t count, auto&& for_blocks) {
    if (out.ndim != 2 || out.sizes[0] != count)
      throw std::invalid_argument("nonzero: output has the wrong size");
    for_blocks([&](int64_t b, int64_t e, int64_t offset) {
      int64_t row = offset;
      visit_range<1>({&self}, b, e,
                     [&](int64_t, const int64_t* coord, const std::array<const char*, 1>& p) {
                       if (!is_hit(p)) return;
                       for (int d = 0; d < nd; ++d) {
                         const int64_t o = row * out.strides[0] + d * out.strides[1];
                         if (i32)
                           static_cast<int32_t*>(out.data)[o] = static_cast<int32_t>(coord[d]);
                         else
                           static_cast<int64_t*>(out.data)[o] = coord[d];
                       }
                       ++row;
                     });
    });
  });
}

void masked_select(const TensorRef& out, const TensorRef& self, const TensorRef& mask) {
  const size_t esz = element_size(self.dtype), msz = element_size(mask.dtype);
  auto is_hit = [&](const std::array<const char*, 2>& p) {
    return nonzero_bytes(p[1], msz, mask.dtype);
  };
  scan_blocks<2>({&self, &mask}, is_hit, [&](int64_t count, auto&& for_blocks) {
    if (out.numel() != count)
      throw std::invalid_argument("masked_select: output has the wrong size");
    const int64_t os = out.ndim ? out.strides[0] : 1;
    for_blocks([&](int64_t b, int64_t e, int64_t offset) {
      int64_t k = offset;
      visit_range<2>(
          {&self, &mask}, b, e, [&](int64_t, const int64_t*, const std::array<const char*, 2>& p) {
            if (!is_hit(p)) return;
            std::memcpy(static_cast<char*>(out.data) + k * os * static_cast<int64_t>(esz), p[0],
                        esz);
            ++k;
          });
    });
  });
}

void masked_scatter(const TensorRef& self, const TensorRef& mask, const TensorRef& source,
                    const char* op) {
  const size_t esz = element_size(self.dtype), msz = element_size(mask.dtype);
  if (source.dtype != self.dtype)
    throw std::invalid_argument(std::string(op) + ": self and source dtypes differ");
  auto is_hit = [&](const std::array<const char*, 2>& p) {
    return nonzero_bytes(p[1], msz, mask.dtype);
  };
  scan_blocks<2>({&self, &mask}, is_hit, [&](int64_t count, auto&& for_blocks) {
    if (count > source.numel())
      throw std::invalid_argument(
          std::string(op) + ": Number of elements of source < number of ones in mask (" +
          std::to_string(source.numel()) + " < " + std::to_string(count) + ")");
    const int64_t ss = source.ndim ? source.strides[0] : 1;
    for_blocks([&](int64_t b, int64_t e, int64_t offset) {
      int64_t k = offset;
      visit_range<2>(
          {&self, &mask}, b, e, [&](int64_t, const int64_t*, const std::array<const char*, 2>& p) {
            if (!is_hit(p)) return;
            std::memcpy(const_cast<char*>(p[0]),
                        static_cast<const char*>(source.data) + k * ss * static_cast<int64_t>(esz),
                        esz);
            ++k;
          });
    });
  });
}

}  // namespace neuron::kernels
