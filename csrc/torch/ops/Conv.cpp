// Convolution and pooling on the kernels of conv.h and pool.h: convolution_overrideable and its
// backward (1-3 spatial dims, stride/padding/dilation/groups, transposed; conv1d/2d/3d and
// conv_transpose reach it through aten::convolution), max_pool2d_with_indices, avg_pool2d and
// _adaptive_avg_pool2d with their backward ops.
#include "kernels/conv.h"

#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "../OpTracker.h"
#include "EwLaunch.h"
#include "OpUtils.h"
#include "kernels/pool.h"

namespace neuron::torch_glue {
namespace {

// ---- convolution ----

std::vector<int64_t> expand_param(c10::IntArrayRef p, int64_t n, const char* what) {
  TORCH_CHECK(p.size() == 1 || static_cast<int64_t>(p.size()) == n, "convolution: expected ", what,
              " to have 1 or ", n, " elements, got ", p.size());
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    r[static_cast<size_t>(i)] = p.size() == 1 ? p[0] : p[static_cast<size_t>(i)];
  return r;
}

kernels::ConvArgs conv_args(const at::Tensor& input, const at::Tensor& weight,
                            c10::IntArrayRef stride, c10::IntArrayRef padding,
                            c10::IntArrayRef dilation, bool transposed,
                            c10::IntArrayRef output_padding, int64_t groups) {
  const char* op = "convolution";
  TORCH_CHECK(input.dim() >= 3 && input.dim() <= 5, op,
              ": expected a 3-d, 4-d or 5-d input (batch, channels, "
              "spatial...), got ",
              input.dim(), "-d");
  TORCH_CHECK(weight.dim() == input.dim(), op, ": weight must have ", input.dim(), " dims, got ",
              weight.dim());
  TORCH_CHECK(is_float_dtype(input.scalar_type()), op, ": unsupported dtype ", input.scalar_type());
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), op, ": Input type (",
              input.scalar_type(), ") and weight type (", weight.scalar_type(),
              ") should be the same");
  TORCH_CHECK(groups > 0, op, ": non-positive groups is not supported");
  check_device(op, input.device(), {&weight});
  const int nsp = static_cast<int>(input.dim() - 2);
  kernels::ConvArgs a;
  a.nsp = nsp;
  a.N = input.size(0);
  a.groups = groups;
  a.transposed = transposed;
  a.dtype = to_kernel_dtype(input.scalar_type());
  const auto s = expand_param(stride, nsp, "stride"), p = expand_param(padding, nsp, "padding"),
             d = expand_param(dilation, nsp, "dilation");
  const auto op_pad = transposed ? expand_param(output_padding, nsp, "output_padding")
                                 : std::vector<int64_t>(nsp, 0);
  if (!transposed) {
    a.Cin = input.size(1);
    a.Cout = weight.size(0);
    TORCH_CHECK(weight.size(1) * groups == a.Cin, op, ": expected input with ",
                weight.size(1) * groups, " channels (weight ", weight.sizes(), ", groups ", groups,
                "), but got ", a.Cin, " channels");
    TORCH_CHECK(a.Cout % groups == 0, op, ": out channels (", a.Cout,
                ") must be divisible by groups (", groups, ")");
  } else {
    a.Cin = input.size(1);
    TORCH_CHECK(weight.size(0) == a.Cin, op, ": expected input with ", weight.size(0),
                " channels, got ", a.Cin);
    TORCH_CHECK(a.Cin % groups == 0, op, ": in channels (", a.Cin,
                ") must be divisible by groups (", groups, ")");
    a.Cout = weight.size(1) * groups;
  }
  for (int i = 0; i < nsp; ++i) {
    TORCH_CHECK(s[i] > 0 && d[i] > 0 && p[i] >= 0, op,
                ": stride and dilation must be positive, padding non-negative");
    a.in[i] = input.size(2 + i);
    a.k[i] = weight.size(2 + i);
    a.stride[i] = s[i];
    a.pad[i] = p[i];
    a.dil[i] = d[i];
    if (!transposed) {
      const int64_t eff = d[i] * (a.k[i] - 1) + 1;
      TORCH_CHECK(a.in[i] + 2 * p[i] >= eff, op, ": Calculated padded input size per channel: (",
                  a.in[i] + 2 * p[i], "). Kernel size: (", eff,
                  "). Kernel size can't be greater than actual input size");
      a.out[i] = (a.in[i] + 2 * p[i] - eff) / s[i] + 1;
    } else {
      a.out[i] = (a.in[i] - 1) * s[i] - 2 * p[i] + d[i] * (a.k[i] - 1) +
                 op_pad[static_cast<size_t>(i)] + 1;
      TORCH_CHECK(a.out[i] > 0, op, ": the transposed convolution's output size is not positive");
    }
  }
  return a;
}

