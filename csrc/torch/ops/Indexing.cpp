// Indexing on the kernels of index.h: index_select, gather, scatter/scatter_add/scatter_reduce,
// advanced indexing (index.Tensor, index_put_), masked_fill_/masked_scatter_/masked_select,
// nonzero, index_copy_/index_fill_/index_add_. CPU index tensors are moved to the device, int32
// indices are accepted next to int64. nonzero and masked_select synchronize (their result size
// depends on the data); everything else is queued.
#include <ATen/ExpandUtils.h>
#include <ATen/native/IndexingUtils.h>
#include <torch/library.h>

#include <cstring>

#include "OpUtils.h"
#include "kernels/index.h"

namespace neuron::torch_glue {
namespace {

using kernels::TensorRef;

void check_index(const char* op, const at::Tensor& index) {
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
              "(): Expected dtype int64 (or int32) for index, got ", index.scalar_type());
}

struct ScalarBytes {
  unsigned char b[16];
};
ScalarBytes scalar_bytes(const c10::Scalar& v, const at::Tensor& like) {
  ScalarBytes s{};
  const at::Tensor host = at::scalar_tensor(v, like.options().device(at::kCPU));
  std::memcpy(s.b, host.data_ptr(), like.element_size());
  return s;
}

// ---- index_select ----

at::Tensor& index_select_out_impl(const at::Tensor& self, int64_t dim, const at::Tensor& index_in,
                                  at::Tensor& out) {
  check_index("index_select", index_in);
  TORCH_CHECK(index_in.dim() <= 1, "index_select(): Index is supposed to be a vector");
  const at::Tensor index = to_device(index_in, self.device());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[static_cast<size_t>(d)] = index.numel();
  prepare_out("index_select", out, sizes, self.scalar_type(), self.device());
  TORCH_CHECK(!overlaps(out, self), "index_select(): out must not overlap self");
  if (self.dim() == 0) {
    TORCH_CHECK(index.numel() == 1, "index_select(): Index to scalar can have only 1 value, got ",
                index.numel(), " value(s)");
  }
  if (out.numel() == 0 && index.numel() == 0) return out;
  TORCH_CHECK(self.dim() == 0 || self.size(d) > 0 || index.numel() == 0,
              "index_select(): self indexing axis dim should be positive");
  const TensorRef o = make_ref(out), s = make_ref(self),
                  i = make_ref(index.dim() == 1 ? index : index.reshape({-1}));
  const int di = static_cast<int>(d);
  launch_on(self, "aten::index_select",
            [o, s, i, di] { kernels::index_select(o, s, di, i, "index_select"); });
  return out;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  NEURON_TRACK_OP("aten::index_select");
  // Allocated at its final size (resize_output then has nothing to do).
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[static_cast<size_t>(wrap_dim(dim, self.dim()))] = index.numel();
  at::Tensor out = at::empty(sizes, self.options());
  return index_select_out_impl(self, dim, index, out);
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             at::Tensor& out) {
  NEURON_TRACK_OP("aten::index_select.out");
  return index_select_out_impl(self, dim, index, out);
}

// ---- gather / scatter ----

void check_gather_shapes(const char* op, const at::Tensor& self, int64_t dim,
                         const at::Tensor& index, const at::Tensor* src) {
  TORCH_CHECK(std::max<int64_t>(index.dim(), 1) == std::max<int64_t>(self.dim(), 1), op,
              "(): Index tensor must have the same number of dimensions as ",
              src ? "self tensor" : "input tensor");
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d != dim)
      TORCH_CHECK(index.size(d) <= self.size(d), op, "(): Expected index ", index.sizes(),
                  " to be no larger than self ", self.sizes(), " apart from dimension ", dim);
    if (src)
      TORCH_CHECK(index.size(d) <= src->size(d), op, "(): Expected index ", index.sizes(),
                  " to be no larger than src ", src->sizes());
  }
}

