#include "sort.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "lines.h"
#include "runtime/thread_pool.h"

namespace neuron::kernels {
namespace {

// Keys compare as float for the 16/8-bit floats, natively otherwise.
template <typename T>
using Key = std::conditional_t<is_small_float_v<T>, float, T>;

template <typename K>
bool is_nan(K v) {
  if constexpr (std::is_floating_point_v<K>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// a before b?
template <typename K>
bool before(K a, K b, bool descending) {
  if (descending) return (a > b) || (is_nan(a) && !is_nan(b));
  return (a < b) || (!is_nan(a) && is_nan(b));
}

void store_index(char* p, DType t, int64_t v) {
  if (t == DType::Int32)
    *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
  else
    *reinterpret_cast<int64_t*>(p) = v;
}

template <typename T>
void check_sortable(const char* op) {
  if constexpr (is_complex_v<T>)
    throw std::invalid_argument(std::string(op) + ": complex tensors cannot be sorted");
}

}  // namespace

void sort(const TensorRef& values, const TensorRef& indices, const TensorRef& self, int dim,
          bool descending) {
  const int64_t n = self.ndim ? self.sizes[dim] : 1;
  const size_t isz = element_size(indices.dtype);
  dispatch_all(self.dtype, [&](auto tag) {
    using T = decltype(tag);
    check_sortable<T>("sort");
    if constexpr (!is_complex_v<T>) {
      using K = Key<T>;
      const int64_t work =
          n * std::max<int64_t>(1, static_cast<int64_t>(std::log2(static_cast<double>(n + 1))));
      for_each_line<3>(
          {&self, &values, &indices}, dim, work,
          [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s) {
            thread_local std::vector<int64_t> order;
            thread_local std::vector<K> keys;
            thread_local std::vector<T> vals;
            order.resize(static_cast<size_t>(n));
            keys.resize(static_cast<size_t>(n));
            vals.resize(static_cast<size_t>(n));
            const T* x = reinterpret_cast<const T*>(p[0]);
            for (int64_t i = 0; i < n; ++i) {
              vals[static_cast<size_t>(i)] = x[i * s[0]];
              keys[static_cast<size_t>(i)] = static_cast<K>(vals[static_cast<size_t>(i)]);
            }
            std::iota(order.begin(), order.end(), int64_t{0});
            std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
              return before(keys[static_cast<size_t>(a)], keys[static_cast<size_t>(b)], descending);
            });
            T* v = reinterpret_cast<T*>(p[1]);
            for (int64_t i = 0; i < n; ++i) {
              const int64_t o = order[static_cast<size_t>(i)];
              v[i * s[1]] = vals[static_cast<size_t>(o)];
              store_index(p[2] + i * s[2] * static_cast<int64_t>(isz), indices.dtype, o);
            }
          });
    }
  });
}

void topk(const TensorRef& values, const TensorRef& indices, const TensorRef& self, int dim,
          int64_t k, bool largest, bool sorted) {
  const int64_t n = self.ndim ? self.sizes[dim] : 1;
  if (k < 0 || k > n)
    throw std::invalid_argument("topk: k (" + std::to_string(k) +
                                ") is out of range for a dimension of size " + std::to_string(n));
  if (k == 0) return;
  const size_t isz = element_size(indices.dtype);
  // Lines of `self` with the output's line strides: iterate over the outputs' shape.
  TensorRef in = self;
  if (in.ndim) in.sizes[dim] = k;
  dispatch_all(self.dtype, [&](auto tag) {
    using T = decltype(tag);
    check_sortable<T>("topk");
    if constexpr (!is_complex_v<T>) {
      using K = Key<T>;
      for_each_line<3>(
          {&in, &values, &indices}, dim, n,
          [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s) {
            // ATen's CPU algorithm, step for step, so that ties come out in the same order:
            // (value, index) pairs, partial_sort when k * 64 <= n, else nth_element and (when
            // sorted) a sort of the first k - 1; NaN counts as the largest value.
            using Elem = std::pair<K, int64_t>;
            thread_local std::vector<Elem> queue;
            queue.resize(static_cast<size_t>(n));
            const T* x = reinterpret_cast<const T*>(p[0]);
            for (int64_t i = 0; i < n; ++i)
              queue[static_cast<size_t>(i)] = Elem(static_cast<K>(x[i * s[0]]), i);
            auto greater = [](const Elem& a, const Elem& b) {
              return (is_nan(a.first) && !is_nan(b.first)) || (a.first > b.first);
            };
            auto less = [](const Elem& a, const Elem& b) {
              return (!is_nan(a.first) && is_nan(b.first)) || (a.first < b.first);
            };
            auto select = [&](auto cmp) {
              if (k * 64 <= n) {
                std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), cmp);
              } else {
                std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), cmp);
                if (sorted) std::sort(queue.begin(), queue.begin() + k - 1, cmp);
              }
            };
            if (largest) {
              select(greater);
            } else {
              select(less);
            }
            T* v = reinterpret_cast<T*>(p[1]);
            for (int64_t i = 0; i < k; ++i) {
              const int64_t o = queue[static_cast<size_t>(i)].second;
              v[i * s[1]] = x[o * s[0]];
              store_index(p[2] + i * s[2] * static_cast<int64_t>(isz), indices.dtype, o);
            }
          });
    }
  });
}

