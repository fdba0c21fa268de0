// Data movement and factories: cat (stack reaches it), flip, roll, tril/triu, unfold (the view
// under repeat), arange, linspace and eye. Copies between views run the strided copy kernel:
// flip reads through negative strides, roll and cat copy blocks, all inside one queued task.
#include "kernels/shape.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/unfold_native.h>
#include <torch/library.h>

#include <cmath>

#include "OpUtils.h"
#include "kernels/copy.h"

namespace neuron::torch_glue {
namespace {

using kernels::TensorRef;
using CopyList = std::vector<std::pair<TensorRef, TensorRef>>;  // (dst, src)

void queue_copies(const at::Tensor& on, const char* name, CopyList copies) {
  if (copies.empty()) return;
  auto shared = std::make_shared<CopyList>(std::move(copies));
  launch_on(on, name, [shared] {
    for (const auto& [d, s] : *shared) kernels::copy(d, s);
  });
}

// ---- cat ----

bool skipped_in_cat(const at::Tensor& t) {
  return t.dim() == 1 && t.numel() == 0;
}  // legacy [0] tensors

// The concatenation dim and the output sizes, with ATen's checks.
struct CatShape {
  int64_t dim = 0, ndim = 0;
  std::vector<int64_t> sizes;
};

CatShape cat_shape(const std::vector<at::Tensor>& tensors, int64_t dim, const c10::Device& device) {
  TORCH_CHECK(!tensors.empty(), "torch.cat(): expected a non-empty list of Tensors");
  const at::Tensor* ref = nullptr;
  for (const auto& t : tensors)
    if (!skipped_in_cat(t)) {
      ref = &t;
      break;
    }
  if (!ref) ref = &tensors[0];
  TORCH_CHECK(ref->dim() > 0, "zero-dimensional tensor (at position 0) cannot be concatenated");
  CatShape c;
  c.ndim = ref->dim();
  c.dim = at::maybe_wrap_dim(dim, c.ndim);
  c.sizes = ref->sizes().vec();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (skipped_in_cat(t) && t.dim() != c.ndim) continue;
    TORCH_CHECK(t.dim() == c.ndim, "Tensors must have same number of dimensions: got ", c.ndim,
                " and ", t.dim());
    for (int64_t k = 0; k < t.dim(); ++k) {
      if (k == c.dim) continue;
      TORCH_CHECK(t.size(k) == c.sizes[static_cast<size_t>(k)],
                  "Sizes of tensors must match except in dimension ", c.dim, ". Expected size ",
                  c.sizes[static_cast<size_t>(k)], " but got size ", t.size(k),
                  " for tensor number ", i, " in the list.");
    }
    TORCH_CHECK(t.device() == device,
                "Expected all tensors to be on the same device, but found at least two devices, ",
                device, " and ", t.device(), "!");
    total += t.size(c.dim);
  }
  c.sizes[static_cast<size_t>(c.dim)] = total;
  return c;
}

// Queues the copies of every input into its slice of `out` (slices as TensorRefs: no views).
void queue_cat(const std::vector<at::Tensor>& tensors, const CatShape& c, const at::Tensor& out) {
  if (out.numel() == 0) return;
  const TensorRef o = make_ref(out);
  const int d = static_cast<int>(c.dim);
  const int64_t esz = static_cast<int64_t>(out.element_size());
  CopyList copies;
  copies.reserve(tensors.size());
  int64_t offset = 0;
  for (const auto& t : tensors) {
    if (skipped_in_cat(t) && t.dim() != c.ndim) continue;
    const int64_t n = t.size(c.dim);
    if (n > 0) {
      TensorRef slice = o;
      slice.sizes[d] = n;
      slice.data = static_cast<char*>(o.data) + offset * o.strides[d] * esz;
      copies.emplace_back(slice, make_ref(t));
    }
    offset += n;
  }
  queue_copies(out, "aten::cat", std::move(copies));
}

at::Tensor& cat_out_impl(const at::ITensorListRef& tensors_ref, int64_t dim, at::Tensor& out) {
  const std::vector<at::Tensor> tensors(tensors_ref.begin(), tensors_ref.end());
  const CatShape c = cat_shape(tensors, dim, out.device());
  at::native::resize_output(out, c.sizes);
  for (const auto& t : tensors)
    TORCH_CHECK(!overlaps(out, t),
                "torch.cat(): unsupported operation: the input tensors cannot refer to any of the "
                "output memory "
                "locations.");
  queue_cat(tensors, c, out);
  return out;
}

at::Tensor cat(const at::ITensorListRef& tensors_ref, int64_t dim) {
  NEURON_TRACK_OP("aten::cat");
  const std::vector<at::Tensor> tensors(tensors_ref.begin(), tensors_ref.end());
  TORCH_CHECK(!tensors.empty(), "torch.cat(): expected a non-empty list of Tensors");
  c10::Device device = tensors[0].device();
  for (const auto& t : tensors)
    if (is_neuron(t)) device = t.device();
  const CatShape c = cat_shape(tensors, dim, device);
  at::Tensor out = at::empty(
      c.sizes, tensors[0].options().dtype(at::native::result_type(tensors_ref)).device(device));
  queue_cat(tensors, c, out);
  return out;
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  NEURON_TRACK_OP("aten::cat.out");
  return cat_out_impl(tensors, dim, out);
}

// ---- flip / roll ----

at::Tensor flip(const at::Tensor& self, c10::IntArrayRef dims) {
  NEURON_TRACK_OP("aten::flip");
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return out;
  TensorRef src = make_ref(self);
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(self.dim(), 1)), false);
  const int64_t esz = static_cast<int64_t>(self.element_size());
  for (int64_t d0 : dims) {
    const int64_t d = at::maybe_wrap_dim(d0, self.dim());
    TORCH_CHECK(!seen[static_cast<size_t>(d)], "flip: dim ", d,
                " appears multiple times in the list of dims");
    seen[static_cast<size_t>(d)] = true;
    src.data = static_cast<char*>(src.data) + (src.sizes[d] - 1) * src.strides[d] * esz;
    src.strides[d] = -src.strides[d];
  }
  queue_copies(out, "aten::flip", {{make_ref(out), src}});
  return out;
}