at::Tensor& gather_out_impl(const at::Tensor& self, int64_t dim, const at::Tensor& index_in,
                            at::Tensor& out) {
  if (index_in.numel() == 0) {
    // Like ATen: an empty index is not checked (dtype, rank); the result is empty.
    prepare_out("gather", out, index_in.sizes(), self.scalar_type(), self.device());
    return out;
  }
  check_index("gather", index_in);
  const at::Tensor index = to_device(index_in, self.device());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_gather_shapes("gather", self, d, index, nullptr);
  prepare_out("gather", out, index.sizes(), self.scalar_type(), self.device());
  if (out.numel() == 0) return out;
  TORCH_CHECK(!overlaps(out, self) && !overlaps(out, index),
              "gather(): out must not overlap its inputs");
  const TensorRef o = make_ref(out), s = make_ref(self), i = make_ref(index);
  const int di = static_cast<int>(d);
  launch_on(self, "aten::gather", [o, s, i, di] { kernels::gather(o, s, di, i, "gather"); });
  return out;
}

at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
  NEURON_TRACK_OP("aten::gather");
  at::Tensor out = at::empty({0}, self.options());
  return gather_out_impl(self, dim, index, out);
}

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       bool sparse_grad, at::Tensor& out) {
  NEURON_TRACK_OP("aten::gather.out");
  return gather_out_impl(self, dim, index, out);
}

kernels::ScatterReduce parse_reduce(const char* op, c10::string_view reduce, bool two) {
  if (two) {
    if (reduce == "sum") return kernels::ScatterReduce::Sum;
    if (reduce == "prod") return kernels::ScatterReduce::Prod;
    if (reduce == "mean") return kernels::ScatterReduce::Mean;
    if (reduce == "amax") return kernels::ScatterReduce::Amax;
    if (reduce == "amin") return kernels::ScatterReduce::Amin;
    TORCH_CHECK(false, op, "(): reduce argument must be either sum, prod, mean, amax or amin, got ",
                reduce);
  }
  if (reduce == "add") return kernels::ScatterReduce::Sum;
  if (reduce == "multiply") return kernels::ScatterReduce::Prod;
  TORCH_CHECK(false, op, "(): reduce argument must be either add or multiply, got ", reduce);
}

// `target` already holds self's values; scatters src (or value) into it.
void scatter_into(const char* name, at::Tensor& target, int64_t dim, const at::Tensor& index_in,
                  const at::Tensor* src, const c10::Scalar* value, kernels::ScatterReduce reduce,
                  bool include_self) {
  if (index_in.numel() == 0) return;  // like ATen: nothing scattered, the index is not checked
  check_index("scatter", index_in);
  const at::Tensor index = to_device(index_in, target.device());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(target.dim(), 1));
  at::Tensor s;
  if (src) {
    TORCH_CHECK(src->scalar_type() == target.scalar_type(),
                "scatter(): Expected self.dtype to be equal to src.dtype");
    check_device("scatter", target.device(), {src});
    s = *src;
  }
  check_gather_shapes("scatter", target, d, index, src ? &s : nullptr);
  if (index.numel() == 0) return;
  TORCH_CHECK(!src || !overlaps(target, s), "scatter(): src must not overlap self");
  const TensorRef t = make_ref(target), i = make_ref(index);
  const TensorRef sr = src ? make_ref(s) : TensorRef();
  const ScalarBytes v = value ? scalar_bytes(*value, target) : ScalarBytes{};
  const int di = static_cast<int>(d);
  launch_on(target, name, [t, i, sr, v, di, reduce, include_self, name] {
    kernels::scatter(t, di, i, sr, sr.data ? nullptr : v.b, reduce, include_self, name);
  });
}

at::Tensor& copy_self_into(const char* op, const at::Tensor& self, at::Tensor& out) {
  prepare_out(op, out, self.sizes(), self.scalar_type(), self.device());
  if (!out.is_same(self)) out.copy_(self);
  return out;
}

