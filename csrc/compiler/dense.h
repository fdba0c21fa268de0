// Dense kernels of compiled programs: GEMM/GEMV, indexing (gather/scatter/index_put),
// convolution and pooling. They take strided TensorRefs (no torch headers) and parallelize over
// the runtime's host pool. Errors (bad index, ...) are ExecError. Attention steps call the
// kernels' attention (kernels/attention.h) directly.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/tensor_ref.h"

namespace neuron::cc::dense {

using kernels::TensorRef;

// c[..., M, N] = a[..., M, K] @ b[..., K, N] (same batch dims, any strides). 16-bit inputs
// accumulate in fp32; c may be fp32 for 16-bit inputs. Small M uses a GEMV micro-kernel.
void matmul(const TensorRef& a, const TensorRef& b, const TensorRef& c);

// out = x[idx...] (advanced indexing): idx[i] indexes x's dim dims[i] (dims increasing).
void index(const TensorRef& x, const TensorRef& out, const std::vector<TensorRef>& idx,
           const std::vector<int>& dims);
// out = self with out[idx...] = values (or += when accumulate). `values` has the shape of the
// indexed result. When inplace, out aliases self and the copy is skipped.
void index_put(const TensorRef& self, const TensorRef& values, const TensorRef& out,
               const std::vector<TensorRef>& idx, const std::vector<int>& dims, bool accumulate,
               bool inplace);
void gather(const TensorRef& x, const TensorRef& index, const TensorRef& out, int dim);
void scatter(const TensorRef& self, const TensorRef& index, const TensorRef& src,
             const TensorRef& out, int dim, bool add, bool inplace);
void slice_scatter(const TensorRef& self, const TensorRef& src, const TensorRef& out, int dim,
                   int64_t start, int64_t end, int64_t step, bool inplace);

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};
// 1-D or 2-D convolution (NC[H]W) by im2col + GEMM in fp32.
void conv(const TensorRef& input, const TensorRef& weight, const TensorRef* bias,
          const TensorRef& out, const ConvParams& p);
// Gradients; null outputs are skipped.
void conv_backward(const TensorRef& grad_out, const TensorRef& input, const TensorRef& weight,
                   const TensorRef* grad_input, const TensorRef* grad_weight,
                   const TensorRef* grad_bias, const ConvParams& p);

struct PoolParams {
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor = 0;
};
// 2-D pooling over the last two dims; indices are flat (h * W + w) like ATen.
void max_pool(const TensorRef& input, const TensorRef& out, const TensorRef& indices,
              const PoolParams& p);
void max_pool_backward(const TensorRef& grad_out, const TensorRef& indices,
                       const TensorRef& grad_in);
void avg_pool(const TensorRef& input, const TensorRef& out, const PoolParams& p);
void avg_pool_backward(const TensorRef& grad_out, const TensorRef& grad_in, const PoolParams& p);

// --- custom ops (torch.library / NKI): native launches registered by name ---
using CustomKernel =
    std::function<void(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                       const std::string& payload)>;
// Registers (or replaces) the native implementation of custom op `target` ("ns::op").
void register_custom_kernel(const std::string& target, CustomKernel fn);
bool has_custom_kernel(const std::string& target);
// Throws ExecError when nothing is registered for `target`.
const CustomKernel& custom_kernel(const std::string& target);

}  // namespace neuron::cc::dense
