#include "driver.h"

#include <chrono>

#include "bytes.h"
#include "error.h"
#include "hash.h"
#include "metrics.h"
#include "runtime/cache_file.h"

namespace neuron::cc {

std::string graph_hash(const Graph& g) {
  Graph anon = g;
  anon.name.clear();
  for (auto& v : anon.values) v.name.clear();
  ByteWriter w;
  serialize(anon, w);
  return Hasher().update(w.buffer().data(), w.buffer().size()).hex128();
}

std::string cache_key(const std::string& graph_hash, const CompileOptions& o,
                      const std::vector<std::string>& unknown_flags, const TargetProfile& t) {
  Hasher h;
  h.update(compiler_build_id());
  h.update(rt::str("opt=", o.opt_level, " fold=", o.fold_constants));
  for (const auto& f : o.flags) h.update(f);
  for (const auto& f : unknown_flags) h.update(f);
  h.update(t.str());
  h.update(graph_hash);
  return h.hex128();
}

const char* source_name(CacheSource s) {
  switch (s) {
    case CacheSource::Memory:
      return "memory";
    case CacheSource::Disk:
      return "disk";
    case CacheSource::Compiled:
      break;
  }
  return "compiled";
}

Artifact compile_cached(const Graph& g, const CompileRequest& r) {
  std::vector<std::string> unknown;
  CompileOptions o = parse_flags(r.flags, r.default_opt_level, &unknown);
  for (const auto& u : unknown)
    push_warning("NEURON_CC_FLAGS: unknown flag '" + u + "' ignored (part of the cache key)");
  o.dump_dir = r.dump_dir;
  const std::string name = r.name.empty() ? g.name : r.name;
  Artifact a;
  a.graph_hash = graph_hash(g);
  a.key = cache_key(a.graph_hash, o, unknown, r.target);
  const std::vector<IOSpec> ins = input_specs(g), outs = output_specs(g);
  EntryCheck check;
  check.graph_hash = a.graph_hash;
  check.target = &r.target;
  check.inputs = &ins;
  check.outputs = &outs;
  a.neff = NeffCache::instance().get(
      a.key,
      [&] {
        Compiled c = compile(g, o);
        Neff n;
        n.target = r.target;
        n.program = std::move(c.program);
        n.ir = std::move(c.final_ir);
        n.metadata["compiler"] = compiler_build_id();
        n.metadata["graph"] = name;
        n.metadata["graph_hash"] = a.graph_hash;
        n.metadata["flags"] = r.flags;
        n.metadata["opt_level"] = std::to_string(o.opt_level);
        std::string passes;
        for (const auto& pr : c.passes) passes += rt::str(pr.name, ":", pr.changed, " ");
        n.metadata["passes"] = passes;
        n.metadata["created"] = std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count());
        return n;
      },
      &a.source, &a.path, check);
  return a;
}

std::optional<Artifact> load_cached(const std::string& key, const std::string& graph_hash,
                                    const TargetProfile& target) {
  if (!rt::is_cache_key(key)) {
    add_metric("cache_corrupted", 1);
    push_warning(rt::str("NEFF cache: '", key,
                         "' is not a cache key (hex digest); the index entry naming it is ignored"));
    return std::nullopt;
  }
  struct NotCached {};
  EntryCheck check;
  check.graph_hash = graph_hash;
  check.target = &target;
  Artifact a;
  a.key = key;
  a.graph_hash = graph_hash;
  try {
    a.neff = NeffCache::instance().get(
        key, []() -> Neff { throw NotCached{}; }, &a.source, &a.path, check);
  } catch (const NotCached&) {
    return std::nullopt;
  }
  return a;
}

}  // namespace neuron::cc
