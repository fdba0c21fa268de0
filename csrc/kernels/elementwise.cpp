#include "elementwise.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "convert.h"
#include "elementwise_internal.h"
#include "simd.h"
#include "strided_loop.h"

namespace neuron::kernels {

namespace {

constexpr int kArity[] = {
#define NEURON_EW_ARITY(name, arity) arity,
    NEURON_EW_OPS(NEURON_EW_ARITY)
#undef NEURON_EW_ARITY
};
constexpr const char* kNames[] = {
#define NEURON_EW_NAME(name, arity) #name,
    NEURON_EW_OPS(NEURON_EW_NAME)
#undef NEURON_EW_NAME
};

// Ops whose per-element cost is dominated by a transcendental function: worth splitting over
// threads at smaller sizes.
bool heavy(EwOp op) {
  switch (op) {
    case EwOp::Add:
    case EwOp::Mul:
    case EwOp::Div:
    case EwOp::Maximum:
    case EwOp::Minimum:
    case EwOp::Lerp:
    case EwOp::LerpTensor:
    case EwOp::Addcmul:
    case EwOp::Addcdiv:
    case EwOp::Where:
    case EwOp::Eq:
    case EwOp::Ne:
    case EwOp::Lt:
    case EwOp::Le:
    case EwOp::Gt:
    case EwOp::Ge:
    case EwOp::LogicalAnd:
    case EwOp::LogicalOr:
    case EwOp::LogicalXor:
    case EwOp::LogicalNot:
    case EwOp::BitAnd:
    case EwOp::BitOr:
    case EwOp::BitXor:
    case EwOp::BitNot:
    case EwOp::Neg:
    case EwOp::Abs:
    case EwOp::Relu:
    case EwOp::Threshold:
    case EwOp::Clamp:
    case EwOp::ClampTensor:
    case EwOp::SigmoidBackward:
    case EwOp::TanhBackward:
    case EwOp::LeakyRelu:
    case EwOp::LeakyReluBackward:
      return false;
    default:
      return true;
  }
}

const EwEntry* find_entry(EwOp op, DType compute) {
  const int slot = ew_compute_slot(compute);
  if (slot < 0 || op >= EwOp::kCount) return nullptr;
  const EwTable& t = simd_level() == SimdLevel::Avx2 ? avx2::table() : portable::table();
  const EwEntry& e = t.rows[static_cast<int>(op)][slot];
  return e.fn ? &e : nullptr;
}

}  // namespace

EwF32Fn ew_f32_kernel(EwOp op, bool avx2_clone) {
  if (op >= EwOp::kCount) return nullptr;
  const EwTable& t = avx2_clone ? avx2::table() : portable::table();
  const EwEntry& e = t.rows[static_cast<int>(op)][ew_compute_slot(DType::Float32)];
  if (!e.fn || e.out != DType::Float32) return nullptr;
  for (int k = 0; k < e.arity; ++k)
    if (e.in[k] != DType::Float32) return nullptr;
  return e.fn;
}

namespace {

// Elements per chunk: the buffers of 4 operands (8 bytes each) stay within 16 KiB of L1.
constexpr int64_t kChunk = 512;

template <int N>
void run(const EwEntry& e, const EwParams& p, const TensorRef* refs, int64_t grain) {
  std::array<const TensorRef*, N> ptrs;
  for (int k = 0; k < N; ++k) ptrs[k] = &refs[k];
  const LoopPlan<N> plan = make_plan<N>(ptrs);

  // Per operand: its dtype, the buffer dtype the kernel wants, and the converter between them.
  std::array<DType, N> buf_dtype;
  std::array<int64_t, N> elem, buf_elem;
  std::array<ConvertFn, N> conv{};
  buf_dtype[0] = e.out;
  for (int k = 1; k < N; ++k) buf_dtype[k] = e.in[k - 1];
  for (int k = 0; k < N; ++k) {
    elem[k] = static_cast<int64_t>(element_size(refs[k].dtype));
    buf_elem[k] = static_cast<int64_t>(element_size(buf_dtype[k]));
    conv[k] =
        k == 0 ? find_convert(refs[0].dtype, e.out) : find_convert(buf_dtype[k], refs[k].dtype);
    if (!conv[k])
      throw std::invalid_argument(std::string("neuron elementwise: cannot convert ") +
                                  std::string(dtype_name(refs[k].dtype)));
  }

  // All operands bf16 (or fp16): the kernel may read and write them directly.
  EwChunkFn direct16 = nullptr;
  {
    bool all_bf16 = true, all_f16 = true;
    for (int k = 0; k < N; ++k) {
      all_bf16 &= refs[k].dtype == DType::BFloat16;
      all_f16 &= refs[k].dtype == DType::Float16;
    }
    direct16 = all_bf16 ? e.fn_bf16 : all_f16 ? e.fn_f16 : nullptr;
  }

  for_each_row(
      plan,
      [&](std::array<char*, N> ptr, int64_t n, const std::array<int64_t, N>& s) {
        if (direct16) {
          bool contiguous = true;
          for (int k = 0; k < N; ++k) contiguous &= s[k] == 2;
          if (contiguous) {
            const void* in[3] = {};
            for (int k = 1; k < N; ++k) in[k - 1] = ptr[k];
            direct16(p, ptr[0], in, n);
            return;
          }
        }
        alignas(64) unsigned char buf[N][kChunk * 8];
        bool filled[N] = {};
        const void* in[3] = {};
        for (int64_t off = 0; off < n; off += kChunk) {
          const int64_t m = std::min(kChunk, n - off);
          for (int k = 1; k < N; ++k) {
            const char* src = ptr[k] + off * s[k];
            if (refs[k].dtype == buf_dtype[k] && s[k] == elem[k]) {
              in[k - 1] = src;
            } else if (s[k] == 0) {
              // A broadcast operand: convert its value once per row.
              if (!filled[k]) {
                conv[k](buf[k], buf_elem[k], src, 0, kChunk);
                filled[k] = true;
              }
              in[k - 1] = buf[k];
            } else {
              conv[k](buf[k], buf_elem[k], src, s[k], m);
              in[k - 1] = buf[k];
            }
          }
          char* dst = ptr[0] + off * s[0];
          const bool direct = refs[0].dtype == e.out && s[0] == elem[0];
          e.fn(p, direct ? static_cast<void*>(dst) : buf[0], in, m);
          if (!direct) conv[0](dst, s[0], buf[0], buf_elem[0], m);
        }
      },
      grain);
}

}  // namespace

int ew_arity(EwOp op) { return op < EwOp::kCount ? kArity[static_cast<int>(op)] : 0; }

const char* ew_name(EwOp op) { return op < EwOp::kCount ? kNames[static_cast<int>(op)] : "?"; }

bool elementwise_supports(EwOp op, DType compute) { return find_entry(op, compute) != nullptr; }

void elementwise(EwOp op, DType compute, const EwParams& p, const TensorRef* operands,
                 int num_operands) {
  const EwEntry* e = find_entry(op, compute);
  if (!e)
    throw std::invalid_argument(std::string("neuron elementwise ") + ew_name(op) +
                                ": no kernel for " + std::string(dtype_name(compute)));
  if (num_operands != e->arity + 1)
    throw std::invalid_argument(std::string("neuron elementwise ") + ew_name(op) + ": expected " +
                                std::to_string(e->arity + 1) + " operands, got " +
                                std::to_string(num_operands));
  const TensorRef& out = operands[0];
  for (int k = 1; k < num_operands; ++k) {
    bool same = operands[k].ndim == out.ndim;
    for (int d = 0; same && d < out.ndim; ++d) same = operands[k].sizes[d] == out.sizes[d];
    if (!same)
      throw std::invalid_argument(std::string("neuron elementwise ") + ew_name(op) +
                                  ": operand shapes differ");
  }
  if (out.numel() == 0) return;
  const int64_t grain = heavy(op) ? 4096 : 32768;
  switch (num_operands) {
    case 2:
      return run<2>(*e, p, operands, grain);
    case 3:
      return run<3>(*e, p, operands, grain);
    case 4:
      return run<4>(*e, p, operands, grain);
    default:
      throw std::invalid_argument("neuron elementwise: bad operand count");
  }
}

}  // namespace neuron::kernels