at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& src) {
  NEURON_TRACK_OP("aten::scatter.src");
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  scatter_into("aten::scatter.src", out, dim, index, &src, nullptr, kernels::ScatterReduce::Assign,
               true);
  return out;
}
at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
  NEURON_TRACK_OP("aten::scatter.src_out");
  copy_self_into("scatter", self, out);
  scatter_into("aten::scatter.src_out", out, dim, index, &src, nullptr,
               kernels::ScatterReduce::Assign, true);
  return out;
}
at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src) {
  NEURON_TRACK_OP("aten::scatter_.src");
  scatter_into("aten::scatter_.src", self, dim, index, &src, nullptr,
               kernels::ScatterReduce::Assign, true);
  return self;
}
at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const c10::Scalar& value) {
  NEURON_TRACK_OP("aten::scatter.value");
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  scatter_into("aten::scatter.value", out, dim, index, nullptr, &value,
               kernels::ScatterReduce::Assign, true);
  return out;
}
at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const c10::Scalar& value, at::Tensor& out) {
  NEURON_TRACK_OP("aten::scatter.value_out");
  copy_self_into("scatter", self, out);
  scatter_into("aten::scatter.value_out", out, dim, index, nullptr, &value,
               kernels::ScatterReduce::Assign, true);
  return out;
}
at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const c10::Scalar& value) {
  NEURON_TRACK_OP("aten::scatter_.value");
  scatter_into("aten::scatter_.value", self, dim, index, nullptr, &value,
               kernels::ScatterReduce::Assign, true);
  return self;
}
at::Tensor scatter_reduce_src(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& src, c10::string_view reduce) {
  NEURON_TRACK_OP("aten::scatter.reduce");
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  scatter_into("aten::scatter.reduce", out, dim, index, &src, nullptr,
               parse_reduce("scatter", reduce, false), true);
  return out;
}
at::Tensor& scatter_reduce_src_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Tensor& src, c10::string_view reduce) {
  NEURON_TRACK_OP("aten::scatter_.reduce");
  scatter_into("aten::scatter_.reduce", self, dim, index, &src, nullptr,
               parse_reduce("scatter_", reduce, false), true);
  return self;
}
at::Tensor& scatter_reduce_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce,
                                   at::Tensor& out) {
  NEURON_TRACK_OP("aten::scatter.reduce_out");
  copy_self_into("scatter", self, out);
  scatter_into("aten::scatter.reduce_out", out, dim, index, &src, nullptr,
               parse_reduce("scatter", reduce, false), true);
  return out;
}
at::Tensor scatter_value_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const c10::Scalar& value, c10::string_view reduce) {
  NEURON_TRACK_OP("aten::scatter.value_reduce");
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  scatter_into("aten::scatter.value_reduce", out, dim, index, nullptr, &value,
               parse_reduce("scatter", reduce, false), true);
  return out;
}
at::Tensor& scatter_value_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                                  const c10::Scalar& value, c10::string_view reduce) {
  NEURON_TRACK_OP("aten::scatter_.value_reduce");
  scatter_into("aten::scatter_.value_reduce", self, dim, index, nullptr, &value,
               parse_reduce("scatter_", reduce, false), true);
  return self;
}
at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const c10::Scalar& value, c10::string_view reduce,
                                     at::Tensor& out) {
  NEURON_TRACK_OP("aten::scatter.value_reduce_out");
  copy_self_into("scatter", self, out);
  scatter_into("aten::scatter.value_reduce_out", out, dim, index, nullptr, &value,
               parse_reduce("scatter", reduce, false), true);
  return out;
}
at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& src) {
  NEURON_TRACK_OP("aten::scatter_add");
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  scatter_into("aten::scatter_add", out, dim, index, &src, nullptr, kernels::ScatterReduce::Sum,
               true);
  return out;
}
at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src) {
  NEURON_TRACK_OP("aten::scatter_add_");
  scatter_into("aten::scatter_add_", self, dim, index, &src, nullptr, kernels::ScatterReduce::Sum,
               true);
  return self;
}
at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
  NEURON_TRACK_OP("aten::scatter_add.out");
  copy_self_into("scatter_add", self, out);
  scatter_into("aten::scatter_add.out", out, dim, index, &src, nullptr, kernels::ScatterReduce::Sum,
               true);
  return out;
}
at::Tensor scatter_reduce_two(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& src, c10::string_view reduce, bool include_self) {
  NEURON_TRACK_OP("aten::scatter_reduce.two");
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  scatter_into("aten::scatter_reduce.two", out, dim, index, &src, nullptr,
               parse_reduce("scatter_reduce", reduce, true), include_self);
  return out;
}
at::Tensor& scatter_reduce_two_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Tensor& src, c10::string_view reduce, bool include_self) {
  NEURON_TRACK_OP("aten::scatter_reduce_.two");
  scatter_into("aten::scatter_reduce_.two", self, dim, index, &src, nullptr,
               parse_reduce("scatter_reduce_", reduce, true), include_self);
  return self;
}
at::Tensor& scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce,
                                   bool include_self, at::Tensor& out) {
  NEURON_TRACK_OP("aten::scatter_reduce.two_out");
  copy_self_into("scatter_reduce", self, out);
  scatter_into("aten::scatter_reduce.two_out", out, dim, index, &src, nullptr,
               parse_reduce("scatter_reduce", reduce, true), include_self);
  return out;
}

