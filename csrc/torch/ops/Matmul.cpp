// Matrix products on kernels::gemm: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, vdot,
// addr, their out= and in-place forms, and the mixed-precision `.dtype` overloads. `matmul`
// and `linear` are composite and reach these through views (t, expand, _unsafe_view):
// transposed or otherwise strided operands go to the kernel by strides, never copied here.
// Complex and bool inputs use the CPU fallback.
#include <ATen/Operators.h>
#include <torch/library.h>

#include "../DeviceTime.h"
#include "OpUtils.h"
#include "kernels/copy.h"
#include "kernels/gemm.h"

namespace neuron::torch_glue {
namespace {

using kernels::GemmProblem;
using kernels::TensorRef;

bool native_dtype(at::ScalarType t) {
  return is_float_dtype(t) || t == at::kByte || t == at::kChar || t == at::kShort ||
         t == at::kInt || t == at::kLong;
}

// A [batch, rows, cols] view of a 1-d, 2-d or 3-d operand, given as sizes and strides (a 1-d
// vector is a column [n, 1] or a row [1, n]).
struct Mat {
  const void* data;
  int64_t bs, rs, cs;
};
Mat mat3(const at::Tensor& t) {
  return {t.numel() ? t.data_ptr() : nullptr, t.stride(0), t.stride(1), t.stride(2)};
}
Mat mat2(const at::Tensor& t) {
  return {t.numel() ? t.data_ptr() : nullptr, 0, t.stride(0), t.stride(1)};
}
Mat column(const at::Tensor& t) { return {t.numel() ? t.data_ptr() : nullptr, 0, t.stride(0), 1}; }
Mat row(const at::Tensor& t) { return {t.numel() ? t.data_ptr() : nullptr, 0, 1, t.stride(0)}; }
Mat scalar(const at::Tensor& t) { return {t.numel() ? t.data_ptr() : nullptr, 0, 1, 1}; }

GemmProblem problem(int64_t batch, int64_t m, int64_t n, int64_t k, const Mat& a, const Mat& b,
                    at::ScalarType in, at::ScalarType out, double alpha, double beta) {
  GemmProblem p;
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a.data;
  p.a_bs = a.bs;
  p.a_rs = a.rs;
  p.a_cs = a.cs;
  p.b = b.data;
  p.b_bs = b.bs;
  p.b_rs = b.rs;
  p.b_cs = b.cs;
  p.in_dtype = to_kernel_dtype(in);
  p.out_dtype = to_kernel_dtype(out);
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

// Queues `out = alpha * A @ B + beta * bias` (bias broadcast to out; ignored when beta == 0),
// with `out_mat(out)` describing where C lives. When `out` shares memory with an operand the
// product goes to a temporary first. A bias that is `out` itself is used in place.
template <typename OutMat>
void queue_product(const char* name, const at::Tensor& out, const at::Tensor& a,
                   const at::Tensor& b, const at::Tensor& bias, GemmProblem p, OutMat out_mat) {
  if (out.numel() == 0) return;
  const bool via_tmp = overlaps(out, a) || overlaps(out, b);
  at::Tensor target = via_tmp ? at::empty(out.sizes(), out.options()) : out;
  bool copy_bias = false;
  TensorRef bias_src, bias_dst;
  if (p.beta != 0.0 && bias.defined()) {
    const bool in_place = bias.is_same(out) && !via_tmp;
    if (!in_place) {
      copy_bias = true;
      bias_src = make_ref(bias.expand(out.sizes()));
      bias_dst = make_ref(target);
    }
  } else if (p.beta != 0.0) {
    p.beta = 0.0;
  }
  const Mat c = out_mat(target);
  p.c = const_cast<void*>(c.data);
  p.c_bs = c.bs;
  p.c_rs = c.rs;
  p.c_cs = c.cs;
  TensorRef tmp_ref, out_ref;
  if (via_tmp) {
    tmp_ref = make_ref(target);
    out_ref = make_ref(out);
  }
  nki::WorkCost work = bytes_of({&a, &b, &out});
  (a.scalar_type() == at::kFloat ? work.flops_fp32 : work.flops_bf16) =
      2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.dim() ? a.size(-1) : 1);
  launch_op(out.device().index(), name, [p, copy_bias, bias_src, bias_dst, via_tmp, tmp_ref, out_ref] {
    if (copy_bias) kernels::copy(bias_dst, bias_src);
    kernels::gemm(p);
    if (via_tmp) kernels::copy(out_ref, tmp_ref);
  }, work);
}

void check_same_dtype(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op,
              ": expected m1 and m2 to have the same dtype, but got: ", a.scalar_type(),
              " != ", b.scalar_type());
}

// Result dtype of the `.dtype` overloads: the input dtype, or fp32 for 16-bit inputs.
at::ScalarType checked_out_dtype(const char* op, at::ScalarType in, at::ScalarType out_dtype) {
  TORCH_CHECK(
      out_dtype == in || (out_dtype == at::kFloat && (in == at::kBFloat16 || in == at::kHalf)), op,
      ": out_dtype must be the input dtype, or float32 for 16-bit inputs (got ", in, " -> ",
      out_dtype, ")");
  return out_dtype;
}

// ---- mm / addmm ----

void check_mm(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2, op, ": self must be a matrix");
  TORCH_CHECK(b.dim() == 2, op, ": mat2 must be a matrix");
  TORCH_CHECK(a.size(1) == b.size(0), op, ": mat1 and mat2 shapes cannot be multiplied (",
              a.size(0), "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  check_same_dtype(op, a, b);
  check_device(op, a.device(), {&a, &b});
}

void addmm_into(const char* name, const at::Tensor& out, const at::Tensor& bias,
                const at::Tensor& a, const at::Tensor& b, double beta, double alpha) {
  GemmProblem p = problem(1, a.size(0), b.size(1), a.size(1), mat2(a), mat2(b), a.scalar_type(),
                          out.scalar_type(), alpha, beta);
  queue_product(name, out, a, b, bias, p, mat2);
}

at::Tensor& mm_out_dtype(const at::Tensor& self, const at::Tensor& mat2_, at::ScalarType out_dtype,
                         at::Tensor& out) {
  check_mm("mm", self, mat2_);
  prepare_out("mm", out, {self.size(0), mat2_.size(1)}, out_dtype, self.device());
  addmm_into("aten::mm", out, at::Tensor(), self, mat2_, 0.0, 1.0);
  return out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2_) {
  NEURON_TRACK_OP("aten::mm");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK0(mm, self, mat2_);
  check_mm("mm", self, mat2_);
  at::Tensor out = at::empty({self.size(0), mat2_.size(1)}, self.options());
  addmm_into("aten::mm", out, at::Tensor(), self, mat2_, 0.0, 1.0);
  return out;
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2_, at::Tensor& out) {
  NEURON_TRACK_OP("aten::mm.out");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK(mm, out, self, mat2_, out);
  return mm_out_dtype(self, mat2_, self.scalar_type(), out);
}

at::Tensor mm_dtype(const at::Tensor& self, const at::Tensor& mat2_, at::ScalarType out_dtype) {
  NEURON_TRACK_OP("aten::mm.dtype");
  const auto dt = checked_out_dtype("mm", self.scalar_type(), out_dtype);
  at::Tensor out = at::empty({0}, self.options().dtype(dt));
  return mm_out_dtype(self, mat2_, dt, out);
}

at::Tensor& mm_dtype_out(const at::Tensor& self, const at::Tensor& mat2_, at::ScalarType out_dtype,
                         at::Tensor& out) {
  NEURON_TRACK_OP("aten::mm.dtype_out");
  return mm_out_dtype(self, mat2_, checked_out_dtype("mm", self.scalar_type(), out_dtype), out);
}

void check_bias(const char* op, const at::Tensor& bias, const at::Tensor& ref,
                c10::IntArrayRef out_sizes) {
  TORCH_CHECK(bias.scalar_type() == ref.scalar_type(), op,
              ": self and mat2 must have the same dtype, but got ", bias.scalar_type(), " and ",
              ref.scalar_type());
  check_device(op, ref.device(), {&bias});
  TORCH_CHECK(at::is_expandable_to(bias.sizes(), out_sizes), op, ": the size of self ",
              bias.sizes(), " cannot be broadcast to the result size ", out_sizes);
}

at::Tensor& addmm_out_impl(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                           const c10::Scalar& beta, const c10::Scalar& alpha,
                           at::ScalarType out_dtype, at::Tensor& out, const char* name) {
  check_mm("addmm", m1, m2);
  const std::vector<int64_t> sizes{m1.size(0), m2.size(1)};
  check_bias("addmm", self, m1, sizes);
  if (!self.is_same(out)) prepare_out("addmm", out, sizes, out_dtype, m1.device());
  addmm_into(name, out, self, m1, m2, beta.toDouble(), alpha.toDouble());
  return out;
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addmm");
  if (!native_dtype(m1.scalar_type()))
    return NEURON_CPU_FALLBACK0(addmm, self, m1, m2, beta, alpha);
  at::Tensor out = at::empty({0}, m1.options());
  return addmm_out_impl(self, m1, m2, beta, alpha, m1.scalar_type(), out, "aten::addmm");
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                      const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  NEURON_TRACK_OP("aten::addmm.out");
  if (!native_dtype(m1.scalar_type()))
    return NEURON_CPU_FALLBACK(addmm, out, self, m1, m2, beta, alpha, out);
  return addmm_out_impl(self, m1, m2, beta, alpha, m1.scalar_type(), out, "aten::addmm.out");
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                   const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addmm_");
  if (!native_dtype(m1.scalar_type()))
    return NEURON_CPU_FALLBACK0(addmm_, self, m1, m2, beta, alpha);
  check_mm("addmm_", m1, m2);
  TORCH_CHECK(self.dim() == 2 && self.size(0) == m1.size(0) && self.size(1) == m2.size(1),
              "addmm_: self must have shape [", m1.size(0), ", ", m2.size(1), "], got ",
              self.sizes());
  return addmm_out_impl(self, m1, m2, beta, alpha, m1.scalar_type(), self, "aten::addmm_");
}

at::Tensor addmm_dtype(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                       at::ScalarType out_dtype, const c10::Scalar& beta,
                       const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addmm.dtype");
  const auto dt = checked_out_dtype("addmm", m1.scalar_type(), out_dtype);
  at::Tensor out = at::empty({0}, m1.options().dtype(dt));
  const at::Tensor bias = self.scalar_type() == dt ? self : self.to(dt);
  check_mm("addmm", m1, m2);
  const std::vector<int64_t> sizes{m1.size(0), m2.size(1)};
  check_device("addmm", m1.device(), {&self});
  prepare_out("addmm", out, sizes, dt, m1.device());
  addmm_into("aten::addmm.dtype", out, bias, m1, m2, beta.toDouble(), alpha.toDouble());
  return out;
}

// ---- bmm / baddbmm / addbmm ----

void check_bmm(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 3, op, ": batch1 must be a 3D tensor");
  TORCH_CHECK(b.dim() == 3, op, ": batch2 must be a 3D tensor");
  TORCH_CHECK(a.size(0) == b.size(0), op,
              ": batch1 and batch2 must have same number of batches, got ", a.size(0), " and ",
              b.size(0));
  TORCH_CHECK(a.size(2) == b.size(1), op,
              ": Expected size for first two dimensions of batch2 tensor to be: [", a.size(0), ", ",
              a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "].");
  check_same_dtype(op, a, b);
  check_device(op, a.device(), {&a, &b});
}

