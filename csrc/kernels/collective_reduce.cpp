#include "collective_reduce.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "dispatch.h"
#include "runtime/thread_pool.h"

namespace neuron::kernels {
namespace {

template <typename T>
using acc_t = std::conditional_t<is_small_float_v<T>, float, T>;

template <typename T>
void reduce_typed(T* dst, const std::vector<const void*>& srcs, int64_t n, CollectiveOp op) {
  using A = acc_t<T>;
  const size_t k = srcs.size();
  rt::parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      A acc = static_cast<A>(static_cast<const T*>(srcs[0])[i]);
      for (size_t r = 1; r < k; ++r) {
        const A v = static_cast<A>(static_cast<const T*>(srcs[r])[i]);
        switch (op) {
          case CollectiveOp::Sum:
          case CollectiveOp::Avg: acc = static_cast<A>(acc + v); break;
          case CollectiveOp::Product: acc = static_cast<A>(acc * v); break;
          case CollectiveOp::Min:
            if constexpr (!is_complex_v<A>) acc = (v < acc || v != v) ? v : acc;
            break;
          case CollectiveOp::Max:
            if constexpr (!is_complex_v<A>) acc = (v > acc || v != v) ? v : acc;
            break;
          case CollectiveOp::BAnd:
            if constexpr (std::is_integral_v<A>) acc = static_cast<A>(acc & v);
            break;
          case CollectiveOp::BOr:
            if constexpr (std::is_integral_v<A>) acc = static_cast<A>(acc | v);
            break;
          case CollectiveOp::BXor:
            if constexpr (std::is_integral_v<A>) acc = static_cast<A>(acc ^ v);
            break;
        }
      }
      if (op == CollectiveOp::Avg) acc = static_cast<A>(acc / static_cast<A>(static_cast<int>(k)));
      dst[i] = convert<T>(acc);
    }
  });
}

}  // namespace

void collective_reduce(void* dst, const std::vector<const void*>& srcs, int64_t n, DType dtype, CollectiveOp op) {
  if (srcs.empty() || n == 0) return;
  const bool bitwise = op == CollectiveOp::BAnd || op == CollectiveOp::BOr || op == CollectiveOp::BXor;
  if (bitwise && (is_floating(dtype) || is_complex(dtype)))
    throw std::invalid_argument("collective: bitwise reduction of " + std::string(dtype_name(dtype)) + " tensors");
  if (is_complex(dtype) && (op == CollectiveOp::Min || op == CollectiveOp::Max))
    throw std::invalid_argument("collective: min/max reduction of complex tensors");
  if (dtype == DType::Bool && op == CollectiveOp::Avg)
    throw std::invalid_argument("collective: AVG reduction of bool tensors");
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      // bool: sum/max/bor are "any", product/min/band are "all", bxor is parity.
      auto* d = static_cast<bool*>(dst);
      rt::parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          bool any = false, all = true, parity = false;
          for (const void* s : srcs) {
            const bool v = static_cast<const bool*>(s)[i];
            any |= v;
            all &= v;
            parity ^= v;
          }
          d[i] = (op == CollectiveOp::Product || op == CollectiveOp::Min || op == CollectiveOp::BAnd) ? all
                 : op == CollectiveOp::BXor                                                            ? parity
                                                                                                       : any;
        }
      });
    } else {
      reduce_typed<T>(static_cast<T*>(dst), srcs, n, op);
    }
  });
}

}  // namespace neuron::kernels
