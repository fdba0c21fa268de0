#include "runtime/process_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "runtime/env.h"
#include "runtime/topology.h"

namespace neuron::rt::registry {

namespace {

constexpr char kMagic[8] = {'N', 'E', 'M', 'U', 'P', 'R', 'C', '1'};
constexpr int kMaxCores = 256;  // trn2.48xlarge at LNC=1 has 128 logical cores

struct Slot {
  int32_t global_id;
  int32_t device;
  uint32_t used;
  uint32_t pad;
  uint64_t reserved;
  uint64_t allocated;
};

// The file's layout (fixed size, native endianness: readers run on the same host).
struct File {
  char magic[8];
  uint32_t size;  // sizeof(File), a format check
  uint32_t ncores;
  int32_t pid;
  uint32_t pad;
  uint64_t start_time;
  char command[1024];
  char runtime_version[32];
  char instance_type[32];
  Slot slots[kMaxCores];
};

void copy_str(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

std::string own_command() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  std::replace(raw.begin(), raw.end(), '\0', ' ');
  return raw;
}

bool ensure_dir(const std::string& dir, std::string* why) {
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return true;
    *why = dir + " exists and is not a directory";
    return false;
  }
  if (mkdir(dir.c_str(), 01777) != 0 && errno != EEXIST) {
    *why = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  chmod(dir.c_str(), 01777);  // shared by every user of the machine, like /tmp (umask aside)
  return true;
}

// Writes the entry under a temporary name and renames it into place, so a reader never sees
// a partial file. Returns the mapping (kept for the live counters) or nullptr.
File* publish(const std::string& dir, const File& content, std::string* path, std::string* why) {
  if (!ensure_dir(dir, why)) return nullptr;
  const std::string final_path = dir + "/" + std::to_string(content.pid);
  const std::string tmp = dir + "/.tmp." + std::to_string(content.pid);
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot write " + tmp + ": " + std::strerror(errno);
    return nullptr;
  }
  void* p = MAP_FAILED;
  if (ftruncate(fd, sizeof(File)) == 0)
    p = mmap(nullptr, sizeof(File), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    *why = "cannot map " + tmp + ": " + std::strerror(err);
    unlink(tmp.c_str());
    return nullptr;
  }
  File* f = static_cast<File*>(p);
  std::memcpy(f, &content, sizeof(File));
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    *why = "cannot rename " + tmp + ": " + std::strerror(errno);
    munmap(p, sizeof(File));
    unlink(tmp.c_str());
    return nullptr;
  }
  *path = final_path;
  return f;
}

bool is_number(const char* s) {
  if (!*s) return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

bool pid_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// A registered process still exists when its pid is alive with the recorded start time (a
// reused pid has another one).
bool entry_alive(int pid, uint64_t start_time) {
  if (!pid_alive(pid)) return false;
  const uint64_t now = process_start_time(pid);
  return now == 0 || start_time == 0 || now == start_time;
}

uint64_t load_relaxed(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
uint32_t load_relaxed(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

std::mutex g_mu;
Registration* g_registration = nullptr;

void remove_at_exit() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_registration) g_registration->remove();
}

}  // namespace

struct Registration::Mapped {
  File* file = nullptr;
};

std::string directory() {
  if (auto v = getenv_str("NEURON_EMU_REGISTRY_DIR"); v && !v->empty()) return *v == "off" ? std::string() : *v;
  return "/dev/shm/neuron-emu";
}

uint64_t process_start_time(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  const size_t close_paren = line.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(close_paren + 1));
  std::string field;
  // Fields after the command: state is field 3, starttime field 22.
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

Registration* Registration::create(const std::string& instance_type, const std::vector<LogicalCore>& cores) {
  auto* content = new File{};
  std::memcpy(content->magic, kMagic, sizeof(kMagic));
  content->size = sizeof(File);
  content->pid = static_cast<int32_t>(getpid());
  content->start_time = process_start_time(content->pid);
  copy_str(content->command, sizeof(content->command), own_command());
  copy_str(content->runtime_version, sizeof(content->runtime_version), kRuntimeVersion);
  copy_str(content->instance_type, sizeof(content->instance_type), instance_type);
  content->ncores = static_cast<uint32_t>(std::min<size_t>(cores.size(), kMaxCores));
  for (uint32_t i = 0; i < content->ncores; ++i) {
    content->slots[i].global_id = cores[i].global_id;
    content->slots[i].device = cores[i].device;
  }
  auto* reg = new Registration();
  reg->owner_pid_ = content->pid;
  std::string why;
  const std::string dir = directory();
  if (dir.empty()) {
    // NEURON_EMU_REGISTRY_DIR=off: not registered, on purpose.
  } else if (File* f = publish(dir, *content, &reg->path_, &why)) {
    reg->map_ = new Mapped{f};
  } else {
    std::fprintf(stderr, "neuron-emu: cannot register this process in %s (%s); neuron-ls will not list it\n",
                 dir.c_str(), why.c_str());
  }
  delete content;
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_registration) std::atexit(remove_at_exit);
  g_registration = reg;
  return reg;
}