// ---- advanced indexing ----

// ATen's AdvancedIndex, computed here: `src` is self restrided to the result's shape (zero
// strides over the index dims), each index is viewed/expanded to the result's shape.
struct AdvIndex {
  at::Tensor src;
  std::vector<at::Tensor> indices;
  kernels::AdvancedIndexRef ref;
  std::vector<int64_t> result_sizes;
};

AdvIndex make_adv(const at::Tensor& self_in, const c10::List<std::optional<at::Tensor>>& orig,
                  const char* op) {
  for (const std::optional<at::Tensor>& t : orig) {
    if (!t.has_value() || !t->defined()) continue;
    const auto st = t->scalar_type();
    TORCH_CHECK_INDEX(st == at::kLong || st == at::kInt || st == at::kByte || st == at::kBool,
                      "tensors used as indices must be long, int, byte or bool tensors");
  }
  TORCH_CHECK_INDEX(orig.size() <= static_cast<size_t>(self_in.dim()),
                    "too many indices for tensor of dimension ", self_in.dim(), " (got ",
                    orig.size(), ")");
  std::vector<at::Tensor> indices =
      at::native::expandTensors(self_in, orig, /*ensure_same_device=*/true);
  for (auto& t : indices)
    if (t.defined()) t = to_device(t, self_in.device());
  try {
    indices = at::expand_outplace(indices);
  } catch (std::exception&) {
    std::ostringstream os;
    bool first = true;
    for (const auto& t : indices)
      if (t.defined()) {
        os << (first ? "" : ", ") << t.sizes();
        first = false;
      }
    TORCH_CHECK_INDEX(
        false, "shape mismatch: indexing tensors could not be broadcast together with shapes ",
        os.str());
  }
  while (indices.size() < static_cast<size_t>(self_in.dim())) indices.emplace_back();
  at::Tensor self = self_in;
  if (!at::native::hasContiguousSubspace(indices))
    std::tie(self, indices) = at::native::transposeToFront(self, indices);
  AdvIndex a;
  int64_t before = 0, indexed = 0;
  at::IntArrayRef index_shape;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i].defined()) {
      if (indexed == 0) index_shape = indices[i].sizes();
      TORCH_CHECK(indexed < kernels::kMaxIndexTensors, op, ": at most ", kernels::kMaxIndexTensors,
                  " index tensors are supported");
      a.ref.indexed_sizes[indexed] = self.size(static_cast<int64_t>(i));
      a.ref.indexed_strides[indexed] = self.stride(static_cast<int64_t>(i));
      ++indexed;
    } else if (indexed == 0) {
      ++before;
    }
  }
  const int64_t after = self.dim() - before - indexed;
  std::vector<int64_t> sizes, strides;
  for (int64_t d = 0; d < before; ++d) {
    sizes.push_back(self.size(d));
    strides.push_back(self.stride(d));
  }
  for (int64_t s : index_shape) {
    sizes.push_back(s);
    strides.push_back(0);
  }
  for (int64_t d = before + indexed; d < self.dim(); ++d) {
    sizes.push_back(self.size(d));
    strides.push_back(self.stride(d));
  }
  for (int64_t k = 0; k < indexed; ++k) {
    if (a.ref.indexed_sizes[k] == 0 &&
        std::accumulate(index_shape.begin(), index_shape.end(), int64_t{1},
                        std::multiplies<int64_t>()) != 0) {
      TORCH_CHECK_INDEX(false, "index is out of bounds for dimension with size 0");
    }
  }
  a.src = self.as_strided(sizes, strides, self.storage_offset());
  a.result_sizes = sizes;
  a.ref.nidx = static_cast<int>(indexed);
  int k = 0;
  for (const auto& t : indices) {
    if (!t.defined()) continue;
    std::vector<int64_t> view(static_cast<size_t>(before), 1);
    for (int64_t s : t.sizes()) view.push_back(s);
    for (int64_t d = 0; d < after; ++d) view.push_back(1);
    at::Tensor e = t.reshape(view).expand(sizes);
    a.indices.push_back(e);
    a.ref.index[k++] = make_ref(e);
  }
  return a;
}

