// Estimated Trainium2 time of device work other than one NKI kernel's instructions: an eager
// op, a kernel inside a compiled program, a transfer between host and device, a CPU fallback,
// a collective. One set of constants, next to the NKI cost model's per-engine figures
// (cost_model.h), each documented with its source - or marked as an assumption or as
// calibrated from the lab guide - in docs/cost-model.md ("Whole programs").
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_model.h"
#include "program.h"

namespace neuron::nki {

struct DeviceTimeParams {
  CostParams core;  // per physical NeuronCore (HBM share, peak FLOPS)
  int lnc = 2;      // physical cores per logical core (both serve one task)
  int logical_cores_per_device = 4;
  // Launch of one eager op: the runtime's dispatch of a single-op kernel (calibrated: Lab 2
  // sampling, 52 tok/s, where the eager ops around the fallbacks dominate).
  double eager_launch_ns = 1.3e6;
  // Launch of one compiled program (NEFF) by the runtime (assumption).
  double neff_launch_ns = 50e3;
  // Each kernel of a compiled program: its DMA setup and the semaphore hand-off to the next
  // kernel (calibrated: Lab 2 base vs experimental, 359 vs 537 tok/s).
  double kernel_boundary_ns = 12e3;
  // An NKI kernel inside a compiled program: only the semaphore hand-off from the kernel before
  // it ([BW]: ~1300 ns cross-engine semaphore-to-start latency). kernel_boundary stands for what
  // the roofline of a compiler-generated kernel leaves out (its DMA setup and latency, its
  // synchronisation); an NKI kernel's own DMAs, their fixed cost and its engines' waits are
  // already in its NKI estimate, so charging the boundary too would count them twice.
  double nki_handoff_ns = 1300.0;
  // Host <-> device transfers over PCIe: latency per transfer and bandwidth (assumptions).
  double pcie_latency_ns = 20e3;
  double pcie_bytes_per_ns = 32.0;
  // The host noticing that the device finished (assumption).
  double host_wake_ns = 10e3;
  // The host op of a CPU fallback, modelled (this host's time for it is not Trainium2's host
  // CPU's): an ATen CPU op's dispatch plus its bytes at one core's streaming bandwidth
  // (assumptions).
  double host_op_ns = 10e3;
  double host_bytes_per_ns = 10.0;
  // Collectives: NeuronLink-v3 1.28 TB/s per chip, shared by its logical cores ([HW]); a
  // ring step costs the DMA cross-engine semaphore latency ([BW], 1300 ns).
  double neuronlink_bytes_per_ns = 1280.0;
  double collective_step_ns = 1300.0;

  double hbm_bytes_per_ns() const { return core.hbm_bytes_per_ns * lnc; }
  static DeviceTimeParams for_target(int nc_version, int lnc, int logical_cores_per_device);
};

// What one kernel does, for the roofline: bytes it moves through HBM and FLOPs by precision.
struct WorkCost {
  double hbm_bytes = 0;
  double flops_bf16 = 0;  // matmul FLOPs at 16-bit (and fp8) precision
  double flops_fp32 = 0;  // matmul FLOPs at fp32
};

// A kernel's device time (no launch): max(HBM bytes / bandwidth, FLOPs / peak).
double work_ns(const WorkCost& w, const DeviceTimeParams& p);
// An eager op: its launch plus work_ns.
double eager_op_ns(const WorkCost& w, const DeviceTimeParams& p);
// A host <-> device copy of `bytes`.
double transfer_ns(double bytes, const DeviceTimeParams& p);
// The host op of a CPU fallback that reads and writes `host_bytes` on the host.
double host_op_ns(double host_bytes, const DeviceTimeParams& p);
// A CPU fallback: the host waits for the device, copies `d2h_bytes` down, runs the host op
// and copies `h2d_bytes` back (waiting for that copy too).
double fallback_ns(double d2h_bytes, double h2d_bytes, double host_bytes,
                   const DeviceTimeParams& p);

enum class Collective { AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll, Barrier, SendRecv };
// A collective over `ranks` logical cores with `bytes` per rank (the input of all-reduce /
// broadcast / all-to-all, the output of all-gather, the input of reduce-scatter): a ring of
// ranks-1 steps (2(ranks-1) for all-reduce), each moving bytes/ranks.
double collective_ns(Collective c, double bytes, int ranks, const DeviceTimeParams& p);

// One NKI launch: its grid instances in waves of lnc running at the same time on the physical
// cores of the logical core, synchronised at their rendezvous (estimate_launch), each at its
// cost-model estimate in program order (a program with runtime loops is estimated from its
// instruction order, not from the trip counts of a run).
double nki_launch_ns(const std::vector<const Program*>& instances, int lnc);

}  // namespace neuron::nki