uint64_t* Registration::reserved_counter(int index) {
  if (!map_ || index < 0 || index >= static_cast<int>(map_->file->ncores)) return nullptr;
  return &map_->file->slots[index].reserved;
}

uint64_t* Registration::allocated_counter(int index) {
  if (!map_ || index < 0 || index >= static_cast<int>(map_->file->ncores)) return nullptr;
  return &map_->file->slots[index].allocated;
}

uint32_t* Registration::used_flag(int index) {
  if (!map_ || index < 0 || index >= static_cast<int>(map_->file->ncores)) return nullptr;
  return &map_->file->slots[index].used;
}

void Registration::remove() {
  // A forked child inherits the mapping but not the entry: only the creator removes it. The
  // mapping stays (allocators may still update counters during shutdown).
  if (getpid() != owner_pid_ || path_.empty()) return;
  unlink(path_.c_str());
  path_.clear();
}

std::vector<ProcessEntry> list_dir(const std::string& dir, bool cleanup) {
  std::vector<ProcessEntry> out;
  if (dir.empty()) return out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = dir + "/" + name;
    if (name.rfind(".tmp.", 0) == 0) {  // a writer that died between create and rename
      if (cleanup && is_number(name.c_str() + 5) && !pid_alive(std::atoi(name.c_str() + 5)))
        unlink(path.c_str());
      continue;
    }
    if (!is_number(name.c_str())) continue;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    void* p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(sizeof(File)))
      p = mmap(nullptr, sizeof(File), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {  // not one of ours (or another format): left alone
      continue;
    }
    const File* f = static_cast<const File*>(p);
    const bool valid = std::memcmp(f->magic, kMagic, sizeof(kMagic)) == 0 && f->size == sizeof(File) &&
                       f->ncores <= kMaxCores && std::to_string(f->pid) == name;
    if (valid && !entry_alive(f->pid, f->start_time)) {
      if (cleanup) unlink(path.c_str());
    } else if (valid) {
      ProcessEntry pe;
      pe.pid = f->pid;
      pe.command.assign(f->command, strnlen(f->command, sizeof(f->command)));
      pe.runtime_version.assign(f->runtime_version, strnlen(f->runtime_version, sizeof(f->runtime_version)));
      pe.instance_type.assign(f->instance_type, strnlen(f->instance_type, sizeof(f->instance_type)));
      for (uint32_t i = 0; i < f->ncores; ++i) {
        CoreUsage u;
        u.global_id = f->slots[i].global_id;
        u.device = f->slots[i].device;
        u.used = load_relaxed(&f->slots[i].used) != 0;
        u.reserved = load_relaxed(&f->slots[i].reserved);
        u.allocated = load_relaxed(&f->slots[i].allocated);
        pe.cores.push_back(u);
      }
      out.push_back(std::move(pe));
    }
    munmap(p, sizeof(File));
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const ProcessEntry& a, const ProcessEntry& b) { return a.pid < b.pid; });
  return out;
}

std::vector<ProcessEntry> list(bool cleanup) { return list_dir(directory(), cleanup); }

bool write_entry_for_test(const std::string& dir, int pid, uint64_t start_time, const std::string& command) {
  auto* content = new File{};
  std::memcpy(content->magic, kMagic, sizeof(kMagic));
  content->size = sizeof(File);
  content->pid = pid;
  content->start_time = start_time;
  copy_str(content->command, sizeof(content->command), command);
  copy_str(content->runtime_version, sizeof(content->runtime_version), kRuntimeVersion);
  content->ncores = 1;
  std::string path, why;
  File* f = publish(dir, *content, &path, &why);
  delete content;
  if (f) munmap(f, sizeof(File));
  return f != nullptr;
}

}  // namespace neuron::rt::registry
