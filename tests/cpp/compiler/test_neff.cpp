// NEFF format and the NEFF cache: round trip, corruption/truncation/version detection, memory
// and disk hits, recompilation of damaged entries, concurrent compiles.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "compiler/cache.h"
#include "compiler/hash.h"
#include "compiler/metrics.h"
#include "compiler/neff.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

namespace fs = std::filesystem;

Neff make_neff() {
  Graph g;
  const int x = g.add_input(TensorType{DType::Float32, {3, 4}}, {}, "x");
  const std::vector<float> c = {1, 2, 3, 4};
  std::vector<uint8_t> bytes(16);
  std::memcpy(bytes.data(), c.data(), 16);
  const int k = g.constant(TensorType{DType::Float32, {4}}, bytes);
  g.set_outputs({g.add1(Op::mul, {g.add1(Op::exp, {x}), k})});
  Compiled comp = compile(g, CompileOptions{});
  Neff n;
  n.program = comp.program;
  n.ir = comp.final_ir;
  n.metadata["graph"] = "test";
  return n;
}

TEST(CompilerNeff, RoundTripKeepsEverything) {
  const Neff n = make_neff();
  const auto bytes = write_neff(n);
  const Neff back = read_neff(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(describe(back.program), describe(n.program));
  EXPECT_EQ(back.metadata, n.metadata);
  EXPECT_EQ(back.ir, n.ir);
  EXPECT_TRUE(back.target == n.target);
  EXPECT_EQ(write_neff(back), bytes);  // deterministic
  // The reloaded program computes the same thing.
  std::vector<HostTensor> in = {random_tensor(TensorType{DType::Float32, {3, 4}}, 1)};
  std::vector<HostTensor> in2 = in;
  expect_close(run_program(back.program, in)[0], run_program(n.program, in2)[0], 0, 0);
}

TEST(CompilerNeff, RoundTripOfLargeKernels) {
  // A long elementwise chain: the serialized kernel fills most of the NEFF, so every length
  // check of the reader is exercised against the end of the data.
  Graph g;
  const int x = g.add_input(TensorType{DType::Float32, {4, 9}});
  int y = x;
  for (int i = 0; i < 200; ++i) y = g.add1(i % 2 ? Op::tanh : Op::sin, {y});
  g.set_outputs({y});
  Neff n;
  n.program = compile(g, CompileOptions{}).program;
  ASSERT_EQ(n.program.steps.size(), 1u);
  ASSERT_GE(n.program.steps[0].kernel->body.size(), 200u);
  const auto bytes = write_neff(n);
  const Neff back = read_neff(bytes.data(), bytes.size(), "large");
  EXPECT_EQ(describe(back.program), describe(n.program));
}

std::string read_error(std::vector<uint8_t> bytes) {
  try {
    read_neff(bytes.data(), bytes.size(), "f.neff");
  } catch (const NeffError& e) {
    return e.what();
  }
  return "";
}

TEST(CompilerNeff, DetectsCorruptionTruncationAndVersion) {
  const auto good = write_neff(make_neff());
  for (size_t pos : {size_t{20}, good.size() / 2, good.size() - 20}) {
    auto bad = good;
    bad[pos] ^= 0x10;
    EXPECT_NE(read_error(bad).find("checksum mismatch"), std::string::npos) << pos;
  }
  auto cut = good;
  cut.resize(good.size() - 7);
  EXPECT_NE(read_error(cut).find("truncated"), std::string::npos);
  EXPECT_NE(read_error(std::vector<uint8_t>(good.begin(), good.begin() + 10)).find("truncated"),
            std::string::npos);
  EXPECT_NE(read_error(std::vector<uint8_t>(64, 0)).find("bad magic"), std::string::npos);
  // A NEFF from a newer format: the checksum is valid but the version is refused.
  auto newer = good;
  newer[8] = static_cast<uint8_t>(kNeffFormatVersion + 1);
  const uint64_t sum = hash64(newer.data(), newer.size() - 16);
  std::memcpy(newer.data() + newer.size() - 16, &sum, 8);
  EXPECT_NE(read_error(newer).find(rt::str("format version ", kNeffFormatVersion + 1,
                                           " is not supported")),
            std::string::npos);
}

TEST(CompilerNeff, ValidationRejectsOutOfBoundsPrograms) {
  Neff n = make_neff();
  ASSERT_FALSE(n.program.steps.empty());
  n.program.steps[0].tensors[0].offset = 1000;  // reads past its buffer
  EXPECT_THROW(validate(n.program), NeffError);
}

TEST(CompilerCache, MemoryThenDiskThenCompile) {
  CacheDir dir;
  int compiles = 0;
  auto compile_fn = [&] {
    ++compiles;
    return make_neff();
  };
  CacheSource src;
  NeffCache::instance().get("c0ffee0000000001", compile_fn, &src);
  EXPECT_EQ(src, CacheSource::Compiled);
  NeffCache::instance().get("c0ffee0000000001", compile_fn, &src);
  EXPECT_EQ(src, CacheSource::Memory);
  NeffCache::instance().clear_memory();
  NeffCache::instance().get("c0ffee0000000001", compile_fn, &src);
  EXPECT_EQ(src, CacheSource::Disk);
  EXPECT_EQ(compiles, 1);
  const Metrics m = metrics();
  EXPECT_EQ(m.graphs_compiled, 1);
  EXPECT_EQ(m.cache_hits_memory, 1);
  EXPECT_EQ(m.cache_hits_disk, 1);
  EXPECT_TRUE(fs::exists(dir.path + "/c0ffee0000000001.neff"));
}

TEST(CompilerCache, CorruptedEntryIsRecompiledAndReplaced) {
  CacheDir dir;
  int compiles = 0;
  auto compile_fn = [&] {
    ++compiles;
    return make_neff();
  };
  CacheSource src;
  NeffCache::instance().get("c0ffee0000000002", compile_fn, &src);
  const std::string file = dir.path + "/c0ffee0000000002.neff";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  NeffCache::instance().clear_memory();
  drain_warnings();
  NeffCache::instance().get("c0ffee0000000002", compile_fn, &src);
  EXPECT_EQ(src, CacheSource::Compiled);
  EXPECT_EQ(compiles, 2);
  EXPECT_EQ(metrics().cache_corrupted, 1);
  const auto w = drain_warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("checksum mismatch"), std::string::npos) << w[0];
  NeffCache::instance().clear_memory();
  NeffCache::instance().get("c0ffee0000000002", compile_fn, &src);
  EXPECT_EQ(src, CacheSource::Disk);  // the replacement is valid
}

