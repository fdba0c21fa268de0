// neuron-ls: lists the Neuron devices of the emulated instance, like the real tool does for the
// hardware: one row per device with its logical cores, HBM, neighbours, PCI address and host
// CPU affinity. Reads only the topology (no runtime start, no threads).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/topology.h"

namespace {

using neuron::rt::Topology;

const char* const kUsage =
    "usage: neuron-ls [-h] [-j]\n"
    "\n"
    "List the Neuron devices of the emulated instance (neuron-emu).\n"
    "\n"
    "options:\n"
    "  -h, --help  show this help message and exit\n"
    "  -j, --json  print one JSON object per device\n"
    "\n"
    "The instance comes from NEURON_EMU_INSTANCE_TYPE (default trn2.3xlarge); the logical core\n"
    "size from NEURON_LOGICAL_NC_CONFIG or NEURON_RT_VIRTUAL_CORE_SIZE; NEURON_EMU_HBM_GB\n"
    "overrides the HBM per logical core.\n";

struct DeviceInfo {
  int index = 0;
  int nc_count = 0;
  std::vector<int> core_ids;
  uint64_t memory_bytes = 0;
  std::vector<int> connected;
  std::string bdf, cpu_affinity;
  int numa_node = 0;
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

void print_table(const Topology& t, const std::vector<DeviceInfo>& devices) {
  const bool multi = devices.size() > 1;
  std::vector<std::pair<std::string, std::string>> header = {
      {"NEURON", "DEVICE"}, {"NEURON", "CORES"}, {"NEURON", "CORE IDS"}, {"NEURON", "MEMORY"}};
  if (multi) header.push_back({"CONNECTED", "DEVICES"});
  header.insert(header.end(), {{"PCI", "BDF"}, {"CPU", "AFFINITY"}, {"NUMA", "NODE"}});

  std::vector<std::vector<std::string>> rows;
  for (const DeviceInfo& d : devices) {
    const double gb = static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0);
    std::vector<std::string> row = {std::to_string(d.index), std::to_string(d.nc_count),
                                    id_range(d.core_ids), std::to_string(std::llround(gb)) + " GB"};
    if (multi) row.push_back(join_ints(d.connected, ", "));
    row.insert(row.end(), {d.bdf, d.cpu_affinity, std::to_string(d.numa_node)});
    rows.push_back(std::move(row));
  }

  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = std::max(header[c].first.size(), header[c].second.size());
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
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

  std::string out = "instance-type: " + t.profile.name + "\n";
  out += rule() + line(top) + line(bottom) + rule();
  for (const auto& row : rows) out += line(row);
  out += rule();
  std::fputs(out.c_str(), stdout);
}

void print_json(const Topology& t, const std::vector<DeviceInfo>& devices) {
  // Every string here is a fixed profile value (digits, ':', '.', '-', ','): no escaping needed.
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
    out += "        \"neuron_processes\": []\n";
    out += i + 1 < devices.size() ? "    },\n" : "    }\n";
  }
  out += "]\n";
  std::fputs(out.c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
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
  const auto devices = collect(topo);
  if (json)
    print_json(topo, devices);
  else
    print_table(topo, devices);
  return 0;
}
