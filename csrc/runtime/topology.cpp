#include "runtime/topology.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "runtime/env.h"
#include "runtime/error.h"

namespace neuron::rt {

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

const char* const kInstanceTypeVar = "NEURON_EMU_INSTANCE_TYPE";
const char* const kLncVar = "NEURON_LOGICAL_NC_CONFIG";
const char* const kVirtualCoreSizeVar = "NEURON_RT_VIRTUAL_CORE_SIZE";
const char* const kVisibleCoresVar = "NEURON_RT_VISIBLE_CORES";
const char* const kNumCoresVar = "NEURON_RT_NUM_CORES";
const char* const kHbmVar = "NEURON_EMU_HBM_GB";
const char* const kDefaultProfile = "trn2.3xlarge";

std::string bdf(int bus) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0000:%02x:00.0", bus);
  return buf;
}

// Single-device instances have a fixed PCI address; the 16-device ones get invented but
// distinct addresses, the first half of the devices on NUMA node 0 and the rest on node 1.
InstanceProfile make_profile(const std::string& name, int devices, int nc_version) {
  InstanceProfile p;
  p.name = name;
  p.num_devices = devices;
  p.nc_version = nc_version;
  if (nc_version == 3) {
    p.physical_cores_per_device = 8;
    p.default_lnc = 2;
    p.allowed_lnc = {1, 2};
    p.hbm_bytes_per_device = 96 * kGiB;
    p.sbuf_bytes_per_partition = 224 * kKiB;
  } else {
    p.physical_cores_per_device = 2;
    p.default_lnc = 1;
    p.allowed_lnc = {1};
    p.hbm_bytes_per_device = 32 * kGiB;
    p.sbuf_bytes_per_partition = 192 * kKiB;
  }
  p.sbuf_partitions = 128;
  p.psum_bytes_per_partition = 16 * kKiB;
  p.psum_banks = 8;
  return p;
}

std::vector<InstanceProfile> build_profiles() {
  std::vector<InstanceProfile> out;

  InstanceProfile t2 = make_profile("trn2.3xlarge", 1, 3);
  t2.host_vcpus = 12;
  t2.pci_bdf = {"0000:33:00.0"};
  t2.cpu_affinity = {"0-11"};
  t2.numa_node = {0};
  out.push_back(t2);

  InstanceProfile t2x = make_profile("trn2.48xlarge", 16, 3);
  t2x.host_vcpus = 192;
  for (int d = 0; d < 16; ++d) {
    t2x.pci_bdf.push_back(bdf(0x1c + 0x0c * d));
    t2x.cpu_affinity.push_back(d < 8 ? "0-47,96-143" : "48-95,144-191");
    t2x.numa_node.push_back(d < 8 ? 0 : 1);
  }
  out.push_back(t2x);

  InstanceProfile t1 = make_profile("trn1.2xlarge", 1, 2);
  t1.host_vcpus = 8;
  t1.pci_bdf = {"0000:00:1e.0"};
  t1.cpu_affinity = {"0-7"};
  t1.numa_node = {0};
  out.push_back(t1);

  InstanceProfile t1x = make_profile("trn1.32xlarge", 16, 2);
  t1x.host_vcpus = 128;
  for (int d = 0; d < 16; ++d) {
    t1x.pci_bdf.push_back(bdf(0x10 + 0x0a * d));
    t1x.cpu_affinity.push_back(d < 8 ? "0-31,64-95" : "32-63,96-127");
    t1x.numa_node.push_back(d < 8 ? 0 : 1);
  }
  out.push_back(t1x);
  return out;
}