at::Tensor& index_out_impl(const at::Tensor& self,
                           const c10::List<std::optional<at::Tensor>>& indices, at::Tensor& out) {
  AdvIndex a = make_adv(self, indices, "index");
  prepare_out("index", out, a.result_sizes, self.scalar_type(), self.device());
  if (out.numel() == 0) return out;
  TORCH_CHECK(!overlaps(out, self), "index(): out must not overlap self");
  const TensorRef o = make_ref(out), s = make_ref(a.src);
  const kernels::AdvancedIndexRef ai = a.ref;
  launch_on(self, "aten::index.Tensor", [o, s, ai] { kernels::index_gather(o, s, ai, "index"); });
  return out;
}

at::Tensor index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  NEURON_TRACK_OP("aten::index.Tensor");
  at::Tensor out = at::empty({0}, self.options());
  return index_out_impl(self, indices, out);
}

at::Tensor& index_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                      at::Tensor& out) {
  NEURON_TRACK_OP("aten::index.Tensor_out");
  return index_out_impl(self, indices, out);
}

at::Tensor& masked_fill_tensor_impl(at::Tensor& self, const at::Tensor& mask,
                                    const at::Tensor& value, const char* name);

at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values, bool accumulate, bool unsafe) {
  NEURON_TRACK_OP("aten::_index_put_impl_");
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()),
                    "too many indices for tensor of dimension ", self.dim(), " (got ",
                    indices.size(), ")");
  check_device("index_put_", self.device(), {&values});
  at::assert_no_internal_overlap(self);
  // A single boolean mask with one value is a masked_fill: no synchronization for nonzero.
  if (!accumulate && values.numel() == 1) {
    int64_t masks = 0, defined = 0;
    at::Tensor mask;
    for (const std::optional<at::Tensor>& t : indices) {
      if (!t.has_value() || !t->defined()) continue;
      ++defined;
      if (t->scalar_type() == at::kBool) {
        ++masks;
        mask = *t;
      }
    }
    if (masks == 1 && defined == 1 && indices.size() >= 1 && indices.get(0).has_value() &&
        indices.get(0)->defined() && indices.get(0)->scalar_type() == at::kBool) {
      TORCH_CHECK_INDEX(mask.dim() <= self.dim(), "too many indices for tensor of dimension ",
                        self.dim());
      for (int64_t j = 0; j < mask.dim(); ++j)
        TORCH_CHECK_INDEX(mask.size(j) == self.size(j), "The shape of the mask ", mask.sizes(),
                          " at index ", j, " does not match the shape of the indexed tensor ",
                          self.sizes(), " at index ", j);
      at::Tensor m = to_device(mask, self.device());
      while (m.dim() < self.dim()) m = m.unsqueeze(-1);
      return masked_fill_tensor_impl(self, m, values.reshape({}), "aten::_index_put_impl_");
    }
  }
  AdvIndex a = make_adv(self, indices, "index_put_");
  at::Tensor v =
      values.scalar_type() == self.scalar_type() ? values : values.to(self.scalar_type());
  TORCH_CHECK(at::is_expandable_to(v.sizes(), a.result_sizes),
              "shape mismatch: value tensor of shape ", v.sizes(),
              " cannot be broadcast to indexing result of shape ",
              c10::IntArrayRef(a.result_sizes));
  if (a.src.numel() == 0) return self;
  if (overlaps(self, v)) v = v.clone();
  const TensorRef d = make_ref(a.src), vr = make_ref(v.expand(a.result_sizes));
  const kernels::AdvancedIndexRef ai = a.ref;
  launch_on(self, "aten::_index_put_impl_",
            [d, vr, ai, accumulate] { kernels::index_put(d, vr, ai, accumulate, "index_put_"); });
  return self;
}

// ---- masks ----

void check_mask(const char* op, const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, op,
              " only supports boolean masks, but got mask with dtype ", mask.scalar_type());
  TORCH_CHECK(at::is_expandable_to(mask.sizes(), self.sizes()), op, ": the mask of shape ",
              mask.sizes(), " cannot be broadcast to self's shape ", self.sizes());
}

