// Fused scaled-dot-product attention, forward and backward, flash-style: queries are processed
// in blocks against blocks of keys with an online softmax, so the [Lq, Lk] score matrix is never
// materialised. fp32/bf16/fp16 operands with fp32 accumulation; grouped-query attention (Hq a
// multiple of Hkv); causal masking (top-left aligned, like PyTorch: query i sees keys j <= i);
// boolean (true = attend) or additive masks broadcast by strides. Rows whose keys are all masked
// produce zeros (and zero gradients), like PyTorch's CPU kernel.
#pragma once

#include <cstdint>

#include "dtype.h"

namespace neuron::kernels {

struct AttentionArgs {
  int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
  DType dtype = DType::Float32;  // of q, k, v, out (and the gradients)
  // Operands with element strides over [batch, head, position, feature].
  const void* q = nullptr;
  int64_t q_s[4] = {};
  const void* k = nullptr;
  int64_t k_s[4] = {};
  const void* v = nullptr;
  int64_t v_s[4] = {};
  // Optional mask over [batch, head(q), Lq, Lk] (zero strides broadcast): Bool, or a floating
  // dtype added to the scaled scores.
  const void* mask = nullptr;
  DType mask_dtype = DType::Bool;
  int64_t mask_s[4] = {};
  // Boolean masks: false (default) means true = attend (SDPA); true means true = masked out (the
  // key-padding / src-mask convention of nn.MultiheadAttention's fused path).
  bool mask_excludes = false;
  bool causal = false;
  double scale = 1.0;
  // Rows whose keys are all masked: zeros (SDPA, the default) or NaN (what softmax of an all -inf
  // row gives; compiled graphs whose attention came from an explicit softmax keep that).
  bool nan_masked_rows = false;
};

// out [B, Hq, Lq, Dv] (strides out_s), lse [B, Hq, Lq] fp32 log-sum-exp of the scaled, masked
// scores (-inf for fully masked rows; may be null).
void attention_forward(const AttentionArgs& a, void* out, const int64_t out_s[4], float* lse,
                       const int64_t lse_s[3]);

struct AttentionGrads {
  const void* dout = nullptr;  // [B, Hq, Lq, Dv], the forward's dtype
  int64_t dout_s[4] = {};
  const void* out = nullptr;  // the forward's output
  int64_t out_s[4] = {};
  const float* lse = nullptr;  // the forward's log-sum-exp
  int64_t lse_s[3] = {};
  void* dq = nullptr;  // outputs in the forward's dtype (any may be null)
  int64_t dq_s[4] = {};
  void* dk = nullptr;
  int64_t dk_s[4] = {};
  void* dv = nullptr;
  int64_t dv_s[4] = {};
  float* dmask = nullptr;  // optional dense [B, Hq, Lq, Lk] fp32 gradient of an additive mask
};

void attention_backward(const AttentionArgs& a, const AttentionGrads& g);

}  // namespace neuron::kernels
