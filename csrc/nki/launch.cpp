#include "launch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "error.h"
#include "runtime/env.h"
#include "runtime/error.h"

namespace neuron::nki {

std::vector<ExecReport> run_launch(const std::vector<const Program*>& programs,
                                   const std::vector<std::vector<HbmArg>>& args,
                                   const LaunchOptions& opt) {
  if (programs.size() != args.size())
    throw NkiError("runtime", "nki launch", "",
                   "one argument list per program instance expected, got " +
                       std::to_string(args.size()) + " for " + std::to_string(programs.size()),
                   "");
  const int64_t max_iterations =
      opt.max_loop_iterations > 0 ? opt.max_loop_iterations : max_loop_iterations_from_env();
  std::map<const uint8_t*, std::vector<uint8_t>> shadows;
  std::vector<ExecReport> reports(programs.size());
  for (size_t i = 0; i < programs.size(); ++i) {
    const Program& prog = *programs[i];
    std::vector<Binding> b;
    b.reserve(args[i].size());
    for (const HbmArg& a : args[i]) {
      Binding x;
      x.data = a.data;
      x.bytes = a.bytes;
      x.name = a.name;
      x.scratch = a.scratch;
      if (opt.check_uninit && !a.is_input) {
        auto& s = shadows[a.data];
        if (s.size() < static_cast<size_t>(a.bytes)) s.resize(static_cast<size_t>(a.bytes), 0);
        x.def = s.data();
      }
      b.push_back(std::move(x));
    }
    ExecOptions eo;
    eo.check_uninit = opt.check_uninit;
    eo.record_trace = opt.record_trace;
    eo.max_loop_iterations = max_iterations;
    auto core = acquire_core(prog.target());
    execute(prog, *core, b, eo, &reports[i]);
  }
  return reports;
}

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
