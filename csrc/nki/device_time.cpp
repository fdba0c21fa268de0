#include "device_time.h"

#include <algorithm>

namespace neuron::nki {

DeviceTimeParams DeviceTimeParams::for_target(int nc_version, int lnc,
                                              int logical_cores_per_device) {
  DeviceTimeParams p;
  p.core = CostParams::for_version(nc_version);
  p.lnc = std::max(1, lnc);
  p.logical_cores_per_device = std::max(1, logical_cores_per_device);
  p.nki_handoff_ns = p.core.dma_fixed_ns;  // the cross-engine semaphore latency ([BW])
  if (nc_version <= 2) p.neuronlink_bytes_per_ns = 768.0;  // NeuronLink-v2, 768 GB/s per chip
  return p;
}

double work_ns(const WorkCost& w, const DeviceTimeParams& p) {
  const double mem = w.hbm_bytes / p.hbm_bytes_per_ns();
  // TFLOPS = 1e3 FLOP per ns.
  const double mm = w.flops_bf16 / (p.core.peak_bf16_tflops * 1e3 * p.lnc) +
                    w.flops_fp32 / (p.core.peak_fp32_tflops * 1e3 * p.lnc);
  return std::max(mem, mm);
}

double eager_op_ns(const WorkCost& w, const DeviceTimeParams& p) {
  return p.eager_launch_ns + work_ns(w, p);
}

double transfer_ns(double bytes, const DeviceTimeParams& p) {
  return p.pcie_latency_ns + bytes / p.pcie_bytes_per_ns;
}

double host_op_ns(double host_bytes, const DeviceTimeParams& p) {
  return p.host_op_ns + host_bytes / p.host_bytes_per_ns;
}

double fallback_ns(double d2h_bytes, double h2d_bytes, double host_bytes,
                   const DeviceTimeParams& p) {
  return transfer_ns(d2h_bytes, p) + p.host_wake_ns + host_op_ns(host_bytes, p) +
         transfer_ns(h2d_bytes, p) + p.host_wake_ns;
}

double collective_ns(Collective c, double bytes, int ranks, const DeviceTimeParams& p) {
  if (ranks <= 1) return 0;
  const double link = p.neuronlink_bytes_per_ns / p.logical_cores_per_device;
  double steps = ranks - 1;
  double per_step = bytes / ranks;
  switch (c) {
    case Collective::AllReduce:
      steps = 2.0 * (ranks - 1);
      break;
    case Collective::Barrier:
      per_step = 0;
      break;
    case Collective::SendRecv:
      steps = 1;
      per_step = bytes;
      break;
    default:
      break;
  }
  return steps * (p.collective_step_ns + per_step / link);
}

double nki_launch_ns(const std::vector<const Program*>& instances, int lnc) {
  std::vector<double> offsets;
  const std::vector<Estimate> est = estimate_launch(instances, {}, lnc, 0, &offsets);
  double total = 0;
  for (size_t i = 0; i < est.size(); ++i) total = std::max(total, offsets[i] + est[i].total_ns);
  return total;
}

}  // namespace neuron::nki