std::vector<int64_t> out_sizes(const kernels::ConvArgs& a) {
  std::vector<int64_t> s{a.N, a.Cout};
  for (int i = 0; i < a.nsp; ++i) s.push_back(a.out[i]);
  return s;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups) {
  if (!is_float_dtype(input.scalar_type())) {
    // Integer convolutions (which CPU PyTorch supports) run on the host; CPU has no
    // convolution_overrideable kernel, so call the generic op there.
    record_fallback("aten::convolution_overrideable");
    std::optional<at::Tensor> b;
    if (bias.has_value() && bias->defined()) b = bias->cpu();
    return at::convolution(input.cpu(), weight.cpu(), b, stride, padding, dilation, transposed,
                           output_padding, groups)
        .to(input.device());
  }
  NEURON_TRACK_OP("aten::convolution_overrideable");
  const kernels::ConvArgs a =
      conv_args(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  at::Tensor out = at::empty(out_sizes(a), input.options());
  at::Tensor b;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == a.Cout, "convolution: expected bias with ", a.Cout,
                " elements, got ", bias->sizes());
    check_device("convolution", input.device(), {&*bias});
    b = bias->to(input.scalar_type()).contiguous();
  }
  if (out.numel() == 0) return out;
  if (input.numel() == 0 || weight.numel() == 0) {  // empty reduction: bias only
    if (b.defined()) {
      std::vector<int64_t> shape(static_cast<size_t>(out.dim()), 1);
      shape[1] = a.Cout;
      out.copy_(b.view(shape).expand(out.sizes()));
    } else {
      out.zero_();
    }
    return out;
  }
  const at::Tensor x = input.contiguous(), w = weight.contiguous();
  const void* xp = x.data_ptr();
  const void* wp = w.data_ptr();
  const void* bp = b.defined() ? b.data_ptr() : nullptr;
  void* op = out.data_ptr();
  launch_on(input, "aten::convolution_overrideable",
            [a, xp, wp, bp, op] { kernels::conv_forward(a, xp, wp, bp, op); });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  NEURON_TRACK_OP("aten::convolution_backward_overrideable");
  const kernels::ConvArgs a =
      conv_args(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  TORCH_CHECK(grad_output.sizes().equals(out_sizes(a)),
              "convolution_backward: grad_output has shape ", grad_output.sizes(), ", expected ",
              c10::IntArrayRef(out_sizes(a)));
  check_device("convolution_backward", input.device(), {&grad_output});
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  if (output_mask[1]) gw = at::empty(weight.sizes(), weight.options());
  if (output_mask[2]) gb = at::empty({a.Cout}, grad_output.options());
  if (grad_output.numel() == 0 || input.numel() == 0 || weight.numel() == 0) {
    for (at::Tensor* t : {&gi, &gw, &gb})
      if (t->defined()) t->zero_();
    if (gb.defined() && grad_output.numel() > 0) {
      std::vector<int64_t> dims{0};
      for (int i = 0; i < a.nsp; ++i) dims.push_back(2 + i);
      gb = grad_output.sum(dims);
    }
    return {gi, gw, gb};
  }
  const at::Tensor x = input.contiguous(), w = weight.contiguous();
  const at::Tensor g = grad_output.scalar_type() == input.scalar_type()
                           ? grad_output.contiguous()
                           : grad_output.to(input.scalar_type()).contiguous();
  const void* gp = g.data_ptr();
  const void* xp = x.data_ptr();
  const void* wp = w.data_ptr();
  void* gip = gi.defined() && gi.numel() ? gi.data_ptr() : nullptr;
  void* gwp = gw.defined() && gw.numel() ? gw.data_ptr() : nullptr;
  void* gbp = gb.defined() && gb.numel() ? gb.data_ptr() : nullptr;
  launch_on(input, "aten::convolution_backward_overrideable", [a, gp, xp, wp, gip, gwp, gbp] {
    kernels::conv_backward(a, gp, xp, wp, gip, gwp, gbp);
  });
  return {gi, gw, gb};
}

