// Estimated Trainium execution time of a program: every instruction gets an engine (Tensor,
// Vector, Scalar, GpSimd, DMA queues, Sync) and a duration from the documented per-instruction
// cost formulas and engine clocks; a list scheduler then runs the engines in parallel,
// honouring data dependencies (overlapping reads/writes of the same tensor region) and
// in-order issue per engine. Every constant and its source is in docs/cost-model.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor.h"
#include "program.h"

namespace neuron::nki {

struct CostParams {
  double tensor_ghz = 2.4;
  double vector_ghz = 0.96;
  double scalar_ghz = 1.2;
  double gpsimd_ghz = 1.2;
  double sync_ghz = 1.2;
  int min_ii = 64;                    // minimum instruction initiation interval (cycles)
  int dma_engines = 16;               // per NeuronCore
  int partitions_per_dma_engine = 8;  // 128 partitions / 16 engines
  double dma_bytes_per_ns = 23.0;     // per engine, sustained
  double dma_fixed_ns = 1300.0;       // descriptor setup + semaphore latency per transfer
  double dma_descriptor_ns = 20.0;    // per contiguous chunk
  double hwdge_issue_ns = 600.0;      // DGE instruction on the issuing engine
  double peak_bf16_tflops = 79.0;     // dense, per NeuronCore
  double peak_fp8_tflops = 158.0;
  double peak_fp32_tflops = 20.0;
  double hbm_bytes_per_ns = 362.5;  // 2.9 TB/s per chip / 8 NeuronCores

  static CostParams for_version(int nc_version);
};

// The engine and duration of one instruction, before scheduling.
struct InstrCost {
  Engine engine = Engine::Vector;
  double ns = 0;          // engine occupancy (per DMA queue for DMA)
  int queues = 0;         // DMA queues used
  double latency_ns = 0;  // extra latency that does not occupy the engine (DMA fixed cost)
  int64_t hbm_read = 0, hbm_written = 0;
  double flops = 0;
};

InstrCost instr_cost(const Program& prog, int32_t idx, const CostParams& p);

struct TimelineEvent {
  int32_t instr;
  int lane;  // 0..4 engines (Tensor, Vector, Scalar, GpSimd, Sync), 5.. DMA queues
  double start_ns, dur_ns;
};

struct Estimate {
  double total_ns = 0;
  double busy_ns[kNumEngines] = {};  // summed engine occupancy (DMA: summed over queues)
  int64_t instructions = 0;
  int64_t hbm_read_bytes = 0, hbm_write_bytes = 0;
  double flops = 0;
  int dma_queues = 16;
  std::vector<TimelineEvent> events;  // when requested
  bool events_truncated = false;
  std::vector<double> rendezvous_ns;  // when each core_barrier / sendrecv was ready, in order

  double utilization(Engine e) const;
};

// Schedules the executed instruction sequence (`trace`, or program order when null; a
// program with runtime loops needs the trace of a run). `max_events` caps the timeline.
// `release` (one per core_barrier / sendrecv, in order): when the peers of each rendezvous
// arrive; a rendezvous starts after everything issued before it and after its release, and
// everything after it waits for it.
Estimate estimate(const Program& prog, const std::vector<ExecRecord>* trace, const CostParams& p,
                  size_t max_events, const std::vector<double>* release = nullptr);

// The instances of one launch on `cores` physical cores: waves of `cores` instances running
// at the same time, their timelines synchronised at every rendezvous (each starts when its
// last participant arrives), one wave after the other. traces[i] (or null / missing: program
// order) as for estimate(). `offsets` receives each instance's start (its wave's). The launch
// takes max(offset + total_ns).
std::vector<Estimate> estimate_launch(const std::vector<const Program*>& progs,
                                      const std::vector<const std::vector<ExecRecord>*>& traces,
                                      int cores, size_t max_events, std::vector<double>* offsets);

// Chrome trace / Perfetto events of one NeuronCore (pid) as a JSON array body (no brackets),
// starting at `offset_ns`, including the lane-name metadata.
std::string timeline_json(const Program& prog, const Estimate& est, int pid,
                          const std::string& core_name, double offset_ns);

}  // namespace neuron::nki
