// Neural-network layers on the kernels of softmax.h, loss.h, norm.h and index.h: softmax and
// log_softmax (forward/backward, half_to_float), nll_loss and nll_loss2d (forward/backward, the
// second half of cross_entropy), layer_norm, rms_norm (_fused_rms_norm, which rms_norm is
// routed to for neuron tensors), batch_norm (train/eval), and embedding (forward/backward).
#include <ATen/Operators.h>
#include <torch/library.h>

#include <limits>

#include "../NeuronGenerator.h"
#include "OpUtils.h"
#include "kernels/index.h"
#include "kernels/loss.h"
#include "kernels/norm.h"
#include "kernels/softmax.h"

namespace neuron::torch_glue {
namespace {

using kernels::TensorRef;

TensorRef opt_ref(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? make_ref(*t) : TensorRef();
}
TensorRef opt_ref(const at::Tensor& t) { return t.defined() ? make_ref(t) : TensorRef(); }

// ---- softmax ----

at::ScalarType softmax_out_dtype(const at::Tensor& self, bool half_to_float) {
  if (!half_to_float) return self.scalar_type();
  TORCH_CHECK(self.scalar_type() == at::kHalf || self.scalar_type() == at::kBFloat16,
              "softmax: half_to_float is only for float16/bfloat16 inputs, got ",
              self.scalar_type());
  return at::kFloat;
}

void softmax_into(const char* name, const at::Tensor& out, const at::Tensor& self, int64_t dim,
                  bool log) {
  if (out.numel() == 0) return;
  const TensorRef o = make_ref(out), i = make_ref(self);
  const int d = static_cast<int>(dim);
  launch_on(out, name, [o, i, d, log] { kernels::softmax_forward(o, i, d, log); });
}

template <bool Log>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if constexpr (Log) {
    NEURON_TRACK_OP("aten::_log_softmax");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK0(_log_softmax, self, dim, half_to_float);
  } else {
    NEURON_TRACK_OP("aten::_softmax");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK0(_softmax, self, dim, half_to_float);
  }
  const int64_t d = wrap_dim(dim, self.dim());
  at::Tensor out =
      at::empty_like(self, self.options().dtype(softmax_out_dtype(self, half_to_float)));
  softmax_into(Log ? "aten::_log_softmax" : "aten::_softmax", out, self, d, Log);
  return out;
}

template <bool Log>
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  if constexpr (Log) {
    NEURON_TRACK_OP("aten::_log_softmax.out");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK(_log_softmax, out, self, dim, half_to_float, out);
  } else {
    NEURON_TRACK_OP("aten::_softmax.out");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK(_softmax, out, self, dim, half_to_float, out);
  }
  const int64_t d = wrap_dim(dim, self.dim());
  prepare_out(Log ? "_log_softmax" : "_softmax", out, self.sizes(),
              softmax_out_dtype(self, half_to_float), self.device());
  if (overlaps(out, self) && !out.is_same(self)) {
    at::Tensor tmp = at::empty_like(out);
    softmax_into(Log ? "aten::_log_softmax.out" : "aten::_softmax.out", tmp, self, d, Log);
    out.copy_(tmp);
    return out;
  }
  softmax_into(Log ? "aten::_log_softmax.out" : "aten::_softmax.out", out, self, d, Log);
  return out;
}

void softmax_backward_into(const char* name, const at::Tensor& grad_input,
                           const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                           bool log) {
  TORCH_CHECK(grad_output.sizes() == output.sizes(), name,
              ": grad_output and output shapes differ (", grad_output.sizes(), " vs ",
              output.sizes(), ")");
  check_device(name, output.device(), {&grad_output, &grad_input});
  if (grad_input.numel() == 0) return;
  const TensorRef gi = make_ref(grad_input), go = make_ref(grad_output), o = make_ref(output);
  const int d = static_cast<int>(wrap_dim(dim, output.dim()));
  launch_on(grad_input, name,
            [gi, go, o, d, log] { kernels::softmax_backward(gi, go, o, d, log); });
}

template <bool Log>
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  if constexpr (Log) {
    NEURON_TRACK_OP("aten::_log_softmax_backward_data");
  } else {
    NEURON_TRACK_OP("aten::_softmax_backward_data");
  }
  if (!is_float_dtype(output.scalar_type()) || !is_float_dtype(input_dtype)) {
    if constexpr (Log) {
      return NEURON_CPU_FALLBACK0(_log_softmax_backward_data, grad_output, output, dim,
                                  input_dtype);
    } else {
      return NEURON_CPU_FALLBACK0(_softmax_backward_data, grad_output, output, dim, input_dtype);
    }
  }
  at::Tensor gi = at::empty_like(output, output.options().dtype(input_dtype));
  softmax_backward_into(Log ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data",
                        gi, grad_output, output, dim, Log);
  return gi;
}

