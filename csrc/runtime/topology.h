// The emulated machine: instance profiles (trn2.3xlarge, ...) and the logical-core topology
// the real runtime variables select (LNC, visible cores). Pure data + parsing; thread-safe
// because it is immutable once built.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace neuron::rt {

// One Trainium instance type as the runtime sees it.
struct InstanceProfile {
  std::string name;                 // "trn2.3xlarge"
  int num_devices = 1;              // Neuron devices (chips)
  int physical_cores_per_device = 8;
  int nc_version = 3;               // NeuronCore-v2 (Trn1) or v3 (Trn2)
  int default_lnc = 2;              // logical NeuronCore config when nothing is set
  std::vector<int> allowed_lnc;     // {1,2} on v3, {1} on v2
  uint64_t hbm_bytes_per_device = 0;
  uint64_t sbuf_bytes_per_partition = 0;  // 224 KiB on v3, 192 KiB on v2
  int sbuf_partitions = 128;
  uint64_t psum_bytes_per_partition = 16 * 1024;
  int psum_banks = 8;
  int host_vcpus = 12;              // shown as CPU AFFINITY by neuron-ls
  std::vector<std::string> pci_bdf; // one per device
  std::vector<std::string> cpu_affinity;  // one per device, e.g. "0-11"
  std::vector<int> numa_node;       // one per device
};

// Returns the built-in profile with that name, or nullopt.
std::optional<InstanceProfile> find_profile(const std::string& name);
// Names of all built-in profiles, in a stable order (for error messages and docs).
std::vector<std::string> profile_names();

// One logical NeuronCore visible to this process (becomes `neuron:<index>`).
struct LogicalCore {
  int index = 0;          // process-local index: neuron:<index>
  int global_id = 0;      // id among all logical cores of the instance (NEURON_RT_VISIBLE_CORES space)
  int device = 0;         // Neuron device (chip) it belongs to
  int physical_first = 0; // first physical core id on that device
  int physical_count = 1; // = lnc
  uint64_t hbm_capacity = 0;  // bytes this core may allocate
};

// Environment variables that shape the topology. Missing keys mean "unset".
using EnvMap = std::map<std::string, std::string>;

// Reads the variables below from the process environment.
//   NEURON_EMU_INSTANCE_TYPE, NEURON_LOGICAL_NC_CONFIG, NEURON_RT_VIRTUAL_CORE_SIZE,
//   NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES, NEURON_EMU_HBM_GB
EnvMap read_topology_env();

struct Topology {
  InstanceProfile profile;
  int lnc = 2;                       // physical cores per logical core
  int logical_cores_per_device = 4;  // physical_cores_per_device / lnc
  int total_logical_cores = 4;       // over all devices of the instance
  std::vector<LogicalCore> visible;  // what this process may use, in index order

  // Builds the topology from `env`; throws ConfigError naming the variable, the value and
  // what is allowed when a value is bad (unknown profile, LNC not allowed, core id out of
  // range, malformed list, HBM size not positive, ...).
  static Topology from_env(const EnvMap& env);
};

// Parses a core list such as "2", "1-3", "0,2", "0-1,3" into sorted unique ids. Throws
// ConfigError mentioning `var` when malformed or when an id is >= limit.
std::vector<int> parse_core_list(const std::string& var, const std::string& value, int limit);

}  // namespace neuron::rt