at::Tensor& masked_fill_tensor_impl(at::Tensor& self, const at::Tensor& mask_in,
                                    const at::Tensor& value, const char* name) {
  const at::Tensor mask = to_device(mask_in, self.device());
  check_mask("masked_fill_", self, mask);
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  if (!is_neuron(value)) {
    const ScalarBytes v = scalar_bytes(value.item(), self);
    const TensorRef s = make_ref(self), m = make_ref(mask.expand(self.sizes()));
    launch_on(self, name, [s, m, v] { kernels::masked_fill(s, m, v.b); });
    return self;
  }
  // A neuron scalar: read it inside the task (ordered after its producer).
  const at::Tensor vv =
      value.scalar_type() == self.scalar_type() ? value : value.to(self.scalar_type());
  const void* vp = vv.data_ptr();
  const size_t esz = self.element_size();
  const TensorRef s = make_ref(self), m = make_ref(mask.expand(self.sizes()));
  launch_on(self, name, [s, m, vp, esz] {
    unsigned char b[16];
    std::memcpy(b, vp, esz);
    kernels::masked_fill(s, m, b);
  });
  return self;
}

at::Tensor& masked_fill_scalar_(at::Tensor& self, const at::Tensor& mask_in,
                                const c10::Scalar& value) {
  NEURON_TRACK_OP("aten::masked_fill_.Scalar");
  const at::Tensor mask = to_device(mask_in, self.device());
  check_mask("masked_fill_", self, mask);
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  const ScalarBytes v = scalar_bytes(value, self);
  const TensorRef s = make_ref(self), m = make_ref(mask.expand(self.sizes()));
  launch_on(self, "aten::masked_fill_.Scalar", [s, m, v] { kernels::masked_fill(s, m, v.b); });
  return self;
}

at::Tensor& masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  NEURON_TRACK_OP("aten::masked_fill_.Tensor");
  return masked_fill_tensor_impl(self, mask, value, "aten::masked_fill_.Tensor");
}

at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask_in, const at::Tensor& source) {
  NEURON_TRACK_OP("aten::masked_scatter_");
  const at::Tensor mask = to_device(mask_in, self.device());
  check_mask("masked_scatter_", self, mask);
  TORCH_CHECK(source.scalar_type() == self.scalar_type(),
              "masked_scatter_: expected self and source to have same "
              "dtypes but got ",
              self.scalar_type(), " and ", source.scalar_type());
  check_device("masked_scatter_", self.device(), {&source});
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  const at::Tensor src = source.reshape({-1});
  const TensorRef s = make_ref(self), m = make_ref(mask.expand(self.sizes())), so = make_ref(src);
  launch_on(self, "aten::masked_scatter_",
            [s, m, so] { kernels::masked_scatter(s, m, so, "masked_scatter_"); });
  return self;
}

// Runs `count` on the stream and waits for it: the size of a data-dependent result.
int64_t synchronized_count(const at::Tensor& on, const char* name, std::function<int64_t()> count) {
  auto result = std::make_shared<int64_t>(0);
  launch_on(on, name, [result, count = std::move(count)] { *result = count(); });
  translate_errors([&] { current_stream(on.device().index()).synchronize(); });
  return *result;
}

at::Tensor& nonzero_out_impl(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong || out.scalar_type() == at::kInt,
              "nonzero: Expected out tensor to have scalar type Long but got ", out.scalar_type());
  const TensorRef s = make_ref(self);
  const int64_t n = self.numel() ? synchronized_count(self, "aten::nonzero",
                                                      [s] { return kernels::count_nonzero(s); })
                                 : 0;
  at::native::resize_output(out, {n, self.dim()});
  if (n == 0 || self.dim() == 0) {
    return out;
  }
  const TensorRef o = make_ref(out);
  launch_on(self, "aten::nonzero", [o, s] { kernels::nonzero(o, s); });
  return out;
}

at::Tensor nonzero(const at::Tensor& self) {
  NEURON_TRACK_OP("aten::nonzero");
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out_impl(self, out);
}

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  NEURON_TRACK_OP("aten::nonzero.out");
  return nonzero_out_impl(self, out);
}

at::Tensor& masked_select_out_impl(const at::Tensor& self, const at::Tensor& mask_in,
                                   at::Tensor& out) {
  const at::Tensor mask = to_device(mask_in, self.device());
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto [s, m] = at::expand_outplace(self, mask);
  const TensorRef mr = make_ref(*m);
  const int64_t n = mr.numel() ? synchronized_count(self, "aten::masked_select",
                                                    [mr] { return kernels::count_nonzero(mr); })
                               : 0;
  prepare_out("masked_select", out, {n}, self.scalar_type(), self.device());
  if (n == 0) return out;
  const TensorRef o = make_ref(out), sr = make_ref(*s);
  launch_on(self, "aten::masked_select", [o, sr, mr] { kernels::masked_select(o, sr, mr); });
  return out;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  NEURON_TRACK_OP("aten::masked_select");
  at::Tensor out = at::empty({0}, self.options());
  return masked_select_out_impl(self, mask, out);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  NEURON_TRACK_OP("aten::masked_select.out");
  return masked_select_out_impl(self, mask, out);
}