at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts_s, c10::IntArrayRef dims) {
  NEURON_TRACK_OP("aten::roll");
  const auto shifts = C10_AS_INTARRAYREF_SLOW(shifts_s);
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, "roll: shifts must be a single value when dims is empty, got ",
                shifts.size());
    return roll(self.flatten(), shifts_s, {0}).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(),
              "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return out;
  // Net shift per dim (repeated dims compose).
  std::vector<int64_t> shift(static_cast<size_t>(self.dim()), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = at::maybe_wrap_dim(dims[i], self.dim());
    shift[static_cast<size_t>(d)] += shifts[i];
  }
  std::vector<int64_t> rolled;
  for (int64_t d = 0; d < self.dim(); ++d) {
    const int64_t n = self.size(d);
    int64_t s = n ? shift[static_cast<size_t>(d)] % n : 0;
    if (s < 0) s += n;
    shift[static_cast<size_t>(d)] = s;
    if (s != 0) rolled.push_back(d);
  }
  CopyList copies;
  const size_t k = rolled.size();
  for (size_t mask = 0; mask < (size_t{1} << k); ++mask) {
    at::Tensor src = self, dst = out;
    bool empty = false;
    for (size_t i = 0; i < k; ++i) {
      const int64_t d = rolled[i], n = self.size(d), s = shift[static_cast<size_t>(d)];
      // Segment 0: src [0, n - s) -> dst [s, n); segment 1: src [n - s, n) -> dst [0, s).
      if (mask & (size_t{1} << i)) {
        src = src.narrow(d, n - s, s);
        dst = dst.narrow(d, 0, s);
      } else {
        src = src.narrow(d, 0, n - s);
        dst = dst.narrow(d, s, n - s);
      }
      empty |= src.numel() == 0;
    }
    if (!empty) copies.emplace_back(make_ref(dst), make_ref(src));
  }
  queue_copies(out, "aten::roll", std::move(copies));
  return out;
}

// ---- tril / triu ----

template <bool Lower>
at::Tensor& triangle_out_impl(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  TORCH_CHECK(self.dim() >= 2, Lower ? "tril" : "triu",
              ": input tensor must have at least 2 dimensions");
  if (!out.is_same(self)) {
    prepare_out(Lower ? "tril" : "triu", out, self.sizes(), self.scalar_type(), self.device());
    TORCH_CHECK(!overlaps(out, self), Lower ? "tril" : "triu", ": out must not overlap the input");
  }
  if (out.numel() == 0) return out;
  const TensorRef o = make_ref(out), i = make_ref(self);
  launch_on(self, Lower ? "aten::tril" : "aten::triu",
            [o, i, diagonal] { kernels::triangle(o, i, diagonal, Lower); });
  return out;
}