template <bool Log>
at::Tensor& softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                 int64_t dim, at::ScalarType input_dtype, at::Tensor& grad_input) {
  if constexpr (Log) {
    NEURON_TRACK_OP("aten::_log_softmax_backward_data.out");
  } else {
    NEURON_TRACK_OP("aten::_softmax_backward_data.out");
  }
  const char* name =
      Log ? "aten::_log_softmax_backward_data.out" : "aten::_softmax_backward_data.out";
  prepare_out(name, grad_input, output.sizes(), input_dtype, output.device());
  if ((overlaps(grad_input, output) || overlaps(grad_input, grad_output)) &&
      !grad_input.is_same(grad_output)) {
    at::Tensor tmp = at::empty_like(grad_input);
    softmax_backward_into(name, tmp, grad_output, output, dim, Log);
    grad_input.copy_(tmp);
    return grad_input;
  }
  softmax_backward_into(name, grad_input, grad_output, output, dim, Log);
  return grad_input;
}

// ---- nll_loss ----

struct NllShape {
  int64_t N, C, R;
};

NllShape check_nll(const char* op, const at::Tensor& self, const at::Tensor& target,
                   const std::optional<at::Tensor>& weight, bool two_d) {
  if (two_d) {
    TORCH_CHECK(self.dim() == 4, op, ": input tensor should be 4D, but got ", self.dim(), "D");
    TORCH_CHECK(target.dim() == 3, op,
                ": only batches of spatial targets supported (3D tensors) but got targets of "
                "dimension: ",
                target.dim());
    TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) &&
                    self.size(3) == target.size(2),
                op, ": input and target batch or spatial sizes don't match: target ",
                target.sizes(), ", input ", self.sizes());
  } else {
    TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, op, ": input tensor should be 1D or 2D");
    TORCH_CHECK(target.dim() <= 1, op,
                ": 0D or 1D target tensor expected, multi-target not supported");
    const bool no_batch = self.dim() == 1 && target.dim() == 0;
    TORCH_CHECK(no_batch || self.size(0) == target.size(0), op, ": Expected input batch_size (",
                self.size(0), ") to match target batch_size (", target.size(0), ").");
  }
  const at::ScalarType tt = target.scalar_type();
  TORCH_CHECK(tt == at::kLong || tt == at::kInt || tt == at::kByte, op,
              ": expected target dtype to be Long, Int or Byte, but got ", tt);
  const int64_t C = self.dim() == 1 ? self.size(0) : self.size(1);
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(weight->dim() <= 1 && weight->numel() == C, op,
                ": weight tensor should be defined either for all ", C,
                " classes or no classes but got weight tensor of shape: ", weight->sizes());
    TORCH_CHECK(weight->scalar_type() == self.scalar_type(), op, ": expected weight dtype ",
                self.scalar_type(), ", got ", weight->scalar_type());
  }
  check_device(op, self.device(), {&target, weight.has_value() ? &*weight : nullptr});
  if (self.dim() == 1) return {1, C, 1};
  if (two_d) return {self.size(0), C, self.size(2) * self.size(3)};
  return {self.size(0), C, 1};
}

// [N, C, R] / [N, R] views the kernel expects.
at::Tensor input3(const at::Tensor& self, const NllShape& s) {
  if (self.dim() == 1) return self.view({1, s.C, 1});
  if (self.dim() == 2) return self.unsqueeze(2);
  return self.reshape({s.N, s.C, s.R});
}
at::Tensor target2(const at::Tensor& target, const NllShape& s) {
  if (target.dim() == 0) return target.view({1, 1});
  if (target.dim() == 1) return target.unsqueeze(1);
  return target.reshape({s.N, s.R});
}

kernels::NllLossArgs nll_args(const at::Tensor& self3, const at::Tensor& target2_,
                              const std::optional<at::Tensor>& w, int64_t reduction,
                              int64_t ignore_index, const char* op) {
  TORCH_CHECK(reduction >= 0 && reduction <= 2, op, ": invalid reduction ", reduction);
  kernels::NllLossArgs a;
  a.input = make_ref(self3);
  a.target = make_ref(target2_);
  a.weight = opt_ref(w);
  a.reduction = static_cast<kernels::Reduction>(reduction);
  a.ignore_index = ignore_index;
  a.op = op;
  return a;
}