void baddbmm_into(const char* name, const at::Tensor& out, const at::Tensor& bias,
                  const at::Tensor& a, const at::Tensor& b, double beta, double alpha) {
  GemmProblem p = problem(a.size(0), a.size(1), b.size(2), a.size(2), mat3(a), mat3(b),
                          a.scalar_type(), out.scalar_type(), alpha, beta);
  queue_product(name, out, a, b, bias, p, mat3);
}

at::Tensor& bmm_out_dtype(const at::Tensor& self, const at::Tensor& mat2_, at::ScalarType dt,
                          at::Tensor& out, const char* name) {
  check_bmm("bmm", self, mat2_);
  prepare_out("bmm", out, {self.size(0), self.size(1), mat2_.size(2)}, dt, self.device());
  baddbmm_into(name, out, at::Tensor(), self, mat2_, 0.0, 1.0);
  return out;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2_) {
  NEURON_TRACK_OP("aten::bmm");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK0(bmm, self, mat2_);
  at::Tensor out = at::empty({0}, self.options());
  return bmm_out_dtype(self, mat2_, self.scalar_type(), out, "aten::bmm");
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2_, at::Tensor& out) {
  NEURON_TRACK_OP("aten::bmm.out");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK(bmm, out, self, mat2_, out);
  return bmm_out_dtype(self, mat2_, self.scalar_type(), out, "aten::bmm.out");
}

