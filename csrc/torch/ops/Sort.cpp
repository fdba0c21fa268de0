// Sorting and sampling on the kernels of sort.h: sort (stable; argsort reaches it), topk,
// multinomial (counter-based draws from the neuron generator: results do not depend on the
// thread count) and unique (_unique2, which synchronizes: its size depends on the data).
#include "kernels/sort.h"

#include <ATen/core/DistributionsHelper.h>
#include <torch/library.h>

#include <mutex>

#include "../NeuronGenerator.h"
#include "../RealStackFallback.h"
#include "EwLaunch.h"
#include "OpUtils.h"

namespace neuron::torch_glue {
namespace {

using kernels::TensorRef;

bool sortable(at::ScalarType t) { return !c10::isComplexType(t); }

std::tuple<at::Tensor&, at::Tensor&> sort_out_impl(const at::Tensor& self, int64_t dim,
                                                   bool descending, at::Tensor& values,
                                                   at::Tensor& indices) {
  TORCH_CHECK(sortable(self.scalar_type()), "sort(): complex tensors cannot be sorted");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  prepare_out("sort", values, self.sizes(), self.scalar_type(), self.device());
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "sort(): expected int64 indices, got ", indices.scalar_type());
  check_device("sort", self.device(), {&indices});
  at::native::resize_output(indices, self.sizes());
  if (self.numel() == 0) return {values, indices};
  const at::Tensor src = overlaps(values, self) || overlaps(indices, self) ? self.clone() : self;
  const TensorRef v = make_ref(values), i = make_ref(indices), s = make_ref(src);
  const int di = static_cast<int>(d);
  launch_on(self, "aten::sort",
            [v, i, s, di, descending] { kernels::sort(v, i, s, di, descending); });
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable,
                                               int64_t dim, bool descending) {
  at::Tensor v = at::empty({0}, self.options()),
             i = at::empty({0}, self.options().dtype(at::kLong));
  if (mirror_real_stack_fallback()) {
    // Like torch-neuronx: the functional sort reaches the CPU as 'aten::sort.values_stable'.
    at::_ops::sort_values_stable::call(self, stable, dim, descending, v, i);
    return {v, i};
  }
  NEURON_TRACK_OP("aten::sort.stable");
  sort_out_impl(self, dim, descending, v, i);
  return {v, i};
}

std::tuple<at::Tensor, at::Tensor> sort(const at::Tensor& self, int64_t dim, bool descending) {
  at::Tensor v = at::empty({0}, self.options()),
             i = at::empty({0}, self.options().dtype(at::kLong));
  if (mirror_real_stack_fallback()) {
    at::_ops::sort_values_stable::call(self, false, dim, descending, v, i);
    return {v, i};
  }
  NEURON_TRACK_OP("aten::sort");
  sort_out_impl(self, dim, descending, v, i);
  return {v, i};
}

std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self,
                                                        std::optional<bool> stable, int64_t dim,
                                                        bool descending, at::Tensor& values,
                                                        at::Tensor& indices) {
  if (mirror_real_stack_fallback())
    return at::native::call_fallback_fn<&neuron_cpu_fallback, at::_ops::sort_values_stable>::call(
        self, stable, dim, descending, values, indices);
  NEURON_TRACK_OP("aten::sort.values_stable");
  return sort_out_impl(self, dim, descending, values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> sort_values(const at::Tensor& self, int64_t dim,
                                                 bool descending, at::Tensor& values,
                                                 at::Tensor& indices) {
  if (mirror_real_stack_fallback())
    return at::_ops::sort_values_stable::call(self, false, dim, descending, values, indices);
  NEURON_TRACK_OP("aten::sort.values");
  return sort_out_impl(self, dim, descending, values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> topk_out_impl(const at::Tensor& self, int64_t k, int64_t dim,
                                                   bool largest, bool sorted, at::Tensor& values,
                                                   at::Tensor& indices) {
  TORCH_CHECK(sortable(self.scalar_type()), "topk(): complex tensors are not supported");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const int64_t size = self.dim() ? self.size(d) : 1;
  TORCH_CHECK(k >= 0 && k <= size, "selected index k out of range");
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim()) sizes[static_cast<size_t>(d)] = k;
  prepare_out("topk", values, sizes, self.scalar_type(), self.device());
  prepare_out("topk", indices, sizes, at::kLong, self.device());
  if (values.numel() == 0) return {values, indices};
  const at::Tensor src = overlaps(values, self) || overlaps(indices, self) ? self.clone() : self;
  const TensorRef v = make_ref(values), i = make_ref(indices), s = make_ref(src);
  const int di = static_cast<int>(d);
  launch_on(self, "aten::topk",
            [v, i, s, di, k, largest, sorted] { kernels::topk(v, i, s, di, k, largest, sorted); });
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, c10::SymInt k, int64_t dim,
                                        bool largest, bool sorted) {
  NEURON_TRACK_OP("aten::topk");
  at::Tensor v = at::empty({0}, self.options()),
             i = at::empty({0}, self.options().dtype(at::kLong));
  topk_out_impl(self, k.expect_int(), dim, largest, sorted, v, i);
  return {v, i};
}

std::tuple<at::Tensor&, at::Tensor&> topk_values(const at::Tensor& self, c10::SymInt k, int64_t dim,
                                                 bool largest, bool sorted, at::Tensor& values,
                                                 at::Tensor& indices) {
  NEURON_TRACK_OP("aten::topk.values");
  return topk_out_impl(self, k.expect_int(), dim, largest, sorted, values, indices);
}

at::Tensor& multinomial_out_impl(const at::Tensor& self, int64_t n, bool replacement,
                                 const std::optional<at::Generator>& gen_in, at::Tensor& out) {
  TORCH_CHECK(self.dim() == 1 || self.dim() == 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(
      c10::isFloatingType(self.scalar_type()),
      "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(n > 0, "cannot sample n_sample <= 0 samples");
  const int64_t C = self.size(-1);
  TORCH_CHECK(replacement || n <= C,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(C > 0, "multinomial: number of categories cannot be zero");
  const int64_t rows = self.dim() == 2 ? self.size(0) : 1;
  std::vector<int64_t> sizes =
      self.dim() == 2 ? std::vector<int64_t>{rows, n} : std::vector<int64_t>{n};
  prepare_out("multinomial", out, sizes, at::kLong, self.device());
  if (out.numel() == 0) return out;
  at::Generator gen =
      gen_in.has_value() && gen_in->defined() ? *gen_in : default_generator(self.device().index());
  TORCH_CHECK(gen.device().type() == kNeuron,
              "multinomial: expected a neuron generator, got one for ", gen.device());
  uint64_t seed, offset;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    std::tie(seed, offset) = gen.get<NeuronGeneratorImpl>()->philox_inputs(
        static_cast<uint64_t>(rows) * static_cast<uint64_t>(std::max(C, n)));
  }
  const TensorRef o = make_ref(out), p = make_ref(self);
  launch_on(self, "aten::multinomial", [o, p, n, replacement, seed, offset] {
    kernels::multinomial(o, p, n, replacement, seed, offset);
  });
  return out;
}

at::Tensor multinomial(const at::Tensor& self, c10::SymInt n, bool replacement,
                       std::optional<at::Generator> gen) {
  if (mirror_real_stack_fallback())
    return at::native::call_fallback_fn_symint<&neuron_cpu_fallback, at::_ops::multinomial>::call(
        self, n, replacement, gen);
  NEURON_TRACK_OP("aten::multinomial");
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return multinomial_out_impl(self, n.expect_int(), replacement, gen, out);
}

at::Tensor& multinomial_out(const at::Tensor& self, c10::SymInt n, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& out) {
  if (mirror_real_stack_fallback())
    return at::native::call_fallback_fn_symint<&neuron_cpu_fallback, at::_ops::multinomial_out>::call(
        self, n, replacement, gen, out);
  NEURON_TRACK_OP("aten::multinomial.out");
  return multinomial_out_impl(self, n.expect_int(), replacement, gen, out);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted,
                                                       bool return_inverse, bool return_counts) {
  NEURON_TRACK_OP("aten::_unique2");
  TORCH_CHECK(sortable(self.scalar_type()), "unique(): complex tensors are not supported");
  auto r = std::make_shared<kernels::UniqueResult>();
  const TensorRef s = make_ref(self);
  launch_on(self, "aten::_unique2", [r, s, return_inverse, return_counts] {
    kernels::unique_compute(s, return_inverse, return_counts, r.get());
  });
  translate_errors([&] { current_stream(self.device().index()).synchronize(); });
  at::Tensor values = at::empty({r->count}, self.options());
  at::Tensor inverse = at::empty(return_inverse ? self.sizes() : c10::IntArrayRef({0}),
                                 self.options().dtype(at::kLong));
  at::Tensor counts = at::empty({return_counts ? r->count : 0}, self.options().dtype(at::kLong));
  const TensorRef v = make_ref(values), i = return_inverse ? make_ref(inverse) : TensorRef(),
                  c = return_counts ? make_ref(counts) : TensorRef();
  if (r->count > 0 || (return_inverse && inverse.numel() > 0))
    launch_on(self, "aten::_unique2", [r, v, i, c] { kernels::unique_write(*r, v, i, c); });
  return {values, inverse, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sort", TORCH_FN(sort));
  m.impl("sort.stable", TORCH_FN(sort_stable));
  m.impl("sort.values", TORCH_FN(sort_values));
  m.impl("sort.values_stable", TORCH_FN(sort_values_stable));
  m.impl("topk", TORCH_FN(topk));
  m.impl("topk.values", TORCH_FN(topk_values));
  m.impl("multinomial", TORCH_FN(multinomial));
  m.impl("multinomial.out", TORCH_FN(multinomial_out));
  m.impl("_unique2", TORCH_FN(unique2));
}

}  // namespace neuron::torch_glue