std::vector<int64_t> nll_output_sizes(const at::Tensor& self, const at::Tensor& target,
                                      int64_t reduction) {
  if (reduction != 0) return {};
  return target.sizes().vec();
}

template <bool TwoD>
std::tuple<at::Tensor&, at::Tensor&> nll_forward_out_impl(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, int64_t ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  const char* op = TwoD ? "nll_loss2d" : "nll_loss";
  const NllShape s = check_nll(op, self, target, weight, TwoD);
  const at::Tensor tgt = to_device(target, self.device());
  prepare_out(op, output, nll_output_sizes(self, tgt, reduction), self.scalar_type(),
              self.device());
  prepare_out(op, total_weight, {}, self.scalar_type(), self.device());
  const kernels::NllLossArgs a =
      nll_args(input3(self, s), target2(tgt, s), weight, reduction, ignore_index, op);
  TensorRef out = make_ref(output);
  if (reduction == 0) out = make_ref(output.reshape({s.N, s.R}));
  const TensorRef tw = make_ref(total_weight);
  if (s.N * s.R == 0 && reduction == 0) return {output, total_weight};
  launch_on(self, TwoD ? "aten::nll_loss2d_forward" : "aten::nll_loss_forward",
            [a, out, tw] { kernels::nll_loss_forward(out, tw, a); });
  return {output, total_weight};
}