const std::vector<InstanceProfile>& profiles() {
  static const std::vector<InstanceProfile> all = build_profiles();
  return all;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// "LNC 1" / "LNC 1 or 2".
std::string allowed_lnc_text(const InstanceProfile& p) {
  std::string out = "LNC ";
  for (size_t i = 0; i < p.allowed_lnc.size(); ++i) {
    if (i) out += (i + 1 == p.allowed_lnc.size()) ? " or " : ", ";
    out += std::to_string(p.allowed_lnc[i]);
  }
  return out;
}

int parse_lnc(const char* var, const std::string& value, const InstanceProfile& p) {
  const std::string t = trim(value);
  int lnc = -1;
  if (!t.empty() && t.size() <= 2 && std::all_of(t.begin(), t.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    lnc = std::stoi(t);
  }
  const bool ok = std::find(p.allowed_lnc.begin(), p.allowed_lnc.end(), lnc) != p.allowed_lnc.end();
  NEURON_RT_CHECK_T(ConfigError, ok, var, "=", value, ": ", p.name, " (NeuronCore-v", p.nc_version,
                    ") supports only ", allowed_lnc_text(p));
  return lnc;
}

std::string id_range_text(int limit) {
  if (limit <= 0) return "none";
  if (limit == 1) return "0";
  return str("0-", limit - 1);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

// Ids longer than 9 digits cannot be valid core ids; cap them instead of overflowing.
int64_t to_id(const std::string& s) {
  return s.size() > 9 ? std::numeric_limits<int64_t>::max() : std::stoll(s);
}

// `where` completes the message: which ids exist and why.
std::vector<int> parse_core_list_impl(const std::string& var, const std::string& value, int limit,
                                      const std::string& where) {
  const char* const forms = "expected core ids such as 2, 1-3, 0,2 or 0-1,3";
  NEURON_RT_CHECK_T(ConfigError, !trim(value).empty(), var, "=", value, ": empty core list; ",
                    forms, " (", where, ")");
  std::vector<int> ids;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string::npos) comma = value.size();
    const std::string item = trim(value.substr(pos, comma - pos));
    pos = comma + 1;

    const size_t dash = item.find('-');
    std::string lo_s = item, hi_s = item;
    if (dash != std::string::npos) {
      lo_s = trim(item.substr(0, dash));
      hi_s = trim(item.substr(dash + 1));
    }
    NEURON_RT_CHECK_T(ConfigError, all_digits(lo_s) && all_digits(hi_s), var, "=", value, ": '",
                      item, "' is not a core id or range; ", forms, " (", where, ")");
    const int64_t lo = to_id(lo_s), hi = to_id(hi_s);
    NEURON_RT_CHECK_T(ConfigError, lo <= hi, var, "=", value, ": range ", item,
                      " is reversed; write it as ", hi_s, "-", lo_s);
    NEURON_RT_CHECK_T(ConfigError, lo < limit, var, "=", value, ": core ", lo_s,
                      " does not exist; ", where);
    NEURON_RT_CHECK_T(ConfigError, hi < limit, var, "=", value, ": core ", hi_s,
                      " does not exist; ", where);
    for (int64_t id = lo; id <= hi; ++id) ids.push_back(static_cast<int>(id));
  }
  std::sort(ids.begin(), ids.end());
  // A core listed twice is a mistake in the list (the process would get fewer cores than it
  // names): say so instead of dropping the repeat.
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  NEURON_RT_CHECK_T(ConfigError, dup == ids.end(), var, "=", value, ": core ",
                    dup == ids.end() ? 0 : *dup, " is listed more than once; ", forms, " (",
                    where, ")");
  return ids;
}

std::optional<std::string> lookup(const EnvMap& env, const char* key) {
  auto it = env.find(key);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// Scalar variables set to an empty string count as unset (as with `VAR= cmd` in a shell).
std::optional<std::string> lookup_scalar(const EnvMap& env, const char* key) {
  auto v = lookup(env, key);
  if (v && trim(*v).empty()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<InstanceProfile> find_profile(const std::string& name) {
  for (const auto& p : profiles()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::vector<std::string> profile_names() {
  std::vector<std::string> names;
  for (const auto& p : profiles()) names.push_back(p.name);
  return names;
}

EnvMap read_topology_env() {
  EnvMap env;
  for (const char* var :
       {kInstanceTypeVar, kLncVar, kVirtualCoreSizeVar, kVisibleCoresVar, kNumCoresVar, kHbmVar}) {
    if (auto v = getenv_str(var)) env[var] = *v;
  }
  return env;
}

std::vector<int> parse_core_list(const std::string& var, const std::string& value, int limit) {
  return parse_core_list_impl(var, value, limit, str("valid core ids are ", id_range_text(limit)));
}

Topology Topology::from_env(const EnvMap& env) {
  Topology t;

  const std::string name = lookup_scalar(env, kInstanceTypeVar).value_or(kDefaultProfile);
  auto profile = find_profile(trim(name));
  NEURON_RT_CHECK_T(ConfigError, profile.has_value(), kInstanceTypeVar, "=", name,
                    ": unknown instance type; known types are ", join(profile_names(), ", "));
  t.profile = *profile;
  const InstanceProfile& p = t.profile;

  // Both variables select the logical NeuronCore size; the newer name wins only if they agree.
  t.lnc = p.default_lnc;
  auto lnc_a = lookup_scalar(env, kLncVar);
  auto lnc_b = lookup_scalar(env, kVirtualCoreSizeVar);
  std::optional<int> a, b;
  if (lnc_a) a = parse_lnc(kLncVar, *lnc_a, p);
  if (lnc_b) b = parse_lnc(kVirtualCoreSizeVar, *lnc_b, p);
  NEURON_RT_CHECK_T(ConfigError, !(a && b && *a != *b), kLncVar, "=", *lnc_a, " and ",
                    kVirtualCoreSizeVar, "=", *lnc_b,
                    " disagree; both set the logical NeuronCore size, set only one");
  if (a)
    t.lnc = *a;
  else if (b)
    t.lnc = *b;

  t.logical_cores_per_device = p.physical_cores_per_device / t.lnc;
  t.total_logical_cores = p.num_devices * t.logical_cores_per_device;
  const std::string machine = str(p.name, " with LNC ", t.lnc);
  const std::string where =
      str(machine, " has logical cores ", id_range_text(t.total_logical_cores));

  std::vector<int> ids;
  if (auto v = lookup(env, kVisibleCoresVar)) {
    ids = parse_core_list_impl(kVisibleCoresVar, *v, t.total_logical_cores, where);
  } else {
    for (int i = 0; i < t.total_logical_cores; ++i) ids.push_back(i);
  }

  if (auto v = lookup_scalar(env, kNumCoresVar)) {
    int64_t n = 0;
    try {
      n = parse_int(kNumCoresVar, *v, 0, t.total_logical_cores);
    } catch (const ConfigError& e) {
      throw ConfigError(str(e.what(), "; ", machine, " has ", t.total_logical_cores,
                            " logical cores (0 means all)"));
    }
    if (n > 0 && static_cast<size_t>(n) < ids.size()) ids.resize(static_cast<size_t>(n));
  }

  uint64_t capacity = p.hbm_bytes_per_device / static_cast<uint64_t>(t.logical_cores_per_device);
  if (auto v = lookup_scalar(env, kHbmVar)) {
    const std::string msg =
        str(kHbmVar, "=", *v,
            ": expected a number of GiB per logical core greater than 0 and at most 1048576 (e.g. "
            "24 or 0.5); the ", p.name, " default is ", capacity / kGiB);
    double gib = 0;
    try {
      gib = parse_double(kHbmVar, *v, 0, 1 << 20);
    } catch (const ConfigError&) {
      throw ConfigError(msg);
    }
    const double bytes = std::round(gib * static_cast<double>(kGiB));
    NEURON_RT_CHECK_T(ConfigError, bytes >= 1, msg);
    capacity = static_cast<uint64_t>(bytes);
  }

  for (size_t i = 0; i < ids.size(); ++i) {
    LogicalCore c;
    c.index = static_cast<int>(i);
    c.global_id = ids[i];
    c.device = ids[i] / t.logical_cores_per_device;
    c.physical_first = (ids[i] % t.logical_cores_per_device) * t.lnc;
    c.physical_count = t.lnc;
    c.hbm_capacity = capacity;
    t.visible.push_back(c);
  }
  return t;
}

}  // namespace neuron::rt
