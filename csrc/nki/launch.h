// One kernel launch: the grid instances of a traced kernel, each on a NeuronCore state
// of its target, with the HBM tensors bound per instance. Shared by the eager entry points
// (nki._nki_native, torch_neuronx._C._nki_launch) and NKI calls inside compiled programs
// (compiler/nki_call.h), so both apply the same checking policy and report the same errors.
// Thread-safety: run_launch() may be called concurrently (each call acquires its own cores).
// Instances of one launch share HBM: a correct kernel orders its cores' accesses to the same
// HBM bytes with core_barrier / sendrecv.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor.h"
#include "program.h"

namespace neuron::nki {

// One HBM tensor of one grid instance, indexed by the program's HBM slot.
struct HbmArg {
  uint8_t* data = nullptr;
  int64_t bytes = 0;
  std::string name;
  bool is_input = false;  // initialized by the caller (always "defined" in checking mode)
  bool scratch = false;   // kernel-private HBM (nl.hbm / nl.private_hbm)
};

struct LaunchOptions {
  bool check_uninit = false;
  bool record_trace = false;
  int64_t max_loop_iterations = 0;  // 0: max_loop_iterations_from_env()
  // Physical NeuronCores per logical core: the instances of a grid run this many at a time,
  // concurrently (0: the configured topology's LNC, NEURON_LOGICAL_NC_CONFIG).
  int physical_cores = 0;
};

// Runs programs[i] with args[i] for every instance i: in waves of physical_cores instances
// that run concurrently on their own host threads and meet at core_barrier / sendrecv
// (rendezvous.h); an instance's error names the instance. In checking mode the
// non-input HBM tensors get definedness shadows shared by address across the instances (they
// share HBM), starting undefined. Returns one report per instance. Throws NkiError.
std::vector<ExecReport> run_launch(const std::vector<const Program*>& programs,
                                   const std::vector<std::vector<HbmArg>>& args,
                                   const LaunchOptions& opt);

// When to track uninitialized memory (NEURON_EMU_NKI_CHECK): on the first run of each
// program (default), always, or never. NKI_SIMULATOR=1 means always. Throws rt::ConfigError
// for a value it does not know.
enum class CheckPolicy { First, Always, Never };
CheckPolicy check_policy_from_env();
const char* check_policy_name(CheckPolicy p);  // "first", "always", "never"
// NEURON_EMU_NKI_MAX_LOOP_ITERATIONS (default kDefaultMaxLoopIterations); throws
// rt::ConfigError unless it is a positive integer.
int64_t max_loop_iterations_from_env();
// Whether a launch of `programs` checks, given whether they ran checked before. Programs whose
// definedness can change between runs (Program::needs_recheck: runtime loops whose trip counts
// or register offsets decide what is written) are checked on every run unless the policy is
// Never - the same rule as the Python entry points.
bool want_check(CheckPolicy policy, bool checked_before,
                const std::vector<const Program*>& programs);

}  // namespace neuron::nki