at::Tensor bmm_dtype(const at::Tensor& self, const at::Tensor& mat2_, at::ScalarType out_dtype) {
  NEURON_TRACK_OP("aten::bmm.dtype");
  const auto dt = checked_out_dtype("bmm", self.scalar_type(), out_dtype);
  at::Tensor out = at::empty({0}, self.options().dtype(dt));
  return bmm_out_dtype(self, mat2_, dt, out, "aten::bmm.dtype");
}

at::Tensor& bmm_dtype_out(const at::Tensor& self, const at::Tensor& mat2_, at::ScalarType out_dtype,
                          at::Tensor& out) {
  NEURON_TRACK_OP("aten::bmm.dtype_out");
  return bmm_out_dtype(self, mat2_, checked_out_dtype("bmm", self.scalar_type(), out_dtype), out,
                       "aten::bmm.dtype_out");
}

at::Tensor& baddbmm_out_impl(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                             const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out,
                             const char* name) {
  check_bmm("baddbmm", b1, b2);
  const std::vector<int64_t> sizes{b1.size(0), b1.size(1), b2.size(2)};
  check_bias("baddbmm", self, b1, sizes);
  if (!self.is_same(out)) prepare_out("baddbmm", out, sizes, b1.scalar_type(), b1.device());
  baddbmm_into(name, out, self, b1, b2, beta.toDouble(), alpha.toDouble());
  return out;
}

