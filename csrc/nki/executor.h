// Runs a finalized Program on the state of one NeuronCore (SBUF, PSUM, registers, engine
// accumulators) and on HBM tensors bound by the caller (device memory of neuron tensors or
// host arrays). Instructions run as vectorised host loops over whole tiles; matmul tiles go
// through kernels::gemm. In checking mode every byte of SBUF/PSUM (and of kernel-created HBM
// tensors) carries a "defined" shadow bit that propagates through the instructions like the
// NaN fill of the real simulator: data derived from never-written memory that reaches an HBM
// output or a register raises an NkiError naming both instructions.
// Thread-safety: execute() may run concurrently on distinct CoreStates; a CoreState is used by
// one execution at a time (acquire_core hands out exclusive states).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/xorwow.h"
#include "program.h"

namespace neuron::nki {

// One HBM tensor of a launch. `def` (checking mode only) is a byte per data byte, 1 = defined;
// null means the memory is always defined (kernel inputs).
struct Binding {
  uint8_t* data = nullptr;
  int64_t bytes = 0;
  uint8_t* def = nullptr;
  std::string name;
  bool scratch = false;  // kernel-private HBM (nl.hbm / nl.private_hbm): not caller-visible
};

// Runtime loop iterations one launch may run before it fails as a runaway
// (NEURON_EMU_NKI_MAX_LOOP_ITERATIONS raises it).
constexpr int64_t kDefaultMaxLoopIterations = int64_t{1} << 24;

class CoreGroup;  // rendezvous.h

struct ExecOptions {
  bool check_uninit = false;
  bool record_trace = false;  // keep the executed instruction sequence (cost model)
  bool use_plan = true;       // unchecked runs follow Program::plan() (DMA elision)
  int64_t max_loop_iterations = kDefaultMaxLoopIterations;
  // The cores of the logical core running this launch's instances concurrently (core_barrier,
  // sendrecv) and this instance's rank among them; null: a group of one.
  CoreGroup* group = nullptr;
  int rank = 0;
  bool poll_interrupt = true;  // ask the interrupt poll (false on helper threads)
  // Start the core's random number generators from the default state of physical core `rank`
  // (RngState::reset); false continues the state the core's previous execution left (the
  // later grid instances a physical core runs in one launch).
  bool reset_rng = true;
};

// One executed instruction: its index and the dynamic element offsets of its operands.
struct ExecRecord {
  int32_t instr = 0;
  std::array<int64_t, kMaxOperands> dyn{};
};

struct ExecReport {
  int64_t instructions = 0;       // executed (loop bodies counted per iteration)
  std::vector<ExecRecord> trace;  // when record_trace
};

// The random number generators of one NeuronCore's engines: per compute lane (partition) one
// XORWOW generator on the GpSimd Engine and four on the Vector Engine (kernels/xorwow.h), the
// state nisa.rand_get_state / rand_set_state move. Engine state: it persists across the
// instructions of a launch and across the grid instances one physical core runs in it.
struct RngState {
  static constexpr int kLanes = 128;
  static constexpr int kVectorGens = 4;
  uint32_t gpsimd[kLanes][kernels::kXorwowWords] = {};
  uint32_t vector[kLanes][kVectorGens * kernels::kXorwowWords] = {};

  // nisa.set_rng_seed: Vector generator g of lane p starts from xorwow_seed of the key
  // seed << 32 | 1 << 16 | p << 4 | g.
  void seed_vector(uint32_t seed);
  // The state a launch starts from on physical core `core` of its logical core: Vector as
  // set_rng_seed(core); GpSimd lane p from the key core << 32 | 2 << 16 | p << 4. Applied
  // when the first random-number instruction runs (use()), so launches without one pay nothing.
  void reset(int core) { pending_reset_ = core; }
  // Called by every instruction that reads or writes the state, before it does.
  void use() {
    if (pending_reset_ >= 0) apply_reset();
  }
  // Generators per lane and the first word of lane p's generators on engine e (GpSimd or Vector).
  static int gens(Engine e) { return e == Engine::Vector ? kVectorGens : 1; }
  uint32_t* lane(Engine e, int64_t p) { return e == Engine::Vector ? vector[p] : gpsimd[p]; }

 private:
  void apply_reset();
  int pending_reset_ = 0;
};

// The mutable state of one NeuronCore.
class CoreState {
 public:
  explicit CoreState(const Target& t);
  const Target& target() const { return target_; }

  uint8_t* sbuf() { return sbuf_.get(); }
  uint8_t* psum() { return psum_.get(); }
  // Shadows exist after enable_shadow() (checking mode).
  uint8_t* sbuf_def() { return sbuf_def_.empty() ? nullptr : sbuf_def_.data(); }
  uint8_t* psum_def() { return psum_def_.empty() ? nullptr : psum_def_.data(); }
  void enable_shadow();   // allocates (if needed) and clears the shadows: all memory undefined
  void disable_shadow();  // frees them

  std::vector<int64_t> regs;
  float act_acc[128] = {};  // Scalar Engine reduce registers (one per partition)
  uint8_t act_acc_def[128] = {};
  float sel_acc[128] = {};  // Vector Engine select_reduce registers
  uint8_t sel_acc_def[128] = {};
  RngState rng;

 private:
  Target target_;
  // On-chip memories in 2 MiB-aligned, huge-page-advised blocks: a tile touches one row in
  // each of up to 128 partitions, which would otherwise cost a TLB miss per row.
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], Free> sbuf_, psum_;
  size_t sbuf_bytes_ = 0, psum_bytes_ = 0;
  std::vector<uint8_t> sbuf_def_, psum_def_;
};

// Hands out CoreStates sized for `t`, reusing released ones (their SBUF is not cleared: a
// kernel must not read memory it did not write, which checking mode verifies).
std::shared_ptr<CoreState> acquire_core(const Target& t);

// Runs `prog` (finalized) with `bindings` indexed by HBM slot. Throws NkiError.
void execute(const Program& prog, CoreState& core, const std::vector<Binding>& bindings,
             const ExecOptions& opt, ExecReport* report);

}  // namespace neuron::nki
