#include "cache_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "error.h"
#include "hash.h"

namespace neuron::rt {

namespace {

constexpr char kSealMagic[8] = {'N', 'E', 'M', 'U', 'S', 'E', 'A', 'L'};
constexpr uint32_t kSealFormat = 1;

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + 4);
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + 8);
}
void put_str(std::vector<uint8_t>& b, std::string_view s) {
  put_u32(b, static_cast<uint32_t>(s.size()));
  b.insert(b.end(), s.begin(), s.end());
}

}  // namespace

bool is_cache_key(std::string_view key) {
  if (key.size() < 8 || key.size() > 128) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string cache_entry_path(const std::string& dir, std::string_view key,
                             std::string_view suffix) {
  NEURON_RT_CHECK(is_cache_key(key), "cache key '", key,
                  "' is not a hex digest (8..128 lowercase hex digits): refusing to use it as a "
                  "file name under ",
                  dir);
  return str(dir, "/", key, suffix);
}

bool write_file_atomic(const std::string& path, const void* data, size_t n, std::string* why) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = str(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      *why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST
               ? std::string("a directory is in the way")
               : std::string(std::strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

ReadStatus read_file(const std::string& path, std::vector<uint8_t>* out, std::string* why) {
  out->clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return ReadStatus::Missing;
    *why = str("cannot open ", path, ": ", std::strerror(errno));
    return ReadStatus::Unusable;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = S_ISDIR(st.st_mode) ? str(path, " is a directory, not a cache entry")
                               : str(path, " is not a regular file");
    ::close(fd);
    return ReadStatus::Unusable;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t r = ::read(fd, out->data() + done, out->size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      *why = str("cannot read ", path, ": ", std::strerror(errno));
      ::close(fd);
      return ReadStatus::Unusable;
    }
    if (r == 0) break;  // shrank while we read: the checksum of the caller decides
    done += static_cast<size_t>(r);
  }
  out->resize(done);
  ::close(fd);
  return ReadStatus::Ok;
}

std::vector<uint8_t> seal(std::string_view kind, std::string_view key, const void* payload,
                          size_t n) {
  std::vector<uint8_t> b(kSealMagic, kSealMagic + 8);
  put_u32(b, kSealFormat);
  put_str(b, kind);
  put_str(b, key);
  put_u64(b, n);
  const auto* p = static_cast<const uint8_t*>(payload);
  b.insert(b.end(), p, p + n);
  put_u64(b, hash64(b.data(), b.size()));
  return b;
}

ReadStatus unseal(const std::vector<uint8_t>& file, std::string_view kind, std::string_view key,
                  std::vector<uint8_t>* payload, std::string* why) {
  payload->clear();
  const size_t size = file.size();
  if (size < 8 + 4 + 4 + 4 + 8 + 8 || std::memcmp(file.data(), kSealMagic, 8) != 0) {
    *why = size < 8 ? "truncated (no header)" : "not a sealed cache entry (bad magic)";
    return ReadStatus::Unusable;
  }
  uint64_t stored;
  std::memcpy(&stored, file.data() + size - 8, 8);
  if (stored != hash64(file.data(), size - 8)) {
    *why = "checksum mismatch (truncated or corrupted)";
    return ReadStatus::Unusable;
  }
  size_t pos = 8;
  auto u32 = [&] {
    uint32_t v = 0;
    if (pos + 4 <= size - 8) std::memcpy(&v, file.data() + pos, 4);
    pos += 4;
    return v;
  };
  auto text = [&]() -> std::string {
    const uint32_t n = u32();
    if (pos + n > size - 8) {
      pos = size;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(file.data() + pos), n);
    pos += n;
    return s;
  };
  if (const uint32_t fmt = u32(); fmt != kSealFormat) {
    *why = str("sealed entry format ", fmt, " (this build reads ", kSealFormat, ")");
    return ReadStatus::Unusable;
  }
  const std::string k = text();
  const std::string entry_key = text();
  uint64_t n = 0;
  if (pos + 8 <= size - 8) std::memcpy(&n, file.data() + pos, 8);
  pos += 8;
  if (pos > size - 8 || n != size - 8 - pos) {
    *why = "malformed sealed entry (lengths do not add up)";
    return ReadStatus::Unusable;
  }
  if (k != kind) {
    *why = str("a '", k, "' entry where a '", kind, "' entry belongs");
    return ReadStatus::Unusable;
  }
  if (entry_key != key) {
    *why = str("the entry was written for key ", entry_key, ", not ", key);
    return ReadStatus::Unusable;
  }
  payload->assign(file.begin() + static_cast<std::ptrdiff_t>(pos), file.end() - 8);
  return ReadStatus::Ok;
}

}  // namespace neuron::rt