at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                   const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::baddbmm");
  if (!native_dtype(b1.scalar_type()))
    return NEURON_CPU_FALLBACK0(baddbmm, self, b1, b2, beta, alpha);
  at::Tensor out = at::empty({0}, b1.options());
  return baddbmm_out_impl(self, b1, b2, beta, alpha, out, "aten::baddbmm");
}

at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                        const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  NEURON_TRACK_OP("aten::baddbmm.out");
  if (!native_dtype(b1.scalar_type()))
    return NEURON_CPU_FALLBACK(baddbmm, out, self, b1, b2, beta, alpha, out);
  return baddbmm_out_impl(self, b1, b2, beta, alpha, out, "aten::baddbmm.out");
}

at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                     const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::baddbmm_");
  if (!native_dtype(b1.scalar_type()))
    return NEURON_CPU_FALLBACK0(baddbmm_, self, b1, b2, beta, alpha);
  check_bmm("baddbmm_", b1, b2);
  TORCH_CHECK(self.dim() == 3 && self.size(0) == b1.size(0) && self.size(1) == b1.size(1) &&
                  self.size(2) == b2.size(2),
              "baddbmm_: self must have shape [", b1.size(0), ", ", b1.size(1), ", ", b2.size(2),
              "], got ", self.sizes());
  return baddbmm_out_impl(self, b1, b2, beta, alpha, self, "aten::baddbmm_");
}

