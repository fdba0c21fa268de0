// The compile driver (driver.h) through the NEFF cache: keys, disk hits, and the entries a
// lookup must not trust (another graph's NEFF under this key, a graph-hash or I/O-signature
// mismatch, a directory in the way, a key that is not a hex digest).
#include <filesystem>
#include <fstream>

#include "compiler/driver.h"
#include "compiler/error.h"
#include "runtime/cache_file.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

namespace fs = std::filesystem;

// x -> unary(x) * [1, 2, 3, 4]; `shape` [3, 4] unless given.
Graph graph_of(Op unary, std::vector<int64_t> shape = {3, 4}) {
  Graph g;
  g.name = "driver_test";
  const int x = g.add_input(TensorType{DType::Float32, shape}, {}, "x");
  const std::vector<float> c = {1, 2, 3, 4};
  std::vector<uint8_t> bytes(16);
  std::memcpy(bytes.data(), c.data(), 16);
  const int k = g.constant(TensorType{DType::Float32, {4}}, bytes);
  g.set_outputs({g.add1(Op::mul, {g.add1(unary, {x}), k})});
  return g;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bool any_warning_has(const std::vector<std::string>& w, const std::string& s) {
  for (const auto& x : w)
    if (x.find(s) != std::string::npos) return true;
  return false;
}

TEST(CompilerDriver, KeysAreHexAndCoverGraphOptionsAndTarget) {
  const Graph a = graph_of(Op::exp), b = graph_of(Op::tanh);
  EXPECT_EQ(graph_hash(a).size(), 32u);
  EXPECT_NE(graph_hash(a), graph_hash(b));
  Graph renamed = a;
  renamed.name = "other";
  EXPECT_EQ(graph_hash(a), graph_hash(renamed));  // names do not change the program
  CompileOptions o;
  TargetProfile t;
  const std::string k = cache_key(graph_hash(a), o, {}, t);
  EXPECT_TRUE(rt::is_cache_key(k));
  CompileOptions o1 = o;
  o1.opt_level = 1;
  EXPECT_NE(k, cache_key(graph_hash(a), o1, {}, t));
  EXPECT_NE(k, cache_key(graph_hash(a), o, {"--bogus"}, t));
  TargetProfile t1 = t;
  t1.lnc = 1;
  EXPECT_NE(k, cache_key(graph_hash(a), o, {}, t1));
}

TEST(CompilerDriver, CompilesOnceThenHitsDisk) {
  CacheDir dir;
  const Graph a = graph_of(Op::exp);
  const Artifact first = compile_cached(a, CompileRequest{});
  EXPECT_EQ(first.source, CacheSource::Compiled);
  EXPECT_EQ(first.neff->metadata.at("cache_key"), first.key);
  EXPECT_EQ(first.neff->metadata.at("graph_hash"), graph_hash(a));
  EXPECT_TRUE(fs::is_regular_file(first.path));
  NeffCache::instance().clear_memory();
  const Artifact second = compile_cached(a, CompileRequest{});
  EXPECT_EQ(second.source, CacheSource::Disk);
  EXPECT_EQ(second.key, first.key);
  NeffCache::instance().clear_memory();
  auto warm = load_cached(first.key, graph_hash(a), TargetProfile{});
  ASSERT_TRUE(warm.has_value());
  EXPECT_EQ(warm->source, CacheSource::Disk);
  EXPECT_EQ(metrics().cache_corrupted, 0);
}

// Another graph's NEFF (same I/O signature) copied under this graph's key.
TEST(CompilerDriver, ForeignNeffUnderTheKeyIsRecompiled) {
  CacheDir dir;
  const Graph a = graph_of(Op::exp), b = graph_of(Op::tanh);
  const Artifact aa = compile_cached(a, CompileRequest{});
  const Artifact bb = compile_cached(b, CompileRequest{});
  fs::copy_file(bb.path, aa.path, fs::copy_options::overwrite_existing);
  NeffCache::instance().clear_memory();
  drain_warnings();
  // The warm-start path (by key) rejects it...
  EXPECT_FALSE(load_cached(aa.key, "", TargetProfile{}).has_value());
  EXPECT_EQ(metrics().cache_corrupted, 1);
  auto w = drain_warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(any_warning_has(w, "cache_key " + bb.key)) << w[0];
  // ...and so does the compile path, which then writes the right NEFF.
  fs::copy_file(bb.path, aa.path, fs::copy_options::overwrite_existing);
  NeffCache::instance().clear_memory();  // forgets that the entry was reported
  reset_metrics();
  const Artifact again = compile_cached(a, CompileRequest{});
  EXPECT_EQ(again.source, CacheSource::Compiled);
  EXPECT_EQ(metrics().cache_corrupted, 1);
  EXPECT_EQ(again.neff->metadata.at("graph_hash"), graph_hash(a));
  NeffCache::instance().clear_memory();
  EXPECT_EQ(compile_cached(a, CompileRequest{}).source, CacheSource::Disk);
}

TEST(CompilerDriver, GraphHashAndSignatureAreChecked) {
  CacheDir dir;
  const Graph a = graph_of(Op::exp);
  const Artifact aa = compile_cached(a, CompileRequest{});
  // Right key, another graph's content.
  Neff forged = *compile_cached(graph_of(Op::tanh), CompileRequest{}).neff;
  forged.metadata["cache_key"] = aa.key;
  write_bytes(aa.path, write_neff(forged));
  NeffCache::instance().clear_memory();
  reset_metrics();
  drain_warnings();
  EXPECT_FALSE(load_cached(aa.key, graph_hash(a), TargetProfile{}).has_value());
  EXPECT_TRUE(any_warning_has(drain_warnings(), "graph hash"));
  // Right key and graph hash, another I/O signature.
  Neff resized = *compile_cached(graph_of(Op::exp, {5, 4}), CompileRequest{}).neff;
  resized.metadata["cache_key"] = aa.key;
  resized.metadata["graph_hash"] = graph_hash(a);
  write_bytes(aa.path, write_neff(resized));
  NeffCache::instance().clear_memory();
  reset_metrics();
  const Artifact again = compile_cached(a, CompileRequest{});
  EXPECT_EQ(again.source, CacheSource::Compiled);
  EXPECT_EQ(metrics().cache_corrupted, 1);
  EXPECT_TRUE(any_warning_has(drain_warnings(), "input signature"));
  EXPECT_EQ(again.neff->program.inputs[0].shape, (std::vector<int64_t>{3, 4}));
}

TEST(CompilerDriver, ADirectoryAtTheEntryPathIsRecompiledNotFatal) {
  CacheDir dir;
  const Graph a = graph_of(Op::exp);
  const Artifact aa = compile_cached(a, CompileRequest{});
  fs::remove(aa.path);
  fs::create_directories(aa.path + "/inner");
  NeffCache::instance().clear_memory();
  reset_metrics();
  drain_warnings();
  const Artifact again = compile_cached(a, CompileRequest{});
  EXPECT_EQ(again.source, CacheSource::Compiled);
  EXPECT_EQ(again.path, "");  // could not be written: memory only
  EXPECT_EQ(metrics().cache_corrupted, 1);
  const auto w = drain_warnings();
  EXPECT_TRUE(any_warning_has(w, "is a directory")) << (w.empty() ? "" : w[0]);
  EXPECT_TRUE(any_warning_has(w, "could not write"));
  EXPECT_TRUE(fs::is_directory(aa.path + "/inner"));  // the user's directory is left alone
  EXPECT_EQ(compile_cached(a, CompileRequest{}).source, CacheSource::Memory);
  // A new process (memory cleared) looks twice, warm start then compile: counted once.
  NeffCache::instance().clear_memory();
  reset_metrics();
  EXPECT_FALSE(load_cached(aa.key, graph_hash(a), TargetProfile{}).has_value());
  EXPECT_EQ(compile_cached(a, CompileRequest{}).source, CacheSource::Compiled);
  EXPECT_EQ(metrics().cache_corrupted, 1);
}

TEST(CompilerDriver, KeysThatAreNotHexNameNoFile) {
  CacheDir dir;
  const std::string outside = dir.path + "_outside";
  fs::create_directories(outside);
  fs::create_directories(dir.path);
  // dir/.locks/../../<outside>/evil.lock would be outside the cache directory.
  const std::string evil = "../../" + fs::path(outside).filename().string() + "/evil";
  EXPECT_FALSE(load_cached(evil, "", TargetProfile{}).has_value());
  EXPECT_EQ(metrics().cache_corrupted, 1);
  CacheSource src;
  EXPECT_THROW(NeffCache::instance().get(evil, [] { return Neff{}; }, &src), CompileError);
  EXPECT_TRUE(fs::is_empty(outside));
  fs::remove_all(outside);
}

}  // namespace
}  // namespace neuron::cc::test