template <bool TwoD>
std::tuple<at::Tensor, at::Tensor> nll_forward(const at::Tensor& self, const at::Tensor& target,
                                               const std::optional<at::Tensor>& weight,
                                               int64_t reduction, int64_t ignore_index) {
  if constexpr (TwoD) {
    NEURON_TRACK_OP("aten::nll_loss2d_forward");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK0(nll_loss2d_forward, self, target, weight, reduction,
                                  ignore_index);
  } else {
    NEURON_TRACK_OP("aten::nll_loss_forward");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK0(nll_loss_forward, self, target, weight, reduction, ignore_index);
  }
  at::Tensor output = at::empty({0}, self.options()), total_weight = at::empty({}, self.options());
  nll_forward_out_impl<TwoD>(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

template <bool TwoD>
std::tuple<at::Tensor&, at::Tensor&> nll_forward_out(const at::Tensor& self,
                                                     const at::Tensor& target,
                                                     const std::optional<at::Tensor>& weight,
                                                     int64_t reduction, int64_t ignore_index,
                                                     at::Tensor& output, at::Tensor& total_weight) {
  if constexpr (TwoD) {
    NEURON_TRACK_OP("aten::nll_loss2d_forward.output");
  } else {
    NEURON_TRACK_OP("aten::nll_loss_forward.output");
  }
  return nll_forward_out_impl<TwoD>(self, target, weight, reduction, ignore_index, output,
                                    total_weight);
}

template <bool TwoD>
at::Tensor& nll_backward_out_impl(const at::Tensor& grad_output, const at::Tensor& self,
                                  const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                  int64_t reduction, int64_t ignore_index,
                                  const at::Tensor& total_weight, at::Tensor& grad_input) {
  const char* op = TwoD ? "nll_loss2d_backward" : "nll_loss_backward";
  const NllShape s = check_nll(op, self, target, weight, TwoD);
  const at::Tensor tgt = to_device(target, self.device());
  check_device(op, self.device(), {&grad_output, &total_weight});
  if (reduction == 0) {
    TORCH_CHECK(grad_output.sizes() == tgt.sizes(), op,
                ": grad_output must have the target's shape ", tgt.sizes(), ", got ",
                grad_output.sizes());
  } else {
    TORCH_CHECK(grad_output.numel() == 1, op, ": expected a single-element grad_output, got ",
                grad_output.sizes());
  }
  prepare_out(op, grad_input, self.sizes(), self.scalar_type(), self.device());
  if (grad_input.numel() == 0) return grad_input;
  const kernels::NllLossArgs a =
      nll_args(input3(self, s), target2(tgt, s), weight, reduction, ignore_index, op);
  const at::Tensor go = grad_output.scalar_type() == self.scalar_type()
                            ? grad_output
                            : grad_output.to(self.scalar_type());
  const TensorRef g = reduction == 0 ? make_ref(go.reshape({s.N, s.R})) : make_ref(go.reshape({}));
  const TensorRef tw = make_ref(total_weight.scalar_type() == self.scalar_type()
                                    ? total_weight
                                    : total_weight.to(self.scalar_type()));
  const TensorRef gi = make_ref(input3(grad_input, s));
  launch_on(self, TwoD ? "aten::nll_loss2d_backward" : "aten::nll_loss_backward",
            [a, g, tw, gi] { kernels::nll_loss_backward(gi, g, tw, a); });
  return grad_input;
}

template <bool TwoD>
at::Tensor nll_backward(const at::Tensor& grad_output, const at::Tensor& self,
                        const at::Tensor& target, const std::optional<at::Tensor>& weight,
                        int64_t reduction, int64_t ignore_index, const at::Tensor& total_weight) {
  if constexpr (TwoD) {
    NEURON_TRACK_OP("aten::nll_loss2d_backward");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK0(nll_loss2d_backward, grad_output, self, target, weight, reduction,
                                  ignore_index, total_weight);
  } else {
    NEURON_TRACK_OP("aten::nll_loss_backward");
    if (!is_float_dtype(self.scalar_type()))
      return NEURON_CPU_FALLBACK0(nll_loss_backward, grad_output, self, target, weight, reduction,
                                  ignore_index, total_weight);
  }
  at::Tensor gi = at::empty(self.sizes(), self.options());
  return nll_backward_out_impl<TwoD>(grad_output, self, target, weight, reduction, ignore_index,
                                     total_weight, gi);
}

template <bool TwoD>
at::Tensor& nll_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight,
                             int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight, at::Tensor& grad_input) {
  if constexpr (TwoD) {
    NEURON_TRACK_OP("aten::nll_loss2d_backward.grad_input");
  } else {
    NEURON_TRACK_OP("aten::nll_loss_backward.grad_input");
  }
  return nll_backward_out_impl<TwoD>(grad_output, self, target, weight, reduction, ignore_index,
                                     total_weight, grad_input);
}

// ---- layer norm / rms norm ----

struct RowsShape {
  int64_t M, N, axis;
};

RowsShape check_norm(const char* op, const at::Tensor& input, c10::IntArrayRef normalized_shape,
                     const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias) {
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(
      nd >= 1, op,
      ": Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
      "element, but got normalized_shape = ",
      normalized_shape);
  TORCH_CHECK(input.dim() >= nd && input.sizes().slice(input.dim() - nd).equals(normalized_shape),
              op, ": Given normalized_shape=", normalized_shape, ", expected input with shape [*, ",
              c10::IntArrayRef(normalized_shape), "], but got input of size", input.sizes());
  for (const auto* p : {&weight, &bias}) {
    if (p->has_value() && (*p)->defined()) {
      TORCH_CHECK((*p)->sizes().equals(normalized_shape), op,
                  ": Expected weight/bias to be of same shape as "
                  "normalized_shape, but got shape ",
                  (*p)->sizes(), " and normalized_shape = ", normalized_shape);
      check_device(op, input.device(), {&**p});
    }
  }
  const int64_t axis = input.dim() - nd;
  int64_t M = 1, N = 1;
  for (int64_t i = 0; i < axis; ++i) M *= input.size(i);
  for (int64_t i = axis; i < input.dim(); ++i) N *= input.size(i);
  return {M, N, axis};
}

std::vector<int64_t> stat_shape(const at::Tensor& input, int64_t axis) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < input.dim(); ++i) s.push_back(i < axis ? input.size(i) : 1);
  return s;
}

at::ScalarType stat_dtype(const at::Tensor& input, const std::optional<at::Tensor>& weight) {
  const bool reduced = input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf;
  if (reduced && weight.has_value() && weight->defined() && weight->scalar_type() == at::kFloat)
    return at::kFloat;
  return input.scalar_type();
}