// addbmm: out = beta * self + alpha * sum_b b1[b] @ b2[b]. The sum over the batch is a product
// over the concatenated k dimension, computed as one accumulation per batch entry.
at::Tensor& addbmm_out_impl(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                            const c10::Scalar& beta_s, const c10::Scalar& alpha_s, at::Tensor& out,
                            const char* name) {
  check_bmm("addbmm", b1, b2);
  const std::vector<int64_t> sizes{b1.size(1), b2.size(2)};
  check_bias("addbmm", self, b1, sizes);
  if (!self.is_same(out)) prepare_out("addbmm", out, sizes, b1.scalar_type(), b1.device());
  if (out.numel() == 0) return out;
  const double beta = beta_s.toDouble(), alpha = alpha_s.toDouble();
  const int64_t nb = b1.size(0);
  const bool via_tmp = overlaps(out, b1) || overlaps(out, b2);
  at::Tensor target = via_tmp ? at::empty(out.sizes(), out.options()) : out;
  const bool copy_bias = beta != 0.0 && !(self.is_same(out) && !via_tmp);
  const TensorRef bias_src = copy_bias ? make_ref(self.expand(out.sizes())) : TensorRef();
  const TensorRef target_ref = make_ref(target), out_ref = make_ref(out);
  GemmProblem p = problem(1, b1.size(1), b2.size(2), b1.size(2), mat2(b1.select(0, 0)),
                          mat2(b2.select(0, 0)), b1.scalar_type(), out.scalar_type(), alpha, beta);
  p.c = target_ref.data;
  p.c_rs = target.stride(0);
  p.c_cs = target.stride(1);
  const int64_t a_bs = b1.stride(0) * b1.element_size(), b_bs = b2.stride(0) * b2.element_size();
  launch_on(out, name, [p, nb, copy_bias, bias_src, target_ref, via_tmp, out_ref, a_bs, b_bs] {
    if (copy_bias) kernels::copy(target_ref, bias_src);
    GemmProblem q = p;
    if (nb == 0) {
      q.k = 0;  // out = beta * self
      kernels::gemm(q);
    }
    for (int64_t i = 0; i < nb; ++i) {
      q.a = static_cast<const char*>(p.a) + i * a_bs;
      q.b = static_cast<const char*>(p.b) + i * b_bs;
      q.beta = i == 0 ? p.beta : 1.0;
      kernels::gemm(q);
    }
    if (via_tmp) kernels::copy(out_ref, target_ref);
  });
  return out;
}

at::Tensor addbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                  const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addbmm");
  if (!native_dtype(b1.scalar_type()))
    return NEURON_CPU_FALLBACK0(addbmm, self, b1, b2, beta, alpha);
  at::Tensor out = at::empty({0}, b1.options());
  return addbmm_out_impl(self, b1, b2, beta, alpha, out, "aten::addbmm");
}

at::Tensor& addbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                       const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  NEURON_TRACK_OP("aten::addbmm.out");
  if (!native_dtype(b1.scalar_type()))
    return NEURON_CPU_FALLBACK(addbmm, out, self, b1, b2, beta, alpha, out);
  return addbmm_out_impl(self, b1, b2, beta, alpha, out, "aten::addbmm.out");
}

at::Tensor& addbmm_(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                    const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addbmm_");
  if (!native_dtype(b1.scalar_type()))
    return NEURON_CPU_FALLBACK0(addbmm_, self, b1, b2, beta, alpha);
  TORCH_CHECK(self.dim() == 2 && b1.dim() == 3 && b2.dim() == 3 && self.size(0) == b1.size(1) &&
                  self.size(1) == b2.size(2),
              "addbmm_: self must have shape [batch1.size(1), batch2.size(2)], got ", self.sizes());
  return addbmm_out_impl(self, b1, b2, beta, alpha, self, "aten::addbmm_");
}

// ---- mv / addmv / dot / vdot / addr ----

void check_mv(const char* op, const at::Tensor& mat, const at::Tensor& vec) {
  TORCH_CHECK(mat.dim() == 2 && vec.dim() == 1, op, ": vector + matrix @ vector expected, got ",
              mat.dim(), ", ", vec.dim());
  TORCH_CHECK(mat.size(1) == vec.size(0), op, ": size mismatch, got input (", mat.size(0),
              "), mat (", mat.size(0), "x", mat.size(1), "), vec (", vec.size(0), ")");
  TORCH_CHECK(mat.scalar_type() == vec.scalar_type(), op,
              ": expected mat and vec to have the same dtype, but got: ", mat.scalar_type(),
              " != ", vec.scalar_type());
  check_device(op, mat.device(), {&mat, &vec});
}

void addmv_into(const char* name, const at::Tensor& out, const at::Tensor& bias,
                const at::Tensor& mat, const at::Tensor& vec, double beta, double alpha) {
  GemmProblem p = problem(1, mat.size(0), 1, mat.size(1), mat2(mat), column(vec), mat.scalar_type(),
                          out.scalar_type(), alpha, beta);
  queue_product(name, out, mat, vec, bias, p, column);
}

