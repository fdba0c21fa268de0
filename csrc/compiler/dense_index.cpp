// Indexing steps (advanced indexing, gather/scatter along a dim, slice_scatter) as adapters to
// the kernels layer's index routines (kernels/index.h, the eager ops' code).
#include <vector>

#include "dense.h"
#include "error.h"
#include "kernels/copy.h"
#include "kernels/index.h"

namespace neuron::cc::dense {

namespace {

int64_t esize(const TensorRef& t) { return static_cast<int64_t>(kernels::element_size(t.dtype)); }

// ATen's advanced-indexing layout for x[idx...] (idx[k] indexes dim dims[k], all broadcast to
// one shape): x restrided to the result's shape with zero strides over the index dims, each
// index restrided to the result's shape. Index dims that are not adjacent go to the front.
struct Advanced {
  TensorRef src;
  kernels::AdvancedIndexRef ref;
};

Advanced advanced(const TensorRef& x, const TensorRef& r, const std::vector<TensorRef>& idx,
                  const std::vector<int>& dims) {
  if (idx.size() != dims.size() || idx.empty())
    throw ExecError("index: needs one dim per index tensor");
  if (idx.size() > static_cast<size_t>(kernels::kMaxIndexTensors))
    throw ExecError(rt::str("index: at most ", kernels::kMaxIndexTensors, " index tensors"));
  const int nb = idx[0].ndim;
  for (const TensorRef& t : idx)
    if (t.ndim != nb) throw ExecError("index: index tensors must be broadcast to one shape");
  bool adjacent = true;
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] != dims[i - 1] + 1) adjacent = false;
  std::vector<bool> indexed(static_cast<size_t>(x.ndim), false);
  for (int d : dims) {
    if (d < 0 || d >= x.ndim) throw ExecError("index: indexed dim out of range");
    indexed[static_cast<size_t>(d)] = true;
  }
  Advanced a;
  a.src = x;
  a.src.ndim = 0;
  int before = 0;
  auto push = [&](int64_t size, int64_t stride) {
    if (a.src.ndim >= kernels::kMaxDims) throw ExecError("index: too many dims");
    a.src.sizes[a.src.ndim] = size;
    a.src.strides[a.src.ndim++] = stride;
  };
  if (adjacent)
    for (; before < dims[0]; ++before) push(x.sizes[before], x.strides[before]);
  for (int j = 0; j < nb; ++j) push(idx[0].sizes[j], 0);
  for (int d = adjacent ? dims[0] : 0; d < x.ndim; ++d)
    if (!indexed[static_cast<size_t>(d)]) push(x.sizes[d], x.strides[d]);
  if (a.src.ndim != r.ndim) throw ExecError("index: result rank does not match the indexing");
  for (int d = 0; d < r.ndim; ++d)
    if (a.src.sizes[d] != r.sizes[d]) throw ExecError("index: result shape does not match");
  a.ref.nidx = static_cast<int>(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    a.ref.indexed_sizes[k] = x.sizes[dims[k]];
    a.ref.indexed_strides[k] = x.strides[dims[k]];
    TensorRef& e = a.ref.index[k];
    e = idx[k];
    e.ndim = r.ndim;
    for (int d = 0; d < r.ndim; ++d) {
      const bool in_index = d >= before && d < before + nb;
      e.sizes[d] = r.sizes[d];
      e.strides[d] = in_index ? idx[k].strides[d - before] : 0;
    }
  }
  return a;
}

}  // namespace

void index(const TensorRef& x, const TensorRef& out, const std::vector<TensorRef>& idx,
           const std::vector<int>& dims) {
  const Advanced a = advanced(x, out, idx, dims);
  if (out.numel() == 0) return;
  kernels::index_gather(out, a.src, a.ref, "index");
}

void index_put(const TensorRef& self, const TensorRef& values, const TensorRef& out,
               const std::vector<TensorRef>& idx, const std::vector<int>& dims, bool accumulate,
               bool inplace) {
  if (!inplace) kernels::copy(out, self);
  const Advanced a = advanced(out, values, idx, dims);
  if (values.numel() == 0) return;
  kernels::index_put(a.src, values, a.ref, accumulate, "index_put");
}

void gather(const TensorRef& x, const TensorRef& index, const TensorRef& out, int dim) {
  kernels::gather(out, x, dim, index, "gather");
}

void scatter(const TensorRef& self, const TensorRef& index, const TensorRef& src,
             const TensorRef& out, int dim, bool add, bool inplace) {
  if (!inplace) kernels::copy(out, self);
  kernels::scatter(out, dim, index, src, nullptr,
                   add ? kernels::ScatterReduce::Sum : kernels::ScatterReduce::Assign, true,
                   add ? "scatter_add" : "scatter");
}

void slice_scatter(const TensorRef& self, const TensorRef& src, const TensorRef& out, int dim,
                   int64_t start, int64_t end, int64_t step, bool inplace) {
  if (!inplace) kernels::copy(out, self);
  TensorRef view = out;
  view.data = static_cast<char*>(out.data) + start * out.strides[dim] * esize(out);
  view.sizes[dim] = step > 0 ? (end - start + step - 1) / step : 0;
  view.strides[dim] = out.strides[dim] * step;
  if (view.sizes[dim] != src.sizes[dim])
    throw ExecError("slice_scatter: src does not fill the slice");
  kernels::copy(view, src);
}

}  // namespace neuron::cc::dense