template <bool Lower>
at::Tensor triangle(const at::Tensor& self, int64_t diagonal) {
  if constexpr (Lower) {
    NEURON_TRACK_OP("aten::tril");
  } else {
    NEURON_TRACK_OP("aten::triu");
  }
  at::Tensor out = at::empty(self.sizes(), self.options());
  return triangle_out_impl<Lower>(self, diagonal, out);
}

template <bool Lower>
at::Tensor& triangle_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  if constexpr (Lower) {
    NEURON_TRACK_OP("aten::tril.out");
  } else {
    NEURON_TRACK_OP("aten::triu.out");
  }
  return triangle_out_impl<Lower>(self, diagonal, out);
}

template <bool Lower>
at::Tensor& triangle_(at::Tensor& self, int64_t diagonal) {
  if constexpr (Lower) {
    NEURON_TRACK_OP("aten::tril_");
  } else {
    NEURON_TRACK_OP("aten::triu_");
  }
  return triangle_out_impl<Lower>(self, diagonal, self);
}

// ---- unfold (a view) ----

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  NEURON_TRACK_OP("aten::unfold");
  return at::native::unfold(self, dimension, size, step);
}

// ---- factories ----

at::Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
                       at::Tensor& out) {
  NEURON_TRACK_OP("aten::arange.start_out");
  const bool integral = c10::isIntegralType(out.scalar_type(), /*includeBool=*/false);
  double size_d;
  if (integral) {
    const int64_t s = start.to<int64_t>(), e = end.to<int64_t>(), st = step.to<int64_t>();
    TORCH_CHECK(st != 0, "step must be nonzero");
    TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
                "upper bound and larger bound inconsistent with step sign");
    size_d = std::ceil(static_cast<double>(e - s) / static_cast<double>(st));
  } else {
    const double s = start.to<double>(), e = end.to<double>(), st = step.to<double>();
    TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
    TORCH_CHECK(st != 0, "step must be nonzero");
    TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
                "upper bound and larger bound inconsistent with step sign");
    size_d = std::ceil((e - s) / st);
  }
  TORCH_CHECK(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()),
              "invalid size, possible overflow?");
  const int64_t size = static_cast<int64_t>(size_d);
  if (out.numel() != size) out.resize_({size});
  if (size == 0) return out;
  const TensorRef o = make_ref(out);
  const double s = start.to<double>(), st = step.to<double>();
  const int64_t is = integral ? start.to<int64_t>() : 0, ist = integral ? step.to<int64_t>() : 0;
  launch_on(out, "aten::arange.start_out",
            [o, s, st, is, ist] { kernels::arange(o, s, st, is, ist); });
  return out;
}

at::Tensor& linspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps,
                         at::Tensor& out) {
  NEURON_TRACK_OP("aten::linspace.out");
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps) out.resize_({steps});
  if (steps == 0) return out;
  const TensorRef o = make_ref(out);
  const double s = start.to<double>(), e = end.to<double>();
  launch_on(out, "aten::linspace.out", [o, s, e] { kernels::linspace(o, s, e); });
  return out;
}

at::Tensor& eye_m_out(c10::SymInt n_s, c10::SymInt m_s, at::Tensor& out) {
  NEURON_TRACK_OP("aten::eye.m_out");
  const int64_t n = n_s.expect_int(), m = m_s.expect_int();
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  out.zero_();
  if (n > 0 && m > 0) out.diagonal().fill_(1);
  return out;
}

at::Tensor& eye_out(c10::SymInt n, at::Tensor& out) {
  NEURON_TRACK_OP("aten::eye.out");
  return eye_m_out(n, n, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat", TORCH_FN(cat));
  m.impl("cat.out", TORCH_FN(cat_out));
  m.impl("flip", TORCH_FN(flip));
  m.impl("roll", TORCH_FN(roll));
  m.impl("tril", TORCH_FN(triangle<true>));
  m.impl("tril.out", TORCH_FN(triangle_out<true>));
  m.impl("tril_", TORCH_FN(triangle_<true>));
  m.impl("triu", TORCH_FN(triangle<false>));
  m.impl("triu.out", TORCH_FN(triangle_out<false>));
  m.impl("triu_", TORCH_FN(triangle_<false>));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("arange.start_out", TORCH_FN(arange_out));
  m.impl("linspace.out", TORCH_FN(linspace_out));
  m.impl("eye.m_out", TORCH_FN(eye_m_out));
  m.impl("eye.out", TORCH_FN(eye_out));
}

}  // namespace neuron::torch_glue
