// The last stages of compilation: in-place/aliasing decisions for input mutations, memory
// planning (every materialized value gets a buffer; intermediates share one arena by
// liveness) and lowering of the planned graph into a Program.
#pragma once

#include <string>
#include <vector>

#include "ir.h"
#include "program.h"

namespace neuron::cc {

struct Location {
  Space space = Space::Arena;
  int32_t index = 0;
  int64_t byte_offset = 0;
  std::vector<int64_t> strides;
  bool set = false;
};

struct Plan {
  std::vector<Location> loc;         // per value; set for materialized roots
  std::vector<bool> inplace;         // per node: writes into its `self` input buffer
  std::vector<int> output_copy;      // per graph output: value to copy at the end, or -1
  std::vector<OutputAlias> output_aliases;  // outputs that are views of unwritten inputs
  std::vector<Mutation> end_copies;  // mutations that need a copy at the end
  std::vector<int64_t> scratch_offset, scratch_bytes;  // per node
  std::vector<IOSpec> constants;
  std::vector<std::vector<uint8_t>> constant_data;
  std::vector<IOSpec> outputs;  // final output specs
  int64_t arena_bytes = 0;
  int inplace_mutations = 0;  // mutations done without a copy
};

// Decides buffers for every value of `g` (after fusion). `output_specs` are the layouts the
// caller will allocate for the outputs (strides may be replaced by contiguous ones when they
// overlap).
Plan plan_memory(const Graph& g, const std::vector<IOSpec>& output_specs);
std::string print_plan(const Graph& g, const Plan& p);

Program lower(const Graph& g, const Plan& plan, const std::vector<IOSpec>& input_specs);

}  // namespace neuron::cc