// ---- Philox 4x32-10 ----

namespace {

inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

void philox(uint32_t c[4], uint64_t seed) {
  uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int r = 0; r < 10; ++r) {
    philox_round(c, k);
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
}

}  // namespace

double philox_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  uint32_t c[4] = {static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32),
                   static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)};
  philox(c, seed);
  const uint64_t bits = (static_cast<uint64_t>(c[0]) << 32 | c[1]) >> 11;  // 53 random bits
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

void multinomial(const TensorRef& out, const TensorRef& probs, int64_t n, bool replacement,
                 uint64_t seed, uint64_t offset) {
  const bool batched = probs.ndim == 2;
  const int64_t rows = batched ? probs.sizes[0] : 1;
  const int64_t C = probs.sizes[batched ? 1 : 0];
  const int64_t ps0 = batched ? probs.strides[0] : 0, ps1 = probs.strides[batched ? 1 : 0];
  const int64_t os0 = out.ndim == 2 ? out.strides[0] : 0, os1 = out.strides[out.ndim - 1];
  dispatch_all(probs.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_complex_v<T> || std::is_integral_v<T>) {
      throw std::invalid_argument("multinomial: probabilities must be floating point");
    } else {
      rt::parallel_for(
          0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
          [&](int64_t r0, int64_t r1) {
            std::vector<double> p(static_cast<size_t>(C)), cdf(static_cast<size_t>(C));
            std::vector<int64_t> order(static_cast<size_t>(C));
            std::vector<double> key(static_cast<size_t>(C));
            for (int64_t r = r0; r < r1; ++r) {
              const T* pr = static_cast<const T*>(probs.data) + r * ps0;
              double sum = 0;
              int64_t nonzero = 0;
              for (int64_t c = 0; c < C; ++c) {
                const double v = static_cast<double>(static_cast<Key<T>>(pr[c * ps1]));
                if (!std::isfinite(v) || v < 0)
                  throw std::invalid_argument(
                      "multinomial: probability tensor contains either `inf`, `nan` or element < "
                      "0");
                p[static_cast<size_t>(c)] = v;
                sum += v;
                nonzero += v > 0;
              }
              if (!(sum > 0))
                throw std::invalid_argument(
                    "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
              if (!replacement && nonzero < n)
                throw std::invalid_argument(
                    "multinomial: invalid multinomial distribution (with replacement=False, not "
                    "enough non-negative "
                    "category to sample)");
              int64_t* o = static_cast<int64_t*>(out.data) + r * os0;
              const uint64_t base =
                  static_cast<uint64_t>(r) * static_cast<uint64_t>(std::max(C, n));
              if (replacement) {
                double acc = 0;
                for (int64_t c = 0; c < C; ++c)
                  cdf[static_cast<size_t>(c)] = (acc += p[static_cast<size_t>(c)] / sum);
                for (int64_t j = 0; j < n; ++j) {
                  const double u = philox_uniform(seed, offset, base + static_cast<uint64_t>(j));
                  int64_t c = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
                  c = std::min(c, C - 1);
                  while (c > 0 && p[static_cast<size_t>(c)] == 0) --c;  // rounding at the top end
                  o[j * os1] = c;
                }
              } else {
                // Exponential race: the n smallest E_c / p_c (E_c ~ Exp(1)) are a sample without
                // replacement with the sequential-draw distribution.
                for (int64_t c = 0; c < C; ++c) {
                  const double u = philox_uniform(seed, offset, base + static_cast<uint64_t>(c));
                  const double e = -std::log1p(-u);
                  key[static_cast<size_t>(c)] = p[static_cast<size_t>(c)] > 0
                                                    ? e / p[static_cast<size_t>(c)]
                                                    : std::numeric_limits<double>::infinity();
                }
                std::iota(order.begin(), order.end(), int64_t{0});
                std::partial_sort(
                    order.begin(), order.begin() + n, order.end(), [&](int64_t a, int64_t b) {
                      return key[static_cast<size_t>(a)] < key[static_cast<size_t>(b)] ||
                             (key[static_cast<size_t>(a)] == key[static_cast<size_t>(b)] && a < b);
                    });
                for (int64_t j = 0; j < n; ++j) o[j * os1] = order[static_cast<size_t>(j)];
              }
            }
          });
    }
  });
}

