// Internals shared by the elementwise driver (elementwise.cpp) and the per-ISA op tables
// (elementwise_portable.cpp, elementwise_avx2.cpp).
#pragma once

#include <cstdint>

#include "dtype.h"
#include "elementwise.h"

namespace neuron::kernels {

// Computes n elements from contiguous input buffers into a contiguous output buffer.
using EwChunkFn = void (*)(const EwParams& p, void* out, const void* const* in, int64_t n);

// One (op, compute type) kernel and the buffer dtypes it reads and writes.
struct EwEntry {
  EwChunkFn fn = nullptr;
  // Direct 16-bit paths (AVX2 only): every operand bf16 (fp16), contiguous; nullptr otherwise.
  // Same results as `fn` on converted buffers, without the buffers.
  EwChunkFn fn_bf16 = nullptr;
  EwChunkFn fn_f16 = nullptr;
  DType out = DType::Undefined;
  DType in[3] = {DType::Undefined, DType::Undefined, DType::Undefined};
  int8_t arity = 0;
};

// Compute types, in table column order.
inline constexpr int kEwComputeTypes = 8;
inline int ew_compute_slot(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::UInt8:
      return 1;
    case DType::Int8:
      return 2;
    case DType::Int16:
      return 3;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 5;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
      return 6;
    case DType::Float64:
      return 7;
    default:
      return -1;
  }
}

struct EwTable {
  EwEntry rows[static_cast<int>(EwOp::kCount)][kEwComputeTypes];
};

namespace portable {
const EwTable& table();
}
namespace avx2 {
const EwTable& table();
}

}  // namespace neuron::kernels
