// Estimated Trainium2 time of a compiled program (NEFF): one launch, then its kernels in
// order, each a kernel boundary plus its roofline time (HBM bytes of its operands, matmul
// FLOPs); fusion shows as fewer kernels and fewer HBM round trips. NKI ops inside a program
// are costed by the NKI cost model after a semaphore hand-off (nki_handoff_ns), not a kernel
// boundary: their DMA setup and latency are part of their NKI estimate.
// Constants: nki/device_time.h, docs/cost-model.md.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "nki/device_time.h"
#include "program.h"

namespace neuron::cc {

struct StepTime {
  std::string name;  // the step's name ("matmul %12")
  StepKind kind = StepKind::Copy;
  nki::WorkCost work;
  double ns = 0;  // kernel boundary + work (NKI ops: their estimate)
};

struct ProgramTime {
  double launch_ns = 0;
  double total_ns = 0;  // launch + every step
  std::vector<StepTime> steps;
};

ProgramTime estimate_program(const Program& prog, const nki::DeviceTimeParams& p);

}  // namespace neuron::cc
