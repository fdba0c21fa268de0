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

// Reads S, accumulates in acc_t<S>, writes D; Avg divides by `divisor` (none when 0).
template <typename S, typename D>
void reduce_typed(D* dst, const std::vector<const void*>& srcs, int64_t n, CollectiveOp op, int64_t divisor) {
  using T = S;
  using A = acc_t<S>;
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
      if (op == CollectiveOp::Avg && divisor > 0) acc = static_cast<A>(acc / static_cast<A>(divisor));
      dst[i] = convert<D>(acc);
    }
  });
}

void check_supported(DType dtype, CollectiveOp op) {
  const bool bitwise = op == CollectiveOp::BAnd || op == CollectiveOp::BOr || op == CollectiveOp::BXor;
  if (bitwise && (is_floating(dtype) || is_complex(dtype)))
    throw std::invalid_argument("collective: bitwise reduction of " + std::string(dtype_name(dtype)) + " tensors");
  if (is_complex(dtype) && (op == CollectiveOp::Min || op == CollectiveOp::Max))
    throw std::invalid_argument("collective: min/max reduction of complex tensors");
  if (dtype == DType::Bool && op == CollectiveOp::Avg)
    throw std::invalid_argument("collective: AVG reduction of bool tensors");
}

// bool: sum/max/bor are "any", product/min/band are "all", bxor is parity (each combines
// partial results of its own kind, so stepwise reductions need nothing special).
void reduce_bool(bool* d, const std::vector<const void*>& srcs, int64_t n, CollectiveOp op) {
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
}

}  // namespace

DType collective_acc_dtype(DType dtype) {
  return dispatch_all(dtype, [&](auto tag) { return is_small_float_v<decltype(tag)> ? DType::Float32 : dtype; });
}

void collective_reduce(void* dst, const std::vector<const void*>& srcs, int64_t n, DType dtype, CollectiveOp op) {
  collective_reduce_step(dst, dtype, srcs, dtype, n, op, static_cast<int64_t>(srcs.size()));
}

void collective_reduce_step(void* dst, DType dst_dtype, const std::vector<const void*>& srcs, DType src_dtype,
                            int64_t n, CollectiveOp op, int64_t avg_divisor) {
  if (srcs.empty() || n == 0) return;
  check_supported(src_dtype, op);
  check_supported(dst_dtype, op);
  if (src_dtype == dst_dtype) {
    dispatch_all(src_dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, bool>)
        reduce_bool(static_cast<bool*>(dst), srcs, n, op);
      else
        reduce_typed<T, T>(static_cast<T*>(dst), srcs, n, op, avg_divisor);
    });
    return;
  }
  const bool widen = dst_dtype == collective_acc_dtype(src_dtype), narrow = src_dtype == collective_acc_dtype(dst_dtype);
  if (!widen && !narrow)
    throw std::invalid_argument(std::string("collective: a reduction step from ") + std::string(dtype_name(src_dtype)) +
                                " to " + std::string(dtype_name(dst_dtype)));
  dispatch_all(widen ? src_dtype : dst_dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_small_float_v<T>) {
      if (widen)
        reduce_typed<T, float>(static_cast<float*>(dst), srcs, n, op, avg_divisor);
      else
        reduce_typed<float, T>(static_cast<T*>(dst), srcs, n, op, avg_divisor);
    }
  });
}

}  // namespace neuron::kernels
