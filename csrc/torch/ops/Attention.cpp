// scaled_dot_product_attention for neuron tensors: the fused-SDP choice (the PrivateUse1 entry
// of _fused_sdp_choice_stub) selects the OVERRIDEABLE backend for 4-d fp32/bf16/fp16 inputs
// without dropout, whose forward and backward run the flash-style kernels of attention.h. Other
// cases (dropout, fp64, other ranks) take PyTorch's math decomposition, which runs on the
// native bmm/softmax/dropout kernels. The fused inference paths of nn.MultiheadAttention and
// nn.TransformerEncoderLayer (_native_multi_head_attention, _transformer_encoder_layer_fwd) are
// composed here from the native linear, attention and layer-norm kernels.
#include "kernels/attention.h"

#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <cmath>

#include "OpUtils.h"

namespace neuron::torch_glue {
namespace {

bool attention_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  const auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (q.is_nested() || k.is_nested() || v.is_nested()) return math;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return math;
  if (!attention_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type())
    return math;
  if (dropout_p > 0.0) return math;
  if (q.size(0) != k.size(0) || q.size(0) != v.size(0) || k.size(1) != v.size(1) ||
      k.size(2) != v.size(2) || q.size(3) != k.size(3))
    return math;  // the math path reports the shape error
  if (q.size(1) != k.size(1) && (!enable_gqa || k.size(1) == 0 || q.size(1) % k.size(1) != 0))
    return math;
  if (attn_mask.has_value() && attn_mask->defined()) {
    const auto mt = attn_mask->scalar_type();
    if (mt != at::kBool && !is_float_dtype(mt)) return math;
    if (!at::is_expandable_to(attn_mask->sizes(), {q.size(0), q.size(1), q.size(2), k.size(2)}))
      return math;
  }
  for (const at::Tensor* t : {&q, &k, &v})
    if (t->device() != q.device()) return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

int64_t fused_sdp_choice_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& attn_mask, double dropout_p,
                            bool is_causal, std::optional<double> scale, bool enable_gqa) {
  NEURON_TRACK_OP("aten::_fused_sdp_choice");
  return fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

void strides4(const at::Tensor& t, int64_t s[4]) {
  for (int i = 0; i < 4; ++i) s[i] = t.stride(i);
}

kernels::AttentionArgs make_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask, bool causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
              ": expected 4-d query, key and value, got ", q.dim(), ", ", k.dim(), ", ", v.dim());
  TORCH_CHECK(attention_dtype(q.scalar_type()) && k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type(),
              op, ": expected query, key and value of one of float32, bfloat16, float16, got ",
              q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(0) == v.size(0), op, ": batch sizes differ");
  TORCH_CHECK(k.size(1) == v.size(1) && k.size(2) == v.size(2), op,
              ": key and value shapes differ: ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(q.size(3) == k.size(3), op, ": query and key head dims differ: ", q.size(3), " and ",
              k.size(3));
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": the number of query heads (",
              q.size(1), ") must be a multiple of the number of key/value heads (", k.size(1), ")");
  check_device(op, q.device(), {&k, &v, &mask});
  kernels::AttentionArgs a;
  a.B = q.size(0);
  a.Hq = q.size(1);
  a.Hkv = k.size(1);
  a.Lq = q.size(2);
  a.Lk = k.size(2);
  a.D = q.size(3);
  a.Dv = v.size(3);
  a.dtype = to_kernel_dtype(q.scalar_type());
  a.q = q.numel() ? q.data_ptr() : nullptr;
  a.k = k.numel() ? k.data_ptr() : nullptr;
  a.v = v.numel() ? v.data_ptr() : nullptr;
  strides4(q, a.q_s);
  strides4(k, a.k_s);
  strides4(v, a.v_s);
  if (mask.defined()) {
    TORCH_CHECK(mask.scalar_type() == at::kBool || is_float_dtype(mask.scalar_type()), op,
                ": attn_mask must be bool or floating, got ", mask.scalar_type());
    const at::Tensor m = mask.expand({a.B, a.Hq, a.Lq, a.Lk});
    a.mask = m.numel() ? m.data_ptr() : nullptr;
    a.mask_dtype = to_kernel_dtype(m.scalar_type());
    strides4(m, a.mask_s);
  }
  a.causal = causal;
  a.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(a.D));
  return a;
}

using FusedOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
                            c10::SymInt, at::Tensor, at::Tensor, at::Tensor>;

// Queues the fused forward; returns (out, logsumexp) with out's memory laid out [B, L, H, Ev] and
// viewed as [B, H, L, Ev]: the usual transpose(1, 2).reshape(B, L, H*Ev) after attention is free.
std::pair<at::Tensor, at::Tensor> run_attention(const at::Tensor& q,
                                                const kernels::AttentionArgs& a, const char* name) {
  at::Tensor out = at::empty({a.B, a.Lq, a.Hq, a.Dv}, q.options()).transpose(1, 2);
  at::Tensor lse = at::empty({a.B, a.Hq, a.Lq}, q.options().dtype(at::kFloat));
  if (out.numel() > 0) {
    int64_t os[4];
    strides4(out, os);
    const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1), ls2 = lse.stride(2);
    void* optr = out.data_ptr();
    float* lptr = lse.data_ptr<float>();
    launch_on(q, name,
              [a, optr, lptr, os0 = os[0], os1 = os[1], os2 = os[2], os3 = os[3], ls0, ls1, ls2] {
                const int64_t o_s[4] = {os0, os1, os2, os3};
                const int64_t l_s[3] = {ls0, ls1, ls2};
                kernels::attention_forward(a, optr, o_s, lptr, l_s);
              });
  } else if (lse.numel() > 0) {
    lse.fill_(-std::numeric_limits<float>::infinity());
  }
  return {out, lse};
}

FusedOut sdpa_overrideable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& attn_bias, double dropout_p,
                           bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  NEURON_TRACK_OP("aten::_scaled_dot_product_fused_attention_overrideable");
  TORCH_CHECK(dropout_p == 0.0,
              "scaled_dot_product_attention: the neuron fused kernel has no dropout (dropout_p=",
              dropout_p, "); the math backend handles dropout");
  TORCH_CHECK(!return_debug_mask,
              "scaled_dot_product_attention: return_debug_mask is not supported");
  const at::Tensor mask = attn_bias.has_value() ? *attn_bias : at::Tensor();
  const kernels::AttentionArgs a = make_args(q, k, v, mask, is_causal, scale);
  auto [out, lse] = run_attention(q, a, "aten::_scaled_dot_product_fused_attention_overrideable");
  const auto empty_long = q.options().dtype(at::kLong);
  return {out,
          lse,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(a.Lq),
          c10::SymInt(a.Lk),
          at::empty({}, empty_long),
          at::empty({}, empty_long),
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k,
    c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    const at::Tensor& philox_seed, const at::Tensor& philox_offset, std::optional<double> scale) {
  NEURON_TRACK_OP("aten::_scaled_dot_product_fused_attention_overrideable_backward");
  TORCH_CHECK(
      dropout_p == 0.0,
      "scaled_dot_product_attention backward: dropout is not supported by the fused kernel");
  const kernels::AttentionArgs a = make_args(q, k, v, attn_bias, is_causal, scale);
  check_device("scaled_dot_product_attention_backward", q.device(), {&grad_out, &out, &logsumexp});
  at::Tensor dq, dk, dv, dmask;
  if (grad_input_mask[0]) dq = at::empty_like(q);
  if (grad_input_mask[1]) dk = at::empty_like(k);
  if (grad_input_mask[2]) dv = at::empty_like(v);
  const bool want_mask =
      grad_input_mask[3] && attn_bias.defined() && attn_bias.scalar_type() != at::kBool;
  at::Tensor dense;
  if (want_mask) dense = at::empty({a.B, a.Hq, a.Lq, a.Lk}, q.options().dtype(at::kFloat));
  kernels::AttentionGrads g;
  const at::Tensor go =
      grad_out.scalar_type() == q.scalar_type() ? grad_out : grad_out.to(q.scalar_type());
  g.dout = go.numel() ? go.data_ptr() : nullptr;
  strides4(go, g.dout_s);
  g.out = out.numel() ? out.data_ptr() : nullptr;
  strides4(out, g.out_s);
  TORCH_CHECK(logsumexp.scalar_type() == at::kFloat && logsumexp.dim() == 3,
              "scaled_dot_product_attention backward: expected the forward's float32 logsumexp");
  g.lse = logsumexp.numel() ? logsumexp.data_ptr<float>() : nullptr;
  for (int i = 0; i < 3; ++i) g.lse_s[i] = logsumexp.stride(i);
  if (dq.defined()) {
    g.dq = dq.numel() ? dq.data_ptr() : nullptr;
    strides4(dq, g.dq_s);
  }
  if (dk.defined()) {
    g.dk = dk.numel() ? dk.data_ptr() : nullptr;
    strides4(dk, g.dk_s);
  }
  if (dv.defined()) {
    g.dv = dv.numel() ? dv.data_ptr() : nullptr;
    strides4(dv, g.dv_s);
  }
  if (dense.defined()) g.dmask = dense.numel() ? dense.data_ptr<float>() : nullptr;
  const bool empty_q = a.Lq == 0 || a.Hq == 0 || a.B == 0;
  if (empty_q) {
    if (dk.defined()) dk.zero_();
    if (dv.defined()) dv.zero_();
  } else if (a.Lk == 0 || a.D == 0) {
    if (dq.defined()) dq.zero_();
    if (dk.defined()) dk.zero_();
    if (dv.defined()) dv.zero_();
  } else {
    launch_on(q, "aten::_scaled_dot_product_fused_attention_overrideable_backward",
              [a, g] { kernels::attention_backward(a, g); });
  }
  at::Tensor dbias;
  if (want_mask) {
    if (empty_q || a.Lk == 0) dense.zero_();
    dbias = at::sum_to(dense.to(attn_bias.scalar_type()), attn_bias.sizes());
    if (dbias.is_same(dense)) dbias = dbias.clone();
  }
  return {dq, dk, dv, dbias};
}