// ---- index_copy / index_fill / index_add ----

void check_index_update(const char* op, const at::Tensor& self, int64_t dim,
                        const at::Tensor& index, const at::Tensor* source) {
  check_index(op, index);
  TORCH_CHECK(index.dim() <= 1, op, "(): Index should have dimension 1 or 0 (got ", index.dim(),
              ")");
  if (!source) return;
  TORCH_CHECK(source->scalar_type() == self.scalar_type(), op, "(): self (", self.scalar_type(),
              ") and source (", source->scalar_type(), ") must have the same scalar type");
  check_device(op, self.device(), {source});
  TORCH_CHECK(
      std::max<int64_t>(source->dim(), 1) == std::max<int64_t>(self.dim(), 1), op,
      "(): When source and destination are not scalars, their dimensionality must match. Source "
      "dimensionality (",
      source->dim(), "), destination dimensionality (", self.dim(), ")");
  const int64_t n = source->dim() ? source->size(dim) : 1;
  TORCH_CHECK(index.numel() == n, op, "(): Number of indices (", index.numel(),
              ") should be equal to source.size(dim) (", n, ")");
  for (int64_t d = 0; d < self.dim(); ++d)
    if (d != dim)
      TORCH_CHECK(self.size(d) == source->size(d), op, "(): source ", source->sizes(),
                  " and destination ", self.sizes(), " shapes must match apart from dimension ",
                  dim);
}

void index_update_into(const char* name, const char* op, at::Tensor& self, int64_t dim,
                       const at::Tensor& index_in, const at::Tensor* source,
                       kernels::IndexUpdate mode, double alpha, const c10::Scalar* value) {
  const at::Tensor index = to_device(index_in, self.device());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_index_update(op, self, d, index, source);
  at::assert_no_internal_overlap(self);
  if (index.numel() == 0 || self.numel() == 0) return;
  at::Tensor src = source ? *source : at::Tensor();
  if (src.defined() && overlaps(self, src)) src = src.clone();
  const TensorRef s = make_ref(self), i = make_ref(index.reshape({-1}));
  const TensorRef sr = src.defined() ? make_ref(src) : TensorRef();
  const ScalarBytes v = value ? scalar_bytes(*value, self) : ScalarBytes{};
  const int di = static_cast<int>(d);
  launch_on(self, name, [s, i, sr, v, di, mode, alpha, op] {
    kernels::index_update(s, di, i, sr, mode, alpha, v.b, op);
  });
}

at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                        const at::Tensor& source) {
  NEURON_TRACK_OP("aten::index_copy_");
  index_update_into("aten::index_copy_", "index_copy_", self, dim, index, &source,
                    kernels::IndexUpdate::Copy, 1.0, nullptr);
  return self;
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Tensor& source, at::Tensor& out) {
  NEURON_TRACK_OP("aten::index_copy.out");
  copy_self_into("index_copy", self, out);
  index_update_into("aten::index_copy.out", "index_copy", out, dim, index, &source,
                    kernels::IndexUpdate::Copy, 1.0, nullptr);
  return out;
}

at::Tensor& index_fill_scalar_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const c10::Scalar& value) {
  NEURON_TRACK_OP("aten::index_fill_.int_Scalar");
  index_update_into("aten::index_fill_.int_Scalar", "index_fill_", self, dim, index, nullptr,
                    kernels::IndexUpdate::Fill, 1.0, &value);
  return self;
}