void unique_compute(const TensorRef& self, bool want_inverse, bool want_counts, UniqueResult* r) {
  const int64_t n = self.numel();
  const size_t esz = element_size(self.dtype);
  dispatch_all(self.dtype, [&](auto tag) {
    using T = decltype(tag);
    check_sortable<T>("unique");
    if constexpr (!is_complex_v<T>) {
      using K = Key<T>;
      using Stored =
          std::conditional_t<std::is_same_v<T, bool>, unsigned char, T>;  // no vector<bool>
      // Gather in row-major order.
      std::vector<Stored> vals(static_cast<size_t>(n));
      {
        int64_t coord[kMaxDims] = {};
        for (int64_t i = 0; i < n; ++i) {
          int64_t off = 0;
          for (int d = 0; d < self.ndim; ++d) off += coord[d] * self.strides[d];
          vals[static_cast<size_t>(i)] = static_cast<Stored>(static_cast<const T*>(self.data)[off]);
          for (int d = self.ndim - 1; d >= 0; --d) {
            if (++coord[d] < self.sizes[d]) break;
            coord[d] = 0;
          }
        }
      }
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return before(static_cast<K>(static_cast<T>(vals[static_cast<size_t>(a)])),
                      static_cast<K>(static_cast<T>(vals[static_cast<size_t>(b)])), false);
      });
      std::vector<Stored> uniq;
      if (want_inverse) r->inverse.assign(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < n; ++i) {
        const Stored v = vals[static_cast<size_t>(order[static_cast<size_t>(i)])];
        // NaN != NaN: every NaN is its own value, like ATen's sorted unique.
        const bool fresh = uniq.empty() || !(static_cast<K>(static_cast<T>(uniq.back())) ==
                                             static_cast<K>(static_cast<T>(v)));
        if (fresh) {
          uniq.push_back(v);
          if (want_counts) r->counts.push_back(0);
        }
        if (want_counts) ++r->counts.back();
        if (want_inverse)
          r->inverse[static_cast<size_t>(order[static_cast<size_t>(i)])] =
              static_cast<int64_t>(uniq.size()) - 1;
      }
      r->count = static_cast<int64_t>(uniq.size());
      r->values.resize(uniq.size() * esz);
      if (!uniq.empty()) std::memcpy(r->values.data(), uniq.data(), uniq.size() * esz);
    }
  });
}

void unique_write(const UniqueResult& r, const TensorRef& values, const TensorRef& inverse,
                  const TensorRef& counts) {
  const size_t esz = element_size(values.dtype);
  const int64_t vs = values.ndim ? values.strides[0] : 1;
  for (int64_t i = 0; i < r.count; ++i)
    std::memcpy(static_cast<char*>(values.data) + i * vs * static_cast<int64_t>(esz),
                r.values.data() + i * esz, esz);
  if (counts.data) {
    const int64_t cs = counts.ndim ? counts.strides[0] : 1;
    for (int64_t i = 0; i < r.count; ++i)
      static_cast<int64_t*>(counts.data)[i * cs] = r.counts[static_cast<size_t>(i)];
  }
  if (inverse.data) {
    int64_t coord[kMaxDims] = {};
    const int64_t n = inverse.numel();
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0;
      for (int d = 0; d < inverse.ndim; ++d) off += coord[d] * inverse.strides[d];
      static_cast<int64_t*>(inverse.data)[off] = r.inverse[static_cast<size_t>(i)];
      for (int d = inverse.ndim - 1; d >= 0; --d) {
        if (++coord[d] < inverse.sizes[d]) break;
        coord[d] = 0;
      }
    }
  }
}

}  // namespace neuron::kernels
