#include "launch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <map>

#include "collective.h"
#include "error.h"
#include "rendezvous.h"
#include "runtime/kernel_link.h"
#include "runtime/thread_pool.h"
#include "runtime/topology.h"
#include "runtime/env.h"
#include "runtime/error.h"

namespace neuron::nki {

namespace {

// An instance's error with the instance named (grids run their instances concurrently).
NkiError in_instance(const NkiError& e, size_t i, size_t n) {
  return NkiError(e.kind(), e.instruction(), e.location(),
                  e.message() + " (grid instance " + std::to_string(i) + " of " +
                      std::to_string(n) + ")",
                  e.rule());
}

int physical_cores(const LaunchOptions& opt) {
  if (opt.physical_cores > 0) return opt.physical_cores;
  return std::max(1, rt::Topology::from_env(rt::read_topology_env()).lnc);
}

}  // namespace

namespace {
std::vector<ExecReport> run_launch_here(const std::vector<const Program*>& programs,
                                        const std::vector<std::vector<HbmArg>>& args,
                                        const LaunchOptions& opt);

bool has_collectives(const std::vector<const Program*>& programs) {
  for (const Program* p : programs)
    for (const Instr& in : p->instrs())
      if (coll::moves_data(in.op)) return true;
  return false;
}
}  // namespace

std::vector<ExecReport> run_launch(const std::vector<const Program*>& programs,
                                   const std::vector<std::vector<HbmArg>>& args,
                                   const LaunchOptions& opt) {
  try {
    return run_launch_here(programs, args, opt);
  } catch (const std::exception& e) {
    // The other ranks may wait in this kernel's collectives: they fail at once, naming this
    // rank's error, instead of waiting for the process group's timeout.
    if (auto link = rt::kernel_link(); link && has_collectives(programs)) link->abort(e.what());
    throw;
  }
}

namespace {
std::vector<ExecReport> run_launch_here(const std::vector<const Program*>& programs,
                                        const std::vector<std::vector<HbmArg>>& args,
                                        const LaunchOptions& opt) {
  if (programs.size() != args.size())
    throw NkiError("runtime", "nki launch", "",
                   "one argument list per program instance expected, got " +
                       std::to_string(args.size()) + " for " + std::to_string(programs.size()),
                   "");
  const int64_t max_iterations =
      opt.max_loop_iterations > 0 ? opt.max_loop_iterations : max_loop_iterations_from_env();
  // Definedness shadows are shared by address (the instances share HBM); all of them are
  // sized before any instance runs, so no instance sees another's shadow move.
  std::map<const uint8_t*, std::vector<uint8_t>> shadows;
  if (opt.check_uninit)
    for (const auto& inst : args)
      for (const HbmArg& a : inst) {
        if (a.is_input) continue;
        auto& s = shadows[a.data];
        if (s.size() < static_cast<size_t>(a.bytes)) s.resize(static_cast<size_t>(a.bytes), 0);
      }
  std::vector<std::vector<Binding>> binds(programs.size());
  for (size_t i = 0; i < programs.size(); ++i) {
    binds[i].reserve(args[i].size());
    for (const HbmArg& a : args[i]) {
      Binding x;
      x.data = a.data;
      x.bytes = a.bytes;
      x.name = a.name;
      x.scratch = a.scratch;
      if (opt.check_uninit && !a.is_input) x.def = shadows[a.data].data();
      binds[i].push_back(std::move(x));
    }
  }
  std::vector<ExecReport> reports(programs.size());
  // One NeuronCore state per physical core, kept across the waves: the engines' random number
  // generators of a core continue from one grid instance to the next it runs, as on the
  // hardware (SBUF/PSUM carry over too; a kernel must not read what it did not write).
  const size_t n = programs.size();
  const auto cores = n == 1 ? size_t{1} : static_cast<size_t>(physical_cores(opt));
  std::vector<std::shared_ptr<CoreState>> core_states(std::min(cores, n));
  auto run_one = [&](size_t i, CoreGroup* group, int rank, bool poll) {
    ExecOptions eo;
    eo.check_uninit = opt.check_uninit;
    eo.record_trace = opt.record_trace;
    eo.max_loop_iterations = max_iterations;
    eo.group = group;
    eo.rank = rank;
    eo.poll_interrupt = poll;
    auto& core = core_states[static_cast<size_t>(rank)];
    const Target& t = programs[i]->target();
    eo.reset_rng = !core;
    if (core && (core->target().sbuf_bytes_per_partition != t.sbuf_bytes_per_partition ||
                 core->target().psum_bytes_per_partition != t.psum_bytes_per_partition)) {
      core.reset();  // instances traced for another target (not produced by nki.jit)
      eo.reset_rng = true;
    }
    if (!core) core = acquire_core(t);
    execute(*programs[i], *core, binds[i], eo, &reports[i]);
  };
  if (n == 1) {
    run_one(0, nullptr, 0, true);
    return reports;
  }
  // The instances of a wave run at the same time, one per physical core of the logical core,
  // each on its own host thread with its own SBUF/PSUM state; waves run one after the other.
  for (size_t w0 = 0; w0 < n; w0 += cores) {
    const size_t m = std::min(cores, n - w0);
    CoreGroup group(static_cast<int>(m), 0);
    std::vector<std::exception_ptr> errors(m);
    auto part = [&](int r) {
      try {
        run_one(w0 + static_cast<size_t>(r), &group, r, r == 0);
        group.finish(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        group.fail(r);
      }
    };
    if (m == 1) {
      part(0);
    } else {
      rt::run_concurrently(static_cast<int>(m), part);
    }
    // The first instance's own error; an instance that stopped because a peer failed
    // ("aborted") only when nothing else failed.
    std::exception_ptr first;
    size_t at = 0;
    for (int pass = 0; pass < 2 && !first; ++pass)
      for (size_t r = 0; r < m && !first; ++r) {
        if (!errors[r]) continue;
        bool aborted = false;
        try {
          std::rethrow_exception(errors[r]);
        } catch (const NkiError& e) {
          aborted = e.kind() == "aborted";
        } catch (...) {
        }
        if (pass == 1 || !aborted) {
          first = errors[r];
          at = w0 + r;
        }
      }
    if (first) {
      try {
        std::rethrow_exception(first);
      } catch (const NkiError& e) {
        throw in_instance(e, at, n);
      }
    }
  }
  return reports;
}
}  // namespace

CheckPolicy check_policy_from_env() {
  if (const char* sim = std::getenv("NKI_SIMULATOR"); sim && std::string(sim) == "1")
    return CheckPolicy::Always;
  const char* v = std::getenv("NEURON_EMU_NKI_CHECK");
  if (!v) return CheckPolicy::First;
  std::string s(v);
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }),
          s.end());
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.empty() || s == "first") return CheckPolicy::First;
  if (s == "0" || s == "never" || s == "off" || s == "false") return CheckPolicy::Never;
  if (s == "always" || s == "2" || s == "all") return CheckPolicy::Always;
  throw rt::ConfigError(std::string("NEURON_EMU_NKI_CHECK=") + v +
                        ": expected first (the default: the first run of each program), always "
                        "or never");
}

const char* check_policy_name(CheckPolicy p) {
  switch (p) {
    case CheckPolicy::Always:
      return "always";
    case CheckPolicy::Never:
      return "never";
    case CheckPolicy::First:
      break;
  }
  return "first";
}

int64_t max_loop_iterations_from_env() {
  return rt::getenv_int("NEURON_EMU_NKI_MAX_LOOP_ITERATIONS", kDefaultMaxLoopIterations, 1,
                        INT64_MAX);
}

bool want_check(CheckPolicy policy, bool checked_before,
                const std::vector<const Program*>& programs) {
  if (policy == CheckPolicy::Never) return false;
  if (policy == CheckPolicy::Always) return true;
  for (const Program* p : programs)
    if (p->needs_recheck()) return true;
  return !checked_before;
}

}  // namespace neuron::nki
