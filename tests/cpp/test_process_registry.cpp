// The process registry behind neuron-ls: a process's entry with live HBM counters, removal,
// and cleanup of entries left by dead processes or reused pids.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/allocator.h"
#include "runtime/process_registry.h"
#include "runtime/topology.h"

using namespace neuron::rt;
namespace fs = std::filesystem;

namespace {

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/neuron-registry-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = std::string(tmpl) + "/registry";  // created by the first registration
    setenv("NEURON_EMU_REGISTRY_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("NEURON_EMU_REGISTRY_DIR");
    fs::remove_all(fs::path(dir_).parent_path());
  }
  static std::vector<LogicalCore> cores(int n) {
    std::vector<LogicalCore> out(n);
    for (int i = 0; i < n; ++i) {
      out[i].index = i;
      out[i].global_id = 4 + i;
      out[i].device = 1;
    }
    return out;
  }
  // A pid that is certainly not alive: a child that has exited and been reaped.
  static int dead_pid() {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, nullptr, 0);
    return static_cast<int>(pid);
  }
  std::string dir_;
};

TEST_F(RegistryTest, ListsThisProcessWithItsCoresAndLiveCounters) {
  registry::Registration* reg = registry::Registration::create("trn2.3xlarge", cores(2));
  ASSERT_NE(reg->reserved_counter(0), nullptr);
  EXPECT_EQ(reg->reserved_counter(2), nullptr);  // only the visible cores have slots

  HbmAllocator alloc(1, 64 << 20);
  alloc.set_usage_mirror(reg->reserved_counter(1), reg->allocated_counter(1), reg->used_flag(1));
  void* p = alloc.allocate(3 << 20, nullptr);

  auto entries = registry::list();
  ASSERT_EQ(entries.size(), 1u);
  const registry::ProcessEntry& e = entries[0];
  EXPECT_EQ(e.pid, getpid());
  EXPECT_NE(e.command.find("runtime_tests"), std::string::npos) << e.command;
  EXPECT_EQ(e.runtime_version, registry::kRuntimeVersion);
  EXPECT_EQ(e.instance_type, "trn2.3xlarge");
  ASSERT_EQ(e.cores.size(), 2u);
  EXPECT_EQ(e.cores[0].global_id, 4);
  EXPECT_EQ(e.cores[1].device, 1);
  EXPECT_FALSE(e.cores[0].used);
  EXPECT_TRUE(e.cores[1].used);
  EXPECT_GE(e.cores[1].allocated, 3u << 20);
  EXPECT_GE(e.cores[1].reserved, e.cores[1].allocated);

  alloc.free(p);
  EXPECT_EQ(registry::list()[0].cores[1].allocated, 0u);  // freed: cached, still reserved
  EXPECT_GE(registry::list()[0].cores[1].reserved, 3u << 20);
  alloc.empty_cache();
  EXPECT_EQ(registry::list()[0].cores[1].reserved, 0u);

  alloc.set_usage_mirror(nullptr, nullptr, nullptr);
  reg->remove();
  EXPECT_TRUE(registry::list().empty());
}

TEST_F(RegistryTest, EntriesOfDeadProcessesAreRemoved) {
  const int pid = dead_pid();
  ASSERT_TRUE(registry::write_entry_for_test(dir_, pid, 12345, "python train.py"));
  ASSERT_TRUE(fs::exists(dir_ + "/" + std::to_string(pid)));
  EXPECT_EQ(registry::list_dir(dir_, /*cleanup=*/false).size(), 0u);  // not listed
  EXPECT_TRUE(fs::exists(dir_ + "/" + std::to_string(pid)));          // but kept without cleanup
  EXPECT_EQ(registry::list().size(), 0u);
  EXPECT_FALSE(fs::exists(dir_ + "/" + std::to_string(pid)));
}

TEST_F(RegistryTest, AReusedPidIsRecognisedByItsStartTime) {
  const int self = static_cast<int>(getpid());
  const uint64_t start = registry::process_start_time(self);
  ASSERT_GT(start, 0u);
  ASSERT_TRUE(registry::write_entry_for_test(dir_, self, start + 1, "an older process with our pid"));
  EXPECT_TRUE(registry::list().empty());
  EXPECT_FALSE(fs::exists(dir_ + "/" + std::to_string(self)));
  ASSERT_TRUE(registry::write_entry_for_test(dir_, self, start, "us"));
  ASSERT_EQ(registry::list().size(), 1u);
  EXPECT_EQ(registry::list()[0].command, "us");
}

TEST_F(RegistryTest, LeftoverTemporaryFilesOfDeadWritersAreRemovedForeignFilesKept) {
  fs::create_directories(dir_);
  const std::string tmp = dir_ + "/.tmp." + std::to_string(dead_pid());
  std::ofstream(tmp) << "half written";
  const std::string foreign = dir_ + "/" + std::to_string(dead_pid());
  std::ofstream(foreign) << "not a registry entry";
  EXPECT_TRUE(registry::list().empty());
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_TRUE(fs::exists(foreign));
}

TEST_F(RegistryTest, OffDisablesTheRegistry) {
  setenv("NEURON_EMU_REGISTRY_DIR", "off", 1);
  EXPECT_EQ(registry::directory(), "");
  registry::Registration* reg = registry::Registration::create("trn2.3xlarge", cores(1));
  EXPECT_EQ(reg->reserved_counter(0), nullptr);
  EXPECT_TRUE(registry::list().empty());
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(RegistryTest, AnUnwritableDirectoryLeavesAnEmptyRegistration) {
  fs::create_directories(fs::path(dir_).parent_path());
  std::ofstream(dir_) << "a file where the directory should be";
  registry::Registration* reg = registry::Registration::create("trn2.3xlarge", cores(1));
  EXPECT_EQ(reg->reserved_counter(0), nullptr);  // updates are ignored, nothing crashes
  EXPECT_TRUE(registry::list().empty());
}

}  // namespace
