#include "compiler.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "compiler/build_id.h"
#include "lower.h"
#include "passes.h"
#include "verifier.h"

namespace neuron::cc {

namespace {

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

}  // namespace

const char* compiler_build_id() {
  static const std::string id = std::string(kCompilerVersion) + " build " + NEURON_CC_BUILD_ID;
  return id.c_str();
}

CompileOptions parse_flags(const std::string& flags, int default_opt_level,
                           std::vector<std::string>* unknown) {
  CompileOptions o;
  o.opt_level = default_opt_level;
  std::istringstream is(flags);
  std::vector<std::string> toks;
  for (std::string t; is >> t;) toks.push_back(t);
  // Real neuronx-cc flags that take a value; accepted for compatibility, no effect here.
  static const char* kWithValue[] = {"--target",
                                     "--lnc",
                                     "--logical-nc-config",
                                     "--model-type",
                                     "--auto-cast",
                                     "--auto-cast-type",
                                     "--framework",
                                     "--output",
                                     "--logfile",
                                     "--workdir",
                                     "--distribution-strategy",
                                     "--internal-hlo2tensorizer-options"};
  static const char* kNoValue[] = {
      "--enable-fast-loading-neuron-binaries", "--enable-saturate-infinity",
      "--enable-mixed-precision-accumulation", "--verbose", "--retry_failed_compilation"};
  for (size_t i = 0; i < toks.size(); ++i) {
    const std::string& t = toks[i];
    if (t.size() == 3 && t[0] == '-' && t[1] == 'O' && t[2] >= '0' && t[2] <= '3') {
      o.opt_level = std::min(2, t[2] - '0');
      o.flags.push_back(t);
      continue;
    }
    if (t == "--optlevel" || t == "--opt-level" || starts_with(t, "--optlevel=")) {
      std::string v = t.find('=') != std::string::npos ? t.substr(t.find('=') + 1)
                                                       : (i + 1 < toks.size() ? toks[++i] : "");
      if (v.size() != 1 || v[0] < '0' || v[0] > '3')
        throw CompileError(rt::str("NEURON_CC_FLAGS: --optlevel expects 0..3, got '", v, "'"));
      o.opt_level = std::min(2, v[0] - '0');
      o.flags.push_back("-O" + v);
      continue;
    }
    if (t == "--disable-fusion") {
      o.opt_level = 0;
      o.flags.push_back(t);
      continue;
    }
    if (t == "--no-verify") {
      o.verify_each = false;
      continue;
    }
    if (t == "--verify") {
      o.verify_each = true;
      continue;
    }
    if (t == "--no-constant-folding") {
      o.fold_constants = false;
      o.flags.push_back(t);
      continue;
    }
    bool known = false;
    for (const char* k : kWithValue) {
      if (t == k) {
        if (i + 1 < toks.size()) ++i;
        known = true;
      } else if (starts_with(t, (std::string(k) + "=").c_str())) {
        known = true;
      }
    }
    for (const char* k : kNoValue)
      if (t == k) known = true;
    if (!known && unknown) unknown->push_back(t);
  }
  return o;
}

std::vector<IOSpec> input_specs(const Graph& g) {
  std::vector<IOSpec> r;
  for (int v : g.inputs)
    r.push_back(IOSpec{g.type(v).dtype, g.type(v).shape, g.strides_of(v),
                       g.values[static_cast<size_t>(v)].name});
  return r;
}

std::vector<IOSpec> output_specs(const Graph& g) {
  std::vector<IOSpec> r;
  for (int v : g.outputs)
    r.push_back(IOSpec{g.type(v).dtype, g.type(v).shape, g.strides_of(v), ""});
  return r;
}

Compiled compile(Graph g, const CompileOptions& opts) {
  Compiled out;
  const bool dump = !opts.dump_dir.empty();
  if (dump) std::filesystem::create_directories(opts.dump_dir);
  int step = 0;
  auto dump_ir = [&](const std::string& name, const std::string& extra = "") {
    if (!dump) return;
    char prefix[16];
    std::snprintf(prefix, sizeof(prefix), "%02d-", step);
    write_file(opts.dump_dir + "/" + prefix + name + ".ir", print(g) + extra);
  };
  verify(g, "input graph");
  const std::vector<IOSpec> ins = input_specs(g);
  const std::vector<IOSpec> outs = output_specs(g);
  dump_ir("input");
  auto run = [&](const std::string& name, const std::function<PassStats(Graph&)>& pass) {
    ++step;
    const auto t0 = std::chrono::steady_clock::now();
    PassStats st = pass(g);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (opts.verify_each) verify(g, "after pass '" + name + "'");
    out.passes.push_back(PassRecord{name, ms, st.changed, static_cast<int>(g.nodes.size())});
    dump_ir("after-" + name);
  };
  run("canonicalize", canonicalize);
  run("dce", dce);
  run("cse", cse);
  if (opts.fold_constants) run("fold_constants", [](Graph& x) { return fold_constants(x); });
  run("canonicalize", canonicalize);
  if (opts.opt_level >= 2) {
    run("fuse_attention", fuse_attention);
    run("canonicalize", canonicalize);
    run("dce", dce);
  }
  if (opts.opt_level >= 1) {
    run("fuse_elementwise", [](Graph& x) { return fuse_elementwise(x); });
  } else {
    run("fuse_elementwise(one op per kernel)", [](Graph& x) { return fuse_elementwise(x, 1); });
  }
  if (opts.opt_level >= 2) run("fuse_gemm_epilogue", fuse_gemm_epilogue);
  run("legalize_views", legalize_views);
  run("dce", dce);
  ++step;
  const auto t0 = std::chrono::steady_clock::now();
  Plan plan = plan_memory(g, outs);
  out.plan = print_plan(g, plan);
  out.passes.push_back(PassRecord{
      "plan_memory",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
      plan.inplace_mutations, static_cast<int>(g.nodes.size())});
  dump_ir("after-plan_memory", "\n" + out.plan);
  const auto t1 = std::chrono::steady_clock::now();
  out.program = lower(g, plan, ins);
  out.passes.push_back(PassRecord{
      "lower",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count(),
      static_cast<int>(out.program.steps.size()), static_cast<int>(g.nodes.size())});
  out.final_ir = print(g);
  if (dump) write_file(opts.dump_dir + "/program.txt", describe(out.program));
  return out;
}

}  // namespace neuron::cc
