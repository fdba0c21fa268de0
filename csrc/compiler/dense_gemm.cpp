// Batched strided matmul: GEMV micro-kernel for small M with row-major weights (decode), the
// kernels layer's GEMM (host BLAS) otherwise.
#include <algorithm>
#include <vector>

#include "dense.h"
#include "error.h"
#include "kernels/gemm.h"
#include "runtime/thread_pool.h"
#include "vm_loops.h"

namespace neuron::cc::dense {

namespace {

using kernels::DType;

struct BatchDim {
  int64_t size, sa, sb, sc;
};

}  // namespace

void matmul(const TensorRef& a, const TensorRef& b, const TensorRef& c) {
  const int r = a.ndim;
  if (r < 2 || b.ndim != r || c.ndim != r)
    throw ExecError("matmul: operands must have the same rank >= 2");
  const int64_t m = a.sizes[r - 2], k = a.sizes[r - 1], n = b.sizes[r - 1];
  if (b.sizes[r - 2] != k || c.sizes[r - 2] != m || c.sizes[r - 1] != n)
    throw ExecError(
        rt::str("matmul: shapes do not match (", m, "x", k, " @ ", b.sizes[r - 2], "x", n, ")"));
  if (m == 0 || n == 0) return;
  std::vector<BatchDim> bd;
  for (int d = 0; d < r - 2; ++d) {
    if (a.sizes[d] != b.sizes[d] || a.sizes[d] != c.sizes[d])
      throw ExecError("matmul: batch dims differ");
    if (a.sizes[d] == 1) continue;
    BatchDim x{a.sizes[d], a.strides[d], b.strides[d], c.strides[d]};
    if (!bd.empty()) {
      BatchDim& p = bd.back();
      if (p.sa == x.sa * x.size && p.sb == x.sb * x.size && p.sc == x.sc * x.size) {
        p = BatchDim{p.size * x.size, x.sa, x.sb, x.sc};
        continue;
      }
    }
    bd.push_back(x);
  }
  for (const BatchDim& x : bd)
    if (x.size == 0) return;
  const int64_t ea = static_cast<int64_t>(kernels::element_size(a.dtype));
  const int64_t ec = static_cast<int64_t>(kernels::element_size(c.dtype));
  const BatchDim last = bd.empty() ? BatchDim{1, 0, 0, 0} : bd.back();
  const size_t outer_dims = bd.empty() ? 0 : bd.size() - 1;
  std::vector<int64_t> idx(outer_dims, 0);
  while (true) {
    int64_t oa = 0, ob = 0, oc = 0;
    for (size_t d = 0; d < outer_dims; ++d) {
      oa += idx[d] * bd[d].sa;
      ob += idx[d] * bd[d].sb;
      oc += idx[d] * bd[d].sc;
    }
    const char* ap = static_cast<const char*>(a.data) + oa * ea;
    const char* bp = static_cast<const char*>(b.data) + ob * ea;
    char* cp = static_cast<char*>(c.data) + oc * ec;
    {
      kernels::GemmProblem p;
      p.batch = last.size;
      p.m = m;
      p.n = n;
      p.k = k;
      p.a = ap;
      p.a_bs = last.sa;
      p.a_rs = a.strides[r - 2];
      p.a_cs = a.strides[r - 1];
      p.b = bp;
      p.b_bs = last.sb;
      p.b_rs = b.strides[r - 2];
      p.b_cs = b.strides[r - 1];
      p.c = cp;
      p.c_bs = last.sc;
      p.c_rs = c.strides[r - 2];
      p.c_cs = c.strides[r - 1];
      p.in_dtype = a.dtype;
      p.out_dtype = c.dtype;
      try {
        kernels::gemm(p);
      } catch (const std::invalid_argument& e) {
        throw ExecError(rt::str("matmul: ", e.what()));
      }
    }
    size_t d = outer_dims;
    while (d > 0) {
      --d;
      if (++idx[d] < bd[d].size) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (outer_dims == 0) return;
  }
}

}  // namespace neuron::cc::dense
