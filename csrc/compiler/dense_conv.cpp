// Convolution and 2-D pooling steps as thin adapters to the kernels layer (kernels/conv.h,
// kernels/pool.h, the eager ops' routines): operands that are not dense row-major are staged
// through dense temporaries. Also the custom-kernel registry.
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "dense.h"
#include "error.h"
#include "kernels/conv.h"
#include "kernels/copy.h"
#include "kernels/pool.h"
#include "staging.h"

namespace neuron::cc::dense {

namespace {

using kernels::DType;

void same_dtype(const char* what, DType want, const TensorRef& t) {
  if (t.dtype != want)
    throw ExecError(rt::str(what, ": operands must have one floating dtype (got ",
                            kernels::dtype_name(t.dtype), " and ", kernels::dtype_name(want), ")"));
}

kernels::ConvArgs conv_args(const TensorRef& in, const TensorRef& w, const TensorRef& out,
                            const ConvParams& p) {
  const int nsp = in.ndim - 2;
  if (nsp < 1 || nsp > 3 || w.ndim != in.ndim || out.ndim != in.ndim ||
      p.stride.size() != static_cast<size_t>(nsp) || p.padding.size() != p.stride.size() ||
      p.dilation.size() != p.stride.size())
    throw ExecError("conv: operands must be [N, C, *spatial] with 1 to 3 spatial dims");
  kernels::ConvArgs a;
  a.nsp = nsp;
  a.N = in.sizes[0];
  a.Cin = in.sizes[1];
  a.Cout = w.sizes[0];
  a.groups = p.groups;
  if (a.groups < 1 || a.Cin % a.groups != 0 || a.Cout % a.groups != 0 ||
      w.sizes[1] * a.groups != a.Cin || out.sizes[1] != a.Cout || out.sizes[0] != a.N)
    throw ExecError("conv: channel counts do not match the groups");
  for (int i = 0; i < nsp; ++i) {
    a.in[i] = in.sizes[2 + i];
    a.out[i] = out.sizes[2 + i];
    a.k[i] = w.sizes[2 + i];
    a.stride[i] = p.stride[static_cast<size_t>(i)];
    a.pad[i] = p.padding[static_cast<size_t>(i)];
    a.dil[i] = p.dilation[static_cast<size_t>(i)];
  }
  a.dtype = in.dtype;
  same_dtype("conv", in.dtype, w);
  same_dtype("conv", in.dtype, out);
  return a;
}

// Every element of t = 0.
void zero(const TensorRef& t) {
  if (t.numel() == 0) return;
  const uint64_t z = 0;
  kernels::fill(t, &z);
}

kernels::Pool2dArgs pool_args(const TensorRef& in, const TensorRef& out, const PoolParams* p) {
  const int r = in.ndim;
  if (r < 2 || out.ndim != r) throw ExecError("pool: operands must have rank >= 2");
  kernels::Pool2dArgs a;
  a.planes = 1;
  for (int d = 0; d + 2 < r; ++d) {
    if (in.sizes[d] != out.sizes[d]) throw ExecError("pool: leading dims differ");
    a.planes *= in.sizes[d];
  }
  a.H = in.sizes[r - 2];
  a.W = in.sizes[r - 1];
  a.OH = out.sizes[r - 2];
  a.OW = out.sizes[r - 1];
  if (p) {
    a.kH = p->kernel.at(0);
    a.kW = p->kernel.at(1);
    a.sH = p->stride.at(0);
    a.sW = p->stride.at(1);
    a.pH = p->padding.at(0);
    a.pW = p->padding.at(1);
    if (!p->dilation.empty()) {
      a.dH = p->dilation.at(0);
      a.dW = p->dilation.at(1);
    }
  }
  a.dtype = in.dtype;
  same_dtype("pool", in.dtype, out);
  return a;
}

void int64_indices(const TensorRef& t) {
  if (t.dtype != DType::Int64) throw ExecError("max_pool: indices must be int64");
}

}  // namespace

void conv(const TensorRef& input, const TensorRef& weight, const TensorRef* bias,
          const TensorRef& out, const ConvParams& p) {
  const kernels::ConvArgs a = conv_args(input, weight, out, p);
  if (out.numel() == 0) return;
  if (bias) same_dtype("conv", input.dtype, *bias);
  if (input.numel() == 0 || weight.numel() == 0) {  // empty reduction: the bias alone
    zero(out);
    if (bias) {
      TensorRef b = *bias;
      b.ndim = out.ndim;
      for (int d = 0; d < out.ndim; ++d) {
        b.sizes[d] = out.sizes[d];
        b.strides[d] = d == 1 ? bias->strides[0] : 0;
      }
      kernels::copy(out, b);
    }
    return;
  }
  Staged x(input), w(weight), y(out);
  std::optional<Staged> b;
  if (bias) b.emplace(*bias);
  kernels::conv_forward(a, x.in(), w.in(), b ? b->in() : nullptr, y.out());
  y.done();
}

void conv_backward(const TensorRef& grad_out, const TensorRef& input, const TensorRef& weight,
                   const TensorRef* grad_input, const TensorRef* grad_weight,
                   const TensorRef* grad_bias, const ConvParams& p) {
  const kernels::ConvArgs a = conv_args(input, weight, grad_out, p);
  for (const TensorRef* t : {grad_input, grad_weight, grad_bias})
    if (t) same_dtype("conv_backward", input.dtype, *t);
  if (grad_out.numel() == 0) {
    for (const TensorRef* t : {grad_input, grad_weight, grad_bias})
      if (t) zero(*t);
    return;
  }
  if (input.numel() == 0 || weight.numel() == 0)
    throw ExecError("conv_backward: empty input or weight with a non-empty gradient");
  Staged g(grad_out), x(input), w(weight);
  std::optional<Staged> gi, gw, gb;
  if (grad_input) gi.emplace(*grad_input);
  if (grad_weight) gw.emplace(*grad_weight);
  if (grad_bias) gb.emplace(*grad_bias);
  kernels::conv_backward(a, g.in(), x.in(), w.in(), gi ? gi->out() : nullptr,
                         gw ? gw->out() : nullptr, gb ? gb->out() : nullptr);
  for (std::optional<Staged>* s : {&gi, &gw, &gb})
    if (*s) (*s)->done();
}

void max_pool(const TensorRef& input, const TensorRef& out, const TensorRef& indices,
              const PoolParams& p) {
  const kernels::Pool2dArgs a = pool_args(input, out, &p);
  int64_indices(indices);
  if (out.numel() == 0) return;
  Staged x(input), y(out), ix(indices);
  kernels::max_pool2d_forward(a, x.in(), y.out(), static_cast<int64_t*>(ix.out()));
  y.done();
  ix.done();
}

void max_pool_backward(const TensorRef& grad_out, const TensorRef& indices,
                       const TensorRef& grad_in) {
  const kernels::Pool2dArgs a = pool_args(grad_in, grad_out, nullptr);
  int64_indices(indices);
  if (grad_in.numel() == 0) return;
  Staged g(grad_out), ix(indices), gi(grad_in);
  kernels::max_pool2d_backward(a, g.in(), static_cast<const int64_t*>(ix.in()), gi.out());
  gi.done();
}

void avg_pool(const TensorRef& input, const TensorRef& out, const PoolParams& p) {
  const kernels::Pool2dArgs a = pool_args(input, out, &p);
  if (out.numel() == 0) return;
  Staged x(input), y(out);
  kernels::avg_pool2d_forward(a, p.count_include_pad, p.divisor, x.in(), y.out());
  y.done();
}

void avg_pool_backward(const TensorRef& grad_out, const TensorRef& grad_in, const PoolParams& p) {
  const kernels::Pool2dArgs a = pool_args(grad_in, grad_out, &p);
  if (grad_in.numel() == 0) return;
  Staged g(grad_out), gi(grad_in);
  kernels::avg_pool2d_backward(a, p.count_include_pad, p.divisor, g.in(), gi.out());
  gi.done();
}

// ---------------------------------------------------------------------------------------

namespace {
std::mutex g_custom_mu;
std::map<std::string, CustomKernel>& custom_table() {
  static std::map<std::string, CustomKernel> t;
  return t;
}
}  // namespace

void register_custom_kernel(const std::string& target, CustomKernel fn) {
  std::lock_guard<std::mutex> lock(g_custom_mu);
  custom_table()[target] = std::move(fn);
}

bool has_custom_kernel(const std::string& target) {
  std::lock_guard<std::mutex> lock(g_custom_mu);
  return custom_table().count(target) != 0;
}

const CustomKernel& custom_kernel(const std::string& target) {
  std::lock_guard<std::mutex> lock(g_custom_mu);
  auto it = custom_table().find(target);
  if (it == custom_table().end())
    throw ExecError(
        rt::str("custom op '", target, "' has no native kernel registered in this process"));
  return it->second;
}

}  // namespace neuron::cc::dense
