// NKI kernels inside compiled programs. A custom op whose body launches NKI kernels
// (torch_neuronx `nki_op`) lowers to one `custom` node with target "nki"; its payload is a
// Plan: the memory the body uses (the node's inputs and outputs, and regions of one scratch
// output), and what the body did on it, recorded at compile time - copies, fills and kernel
// launches with the traced program of every grid instance. The plan is self-contained (the
// programs' bytes are inside), so a NEFF loaded in another process runs it without Python.
// At run time the plan is decoded once per content hash, its programs are re-validated by
// nki::Program::deserialize, and every launch runs on the NeuronCore model (nki/launch.h)
// inside the compiled program's stream task, with the NKI checks and error messages.
// Thread-safety: run() may execute the same plan concurrently (decoded plans are immutable
// apart from an atomic "checked once" flag per launch).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir.h"
#include "kernels/tensor_ref.h"
#include "nki/device_time.h"

namespace neuron::cc::nki_call {

// The custom-kernel target of NKI nodes (dense::register_custom_kernel).
inline constexpr const char* kTarget = "nki";
inline constexpr uint32_t kPlanVersion = 1;

enum class RootKind : uint8_t { Input, Output, Scratch };

// One memory region. Input/Output roots are the node's tensors, used as contiguous bytes (a
// strided tensor is staged through a contiguous copy); Scratch roots are byte ranges of the
// scratch output.
struct Root {
  RootKind kind = RootKind::Scratch;
  int32_t index = 0;           // Input/Output: node input/output number
  DType dtype = DType::UInt8;  // Input/Output: the tensor's dtype
  int64_t numel = 0;           // Input/Output: its element count
  int64_t offset = 0;          // Scratch: byte offset in the scratch output
  int64_t bytes = 0;           // size in bytes (numel * element size for Input/Output)
  std::string name;            // for messages ("x", "kernel output 0", ...)
};

// A strided view of a root, in elements of `dtype` from the root's first byte.
struct View {
  int32_t root = 0;
  DType dtype = DType::Float32;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
};

// One HBM tensor of one grid instance: a contiguous byte range of a root.
struct Arg {
  int32_t root = 0;
  int64_t byte_offset = 0;
  int64_t bytes = 0;
  std::string name;
  bool is_input = false;  // a kernel argument (defined memory for the uninitialized-read check)
  bool scratch = false;   // kernel-private HBM
};

enum class OpKind : uint8_t { Copy, Fill, Launch };

struct Op {
  OpKind kind = OpKind::Copy;
  View dst, src;  // Copy: dst <- src (dtype conversion allowed); Fill: dst
  double fvalue = 0;
  int64_t ivalue = 0;
  bool integral = false;               // Fill: use ivalue (exact for 64-bit integers)
  std::string kernel;                  // Launch: the kernel's name
  std::vector<int32_t> programs;       // Launch: program index per grid instance
  std::vector<std::vector<Arg>> args;  // Launch: per instance, per HBM slot
};

struct Plan {
  std::string op;  // "ns::name" of the custom op
  int32_t n_inputs = 0, n_outputs = 0;
  int32_t scratch_output = -1;  // node output holding the Scratch roots (uint8 [scratch_bytes])
  int64_t scratch_bytes = 0;
  std::vector<Root> roots;
  std::vector<Op> ops;
  std::vector<std::string> programs;  // nki::Program::serialize() bytes
};

// Payload bytes: magic "NKICALL\0", version, 128-bit content hash, body (deterministic).
std::string encode(const Plan& p);
// Parses and validates a payload (magic, version, hash, every index and extent); throws
// NeffError. Does not deserialize the programs.
Plan decode(std::string_view payload);
// decode() plus the node's tensor counts (run on every program load: program.cpp validate()).
void check(std::string_view payload, int32_t n_inputs, int32_t n_outputs);
// One line per op for dumps (neff-dump, program.txt).
std::string describe(std::string_view payload);

// Runs a plan on the node's tensors (the custom kernel behind target "nki"). Throws
// ExecError naming the op and kernel (NKI errors keep their message: instruction, kernel
// file:line, rule and values).
void run(const std::vector<kernels::TensorRef>& inputs,
         const std::vector<kernels::TensorRef>& outputs, const std::string& payload);

// Estimated Trainium2 time of a plan (nki/device_time.h): every launch at its NKI cost-model
// estimate, copies and fills at HBM bandwidth. `aliased` lists (input, output) pairs of the
// node that the compiled program placed in the same memory (an NKI op updating its argument
// in place): a copy between the two with the same view moves nothing and costs nothing, as at
// run time.
double estimate_ns(const std::string& payload, const nki::DeviceTimeParams& p,
                   const std::vector<std::pair<int32_t, int32_t>>& aliased = {});

// Registers run() as the custom kernel "nki" (idempotent).
void register_kernel();

// Decoded plans kept by content hash (tests and diagnostics).
size_t cached_plans();

}  // namespace neuron::cc::nki_call