at::Tensor& index_fill_tensor_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const at::Tensor& value) {
  NEURON_TRACK_OP("aten::index_fill_.int_Tensor");
  TORCH_CHECK(value.dim() == 0,
              "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  if (!is_neuron(value)) {
    const c10::Scalar v = value.item();
    index_update_into("aten::index_fill_.int_Tensor", "index_fill_", self, dim, index, nullptr,
                      kernels::IndexUpdate::Fill, 1.0, &v);
    return self;
  }
  // A neuron value is read inside the task (ordered after its producer): no synchronization.
  const at::Tensor idx = to_device(index, self.device());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_index_update("index_fill_", self, d, idx, nullptr);
  if (idx.numel() == 0 || self.numel() == 0) return self;
  const at::Tensor vv =
      value.scalar_type() == self.scalar_type() ? value : value.to(self.scalar_type());
  const void* vp = vv.data_ptr();
  const size_t esz = self.element_size();
  const TensorRef s = make_ref(self), i = make_ref(idx.reshape({-1}));
  const int di = static_cast<int>(d);
  launch_on(self, "aten::index_fill_.int_Tensor", [s, i, di, vp, esz] {
    unsigned char b[16];
    std::memcpy(b, vp, esz);
    kernels::index_update(s, di, i, TensorRef(), kernels::IndexUpdate::Fill, 1.0, b, "index_fill_");
  });
  return self;
}

at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& source, const c10::Scalar& alpha) {
  NEURON_TRACK_OP("aten::index_add_");
  index_update_into("aten::index_add_", "index_add_", self, dim, index, &source,
                    kernels::IndexUpdate::Add, alpha.toDouble(), nullptr);
  return self;
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& source, const c10::Scalar& alpha, at::Tensor& out) {
  NEURON_TRACK_OP("aten::index_add.out");
  copy_self_into("index_add", self, out);
  index_update_into("aten::index_add.out", "index_add", out, dim, index, &source,
                    kernels::IndexUpdate::Add, alpha.toDouble(), nullptr);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("index_select.out", TORCH_FN(index_select_out));
  m.impl("gather", TORCH_FN(gather));
  m.impl("gather.out", TORCH_FN(gather_out));
  m.impl("scatter.src", TORCH_FN(scatter_src));
  m.impl("scatter.src_out", TORCH_FN(scatter_src_out));
  m.impl("scatter_.src", TORCH_FN(scatter_src_));
  m.impl("scatter.value", TORCH_FN(scatter_value));
  m.impl("scatter.value_out", TORCH_FN(scatter_value_out));
  m.impl("scatter_.value", TORCH_FN(scatter_value_));
  m.impl("scatter.reduce", TORCH_FN(scatter_reduce_src));
  m.impl("scatter.reduce_out", TORCH_FN(scatter_reduce_src_out));
  m.impl("scatter_.reduce", TORCH_FN(scatter_reduce_src_));
  m.impl("scatter.value_reduce", TORCH_FN(scatter_value_reduce));
  m.impl("scatter.value_reduce_out", TORCH_FN(scatter_value_reduce_out));
  m.impl("scatter_.value_reduce", TORCH_FN(scatter_value_reduce_));
  m.impl("scatter_add", TORCH_FN(scatter_add));
  m.impl("scatter_add.out", TORCH_FN(scatter_add_out));
  m.impl("scatter_add_", TORCH_FN(scatter_add_));
  m.impl("scatter_reduce.two", TORCH_FN(scatter_reduce_two));
  m.impl("scatter_reduce.two_out", TORCH_FN(scatter_reduce_two_out));
  m.impl("scatter_reduce_.two", TORCH_FN(scatter_reduce_two_));
  m.impl("index.Tensor", TORCH_FN(index));
  m.impl("index.Tensor_out", TORCH_FN(index_out));
  m.impl("_index_put_impl_", TORCH_FN(index_put_impl_));
  m.impl("masked_fill_.Scalar", TORCH_FN(masked_fill_scalar_));
  m.impl("masked_fill_.Tensor", TORCH_FN(masked_fill_tensor_));
  m.impl("masked_scatter_", TORCH_FN(masked_scatter_));
  m.impl("masked_select", TORCH_FN(masked_select));
  m.impl("masked_select.out", TORCH_FN(masked_select_out));
  m.impl("nonzero", TORCH_FN(nonzero));
  m.impl("nonzero.out", TORCH_FN(nonzero_out));
  m.impl("index_copy_", TORCH_FN(index_copy_));
  m.impl("index_copy.out", TORCH_FN(index_copy_out));
  m.impl("index_fill_.int_Scalar", TORCH_FN(index_fill_scalar_));
  m.impl("index_fill_.int_Tensor", TORCH_FN(index_fill_tensor_));
  m.impl("index_add_", TORCH_FN(index_add_));
  m.impl("index_add.out", TORCH_FN(index_add_out));
}

}  // namespace neuron::torch_glue
