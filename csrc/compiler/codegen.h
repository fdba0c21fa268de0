// Code generation for fused kernels: a fused body (elementwise, reduction, view, cat/pad ops
// over leaf buffers) becomes one VM kernel. Every body value is emitted under an index map
// from the kernel domain; values reached through their canonical map share a register,
// values reached through other views are recomputed from their leaves (inlined). The domain
// is refined until every map is affine. Also used by the fusion pass to test whether a group
// of nodes can become one kernel.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir.h"
#include "vm.h"

namespace neuron::cc {

// Layout of the buffer behind a body input (or output).
struct LeafLayout {
  std::vector<int64_t> strides;
  bool contiguous = true;
};

struct FusedKernel {
  vm::Kernel kernel;
  // Buffer of each VM operand: body input i is buffer i, body output j is n_inputs + j.
  std::vector<int> operand_buffer;
};

struct CodegenResult {
  std::optional<FusedKernel> fused;
  std::string why;
};

// `F` is the kernel's logical domain, `reduced` marks its reduced dims (all false for an
// elementwise kernel). `inputs` / `outputs` give the layouts of the body's inputs/outputs.
CodegenResult codegen_fused(const Graph& body, const Shape& F, const std::vector<bool>& reduced,
                            const std::vector<LeafLayout>& inputs,
                            const std::vector<LeafLayout>& outputs);

// True when a value of this dtype can live in a fused kernel (no f64/complex arithmetic).
bool fusable_dtype(DType t);

}  // namespace neuron::cc