TensorRef param_ref(const std::optional<at::Tensor>& p) {
  if (!p.has_value() || !p->defined()) return TensorRef();
  return make_ref(p->reshape({-1}));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  NEURON_TRACK_OP("aten::native_layer_norm");
  if (!is_float_dtype(input.scalar_type()))
    return NEURON_CPU_FALLBACK0(native_layer_norm, input, normalized_shape, weight, bias, eps);
  const RowsShape s = check_norm("layer_norm", input, normalized_shape, weight, bias);
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  const auto sd = stat_dtype(input, weight);
  at::Tensor mean = at::empty(stat_shape(input, s.axis), input.options().dtype(sd));
  at::Tensor rstd = at::empty(stat_shape(input, s.axis), input.options().dtype(sd));
  if (s.M == 0) return {out, mean, rstd};
  const TensorRef xo = make_ref(out.view({s.M, s.N})), xi = make_ref(x.view({s.M, s.N}));
  const TensorRef mr = make_ref(mean.view({s.M})), rr = make_ref(rstd.view({s.M}));
  const TensorRef w = param_ref(weight), b = param_ref(bias);
  launch_on(input, "aten::native_layer_norm", [xo, xi, mr, rr, w, b, eps] {
    kernels::layer_norm_forward(xo, mr, rr, xi, w, b, eps);
  });
  return {out, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::IntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  NEURON_TRACK_OP("aten::native_layer_norm_backward");
  if (!is_float_dtype(input.scalar_type()))
    return NEURON_CPU_FALLBACK0(native_layer_norm_backward, grad_out, input, normalized_shape, mean,
                                rstd, weight, bias, output_mask);
  const RowsShape s = check_norm("layer_norm_backward", input, normalized_shape, weight, bias);
  check_device("layer_norm_backward", input.device(), {&grad_out, &mean, &rstd});
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  const bool has_w = weight.has_value() && weight->defined(),
             has_b = bias.has_value() && bias->defined();
  if (output_mask[1] && has_w) gw = at::empty(weight->sizes(), weight->options());
  if (output_mask[2] && has_b) gb = at::empty(bias->sizes(), bias->options());
  if (output_mask[1] && !has_w) gw = at::Tensor();
  if (s.M == 0 || s.N == 0) {
    if (gw.defined()) gw.zero_();
    if (gb.defined()) gb.zero_();
    return {gi, gw, gb};
  }
  const at::Tensor x = input.contiguous(), g = grad_out.contiguous();
  const TensorRef gir = gi.defined() ? make_ref(gi.view({s.M, s.N})) : TensorRef();
  const TensorRef gwr = gw.defined() ? make_ref(gw.view({-1})) : TensorRef();
  const TensorRef gbr = gb.defined() ? make_ref(gb.view({-1})) : TensorRef();
  const TensorRef gr = make_ref(g.view({s.M, s.N})), xr = make_ref(x.view({s.M, s.N}));
  const TensorRef mr = make_ref(mean.reshape({s.M})), rr = make_ref(rstd.reshape({s.M}));
  const TensorRef w = param_ref(weight);
  launch_on(input, "aten::native_layer_norm_backward", [gir, gwr, gbr, gr, xr, mr, rr, w] {
    kernels::layer_norm_backward(gir, gwr, gbr, gr, xr, mr, rr, w);
  });
  return {gi, gw, gb};
}

double rms_eps(const at::Tensor& input, std::optional<double> eps) {
  if (eps.has_value()) return *eps;
  if (input.scalar_type() == at::kDouble) return std::numeric_limits<double>::epsilon();
  return std::numeric_limits<float>::epsilon();  // the opmath type's epsilon, like ATen
}

std::tuple<at::Tensor, at::Tensor> fused_rms_norm(const at::Tensor& input,
                                                  c10::IntArrayRef normalized_shape,
                                                  const std::optional<at::Tensor>& weight,
                                                  std::optional<double> eps) {
  NEURON_TRACK_OP("aten::_fused_rms_norm");
  TORCH_CHECK(is_float_dtype(input.scalar_type()), "rms_norm: expected a floating input, got ",
              input.scalar_type());
  const RowsShape s = check_norm("rms_norm", input, normalized_shape, weight, std::nullopt);
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  const auto sd = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor rstd = at::empty(stat_shape(input, s.axis), input.options().dtype(sd));
  if (s.M == 0) return {out, rstd};
  const TensorRef xo = make_ref(out.view({s.M, s.N})), xi = make_ref(x.view({s.M, s.N}));
  const TensorRef rr = make_ref(rstd.view({s.M}));
  const TensorRef w = param_ref(weight);
  const double e = rms_eps(input, eps);
  launch_on(input, "aten::_fused_rms_norm",
            [xo, xi, rr, w, e] { kernels::rms_norm_forward(xo, rr, xi, w, e); });
  return {out, rstd};
}

std::tuple<at::Tensor, at::Tensor> fused_rms_norm_backward(const at::Tensor& grad_out,
                                                           const at::Tensor& input,
                                                           c10::IntArrayRef normalized_shape,
                                                           const at::Tensor& rstd,
                                                           const std::optional<at::Tensor>& weight,
                                                           std::array<bool, 2> output_mask) {
  NEURON_TRACK_OP("aten::_fused_rms_norm_backward");
  const RowsShape s =
      check_norm("rms_norm_backward", input, normalized_shape, weight, std::nullopt);
  check_device("rms_norm_backward", input.device(), {&grad_out, &rstd});
  at::Tensor gi, gw;
  const bool has_w = weight.has_value() && weight->defined();
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  if (output_mask[1] && has_w) gw = at::empty(weight->sizes(), weight->options());
  if (s.M == 0 || s.N == 0) {
    if (gw.defined()) gw.zero_();
    return {gi, gw};
  }
  const at::Tensor x = input.contiguous(), g = grad_out.contiguous();
  const TensorRef gir = gi.defined() ? make_ref(gi.view({s.M, s.N})) : TensorRef();
  const TensorRef gwr = gw.defined() ? make_ref(gw.view({-1})) : TensorRef();
  const TensorRef gr = make_ref(g.view({s.M, s.N})), xr = make_ref(x.view({s.M, s.N}));
  const TensorRef rr = make_ref(rstd.reshape({s.M}));
  const TensorRef w = param_ref(weight);
  launch_on(input, "aten::_fused_rms_norm_backward",
            [gir, gwr, gr, xr, rr, w] { kernels::rms_norm_backward(gir, gwr, gr, xr, rr, w); });
  return {gi, gw};
}

// rms_norm is composite; for neuron tensors it goes to the fused kernel (with its derivative
// from _fused_rms_norm's autograd formula) instead of five elementwise ops and a reduction.
at::Tensor rms_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                    const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  if (!is_float_dtype(input.scalar_type()) ||
      (weight.has_value() && weight->defined() && weight->scalar_type() != input.scalar_type() &&
       !(weight->scalar_type() == at::kFloat))) {
    TORCH_CHECK(
        false, "rms_norm: expected floating input and weight, got ", input.scalar_type(), " and ",
        weight.has_value() && weight->defined() ? c10::toString(weight->scalar_type()) : "none");
  }
  const auto shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  return std::get<0>(at::_fused_rms_norm(input, shape, weight, eps));
}

