// What both extensions do with one NKI kernel call (nki._nki_native runs it on host memory,
// torch_neuronx._C launches it on a neuron device): the binding lists python/nki passes, the
// run of every grid instance, and the check state a device launch reports into. In
// libneuron_py, so both extensions share one definition of each type.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nki/executor.h"
#include "nki/program.h"

namespace neuron::pyglue {

// One HBM tensor of one kernel instance as the tracer binds it.
struct PyBinding {
  uintptr_t ptr = 0;
  int64_t bytes = 0;
  std::string name;
  bool is_input = false;  // initialized by the caller
  bool scratch = false;   // kernel-private HBM
};

// What a recorded run of one instance leaves for the cost model.
struct Trace {
  std::vector<nki::ExecRecord> records;
  int64_t instructions = 0;
};

// Set by a launched task when a checked run of its programs finished without error: a program
// counts as validated only then (a failed or still-queued checked run keeps the next call
// checking). Written by the stream worker, read by the caller.
struct CheckState {
  std::atomic<bool> passed{false};
};

// bindings: per instance, a list of (data_ptr, nbytes, name, is_input, is_scratch) indexed by
// HBM slot; one list per program (throws std::invalid_argument otherwise). Needs the GIL.
// Exported explicitly: a function taking a pybind11 type (hidden visibility) would be hidden.
[[gnu::visibility("default")]] std::vector<std::vector<PyBinding>> to_bindings(const pybind11::list& per_instance,
                                                size_t num_programs);

// The binding lists of a launch worked out once (the warm-call launch templates of nki.jit):
// each HBM slot's role, size and name; per call only the buffers' addresses are filled in.
// slots: per instance, a list of (pool, index, bytes, name, is_input, is_scratch), pool 0 = an
// argument, 1 = a shared output, 2 = a scratch buffer (index into `scratch` sizes), 3 = a
// constant (index into `consts` addresses). Immutable after construction (bind() is const and
// may run on any thread).
class [[gnu::visibility("default")]] BindingTemplate {
 public:
  BindingTemplate(const pybind11::list& slots, size_t num_programs, std::vector<uintptr_t> consts,
                  std::vector<int64_t> scratch);
  const std::vector<int64_t>& scratch_bytes() const { return scratch_; }
  // The binding lists for these argument, shared-output and scratch addresses (throws
  // std::invalid_argument when a slot names a buffer that is not there).
  std::vector<std::vector<PyBinding>> bind(const std::vector<uintptr_t>& args,
                                           const std::vector<uintptr_t>& shared,
                                           const std::vector<uintptr_t>& scratch) const;

 private:
  struct Slot {
    int pool = 0;
    size_t index = 0;
    PyBinding b;
  };
  std::vector<std::vector<Slot>> slots_;
  std::vector<uintptr_t> consts_;
  std::vector<int64_t> scratch_;
};

// Runs every instance of a launch in order (nki/launch.h) and keeps what the cost model needs.
// Does not touch Python objects (callable without the GIL). Throws nki::NkiError.
std::vector<std::shared_ptr<Trace>> run_all(
    const std::vector<std::shared_ptr<nki::Program>>& progs,
    const std::vector<std::vector<PyBinding>>& binds, bool check, bool record, int64_t max_iters);

}  // namespace neuron::pyglue
