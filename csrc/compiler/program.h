// The executable form of a compiled graph: a list of kernel steps over four buffer spaces
// (inputs, outputs, constants, one arena). It is what a NEFF stores and what the executor
// runs as one stream task. validate() bounds-checks every tensor a step touches so a
// corrupted program cannot address memory outside its buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bytes.h"
#include "ir.h"
#include "kernels/tensor_ref.h"
#include "vm.h"

namespace neuron::cc {

enum class Space : uint8_t { Input, Output, Arena, Constant };

// A strided view of one buffer.
struct TensorDesc {
  Space space = Space::Arena;
  int32_t index = 0;        // input/output/constant number
  int64_t byte_offset = 0;  // Arena: where the buffer starts
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // elements
  int64_t offset = 0;            // elements from the buffer start
};

enum class StepKind : uint8_t {
  Fused,         // tensors: VM buffers; kernel + kernel_buffers
  Gemm,          // tensors: A, B, C [, epilogue buffers]; floats: alpha, beta
  Attention,     // tensors: q, k, v, out [, mask] [, lse]; floats: scale;
                 // ints: causal, zero_masked_rows, has_mask, has_lse
  Index,         // tensors: x, out, idx...; ints: indexed dim of each idx
  IndexPut,      // tensors: self, values, out, idx...; ints: accumulate, inplace, dims...
  Gather,        // tensors: x, index, out; ints: dim
  Scatter,       // tensors: self, index, src, out; ints: dim, reduce (0 set, 1 add), inplace
  SliceScatter,  // tensors: self, src, out; ints: dim, start, end, step, inplace
  Copy,          // tensors: src, dst
  Conv,  // tensors: input, weight, [bias], out; ints: spatial, stride.., pad.., dil.., groups,
         // has_bias
  ConvBackward,     // tensors: grad_out, input, weight, grad_in, grad_w, grad_b; ints: .. + mask(3)
  MaxPool,          // tensors: input, out, indices; ints: k.., s.., p.., d.., ceil_mode
  MaxPoolBackward,  // tensors: grad_out, indices, grad_in; ints as MaxPool
  AvgPool,  // tensors: input, out; ints: k.., s.., p.., ceil_mode, count_include_pad, divisor
  AvgPoolBackward,  // tensors: grad_out, grad_in; ints as AvgPool
  Custom,           // tensors: inputs then outputs; ints: n_inputs; text: target; payload
  AttentionBackward,  // tensors: dout, q, k, v, out, lse, dq, dk, dv [, mask]; floats: scale;
                      // ints: causal, has_mask
  Softmax,            // tensors: input, out; ints: dim, log
  SoftmaxBackward,    // tensors: grad_out, out, grad_in; ints: dim, log
  LayerNorm,          // tensors: x, [w], [b], out, mean, rstd; ints: axis, has_w, has_b; floats: eps
  LayerNormBackward,  // tensors: grad_out, x, mean, rstd, [w], dx, dw, db;
                      // ints: axis, has_w, 0, want dx, want dw, want db
  Reduce,             // tensors: input, out (input's rank, size 1 where reduced);
                      // ints: op (0 sum, 1 mean, 2 prod, 3 amax, 4 amin)
  BatchNorm,          // tensors: x, [w], [b], [running_mean, running_var], out, save_mean,
                      // save_invstd, [new running_mean, new running_var];
                      // ints: has_w, has_b, has_running; floats: momentum, eps
  BatchNormBackward,  // tensors: grad_out, x, save_mean, save_invstd, [w], dx, dw, db;
                      // ints: has_w, want dx, want dw, want db
};
constexpr int kNumStepKinds = static_cast<int>(StepKind::BatchNormBackward) + 1;
const char* step_kind_name(StepKind k);

struct Step {
  StepKind kind = StepKind::Copy;
  std::string name;  // names the graph node in errors ("matmul %12")
  std::vector<TensorDesc> tensors;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::string text;
  std::string payload;
  std::shared_ptr<vm::Kernel> kernel;  // Fused, or a Gemm epilogue
  std::vector<int> kernel_buffers;     // VM operand -> index into tensors
  int64_t scratch_offset = 0;          // arena bytes for the step's temporaries
  int64_t scratch_bytes = 0;
};

struct IOSpec {
  DType dtype = DType::Float32;
  Shape shape;
  std::vector<int64_t> strides;
  std::string name;
  int64_t storage_elements() const;  // extent the strides reach
};

// An output that is a view of an input the program never writes (a weight's transpose saved
// for the backward, an input returned as is) or of another output (a reshape of it): no step
// writes it; the caller returns that buffer seen with the output's shape and strides, `offset`
// elements from the buffer's start. The base output is not an alias itself.
struct OutputAlias {
  int32_t output = 0;
  int32_t input = 0;  // the base: an input index, or an output index when of_output
  int64_t offset = 0;
  bool of_output = false;
};

struct Program {
  std::vector<IOSpec> inputs;
  std::vector<IOSpec> outputs;
  std::vector<OutputAlias> output_aliases;
  std::vector<IOSpec> constants;
  std::vector<std::vector<uint8_t>> constant_data;
  std::vector<int> mutated_inputs;  // inputs the program writes (KV caches, buffers)
  int64_t arena_bytes = 0;
  std::vector<Step> steps;
};

void serialize(const Program& p, ByteWriter& w);
// Reads a program; `check` runs validate() (NEFF readers attach constants first).
Program deserialize_program(ByteReader& r, bool check = true);
// Throws NeffError when a step reads or writes outside its buffers or is malformed.
void validate(const Program& p);
std::string describe(const Program& p);

// Raw buffer pointers for one execution. The pointers of aliased outputs (Program::output_aliases)
// are not used: those outputs are views of their inputs.
struct Buffers {
  std::vector<void*> inputs;
  std::vector<void*> outputs;
  std::vector<const void*> constants;
  void* arena = nullptr;
};

// Runs every step in order on the calling thread (kernels parallelize internally).
// Errors are ExecError naming the step.
void execute(const Program& p, const Buffers& b);

// Per step-kind time spent by execute() since the last reset, when step profiling is on
// (NEURON_EMU_PROFILE_COMPILED=1 or set_step_profiling(true)): kind -> (calls, seconds).
void set_step_profiling(bool on);
std::vector<std::pair<std::string, std::pair<int64_t, double>>> step_profile(bool reset);

// Resolves a TensorDesc against concrete buffers.
kernels::TensorRef resolve(const TensorDesc& d, const Buffers& b);

}  // namespace neuron::cc