at::Tensor& addmv_out_impl(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                           const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out,
                           const char* name) {
  check_mv("addmv", mat, vec);
  const std::vector<int64_t> sizes{mat.size(0)};
  check_bias("addmv", self, mat, sizes);
  if (!self.is_same(out)) prepare_out("addmv", out, sizes, mat.scalar_type(), mat.device());
  addmv_into(name, out, self, mat, vec, beta.toDouble(), alpha.toDouble());
  return out;
}

at::Tensor mv(const at::Tensor& self, const at::Tensor& vec) {
  NEURON_TRACK_OP("aten::mv");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK0(mv, self, vec);
  check_mv("mv", self, vec);
  at::Tensor out = at::empty({self.size(0)}, self.options());
  addmv_into("aten::mv", out, at::Tensor(), self, vec, 0.0, 1.0);
  return out;
}

at::Tensor& mv_out(const at::Tensor& self, const at::Tensor& vec, at::Tensor& out) {
  NEURON_TRACK_OP("aten::mv.out");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK(mv, out, self, vec, out);
  check_mv("mv", self, vec);
  prepare_out("mv", out, {self.size(0)}, self.scalar_type(), self.device());
  addmv_into("aten::mv.out", out, at::Tensor(), self, vec, 0.0, 1.0);
  return out;
}

at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addmv");
  if (!native_dtype(mat.scalar_type()))
    return NEURON_CPU_FALLBACK0(addmv, self, mat, vec, beta, alpha);
  at::Tensor out = at::empty({0}, mat.options());
  return addmv_out_impl(self, mat, vec, beta, alpha, out, "aten::addmv");
}

at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                      const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  NEURON_TRACK_OP("aten::addmv.out");
  if (!native_dtype(mat.scalar_type()))
    return NEURON_CPU_FALLBACK(addmv, out, self, mat, vec, beta, alpha, out);
  return addmv_out_impl(self, mat, vec, beta, alpha, out, "aten::addmv.out");
}

at::Tensor& addmv_(at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                   const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addmv_");
  if (!native_dtype(mat.scalar_type()))
    return NEURON_CPU_FALLBACK0(addmv_, self, mat, vec, beta, alpha);
  TORCH_CHECK(self.dim() == 1 && mat.dim() == 2 && self.size(0) == mat.size(0),
              "addmv_: self must have shape [", mat.size(0), "], got ", self.sizes());
  return addmv_out_impl(self, mat, vec, beta, alpha, self, "aten::addmv_");
}

void check_dot(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 1, op, ": 1D tensors expected, but got ", a.dim(),
              "D and ", b.dim(), "D tensors");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op,
              ": expected both vectors to have same dtype, but found ", a.scalar_type(), " and ",
              b.scalar_type());
  TORCH_CHECK(a.numel() == b.numel(), op, ": inconsistent tensor size, expected tensor [",
              a.numel(), "] and src [", b.numel(),
              "] to have the same number of elements, but got ", a.numel(), " and ", b.numel(),
              " elements respectively");
  check_device(op, a.device(), {&a, &b});
}

void dot_into(const char* name, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  GemmProblem p =
      problem(1, 1, 1, a.size(0), row(a), column(b), a.scalar_type(), out.scalar_type(), 1.0, 0.0);
  queue_product(name, out, a, b, at::Tensor(), p, scalar);
}

at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
  NEURON_TRACK_OP("aten::dot");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK0(dot, self, other);
  check_dot("dot", self, other);
  at::Tensor out = at::empty({}, self.options());
  dot_into("aten::dot", out, self, other);
  return out;
}

at::Tensor& dot_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  NEURON_TRACK_OP("aten::dot.out");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK(dot, out, self, other, out);
  check_dot("dot", self, other);
  prepare_out("dot", out, {}, self.scalar_type(), self.device());
  dot_into("aten::dot.out", out, self, other);
  return out;
}

// vdot conjugates its first argument: the same as dot for real dtypes.
at::Tensor vdot(const at::Tensor& self, const at::Tensor& other) {
  NEURON_TRACK_OP("aten::vdot");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK0(vdot, self, other);
  check_dot("vdot", self, other);
  at::Tensor out = at::empty({}, self.options());
  dot_into("aten::vdot", out, self, other);
  return out;
}

