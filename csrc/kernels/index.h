// Indexing kernels: index_select/embedding, index_copy/index_add/index_fill, the embedding
// gradient, gather/scatter/scatter_reduce, advanced indexing (x[i, j] and x[i, j] = v),
// masked_fill/masked_scatter/masked_select and nonzero. Index tensors may be int32 or int64.
// Out-of-range indices throw std::out_of_range naming the op, the index and the bound; inside
// queued work that surfaces at the next synchronization (like a CUDA device-side assert).
// Operations whose writes may collide (index_add, scatter_add/reduce, accumulating index_put,
// the embedding gradient) apply the updates of one destination in index order, so results do
// not depend on the thread count.
#pragma once

#include <cstdint>

#include "tensor_ref.h"

namespace neuron::kernels {

// out.select(dim, i) = src.select(dim, index[i]); index is 1-d (or 0-d). out and src have the
// same dtype and the same sizes except along dim.
void index_select(const TensorRef& out, const TensorRef& src, int dim, const TensorRef& index,
                  const char* op);

enum class IndexUpdate { Copy, Add, Fill };
// self.select(dim, index[i]) = source.select(dim, i)            (Copy)
//                           += alpha * source.select(dim, i)    (Add)
//                            = *fill_value (bytes of self's dtype)  (Fill; source unused)
// Negative indices wrap for Fill (index_fill), like ATen.
void index_update(const TensorRef& self, int dim, const TensorRef& index, const TensorRef& source,
                  IndexUpdate mode, double alpha, const void* fill_value, const char* op);

// grad_weight[V, D] (written in full) = sum over i with indices[i] == v (!= padding_idx) of
// grad[i, :] (divided by the count of v when scale_grad_by_freq). Sums in fp32 (fp64 for double).
void embedding_backward(const TensorRef& grad_weight, const TensorRef& grad,
                        const TensorRef& indices, int64_t padding_idx, bool scale_grad_by_freq);

// For each distinct index v: if the norm_type-norm of weight[v, :] exceeds max_norm, scale the row
// by max_norm / (norm + 1e-7) (embedding with max_norm), in place.
void embedding_renorm(const TensorRef& weight, const TensorRef& indices, double max_norm,
                      double norm_type);

// out[p] = self[p with p[dim] = index[p]]: index, out of the same shape; self at least as big
// in every dim but `dim`.
void gather(const TensorRef& out, const TensorRef& self, int dim, const TensorRef& index,
            const char* op);

enum class ScatterReduce { Assign, Sum, Prod, Mean, Amax, Amin };
// self[p with p[dim] = index[p]] (reduce)= src[p] (or *value, bytes of self's dtype, when src
// has data == nullptr) for every position p of index. include_self = false ignores self's old
// value at every destination that receives an update.
void scatter(const TensorRef& self, int dim, const TensorRef& index, const TensorRef& src,
             const void* value, ScatterReduce reduce, bool include_self, const char* op);

// Advanced indexing over `nidx` broadcast index tensors (see the torch glue for the layout).
constexpr int kMaxIndexTensors = 8;
struct AdvancedIndexRef {
  int nidx = 0;
  TensorRef index[kMaxIndexTensors];               // each restrided to the result's shape
  int64_t indexed_sizes[kMaxIndexTensors] = {};    // sizes of the indexed dims of self
  int64_t indexed_strides[kMaxIndexTensors] = {};  // their strides (elements of self)
};
// out[p] = src[p + sum_k index_k[p] * indexed_strides[k]] (src restrided: zero strides over the
// index dims). Negative indices wrap.
void index_gather(const TensorRef& out, const TensorRef& src, const AdvancedIndexRef& ai,
                  const char* op);
// dst[p + offsets] = values[p] (or += when accumulate); dst restrided like src above.
void index_put(const TensorRef& dst, const TensorRef& values, const AdvancedIndexRef& ai,
               bool accumulate, const char* op);

// self[p] = *value where mask[p] (mask: bool, broadcast to self's shape by strides).
void masked_fill(const TensorRef& self, const TensorRef& mask, const void* value);
// The number of elements that are not zero (any dtype).
int64_t count_nonzero(const TensorRef& t);
// out [n, ndim] (int64 or int32): the coordinates of the non-zero elements in row-major order.
void nonzero(const TensorRef& out, const TensorRef& self);
// out [n] = self[mask] in row-major order (self and mask of the same shape).
void masked_select(const TensorRef& out, const TensorRef& self, const TensorRef& mask);
// self[mask] = source[0, 1, ...] in row-major order; source is 1-d with at least count(mask)
// elements (else std::invalid_argument naming the op).
void masked_scatter(const TensorRef& self, const TensorRef& mask, const TensorRef& source,
                    const char* op);

}  // namespace neuron::kernels
