// The compile driver: from a graph to a loaded NEFF through the NEFF cache. Derives the cache
// key, assembles the NEFF (program, IR, metadata), and checks what it loads from disk against
// what was asked for (embedded key, graph hash, target, I/O signature). The torch glue only
// converts tensors; C++ tests drive this directly.
// Thread-safety: every function is safe from any thread (the cache serializes per key).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache.h"
#include "compiler.h"
#include "neff.h"

namespace neuron::cc {

// Hash of a graph's content (names do not count: they do not change the program). 32 hex.
std::string graph_hash(const Graph& g);

// The NEFF cache key: graph hash + compiler build id + options + flags (known and unknown) +
// target. 32 hex digits.
std::string cache_key(const std::string& graph_hash, const CompileOptions& o,
                      const std::vector<std::string>& unknown_flags, const TargetProfile& t);

struct CompileRequest {
  std::string name;          // graph name in metadata and task names (default: the graph's)
  std::string flags;         // compiler flags (NEURON_CC_FLAGS syntax)
  int default_opt_level = 2;
  std::string dump_dir;      // IR after every pass, program.txt
  TargetProfile target;
};

// A NEFF from the cache (or just compiled) and where it came from.
struct Artifact {
  std::shared_ptr<const Neff> neff;
  std::string key;
  std::string graph_hash;
  CacheSource source = CacheSource::Compiled;
  std::string path;  // disk entry ("" when memory-only)
};

const char* source_name(CacheSource s);

// Compiles `g` (or loads it from the cache). Unknown flags become warnings (metrics.h queue).
Artifact compile_cached(const Graph& g, const CompileRequest& r);

// The cached NEFF of `key` without compiling (warm start): nullopt when there is none or it is
// unusable (counted and reported like any rejected entry). `graph_hash` (when not empty) and
// `target` must match the entry.
std::optional<Artifact> load_cached(const std::string& key, const std::string& graph_hash,
                                    const TargetProfile& target);

}  // namespace neuron::cc