at::Tensor& vdot_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  NEURON_TRACK_OP("aten::vdot.out");
  if (!native_dtype(self.scalar_type())) return NEURON_CPU_FALLBACK(vdot, out, self, other, out);
  check_dot("vdot", self, other);
  prepare_out("vdot", out, {}, self.scalar_type(), self.device());
  dot_into("aten::vdot.out", out, self, other);
  return out;
}

// addr: out = beta * self + alpha * outer(vec1, vec2), a product with k = 1.
at::Tensor& addr_out_impl(const at::Tensor& self, const at::Tensor& v1, const at::Tensor& v2,
                          const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out,
                          const char* name) {
  TORCH_CHECK(v1.dim() == 1 && v2.dim() == 1,
              "addr: expected 1-D arguments vec1 and vec2, but got ", v1.dim(), "-D and ", v2.dim(),
              "-D");
  TORCH_CHECK(v1.scalar_type() == v2.scalar_type(),
              "addr: expected vec1 and vec2 to have the same dtype, got ", v1.scalar_type(),
              " and ", v2.scalar_type());
  check_device("addr", v1.device(), {&v1, &v2});
  const std::vector<int64_t> sizes{v1.size(0), v2.size(0)};
  check_bias("addr", self, v1, sizes);
  if (!self.is_same(out)) prepare_out("addr", out, sizes, v1.scalar_type(), v1.device());
  GemmProblem p = problem(1, v1.size(0), v2.size(0), 1, column(v1), row(v2), v1.scalar_type(),
                          out.scalar_type(), alpha.toDouble(), beta.toDouble());
  queue_product(name, out, v1, v2, self, p, mat2);
  return out;
}

at::Tensor addr(const at::Tensor& self, const at::Tensor& v1, const at::Tensor& v2,
                const c10::Scalar& beta, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::addr");
  if (!native_dtype(v1.scalar_type())) return NEURON_CPU_FALLBACK0(addr, self, v1, v2, beta, alpha);
  at::Tensor out = at::empty({0}, v1.options());
  return addr_out_impl(self, v1, v2, beta, alpha, out, "aten::addr");
}

at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& v1, const at::Tensor& v2,
                     const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  NEURON_TRACK_OP("aten::addr.out");
  if (!native_dtype(v1.scalar_type()))
    return NEURON_CPU_FALLBACK(addr, out, self, v1, v2, beta, alpha, out);
  return addr_out_impl(self, v1, v2, beta, alpha, out, "aten::addr.out");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", TORCH_FN(mm));
  m.impl("mm.out", TORCH_FN(mm_out));
  m.impl("mm.dtype", TORCH_FN(mm_dtype));
  m.impl("mm.dtype_out", TORCH_FN(mm_dtype_out));
  m.impl("addmm", TORCH_FN(addmm));
  m.impl("addmm.out", TORCH_FN(addmm_out));
  m.impl("addmm_", TORCH_FN(addmm_));
  m.impl("addmm.dtype", TORCH_FN(addmm_dtype));
  m.impl("bmm", TORCH_FN(bmm));
  m.impl("bmm.out", TORCH_FN(bmm_out));
  m.impl("bmm.dtype", TORCH_FN(bmm_dtype));
  m.impl("bmm.dtype_out", TORCH_FN(bmm_dtype_out));
  m.impl("baddbmm", TORCH_FN(baddbmm));
  m.impl("baddbmm.out", TORCH_FN(baddbmm_out));
  m.impl("baddbmm_", TORCH_FN(baddbmm_));
  m.impl("addbmm", TORCH_FN(addbmm));
  m.impl("addbmm.out", TORCH_FN(addbmm_out));
  m.impl("addbmm_", TORCH_FN(addbmm_));
  m.impl("mv", TORCH_FN(mv));
  m.impl("mv.out", TORCH_FN(mv_out));
  m.impl("addmv", TORCH_FN(addmv));
  m.impl("addmv.out", TORCH_FN(addmv_out));
  m.impl("addmv_", TORCH_FN(addmv_));
  m.impl("dot", TORCH_FN(dot));
  m.impl("dot.out", TORCH_FN(dot_out));
  m.impl("vdot", TORCH_FN(vdot));
  m.impl("vdot.out", TORCH_FN(vdot_out));
  m.impl("addr", TORCH_FN(addr));
  m.impl("addr.out", TORCH_FN(addr_out));
}

}  // namespace neuron::torch_glue