// ---- fused inference paths of nn.MultiheadAttention / nn.TransformerEncoderLayer ----

// The boolean "masked out" mask of _native_multi_head_attention as a [B|1, H|1, T, T]-broadcastable
// view: mask_type 0 is [T, T], 1 a key-padding [B, T], 2 (or none) a [B, H, T, T]-broadcastable
// mask (a 3-d one is [B * H, T, T]). Floating masks
// count as masked where non-zero, like PyTorch's masked softmax.
at::Tensor mha_mask(const at::Tensor& mask, std::optional<int64_t> mask_type, int64_t B,
                    int64_t T) {
  at::Tensor m = mask.scalar_type() == at::kBool ? mask : mask.to(at::kBool);
  const int64_t type = mask_type.value_or(2);  // no type: a mask broadcastable to [B, H, T, T]
  if (type == 0) return m.reshape({1, 1, T, T});
  if (type == 1) return m.reshape({B, 1, 1, T});
  if (m.dim() == 3) return m.reshape({B, -1, T, T});
  return m;
}

std::tuple<at::Tensor, at::Tensor> native_mha(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim,
    int64_t num_head, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
    const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  NEURON_TRACK_OP("aten::_native_multi_head_attention");
  const char* op = "_native_multi_head_attention";
  TORCH_CHECK(!query.is_nested(), op, ": nested tensors are not supported on neuron");
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, op,
              ": expected 3-D query, key and value");
  TORCH_CHECK(query.sizes() == key.sizes() && key.sizes() == value.sizes(), op,
              ": expected `query`/`key`/`value` shapes to match");
  TORCH_CHECK(query.size(2) == embed_dim, op, ": passed-in embed_dim ", embed_dim,
              " didn't match last dim of query ", query.size(2));
  TORCH_CHECK(qkv_weight.dim() == 2 && qkv_weight.size(0) == 3 * embed_dim &&
                  qkv_weight.size(1) == embed_dim,
              op, ": expected qkv_weight of shape [3 * embed_dim, embed_dim], got ",
              qkv_weight.sizes());
  TORCH_CHECK(qkv_bias.dim() == 1 && qkv_bias.size(0) == 3 * embed_dim, op,
              ": expected qkv_bias of shape [", 3 * embed_dim, "], got ", qkv_bias.sizes());
  TORCH_CHECK(embed_dim % num_head == 0, op, ": `embed_dim` must divide evenly by `num_heads`");
  const int64_t B = query.size(0), T = query.size(1), D = embed_dim, hd = D / num_head;
  at::Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    const at::Tensor qkv = at::linear(query, qkv_weight, qkv_bias);
    q = qkv.narrow(2, 0, D);
    k = qkv.narrow(2, D, D);
    v = qkv.narrow(2, 2 * D, D);
  } else {
    const auto w = qkv_weight.chunk(3, 0);
    const auto b = qkv_bias.chunk(3, 0);
    q = at::linear(query, w[0], b[0]);
    k = at::linear(key, w[1], b[1]);
    v = at::linear(value, w[2], b[2]);
  }
  q = q.view({B, T, num_head, hd}).transpose(1, 2);
  k = k.view({B, T, num_head, hd}).transpose(1, 2);
  v = v.view({B, T, num_head, hd}).transpose(1, 2);
  at::Tensor m;
  if (mask.has_value() && mask->defined())
    m = mha_mask(to_device(*mask, query.device()), mask_type, B, T);
  kernels::AttentionArgs a = make_args(q, k, v, m, false, std::nullopt);
  a.mask_excludes = true;
  const at::Tensor ctx = run_attention(q, a, "aten::_native_multi_head_attention").first;
  const at::Tensor proj =
      at::linear(ctx.transpose(1, 2).reshape({B, T, D}), proj_weight, proj_bias);
  at::Tensor weights;
  if (need_weights) {
    at::Tensor scores =
        at::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(hd)));
    if (m.defined()) scores.masked_fill_(m, -std::numeric_limits<double>::infinity());
    weights = at::softmax(scores, -1);
    if (m.defined())
      weights.masked_fill_(weights.isnan(), 0);  // fully masked rows are 0, like masked softmax
    if (average_attn_weights) weights = weights.sum(1).div_(num_head);
  }
  return {proj, weights};
}