TEST(CompilerCache, ConcurrentRequestsCompileOnce) {
  CacheDir dir;
  std::atomic<int> compiles{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      CacheSource src;
      NeffCache::instance().get(
          "c0ffee0000000003",
          [&] {
            ++compiles;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            return make_neff();
          },
          &src);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(compiles.load(), 1);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.path().extension() == ".neff";
  EXPECT_EQ(files, 1u);
}

TEST(CompilerCache, MemoryLruIsBounded) {
  CacheDir dir;
  ::setenv("NEURON_COMPILATION_CACHE_MAX_ENTRIES", "2", 1);
  CacheSource src;
  for (const char* k : {"aaaaaaaa", "bbbbbbbb", "cccccccc"}) NeffCache::instance().get(k, make_neff, &src);
  EXPECT_EQ(NeffCache::instance().memory_entries(), 2u);
  NeffCache::instance().get("aaaaaaaa", make_neff, &src);  // evicted from memory, still on disk
  EXPECT_EQ(src, CacheSource::Disk);
  ::unsetenv("NEURON_COMPILATION_CACHE_MAX_ENTRIES");
}

TEST(CompilerCli, NeffDumpPrintsAFile) {
  const std::string path = ::testing::TempDir() + "/dump_test.neff";
  const auto bytes = write_neff(make_neff());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const std::string out = ::testing::TempDir() + "/dump_test.txt";
  const int rc = std::system((std::string(NEFF_DUMP_EXE) + " " + path + " > " + out).c_str());
  ASSERT_EQ(rc, 0);
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("NEFF format version 2"), std::string::npos) << text;
  EXPECT_NE(text.find("fused"), std::string::npos) << text;
  EXPECT_NE(text.find("graph: test"), std::string::npos) << text;
  // A damaged file fails with a message and status 1.

  {
    std::fstream d(path, std::ios::in | std::ios::out | std::ios::binary);
    d.seekp(30);
    d.put('\x55');
  }
  const int bad = std::system((std::string(NEFF_DUMP_EXE) + " " + path + " 2> " + out).c_str());
  EXPECT_EQ(WEXITSTATUS(bad), 1);
}

}  // namespace
}  // namespace neuron::cc::test
