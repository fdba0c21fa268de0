// neuron-ls: lists the Neuron devices of the emulated instance, like the real tool does for the
// hardware: one row per device with its logical cores, HBM, neighbours, PCI address and host
// CPU affinity, and the processes holding each device (from the runtime's process registry:
// PID, command, runtime version, cores and HBM in use). Reads only the topology and the
// registry (no runtime start, no threads).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/error.h"
#include "runtime/process_registry.h"
#include "runtime/topology.h"

namespace {

using neuron::rt::Topology;
namespace registry = neuron::rt::registry;

const char* const kUsage =
    "usage: neuron-ls [-h] [-j] [-w] [-a]\n"
    "\n"
    "List the Neuron devices of the emulated instance (neuron-emu) and the processes using them.\n"
    "\n"
    "options:\n"
    "  -h, --help            show this help message and exit\n"
    "  -j, --json            print one JSON object per device\n"
    "  -w, --wide            do not shorten the process commands\n"
    "  -a, --show-all-procs  also list processes that do not run the Neuron runtime (neuron-ls)\n"
    "\n"
    "The instance comes from NEURON_EMU_INSTANCE_TYPE (default trn2.3xlarge); the logical core\n"
    "size from NEURON_LOGICAL_NC_CONFIG or NEURON_RT_VIRTUAL_CORE_SIZE; NEURON_EMU_HBM_GB\n"
    "overrides the HBM per logical core. Processes come from the registry in\n"
    "NEURON_EMU_REGISTRY_DIR (default /dev/shm/neuron-emu); entries of dead processes are removed.\n";

// One process on one device: the registry entry and what it holds there.
struct DeviceProcess {
  int pid = 0;
  std::string command, runtime_version;
  std::vector<int> cores_in_use;  // global logical core ids with memory allocated
  uint64_t hbm_reserved = 0, hbm_allocated = 0;
};

struct DeviceInfo {
  int index = 0;
  int nc_count = 0;
  std::vector<int> core_ids;
  uint64_t memory_bytes = 0;
  std::vector<int> connected;
  std::string bdf, cpu_affinity;
  int numa_node = 0;
  std::vector<DeviceProcess> processes;
};

// Neighbours in the device interconnect: a square torus when the count is a square (4x4 on
// the 16-device instances), listed up, left, down, right; a ring otherwise.
std::vector<int> neighbours(int d, int n) {
  std::vector<int> out;
  auto add = [&](int x) {
    if (x != d && std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  };
  if (n <= 1) return out;
  const int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(n))));
  if (side * side == n) {
    const int r = d / side, c = d % side;
    add(((r + side - 1) % side) * side + c);
    add(r * side + (c + side - 1) % side);
    add(((r + 1) % side) * side + c);
    add(r * side + (c + 1) % side);
  } else {
    add((d + n - 1) % n);
    add((d + 1) % n);
  }
  return out;
}

std::string own_command() {
  std::string raw;
  if (FILE* f = std::fopen("/proc/self/cmdline", "rb")) {
    char buf[4096];
    const size_t n = std::fread(buf, 1, sizeof(buf), f);
    std::fclose(f);
    raw.assign(buf, n);
  }
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  std::replace(raw.begin(), raw.end(), '\0', ' ');
  return raw;
}

// Attaches the registered processes to the devices of their cores (a process holds every
// device it has visible cores on, like the real runtime after nrt_init).
void attach_processes(std::vector<DeviceInfo>& devices, bool all_procs) {
  for (const registry::ProcessEntry& p : registry::list(/*cleanup=*/true)) {
    for (DeviceInfo& d : devices) {
      DeviceProcess dp;
      bool holds = false;
      for (const registry::CoreUsage& c : p.cores) {
        if (c.device != d.index) continue;
        holds = true;
        if (c.used) dp.cores_in_use.push_back(c.global_id);
        dp.hbm_reserved += c.reserved;
        dp.hbm_allocated += c.allocated;
      }
      if (!holds) continue;
      dp.pid = p.pid;
      dp.command = p.command;
      dp.runtime_version = p.runtime_version;
      d.processes.push_back(std::move(dp));
    }
  }
  if (all_procs) {  // the real tool's -a: itself, without a runtime, on every device
    DeviceProcess self;
    self.pid = static_cast<int>(getpid());
    self.command = own_command();
    self.runtime_version = "NA";
    for (DeviceInfo& d : devices) d.processes.push_back(self);
  }
}