// ---- pooling ----

int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct PoolShape {
  kernels::Pool2dArgs a;
  std::vector<int64_t> out_sizes;
};

PoolShape pool_shape(const char* op, const at::Tensor& self, c10::IntArrayRef kernel,
                     c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                     bool ceil_mode) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, op,
              ": Expected 3D or 4D (batch mode) tensor for input, got ", self.dim(), "D");
  TORCH_CHECK(kernel.size() == 1 || kernel.size() == 2, op,
              ": kernel_size must either be a single int, or a tuple of "
              "two ints");
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 2, op,
              ": stride must either be omitted, a "
              "single int, or a tuple of two ints");
  TORCH_CHECK(padding.size() == 1 || padding.size() == 2, op,
              ": padding must either be a single int, or a tuple of "
              "two ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 2, op,
              ": dilation must be either a single int, or a tuple "
              "of two ints");
  TORCH_CHECK(is_float_dtype(self.scalar_type()), op, ": unsupported dtype ", self.scalar_type());
  kernels::Pool2dArgs a;
  a.kH = kernel[0];
  a.kW = kernel.size() == 2 ? kernel[1] : kernel[0];
  a.sH = stride.empty() ? a.kH : stride[0];
  a.sW = stride.empty() ? a.kW : (stride.size() == 2 ? stride[1] : stride[0]);
  a.pH = padding[0];
  a.pW = padding.size() == 2 ? padding[1] : padding[0];
  a.dH = dilation[0];
  a.dW = dilation.size() == 2 ? dilation[1] : dilation[0];
  TORCH_CHECK(a.kH > 0 && a.kW > 0, op, ": kernel size should be greater than zero");
  TORCH_CHECK(a.sH > 0 && a.sW > 0, op, ": stride should be greater than zero");
  TORCH_CHECK(a.dH > 0 && a.dW > 0, op, ": dilation should be greater than zero");
  TORCH_CHECK(a.pH >= 0 && a.pW >= 0 && a.pH <= ((a.kH - 1) * a.dH + 1) / 2 &&
                  a.pW <= ((a.kW - 1) * a.dW + 1) / 2,
              op, ": pad should be at most half of effective kernel size, but got pad=", a.pH,
              ", kernel_size=", a.kH, " and dilation=", a.dH);
  const int64_t n = self.dim() == 4 ? self.size(0) : 1, c = self.size(-3);
  a.H = self.size(-2);
  a.W = self.size(-1);
  a.OH = pool_out(a.H, a.kH, a.pH, a.sH, a.dH, ceil_mode);
  a.OW = pool_out(a.W, a.kW, a.pW, a.sW, a.dW, ceil_mode);
  TORCH_CHECK(a.OH > 0 && a.OW > 0, op, ": Given input size: (", c, "x", a.H, "x", a.W,
              "). Calculated output size: (", c, "x", a.OH, "x", a.OW,
              "). Output size is too small");
  a.planes = n * c;
  a.dtype = to_kernel_dtype(self.scalar_type());
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[sizes.size() - 2] = a.OH;
  sizes[sizes.size() - 1] = a.OW;
  return {a, sizes};
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_out_impl(const at::Tensor& self,
                                                         c10::IntArrayRef kernel,
                                                         c10::IntArrayRef stride,
                                                         c10::IntArrayRef padding,
                                                         c10::IntArrayRef dilation, bool ceil_mode,
                                                         at::Tensor& out, at::Tensor& indices) {
  const PoolShape s = pool_shape("max_pool2d", self, kernel, stride, padding, dilation, ceil_mode);
  prepare_out("max_pool2d", out, s.out_sizes, self.scalar_type(), self.device());
  prepare_out("max_pool2d", indices, s.out_sizes, at::kLong, self.device());
  if (out.numel() == 0) return {out, indices};
  const at::Tensor x = self.contiguous();
  const bool direct = out.is_contiguous() && indices.is_contiguous();
  at::Tensor o = direct ? out : at::empty(s.out_sizes, out.options());
  at::Tensor ind = direct ? indices : at::empty(s.out_sizes, indices.options());
  const kernels::Pool2dArgs a = s.a;
  const void* xp = x.data_ptr();
  void* op = o.data_ptr();
  int64_t* ip = ind.data_ptr<int64_t>();
  launch_on(self, "aten::max_pool2d_with_indices",
            [a, xp, op, ip] { kernels::max_pool2d_forward(a, xp, op, ip); });
  if (!direct) {
    out.copy_(o);
    indices.copy_(ind);
  }
  return {out, indices};
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(
    const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  if (!is_float_dtype(self.scalar_type()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::max_pool2d_with_indices>::call(self, kernel, stride, padding, dilation, ceil_mode);
  NEURON_TRACK_OP("aten::max_pool2d_with_indices");
  at::Tensor out = at::empty({0}, self.options()),
             ind = at::empty({0}, self.options().dtype(at::kLong));
  max_pool2d_out_impl(self, kernel, stride, padding, dilation, ceil_mode, out, ind);
  return {out, ind};
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_with_indices_out(
    const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode, at::Tensor& out,
    at::Tensor& indices) {
  if (!is_float_dtype(self.scalar_type()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::max_pool2d_with_indices_out>::call(self, kernel, stride, padding, dilation, ceil_mode, out, indices);
  NEURON_TRACK_OP("aten::max_pool2d_with_indices.out");
  return max_pool2d_out_impl(self, kernel, stride, padding, dilation, ceil_mode, out, indices);
}

at::Tensor& max_pool2d_backward_out_impl(const at::Tensor& grad_output, const at::Tensor& self,
                                         c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                         c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                         bool ceil_mode, const at::Tensor& indices,
                                         at::Tensor& grad_input) {
  const PoolShape s =
      pool_shape("max_pool2d_backward", self, kernel, stride, padding, dilation, ceil_mode);
  TORCH_CHECK(grad_output.sizes().equals(s.out_sizes) && indices.sizes().equals(s.out_sizes),
              "max_pool2d_backward: grad_output and indices must have shape ",
              c10::IntArrayRef(s.out_sizes));
  TORCH_CHECK(indices.scalar_type() == at::kLong, "max_pool2d_backward: expected int64 indices");
  check_device("max_pool2d_backward", self.device(), {&grad_output, &indices});
  prepare_out("max_pool2d_backward", grad_input, self.sizes(), self.scalar_type(), self.device());
  if (grad_input.numel() == 0) return grad_input;
  const at::Tensor g = grad_output.to(self.scalar_type()).contiguous(), ind = indices.contiguous();
  at::Tensor gi = grad_input.is_contiguous() ? grad_input : at::empty(self.sizes(), self.options());
  const kernels::Pool2dArgs a = s.a;
  const void* gp = g.data_ptr();
  const int64_t* ip = ind.data_ptr<int64_t>();
  void* gip = gi.data_ptr();
  launch_on(self, "aten::max_pool2d_with_indices_backward",
            [a, gp, ip, gip] { kernels::max_pool2d_backward(a, gp, ip, gip); });
  if (!gi.is_same(grad_input)) grad_input.copy_(gi);
  return grad_input;
}

at::Tensor max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               c10::IntArrayRef kernel, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode,
                               const at::Tensor& indices) {
  NEURON_TRACK_OP("aten::max_pool2d_with_indices_backward");
  at::Tensor gi = at::empty(self.sizes(), self.options());
  return max_pool2d_backward_out_impl(grad_output, self, kernel, stride, padding, dilation,
                                      ceil_mode, indices, gi);
}

at::Tensor& max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                    c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool ceil_mode, const at::Tensor& indices,
                                    at::Tensor& grad_input) {
  NEURON_TRACK_OP("aten::max_pool2d_with_indices_backward.grad_input");
  return max_pool2d_backward_out_impl(grad_output, self, kernel, stride, padding, dilation,
                                      ceil_mode, indices, grad_input);
}

at::Tensor& avg_pool2d_out_impl(const at::Tensor& self, c10::IntArrayRef kernel,
                                c10::IntArrayRef stride, c10::IntArrayRef padding, bool ceil_mode,
                                bool count_include_pad, std::optional<int64_t> divisor_override,
                                at::Tensor& out) {
  TORCH_CHECK(!divisor_override.has_value() || *divisor_override != 0,
              "avg_pool2d: divisor must be not zero");
  const PoolShape s = pool_shape("avg_pool2d", self, kernel, stride, padding, {1}, ceil_mode);
  prepare_out("avg_pool2d", out, s.out_sizes, self.scalar_type(), self.device());
  if (out.numel() == 0) return out;
  const at::Tensor x = self.contiguous();
  at::Tensor o = out.is_contiguous() ? out : at::empty(s.out_sizes, out.options());
  const kernels::Pool2dArgs a = s.a;
  const int64_t div = divisor_override.value_or(0);
  const void* xp = x.data_ptr();
  void* op = o.data_ptr();
  launch_on(self, "aten::avg_pool2d", [a, count_include_pad, div, xp, op] {
    kernels::avg_pool2d_forward(a, count_include_pad, div, xp, op);
  });
  if (!o.is_same(out)) out.copy_(o);
  return out;
}

at::Tensor avg_pool2d(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                      c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor_override) {
  if (!is_float_dtype(self.scalar_type()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::avg_pool2d>::call(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override);
  NEURON_TRACK_OP("aten::avg_pool2d");
  at::Tensor out = at::empty({0}, self.options());
  return avg_pool2d_out_impl(self, kernel, stride, padding, ceil_mode, count_include_pad,
                             divisor_override, out);
}

at::Tensor& avg_pool2d_out(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                           c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override, at::Tensor& out) {
  if (!is_float_dtype(self.scalar_type()))
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::avg_pool2d_out>::call(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, out);
  NEURON_TRACK_OP("aten::avg_pool2d.out");
  return avg_pool2d_out_impl(self, kernel, stride, padding, ceil_mode, count_include_pad,
                             divisor_override, out);
}

at::Tensor& avg_pool2d_backward_out_impl(const at::Tensor& grad_output, const at::Tensor& self,
                                         c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                         c10::IntArrayRef padding, bool ceil_mode,
                                         bool count_include_pad,
                                         std::optional<int64_t> divisor_override,
                                         at::Tensor& grad_input) {
  TORCH_CHECK(!divisor_override.has_value() || *divisor_override != 0,
              "avg_pool2d: divisor must be not zero");
  const PoolShape s =
      pool_shape("avg_pool2d_backward", self, kernel, stride, padding, {1}, ceil_mode);
  TORCH_CHECK(grad_output.sizes().equals(s.out_sizes),
              "avg_pool2d_backward: grad_output must have shape ", c10::IntArrayRef(s.out_sizes),
              ", got ", grad_output.sizes());
  check_device("avg_pool2d_backward", self.device(), {&grad_output});
  prepare_out("avg_pool2d_backward", grad_input, self.sizes(), self.scalar_type(), self.device());
  if (grad_input.numel() == 0) return grad_input;
  const at::Tensor g = grad_output.to(self.scalar_type()).contiguous();
  at::Tensor gi = grad_input.is_contiguous() ? grad_input : at::empty(self.sizes(), self.options());
  const kernels::Pool2dArgs a = s.a;
  const int64_t div = divisor_override.value_or(0);
  const void* gp = g.data_ptr();
  void* gip = gi.data_ptr();
  launch_on(self, "aten::avg_pool2d_backward", [a, count_include_pad, div, gp, gip] {
    kernels::avg_pool2d_backward(a, count_include_pad, div, gp, gip);
  });
  if (!gi.is_same(grad_input)) grad_input.copy_(gi);
  return grad_input;
}

at::Tensor avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               c10::IntArrayRef kernel, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor_override) {
  NEURON_TRACK_OP("aten::avg_pool2d_backward");
  at::Tensor gi = at::empty(self.sizes(), self.options());
  return avg_pool2d_backward_out_impl(grad_output, self, kernel, stride, padding, ceil_mode,
                                      count_include_pad, divisor_override, gi);
}

at::Tensor& avg_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                    c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, bool ceil_mode,
                                    bool count_include_pad, std::optional<int64_t> divisor_override,
                                    at::Tensor& grad_input) {
  NEURON_TRACK_OP("aten::avg_pool2d_backward.grad_input");
  return avg_pool2d_backward_out_impl(grad_output, self, kernel, stride, padding, ceil_mode,
                                      count_include_pad, divisor_override, grad_input);
}

kernels::Pool2dArgs adaptive_args(const at::Tensor& self, int64_t OH, int64_t OW) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4,
              "adaptive_avg_pool2d: Expected 3D or 4D tensor, but got ", self.sizes());
  TORCH_CHECK(is_float_dtype(self.scalar_type()), "adaptive_avg_pool2d: unsupported dtype ",
              self.scalar_type());
  for (int64_t i = 1; i < self.dim(); ++i)
    TORCH_CHECK(self.size(i) > 0,
                "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
                "dimensions, but input has sizes ",
                self.sizes(), " with dimension ", i, " being empty");
  TORCH_CHECK(OH >= 0 && OW >= 0, "adaptive_avg_pool2d: output_size must be non-negative");
  kernels::Pool2dArgs a;
  a.planes = (self.dim() == 4 ? self.size(0) : 1) * self.size(-3);
  a.H = self.size(-2);
  a.W = self.size(-1);
  a.OH = OH;
  a.OW = OW;
  a.dtype = to_kernel_dtype(self.scalar_type());
  return a;
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  NEURON_TRACK_OP("aten::_adaptive_avg_pool2d");
  TORCH_CHECK(output_size.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  const kernels::Pool2dArgs a =
      adaptive_args(self, output_size[0].expect_int(), output_size[1].expect_int());
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[sizes.size() - 2] = a.OH;
  sizes[sizes.size() - 1] = a.OW;
  at::Tensor out = at::empty(sizes, self.options());
  if (out.numel() == 0) return out;
  const at::Tensor x = self.contiguous();
  const void* xp = x.data_ptr();
  void* op = out.data_ptr();
  launch_on(self, "aten::_adaptive_avg_pool2d",
            [a, xp, op] { kernels::adaptive_avg_pool2d_forward(a, xp, op); });
  return out;
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  NEURON_TRACK_OP("aten::_adaptive_avg_pool2d_backward");
  const kernels::Pool2dArgs a = adaptive_args(self, grad_output.size(-2), grad_output.size(-1));
  check_device("adaptive_avg_pool2d_backward", self.device(), {&grad_output});
  at::Tensor gi = at::empty(self.sizes(), self.options());
  if (gi.numel() == 0) return gi;
  const at::Tensor g = grad_output.to(self.scalar_type()).contiguous();
  const void* gp = g.data_ptr();
  void* gip = gi.data_ptr();
  launch_on(self, "aten::_adaptive_avg_pool2d_backward",
            [a, gp, gip] { kernels::adaptive_avg_pool2d_backward(a, gp, gip); });
  return gi;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices));
  m.impl("max_pool2d_with_indices.out", TORCH_FN(max_pool2d_with_indices_out));
  m.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_backward));
  m.impl("max_pool2d_with_indices_backward.grad_input", TORCH_FN(max_pool2d_backward_out));
  m.impl("avg_pool2d", TORCH_FN(avg_pool2d));
  m.impl("avg_pool2d.out", TORCH_FN(avg_pool2d_out));
  m.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward));
  m.impl("avg_pool2d_backward.grad_input", TORCH_FN(avg_pool2d_backward_out));
  m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d));
  m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward));
}

}  // namespace neuron::torch_glue
