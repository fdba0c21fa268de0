// Instance profiles and the logical-core topology selected by the runtime variables.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/topology.h"

using namespace neuron::rt;

namespace {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

std::string config_error(const EnvMap& env) {
  try {
    Topology::from_env(env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ConfigError";
  return "";
}

std::vector<int> global_ids(const Topology& t) {
  std::vector<int> ids;
  for (const auto& c : t.visible) ids.push_back(c.global_id);
  return ids;
}

}  // namespace

TEST(Profiles, KnownNamesInStableOrder) {
  EXPECT_EQ(profile_names(), (std::vector<std::string>{"trn2.3xlarge", "trn2.48xlarge",
                                                       "trn1.2xlarge", "trn1.32xlarge"}));
  EXPECT_FALSE(find_profile("trn3.huge").has_value());
}

TEST(Profiles, Trn2_3xlarge) {
  auto p = find_profile("trn2.3xlarge").value();
  EXPECT_EQ(p.num_devices, 1);
  EXPECT_EQ(p.physical_cores_per_device, 8);
  EXPECT_EQ(p.nc_version, 3);
  EXPECT_EQ(p.default_lnc, 2);
  EXPECT_EQ(p.allowed_lnc, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.hbm_bytes_per_device, 96 * kGiB);
  EXPECT_EQ(p.sbuf_bytes_per_partition * p.sbuf_partitions, 28ull * 1024 * 1024);
  EXPECT_EQ(p.psum_bytes_per_partition * p.sbuf_partitions, 2ull * 1024 * 1024);
  EXPECT_EQ(p.psum_banks, 8);
  EXPECT_EQ(p.host_vcpus, 12);
  EXPECT_EQ(p.pci_bdf, (std::vector<std::string>{"0000:33:00.0"}));
  EXPECT_EQ(p.cpu_affinity, (std::vector<std::string>{"0-11"}));
  EXPECT_EQ(p.numa_node, (std::vector<int>{0}));
}

TEST(Profiles, MultiDeviceProfilesHaveDistinctAddressesAndTwoNumaNodes) {
  for (const char* name : {"trn2.48xlarge", "trn1.32xlarge"}) {
    auto p = find_profile(name).value();
    ASSERT_EQ(p.num_devices, 16) << name;
    ASSERT_EQ(p.pci_bdf.size(), 16u);
    ASSERT_EQ(p.cpu_affinity.size(), 16u);
    ASSERT_EQ(p.numa_node.size(), 16u);
    EXPECT_EQ(std::set<std::string>(p.pci_bdf.begin(), p.pci_bdf.end()).size(), 16u) << name;
    EXPECT_EQ(p.numa_node[0], 0);
    EXPECT_EQ(p.numa_node[7], 0);
    EXPECT_EQ(p.numa_node[8], 1);
    EXPECT_EQ(p.numa_node[15], 1);
    EXPECT_NE(p.cpu_affinity[0], p.cpu_affinity[15]);
  }
  auto t2 = find_profile("trn2.48xlarge").value();
  EXPECT_EQ(t2.host_vcpus, 192);
  EXPECT_EQ(t2.cpu_affinity[0], "0-47,96-143");
  EXPECT_EQ(t2.cpu_affinity[8], "48-95,144-191");
  EXPECT_EQ(t2.hbm_bytes_per_device, 96 * kGiB);
  auto t1 = find_profile("trn1.32xlarge").value();
  EXPECT_EQ(t1.host_vcpus, 128);
  EXPECT_EQ(t1.physical_cores_per_device, 2);
  EXPECT_EQ(t1.hbm_bytes_per_device, 32 * kGiB);
}

TEST(Profiles, Trn1HasNeuronCoreV2) {
  auto p = find_profile("trn1.2xlarge").value();
  EXPECT_EQ(p.nc_version, 2);
  EXPECT_EQ(p.physical_cores_per_device, 2);
  EXPECT_EQ(p.allowed_lnc, (std::vector<int>{1}));
  EXPECT_EQ(p.default_lnc, 1);
  EXPECT_EQ(p.sbuf_bytes_per_partition * p.sbuf_partitions, 24ull * 1024 * 1024);
  EXPECT_EQ(p.hbm_bytes_per_device, 32 * kGiB);
  EXPECT_EQ(p.host_vcpus, 8);
  EXPECT_EQ(p.cpu_affinity, (std::vector<std::string>{"0-7"}));
}

TEST(Topology, DefaultIsTrn2_3xlargeWithLnc2) {
  Topology t = Topology::from_env({});
  EXPECT_EQ(t.profile.name, "trn2.3xlarge");
  EXPECT_EQ(t.lnc, 2);
  EXPECT_EQ(t.logical_cores_per_device, 4);
  EXPECT_EQ(t.total_logical_cores, 4);
  ASSERT_EQ(t.visible.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const LogicalCore& c = t.visible[i];
    EXPECT_EQ(c.index, i);
    EXPECT_EQ(c.global_id, i);
    EXPECT_EQ(c.device, 0);
    EXPECT_EQ(c.physical_first, 2 * i);
    EXPECT_EQ(c.physical_count, 2);
    EXPECT_EQ(c.hbm_capacity, 24 * kGiB);
  }
}

TEST(Topology, Lnc1DoublesTheLogicalCores) {
  for (const char* var : {"NEURON_LOGICAL_NC_CONFIG", "NEURON_RT_VIRTUAL_CORE_SIZE"}) {
    Topology t = Topology::from_env({{var, "1"}});
    EXPECT_EQ(t.lnc, 1) << var;
    EXPECT_EQ(t.logical_cores_per_device, 8);
    ASSERT_EQ(t.visible.size(), 8u);
    EXPECT_EQ(t.visible[5].physical_first, 5);
    EXPECT_EQ(t.visible[5].physical_count, 1);
    EXPECT_EQ(t.visible[5].hbm_capacity, 12 * kGiB);
  }
}

TEST(Topology, BothLncVariablesMayBeSetWhenTheyAgree) {
  Topology t =
      Topology::from_env({{"NEURON_LOGICAL_NC_CONFIG", "1"}, {"NEURON_RT_VIRTUAL_CORE_SIZE", "1"}});
  EXPECT_EQ(t.lnc, 1);
  EXPECT_EQ(
      config_error({{"NEURON_LOGICAL_NC_CONFIG", "1"}, {"NEURON_RT_VIRTUAL_CORE_SIZE", "2"}}),
      "NEURON_LOGICAL_NC_CONFIG=1 and NEURON_RT_VIRTUAL_CORE_SIZE=2 disagree; both set the logical "
      "NeuronCore size, set only one");
}

TEST(Topology, LncOutsideTheProfilesSetIsRejected) {
  EXPECT_EQ(config_error(
                {{"NEURON_EMU_INSTANCE_TYPE", "trn1.2xlarge"}, {"NEURON_LOGICAL_NC_CONFIG", "2"}}),
            "NEURON_LOGICAL_NC_CONFIG=2: trn1.2xlarge (NeuronCore-v2) supports only LNC 1");
  EXPECT_EQ(config_error({{"NEURON_LOGICAL_NC_CONFIG", "3"}}),
            "NEURON_LOGICAL_NC_CONFIG=3: trn2.3xlarge (NeuronCore-v3) supports only LNC 1 or 2");
  EXPECT_EQ(
      config_error({{"NEURON_RT_VIRTUAL_CORE_SIZE", "two"}}),
      "NEURON_RT_VIRTUAL_CORE_SIZE=two: trn2.3xlarge (NeuronCore-v3) supports only LNC 1 or 2");
}

TEST(Topology, UnknownInstanceTypeListsTheKnownOnes) {
  EXPECT_EQ(
      config_error({{"NEURON_EMU_INSTANCE_TYPE", "trn9.nano"}}),
      "NEURON_EMU_INSTANCE_TYPE=trn9.nano: unknown instance type; known types are trn2.3xlarge, "
      "trn2.48xlarge, trn1.2xlarge, trn1.32xlarge");
}

TEST(Topology, EachProfileWithItsDefaultLnc) {
  struct Case {
    const char* name;
    int lnc, per_device, total;
    uint64_t capacity;
  };
  for (const Case& c :
       {Case{"trn2.3xlarge", 2, 4, 4, 24 * kGiB}, Case{"trn2.48xlarge", 2, 4, 64, 24 * kGiB},
        Case{"trn1.2xlarge", 1, 2, 2, 16 * kGiB}, Case{"trn1.32xlarge", 1, 2, 32, 16 * kGiB}}) {
    Topology t = Topology::from_env({{"NEURON_EMU_INSTANCE_TYPE", c.name}});
    EXPECT_EQ(t.profile.name, c.name);
    EXPECT_EQ(t.lnc, c.lnc) << c.name;
    EXPECT_EQ(t.logical_cores_per_device, c.per_device) << c.name;
    EXPECT_EQ(t.total_logical_cores, c.total) << c.name;
    ASSERT_EQ(static_cast<int>(t.visible.size()), c.total) << c.name;
    EXPECT_EQ(t.visible.back().device, t.profile.num_devices - 1) << c.name;
    EXPECT_EQ(t.visible.back().hbm_capacity, c.capacity) << c.name;
  }
  Topology big = Topology::from_env(
      {{"NEURON_EMU_INSTANCE_TYPE", "trn2.48xlarge"}, {"NEURON_LOGICAL_NC_CONFIG", "1"}});
  EXPECT_EQ(big.total_logical_cores, 128);
  EXPECT_EQ(big.visible[127].device, 15);
  EXPECT_EQ(big.visible[127].physical_first, 7);
}

TEST(Topology, VisibleCoresForms) {
  struct Case {
    const char* value;
    std::vector<int> ids;
  };
  for (const Case& c :
       {Case{"2", {2}}, Case{"1-3", {1, 2, 3}}, Case{"0,2", {0, 2}}, Case{"0-1,3", {0, 1, 3}},
        Case{" 1 , 3 ", {1, 3}}, Case{"3,1-2", {1, 2, 3}}}) {
    Topology t = Topology::from_env({{"NEURON_RT_VISIBLE_CORES", c.value}});
    EXPECT_EQ(global_ids(t), c.ids) << c.value;
    for (size_t i = 0; i < t.visible.size(); ++i)
      EXPECT_EQ(t.visible[i].index, static_cast<int>(i));
  }
  Topology t = Topology::from_env({{"NEURON_RT_VISIBLE_CORES", "2"}});
  EXPECT_EQ(t.visible[0].physical_first, 4);  // logical core 2 = physical cores 4-5
}

TEST(Topology, VisibleCoresOnAMultiDeviceInstanceMapToTheirDevice) {
  Topology t = Topology::from_env(
      {{"NEURON_EMU_INSTANCE_TYPE", "trn2.48xlarge"}, {"NEURON_RT_VISIBLE_CORES", "33,63"}});
  ASSERT_EQ(t.visible.size(), 2u);
  EXPECT_EQ(t.visible[0].device, 8);
  EXPECT_EQ(t.visible[0].physical_first, 2);
  EXPECT_EQ(t.visible[1].device, 15);
  EXPECT_EQ(t.visible[1].index, 1);
}

TEST(Topology, VisibleCoresBadForms) {
  const std::string forms = "expected core ids such as 2, 1-3, 0,2 or 0-1,3";
  const std::string where = "trn2.3xlarge with LNC 2 has logical cores 0-3";
  EXPECT_EQ(config_error({{"NEURON_RT_VISIBLE_CORES", "9"}}),
            "NEURON_RT_VISIBLE_CORES=9: core 9 does not exist; " + where);
  EXPECT_EQ(config_error({{"NEURON_RT_VISIBLE_CORES", "2-5"}}),
            "NEURON_RT_VISIBLE_CORES=2-5: core 5 does not exist; " + where);
  EXPECT_EQ(
      config_error({{"NEURON_RT_VISIBLE_CORES", "a"}}),
      "NEURON_RT_VISIBLE_CORES=a: 'a' is not a core id or range; " + forms + " (" + where + ")");
  EXPECT_EQ(config_error({{"NEURON_RT_VISIBLE_CORES", "3-1"}}),
            "NEURON_RT_VISIBLE_CORES=3-1: range 3-1 is reversed; write it as 1-3");
  EXPECT_EQ(config_error({{"NEURON_RT_VISIBLE_CORES", ""}}),
            "NEURON_RT_VISIBLE_CORES=: empty core list; " + forms + " (" + where + ")");
  EXPECT_EQ(
      config_error({{"NEURON_RT_VISIBLE_CORES", "1,"}}),
      "NEURON_RT_VISIBLE_CORES=1,: '' is not a core id or range; " + forms + " (" + where + ")");
  // A core named twice (0,0 or overlapping ranges) is an error, not silently one core.
  EXPECT_EQ(config_error({{"NEURON_RT_VISIBLE_CORES", "0,0"}}),
            "NEURON_RT_VISIBLE_CORES=0,0: core 0 is listed more than once; " + forms + " (" +
                where + ")");
  EXPECT_NE(config_error({{"NEURON_RT_VISIBLE_CORES", "3,1-2,1"}}).find("core 1 is listed more than once"),
            std::string::npos);
  for (const char* bad : {"-1", "1-2-3", "1.5", "0x1", ",", "1--2"}) {
    const std::string msg = config_error({{"NEURON_RT_VISIBLE_CORES", bad}});
    EXPECT_EQ(msg.rfind(std::string("NEURON_RT_VISIBLE_CORES=") + bad + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("is not a core id or range"), std::string::npos) << msg;
  }
  // With LNC 1 there are 8 logical cores, so 7 exists and 8 does not.
  EXPECT_EQ(global_ids(Topology::from_env(
                {{"NEURON_LOGICAL_NC_CONFIG", "1"}, {"NEURON_RT_VISIBLE_CORES", "7"}})),
            std::vector<int>{7});
  EXPECT_EQ(config_error({{"NEURON_LOGICAL_NC_CONFIG", "1"}, {"NEURON_RT_VISIBLE_CORES", "8"}}),
            "NEURON_RT_VISIBLE_CORES=8: core 8 does not exist; trn2.3xlarge with LNC 1 has logical "
            "cores 0-7");
  EXPECT_NE(
      config_error({{"NEURON_RT_VISIBLE_CORES", "99999999999999999999"}}).find("does not exist"),
      std::string::npos);
}

TEST(Topology, NumCores) {
  EXPECT_EQ(global_ids(Topology::from_env({{"NEURON_RT_NUM_CORES", "2"}})),
            (std::vector<int>{0, 1}));
  EXPECT_EQ(global_ids(Topology::from_env({{"NEURON_RT_NUM_CORES", "0"}})),
            (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(global_ids(Topology::from_env({{"NEURON_RT_NUM_CORES", "4"}})),
            (std::vector<int>{0, 1, 2, 3}));
  // Both set: the first n of the visible list.
  EXPECT_EQ(global_ids(Topology::from_env(
                {{"NEURON_RT_VISIBLE_CORES", "1-3"}, {"NEURON_RT_NUM_CORES", "2"}})),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(global_ids(Topology::from_env(
                {{"NEURON_RT_VISIBLE_CORES", "3"}, {"NEURON_RT_NUM_CORES", "2"}})),
            (std::vector<int>{3}));
  EXPECT_EQ(config_error({{"NEURON_RT_NUM_CORES", "5"}}),
            "NEURON_RT_NUM_CORES=5: expected an integer in [0, 4]; trn2.3xlarge with LNC 2 has 4 "
            "logical cores "
            "(0 means all)");
  EXPECT_EQ(config_error({{"NEURON_RT_NUM_CORES", "-1"}}),
            "NEURON_RT_NUM_CORES=-1: expected an integer in [0, 4]; trn2.3xlarge with LNC 2 has 4 "
            "logical cores "
            "(0 means all)");
  EXPECT_NE(config_error({{"NEURON_RT_NUM_CORES", "many"}}).find("NEURON_RT_NUM_CORES=many"),
            std::string::npos);
}

TEST(Topology, HbmOverrideIsGiBPerLogicalCore) {
  Topology t = Topology::from_env({{"NEURON_EMU_HBM_GB", "0.5"}});
  for (const auto& c : t.visible) EXPECT_EQ(c.hbm_capacity, kGiB / 2);
  EXPECT_EQ(Topology::from_env({{"NEURON_EMU_HBM_GB", "2"}}).visible[0].hbm_capacity, 2 * kGiB);
  // An empty value counts as unset for scalar variables.
  EXPECT_EQ(Topology::from_env({{"NEURON_EMU_HBM_GB", ""}}).visible[0].hbm_capacity, 24 * kGiB);
  for (const char* bad : {"0", "-1", "abc", "nan", "1GB", "1e9"}) {
    EXPECT_EQ(config_error({{"NEURON_EMU_HBM_GB", bad}}),
              std::string("NEURON_EMU_HBM_GB=") + bad +
                  ": expected a number of GiB per logical core greater than 0 and at most 1048576 "
                  "(e.g. 24 or 0.5); the trn2.3xlarge default is 24");
  }
}

TEST(ParseCoreList, UsesTheGivenLimit) {
  EXPECT_EQ(parse_core_list("V", "0-1,3", 4), (std::vector<int>{0, 1, 3}));
  try {
    parse_core_list("V", "4", 4);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "V=4: core 4 does not exist; valid core ids are 0-3");
  }
}