std::string format_hbm(uint64_t bytes) {
  char buf[32];
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (bytes == 0)
    return "0 B";
  else if (mib < 1.0)
    std::snprintf(buf, sizeof(buf), "%llu KB", static_cast<unsigned long long>((bytes + 1023) / 1024));
  else if (mib < 1024.0)
    std::snprintf(buf, sizeof(buf), "%.1f MB", mib);
  else
    std::snprintf(buf, sizeof(buf), "%.1f GB", mib / 1024.0);
  return buf;
}

// A command for a table cell: control characters (newlines of `python -c` code) blanked,
// shortened to `width` with "...".
std::string shorten(std::string s, size_t width) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (s.size() <= width) return s;
  return s.substr(0, width - 3) + "...";
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::vector<DeviceInfo> collect(const Topology& t) {
  const auto& p = t.profile;
  // Every logical core gets the same capacity, which NEURON_EMU_HBM_GB may override.
  const uint64_t per_core = t.visible.empty() ? p.hbm_bytes_per_device / t.logical_cores_per_device
                                              : t.visible.front().hbm_capacity;
  std::vector<DeviceInfo> out;
  for (int d = 0; d < p.num_devices; ++d) {
    DeviceInfo info;
    info.index = d;
    info.nc_count = t.logical_cores_per_device;
    for (int i = 0; i < t.logical_cores_per_device; ++i)
      info.core_ids.push_back(d * t.logical_cores_per_device + i);
    info.memory_bytes = per_core * static_cast<uint64_t>(t.logical_cores_per_device);
    info.connected = neighbours(d, p.num_devices);
    info.bdf = p.pci_bdf.at(d);
    info.cpu_affinity = p.cpu_affinity.at(d);
    info.numa_node = p.numa_node.at(d);
    out.push_back(std::move(info));
  }
  return out;
}

std::string join_ints(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::string id_range(const std::vector<int>& ids) {
  if (ids.empty()) return "";
  if (ids.size() == 1) return std::to_string(ids.front());
  return std::to_string(ids.front()) + "-" + std::to_string(ids.back());
}

std::string core_list(const std::vector<int>& ids) {
  if (ids.empty()) return "-";
  // Contiguous ids as a range ("0-3"), otherwise listed ("0, 2").
  bool contiguous = true;
  for (size_t i = 1; i < ids.size(); ++i) contiguous = contiguous && ids[i] == ids[i - 1] + 1;
  return contiguous ? id_range(ids) : join_ints(ids, ", ");
}

void print_table(const Topology& t, const std::vector<DeviceInfo>& devices, bool wide) {
  const bool multi = devices.size() > 1;
  bool any_procs = false;
  for (const DeviceInfo& d : devices) any_procs = any_procs || !d.processes.empty();
  std::vector<std::pair<std::string, std::string>> header = {
      {"NEURON", "DEVICE"}, {"NEURON", "CORES"}, {"NEURON", "CORE IDS"}, {"NEURON", "MEMORY"}};
  if (multi) header.push_back({"CONNECTED", "DEVICES"});
  header.insert(header.end(), {{"PCI", "BDF"}, {"CPU", "AFFINITY"}, {"NUMA", "NODE"}});
  // The real tool's process columns, then what the process holds on the device.
  if (any_procs)
    header.insert(header.end(), {{"PID", ""}, {"COMMAND", ""}, {"RUNTIME", "VERSION"}, {"CORES", "IN USE"},
                                 {"HBM", "IN USE"}});

  // Rows grouped per device: the device's first row carries its cells, further processes of
  // the same device get rows of their own with the device cells blank.
  std::vector<std::vector<std::vector<std::string>>> groups;
  for (const DeviceInfo& d : devices) {
    const double gb = static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0);
    std::vector<std::string> row = {std::to_string(d.index), std::to_string(d.nc_count),
                                    id_range(d.core_ids), std::to_string(std::llround(gb)) + " GB"};
    if (multi) row.push_back(join_ints(d.connected, ", "));
    row.insert(row.end(), {d.bdf, d.cpu_affinity, std::to_string(d.numa_node)});
    std::vector<std::vector<std::string>> group;
    if (!any_procs || d.processes.empty()) {
      if (any_procs) row.insert(row.end(), 5, "");
      group.push_back(row);
    }
    for (size_t i = 0; i < d.processes.size(); ++i) {
      const DeviceProcess& p = d.processes[i];
      std::vector<std::string> r = i == 0 ? row : std::vector<std::string>(row.size(), "");
      r.insert(r.end(), {std::to_string(p.pid), shorten(p.command, wide ? 80 : 40), p.runtime_version,
                         core_list(p.cores_in_use), format_hbm(p.hbm_reserved)});
      group.push_back(std::move(r));
    }
    groups.push_back(std::move(group));
  }

  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = std::max(header[c].first.size(), header[c].second.size());
    for (const auto& group : groups)
      for (const auto& row : group) width[c] = std::max(width[c], row[c].size());
  }
  auto rule = [&] {
    std::string s = "+";
    for (size_t w : width) s += std::string(w + 2, '-') + "+";
    return s + "\n";
  };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < cells.size(); ++c)
      s += " " + cells[c] + std::string(width[c] - cells[c].size(), ' ') + " |";
    return s + "\n";
  };
  std::vector<std::string> top, bottom;
  for (const auto& h : header) {
    top.push_back(h.first);
    bottom.push_back(h.second);
  }

  bool multi_row = false;  // a rule between devices once one of them has several rows
  for (const auto& group : groups) multi_row = multi_row || group.size() > 1;
  std::string out = "instance-type: " + t.profile.name + "\n";
  out += rule() + line(top) + line(bottom) + rule();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& row : groups[g]) out += line(row);
    if (multi_row && g + 1 < groups.size()) out += rule();
  }
  out += rule();
  std::fputs(out.c_str(), stdout);
}

