// The disk-cache file helper: hex keys only, atomic writes, sealed entries that detect damage,
// truncation and entries written for another key, and unusable paths (directories).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/cache_file.h"
#include "runtime/error.h"

namespace neuron::rt {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path = ::testing::TempDir() + "/cache_file_" + std::to_string(::getpid()) + "_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name();
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

constexpr const char* kKey = "0123456789abcdef";

TEST(CacheFile, KeysAreHexDigestsOnly) {
  EXPECT_TRUE(is_cache_key(kKey));
  EXPECT_FALSE(is_cache_key("../../x/evil"));
  EXPECT_FALSE(is_cache_key("0123456789ABCDEF"));  // one spelling per key
  EXPECT_FALSE(is_cache_key("abc"));
  EXPECT_FALSE(is_cache_key("/0123456789abcdef"));
  EXPECT_EQ(cache_entry_path("/c", kKey, ".neff"), std::string("/c/") + kKey + ".neff");
  EXPECT_THROW(cache_entry_path("/c", "../../x/evil", ".neff"), Error);
}

TEST(CacheFile, SealedEntriesRoundTripAndRejectForeignOrDamagedOnes) {
  TempDir d;
  const std::string path = d.path + "/e";
  const std::string payload = "hello cache";
  const auto sealed = seal("frontend", kKey, payload.data(), payload.size());
  std::string why;
  ASSERT_TRUE(write_file_atomic(path, sealed.data(), sealed.size(), &why)) << why;
  std::vector<uint8_t> file, out;
  ASSERT_EQ(read_file(path, &file, &why), ReadStatus::Ok);
  ASSERT_EQ(unseal(file, "frontend", kKey, &out, &why), ReadStatus::Ok) << why;
  EXPECT_EQ(std::string(out.begin(), out.end()), payload);
  EXPECT_EQ(unseal(file, "frontend", "fedcba9876543210", &out, &why), ReadStatus::Unusable);
  EXPECT_NE(why.find("written for key 0123456789abcdef"), std::string::npos) << why;
  EXPECT_EQ(unseal(file, "nki-trace", kKey, &out, &why), ReadStatus::Unusable);
  std::vector<uint8_t> flipped = file;
  flipped[flipped.size() / 2] ^= 0x10;
  EXPECT_EQ(unseal(flipped, "frontend", kKey, &out, &why), ReadStatus::Unusable);
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
  for (size_t cut : {size_t{0}, size_t{5}, file.size() - 1}) {
    std::vector<uint8_t> t(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_EQ(unseal(t, "frontend", kKey, &out, &why), ReadStatus::Unusable) << cut;
  }
  // Empty payloads are entries too.
  const auto empty = seal("frontend", kKey, nullptr, 0);
  EXPECT_EQ(unseal(empty, "frontend", kKey, &out, &why), ReadStatus::Ok);
  EXPECT_TRUE(out.empty());
}

TEST(CacheFile, MissingAndUnusablePaths) {
  TempDir d;
  std::vector<uint8_t> file;
  std::string why;
  EXPECT_EQ(read_file(d.path + "/absent", &file, &why), ReadStatus::Missing);
  fs::create_directories(d.path + "/dir/x");
  EXPECT_EQ(read_file(d.path + "/dir", &file, &why), ReadStatus::Unusable);
  EXPECT_NE(why.find("is a directory"), std::string::npos) << why;
  // A write onto a directory fails with a reason and leaves no temporary file.
  const char b[3] = {1, 2, 3};
  EXPECT_FALSE(write_file_atomic(d.path + "/dir", b, 3, &why));
  EXPECT_FALSE(why.empty());
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(d.path)) entries += e.exists();
  EXPECT_EQ(entries, 1u);
}

}  // namespace
}  // namespace neuron::rt