// ---- batch norm ----

at::Tensor as_ncs(const at::Tensor& t) {
  TORCH_CHECK(t.dim() >= 2, "batch_norm: expected an input with at least 2 dims, got ", t.dim());
  return t.reshape({t.size(0), t.size(1), -1});
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_impl(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps,
    const char* name) {
  const int64_t C = input.dim() >= 2 ? input.size(1) : 0;
  for (const auto* p : {&weight, &bias, &running_mean, &running_var}) {
    if (p->has_value() && (*p)->defined()) {
      TORCH_CHECK((*p)->numel() == C, "batch_norm: expected weight/bias/running stats with ", C,
                  " elements, got ", (*p)->sizes());
      check_device("batch_norm", input.device(), {&**p});
    }
  }
  if (!training) {
    TORCH_CHECK(running_mean.has_value() && running_mean->defined() && running_var.has_value() &&
                    running_var->defined(),
                "batch_norm: running_mean and running_var must be defined in evaluation mode");
  }
  if (training) {
    int64_t count = input.dim() >= 2 ? input.numel() / std::max<int64_t>(C, 1) : 0;
    TORCH_CHECK(count > 1 || input.numel() == 0,
                "Expected more than 1 value per channel when training, got input size ",
                input.sizes());
  }
  at::Tensor out = at::empty_like(input);
  const auto sd = stat_dtype(input, weight);
  at::Tensor save_mean = at::empty({training ? C : 0}, input.options().dtype(sd));
  at::Tensor save_invstd = at::empty({training ? C : 0}, input.options().dtype(sd));
  if (input.numel() == 0) return {out, save_mean, save_invstd};
  kernels::BatchNormArgs a;
  a.input = make_ref(as_ncs(input));
  a.weight = param_ref(weight);
  a.bias = param_ref(bias);
  a.running_mean = param_ref(running_mean);
  a.running_var = param_ref(running_var);
  a.training = training;
  a.momentum = momentum;
  a.eps = eps;
  const TensorRef o = make_ref(as_ncs(out));
  const TensorRef sm = training ? make_ref(save_mean) : TensorRef(),
                  si = training ? make_ref(save_invstd) : TensorRef();
  launch_on(input, name, [o, sm, si, a] { kernels::batch_norm_forward(o, sm, si, a); });
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  NEURON_TRACK_OP("aten::native_batch_norm");
  if (!is_float_dtype(input.scalar_type()))
    return NEURON_CPU_FALLBACK0(native_batch_norm, input, weight, bias, running_mean, running_var,
                                training, momentum, eps);
  return batch_norm_impl(input, weight, bias, running_mean, running_var, training, momentum, eps,
                         "aten::native_batch_norm");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    bool training, double momentum, double eps) {
  NEURON_TRACK_OP("aten::_native_batch_norm_legit");
  return batch_norm_impl(input, weight, bias, running_mean, running_var, training, momentum, eps,
                         "aten::_native_batch_norm_legit");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  NEURON_TRACK_OP("aten::_native_batch_norm_legit.no_stats");
  return batch_norm_impl(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps,
                         "aten::_native_batch_norm_legit.no_stats");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_training(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const at::Tensor& running_mean,
    const at::Tensor& running_var, double momentum, double eps) {
  NEURON_TRACK_OP("aten::_native_batch_norm_legit_no_training");
  return batch_norm_impl(input, weight, bias, running_mean, running_var, false, momentum, eps,
                         "aten::_native_batch_norm_legit_no_training");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
    bool train, double eps, std::array<bool, 3> output_mask) {
  NEURON_TRACK_OP("aten::native_batch_norm_backward");
  if (!is_float_dtype(input.scalar_type()))
    return NEURON_CPU_FALLBACK0(native_batch_norm_backward, grad_out, input, weight, running_mean,
                                running_var, save_mean, save_invstd, train, eps, output_mask);
  check_device("batch_norm_backward", input.device(), {&grad_out});
  const int64_t C = input.size(1);
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty_like(input);
  const auto pd = weight.has_value() && weight->defined()
                      ? weight->options()
                      : input.options().dtype(stat_dtype(input, weight));
  if (output_mask[1]) gw = at::empty({C}, pd);
  if (output_mask[2]) gb = at::empty({C}, pd);
  if (input.numel() == 0) {
    if (gw.defined()) gw.zero_();
    if (gb.defined()) gb.zero_();
    return {gi, gw, gb};
  }
  if (train) {
    TORCH_CHECK(save_mean.has_value() && save_mean->defined() && save_invstd.has_value() &&
                    save_invstd->defined(),
                "batch_norm_backward: save_mean and save_invstd are required in training mode");
  }
  kernels::BatchNormArgs a;
  a.input = make_ref(as_ncs(input));
  a.weight = param_ref(weight);
  a.running_mean = param_ref(running_mean);
  a.running_var = param_ref(running_var);
  a.training = train;
  a.eps = eps;
  const TensorRef g = make_ref(as_ncs(grad_out)),
                  gir = gi.defined() ? make_ref(as_ncs(gi)) : TensorRef();
  const TensorRef gwr = opt_ref(gw), gbr = opt_ref(gb);
  const TensorRef sm = train ? make_ref(*save_mean) : TensorRef(),
                  si = train ? make_ref(*save_invstd) : TensorRef();
  launch_on(input, "aten::native_batch_norm_backward", [gir, gwr, gbr, g, sm, si, a] {
    kernels::batch_norm_backward(gir, gwr, gbr, g, sm, si, a);
  });
  return {gi, gw, gb};
}

// ---- embedding ----

void check_index_dtype(const char* op, const at::Tensor& idx) {
  TORCH_CHECK(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt, op,
              ": Expected tensor for argument #1 'indices' to have one of the following scalar "
              "types: Long, Int; "
              "but got ",
              idx.scalar_type(), " instead");
}

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices_in,
                     c10::SymInt padding_idx, bool scale_grad_by_freq, bool sparse) {
  NEURON_TRACK_OP("aten::embedding");
  TORCH_CHECK(weight.dim() == 2, "embedding: 'weight' must be 2-D");
  check_index_dtype("embedding", indices_in);
  const at::Tensor indices = to_device(indices_in, weight.device());
  std::vector<int64_t> sizes = indices.sizes().vec();
  sizes.push_back(weight.size(1));
  at::Tensor out = at::empty(sizes, weight.options());
  if (out.numel() == 0 && indices.numel() == 0) return out;
  const at::Tensor flat = indices.reshape({-1});
  const TensorRef o = make_ref(out.view({flat.numel(), weight.size(1)})), w = make_ref(weight),
                  i = make_ref(flat);
  launch_on(weight, "aten::embedding",
            [o, w, i] { kernels::index_select(o, w, 0, i, "embedding"); });
  return out;
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices_in,
                                    c10::SymInt num_weights_s, c10::SymInt padding_idx_s,
                                    bool scale_grad_by_freq) {
  NEURON_TRACK_OP("aten::embedding_dense_backward");
  check_index_dtype("embedding_backward", indices_in);
  const at::Tensor indices = to_device(indices_in, grad_output.device());
  const int64_t num_weights = num_weights_s.expect_int(), padding_idx = padding_idx_s.expect_int();
  const int64_t D = grad_output.size(-1);
  at::Tensor gw = at::empty({num_weights, D}, grad_output.options());
  if (gw.numel() == 0) return gw;
  const at::Tensor flat = indices.reshape({-1});
  const TensorRef g = make_ref(grad_output.reshape({flat.numel(), D})), i = make_ref(flat),
                  o = make_ref(gw);
  launch_on(grad_output, "aten::embedding_dense_backward",
            [o, g, i, padding_idx, scale_grad_by_freq] {
              kernels::embedding_backward(o, g, i, padding_idx, scale_grad_by_freq);
            });
  return gw;
}

at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices_in, double max_norm,
                              double norm_type) {
  NEURON_TRACK_OP("aten::embedding_renorm_");
  TORCH_CHECK(self.dim() == 2, "embedding_renorm_(): 'self' must be 2-D");
  check_index_dtype("embedding_renorm_", indices_in);
  TORCH_CHECK(is_float_dtype(self.scalar_type()),
              "embedding_renorm_(): expected a floating weight, got ", self.scalar_type());
  const at::Tensor indices = to_device(indices_in, self.device()).reshape({-1});
  if (indices.numel() == 0 || self.numel() == 0) return self;
  const TensorRef w = make_ref(self), i = make_ref(indices);
  launch_on(self, "aten::embedding_renorm_",
            [w, i, max_norm, norm_type] { kernels::embedding_renorm(w, i, max_norm, norm_type); });
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("embedding_renorm_", TORCH_FN(embedding_renorm_));
  m.impl("_softmax", TORCH_FN(softmax<false>));
  m.impl("_softmax.out", TORCH_FN(softmax_out<false>));
  m.impl("_log_softmax", TORCH_FN(softmax<true>));
  m.impl("_log_softmax.out", TORCH_FN(softmax_out<true>));
  m.impl("_softmax_backward_data", TORCH_FN(softmax_backward<false>));
  m.impl("_softmax_backward_data.out", TORCH_FN(softmax_backward_out<false>));
  m.impl("_log_softmax_backward_data", TORCH_FN(softmax_backward<true>));
  m.impl("_log_softmax_backward_data.out", TORCH_FN(softmax_backward_out<true>));
  m.impl("nll_loss_forward", TORCH_FN(nll_forward<false>));
  m.impl("nll_loss_forward.output", TORCH_FN(nll_forward_out<false>));
  m.impl("nll_loss_backward", TORCH_FN(nll_backward<false>));
  m.impl("nll_loss_backward.grad_input", TORCH_FN(nll_backward_out<false>));
  m.impl("nll_loss2d_forward", TORCH_FN(nll_forward<true>));
  m.impl("nll_loss2d_forward.output", TORCH_FN(nll_forward_out<true>));
  m.impl("nll_loss2d_backward", TORCH_FN(nll_backward<true>));
  m.impl("nll_loss2d_backward.grad_input", TORCH_FN(nll_backward_out<true>));
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  m.impl("_fused_rms_norm", TORCH_FN(fused_rms_norm));
  m.impl("_fused_rms_norm_backward", TORCH_FN(fused_rms_norm_backward));
  m.impl("rms_norm", TORCH_FN(rms_norm));
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  m.impl("_native_batch_norm_legit", TORCH_FN(batch_norm_legit));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(batch_norm_legit_no_stats));
  m.impl("_native_batch_norm_legit_no_training", TORCH_FN(batch_norm_legit_no_training));
  m.impl("native_batch_norm_backward", TORCH_FN(native_batch_norm_backward));
  m.impl("embedding", TORCH_FN(embedding));
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("rms_norm", TORCH_FN(rms_norm)); }

}  // namespace neuron::torch_glue