at::Tensor transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
    const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2,
    const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
    const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
    std::optional<int64_t> mask_type) {
  NEURON_TRACK_OP("aten::_transformer_encoder_layer_fwd");
  TORCH_CHECK(!src.is_nested(),
              "_transformer_encoder_layer_fwd: nested tensors are not supported on neuron");
  if (src.numel() == 0) return src.clone();
  const std::vector<int64_t> shape{embed_dim};
  auto attention = [&](const at::Tensor& x) {
    return std::get<0>(native_mha(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                  proj_bias, mask, false, false, mask_type));
  };
  auto ffn = [&](const at::Tensor& x) {
    at::Tensor h = at::linear(x, ffn_weight_1, ffn_bias_1);
    h = use_gelu ? at::gelu(h) : at::relu(h);
    return at::linear(h, ffn_weight_2, ffn_bias_2);
  };
  at::Tensor x = src;
  if (norm_first) {
    x = src + attention(at::layer_norm(src, shape, norm_weight_1, norm_bias_1, eps));
    return x + ffn(at::layer_norm(x, shape, norm_weight_2, norm_bias_2, eps));
  }
  x = at::layer_norm(src + attention(src), shape, norm_weight_1, norm_bias_1, eps);
  return at::layer_norm(x + ffn(x), shape, norm_weight_2, norm_bias_2, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_multi_head_attention", TORCH_FN(native_mha));
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(transformer_encoder_layer_fwd));
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice_op));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_overrideable));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(sdpa_overrideable_backward));
}

}  // namespace neuron::torch_glue

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::torch_glue::fused_sdp_choice);
}  // namespace at::native
