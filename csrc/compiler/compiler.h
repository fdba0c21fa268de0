// The compiler driver: runs the pass pipeline on a graph (verifier after every pass, IR dumps
// when asked) and lowers it to a Program. Also parses the compiler flags (the text of
// NEURON_CC_FLAGS; the Python backend reads NEURON_COMPILER_OPT_LEVEL into the default level).
// Thread-safety: compile() has no shared state; call it from any thread.
#pragma once

#include <string>
#include <vector>

#include "ir.h"
#include "program.h"

namespace neuron::cc {

// Bumped whenever generated programs change: part of every cache key.
constexpr const char* kCompilerVersion = "neuron-emu-cc 0.1.0 (neff 2)";
// kCompilerVersion plus a hash of the compiler's sources (so a rebuilt compiler never reuses
// NEFFs of different code).
const char* compiler_build_id();

struct CompileOptions {
  int opt_level =
      2;  // 0: one kernel per op, 1: + elementwise fusion, 2: + attention/epilogue fusion
  bool fold_constants = true;
  bool verify_each = true;
  std::string dump_dir;  // when set: NN-<pass>.ir after every pass, program.txt at the end
  std::vector<std::string> flags;  // normalized flags (part of the cache key)
};

// Parses compiler flags. Known: -O0..-O3, --optlevel N, --verify/--no-verify,
// --disable-fusion, plus the real neuronx-cc flags (--target, --lnc, --model-type,
// --auto-cast, --auto-cast-type, --enable-fast-loading-neuron-binaries, ...) which are
// accepted and ignored. Unknown flags are returned in `unknown`.
CompileOptions parse_flags(const std::string& flags, int default_opt_level,
                           std::vector<std::string>* unknown);

struct PassRecord {
  std::string name;
  double ms = 0;
  int changed = 0;
  int nodes_after = 0;
};

struct Compiled {
  Program program;
  std::vector<PassRecord> passes;
  std::string final_ir;
  std::string plan;
};

// Compiles `g`; throws VerifyError for a malformed input graph, CompileError otherwise.
Compiled compile(Graph g, const CompileOptions& opts);

// Input/output specs of a graph (its signature, taken before any pass).
std::vector<IOSpec> input_specs(const Graph& g);
std::vector<IOSpec> output_specs(const Graph& g);

}  // namespace neuron::cc
