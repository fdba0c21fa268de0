// The compiler passes. Each is a small function Graph -> Graph (in place) that preserves the
// graph's semantics; the pass manager (compiler.h) runs the verifier after each one and can
// dump the IR after each one (TORCH_NEURONX_DEBUG_DIR).
#pragma once

#include <string>
#include <vector>

#include "ir.h"

namespace neuron::cc {

struct PassStats {
  int changed = 0;  // nodes added/removed/rewritten (for dumps and tests)
};

// Removes nodes whose results are unused.
PassStats dce(Graph& g);
// Merges identical nodes (same op, inputs, attrs, types); constants compare by value.
PassStats cse(Graph& g);
// Removes no-op views and casts, merges chains of reshapes/permutes, drops copies.
PassStats canonicalize(Graph& g);
// Evaluates nodes whose inputs are all constants (results up to `max_elements`).
PassStats fold_constants(Graph& g, int64_t max_elements = 1 << 20);
// matmul -> [scale] -> [+mask] -> softmax -> matmul becomes one `attention` node.
PassStats fuse_attention(Graph& g);
// Groups elementwise ops, reductions and views into `fused` nodes (one VM kernel each).
PassStats fuse_elementwise(Graph& g, int max_members = 96);
// A fused elementwise kernel that only post-processes a matmul result becomes its epilogue.
PassStats fuse_gemm_epilogue(Graph& g);
// Makes every operand of a dense kernel a plain strided view (inserts copies when not).
PassStats legalize_views(Graph& g);

// A reduction (sum, mean, prod, amax, amin over floats) that runs as one call of the eager
// reduction kernel (kernels/reduce.h) instead of a fused kernel: its input's innermost dim is
// contiguous and kept (the bias gradient of a Linear sums over the batch rows), where a fused
// kernel would walk the reduced dims with strided loads. It is not fused with its producers.
bool is_dense_reduction(const Graph& g, const UseInfo& uses, const Node& n);

// Layout (strides) a materialized value gets: graph inputs keep theirs, graph outputs get the
// requested strides, everything else is contiguous.
std::vector<int64_t> layout_of(const Graph& g, int value);
bool is_contiguous_layout(const Shape& shape, const std::vector<int64_t>& strides);

// Replaces every use of value `from` by `to` (nodes, outputs, mutations).
void replace_uses(Graph& g, int from, int to);

}  // namespace neuron::cc