void print_json(const Topology& t, const std::vector<DeviceInfo>& devices) {
  // Profile values are fixed strings (digits, ':', '.', '-', ','); commands are escaped.
  std::string out = "[\n";
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceInfo& d = devices[i];
    out += "    {\n";
    out += "        \"neuron_device\": " + std::to_string(d.index) + ",\n";
    out += "        \"bdf\": \"" + d.bdf + "\",\n";
    out += "        \"cpu_affinity\": \"" + d.cpu_affinity + "\",\n";
    out += "        \"numa_node\": " + std::to_string(d.numa_node) + ",\n";
    out += "        \"connected_to\": [" + join_ints(d.connected, ", ") + "],\n";
    out += "        \"nc_count\": " + std::to_string(d.nc_count) + ",\n";
    out += "        \"logical_neuroncore_config\": " + std::to_string(t.lnc) + ",\n";
    out += "        \"memory_size\": " + std::to_string(d.memory_bytes) + ",\n";
    out += "        \"neuroncore_ids\": [" + join_ints(d.core_ids, ", ") + "],\n";
    if (d.processes.empty()) {
      out += "        \"neuron_processes\": []\n";
    } else {
      out += "        \"neuron_processes\": [\n";
      for (size_t k = 0; k < d.processes.size(); ++k) {
        const DeviceProcess& p = d.processes[k];
        out += "            {\n";
        out += "                \"pid\": " + std::to_string(p.pid) + ",\n";
        out += "                \"command\": \"" + json_escape(p.command) + "\",\n";
        out += "                \"neuron_runtime_version\": \"" + json_escape(p.runtime_version) + "\",\n";
        out += "                \"neuroncore_ids\": [" + join_ints(p.cores_in_use, ", ") + "],\n";
        out += "                \"memory_used\": " + std::to_string(p.hbm_reserved) + ",\n";
        out += "                \"memory_allocated\": " + std::to_string(p.hbm_allocated) + "\n";
        out += k + 1 < d.processes.size() ? "            },\n" : "            }\n";
      }
      out += "        ]\n";
    }
    out += i + 1 < devices.size() ? "    },\n" : "    }\n";
  }
  out += "]\n";
  std::fputs(out.c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false, wide = false, all_procs = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "-j" || a == "--json") {
      json = true;
      continue;
    }
    if (a == "-w" || a == "--wide") {
      wide = true;
      continue;
    }
    if (a == "-a" || a == "--show-all-procs") {
      all_procs = true;
      continue;
    }
    std::fprintf(stderr, "neuron-ls: unrecognized argument '%s'\n%s", argv[i], kUsage);
    return 2;
  }

  Topology topo;
  try {
    topo = Topology::from_env(neuron::rt::read_topology_env());
  } catch (const neuron::rt::Error& e) {
    std::fprintf(stderr, "neuron-ls: %s\n", e.what());
    return 2;
  }
  auto devices = collect(topo);
  attach_processes(devices, all_procs);
  if (json)
    print_json(topo, devices);
  else
    print_table(topo, devices, wide);
  return 0;
}
