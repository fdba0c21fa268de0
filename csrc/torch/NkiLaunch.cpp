// The launch of NKI kernels on neuron tensors (torch_neuronx._C._nki_launch): one task on the
// device's current stream per kernel call, with the arguments' device buffers bound by address
// and the launch's estimated Trainium2 time. torch_neuronx registers it with nki when it loads
// (nki never imports torch); programs, binding lists and check states are the ones
// nki._nki_native made (csrc/python: the NKI bindings without torch).
#include "NkiLaunch.h"

#include <pybind11/stl.h>

#include <mutex>
#include <unordered_map>

#include "DeviceTime.h"
#include "nki/device_time.h"
#include "nki/launch.h"
#include "nki/program.h"
#include "python/NkiRun.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace neuron::torch_glue {
namespace {

using nki::Program;

// Estimated Trainium2 time of an eager NKI launch: one op launch plus the cost model's
// estimate of its grid instances, kept per program set (a kernel is estimated once).
double eager_nki_ns(const std::vector<std::shared_ptr<Program>>& progs) {
  struct Entry {
    std::vector<std::weak_ptr<Program>> progs;
    double ns;
  };
  static std::mutex mu;
  static std::unordered_map<const Program*, Entry> cache;
  const nki::DeviceTimeParams& dp = torch_glue::device_time_params();
  if (progs.empty()) return dp.eager_launch_ns;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(progs[0].get());
    if (it != cache.end() && it->second.progs.size() == progs.size()) {
      bool same = true;
      for (size_t i = 0; i < progs.size() && same; ++i)
        same = it->second.progs[i].lock() == progs[i];
      if (same) return it->second.ns;
    }
  }
  std::vector<const Program*> raw;
  for (const auto& p : progs) raw.push_back(p.get());
  const double ns = dp.eager_launch_ns + nki::nki_launch_ns(raw, dp.lnc);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 4096) cache.clear();
  Entry e{{progs.begin(), progs.end()}, ns};
  cache[progs[0].get()] = std::move(e);
  return ns;
}

}  // namespace

void register_nki_launch(py::module_& m) {
  // Asynchronous execution on device memory: one task on the current stream of `device`.
  // `check_state` (optional) is marked passed when a checked run completes without error.
  m.def(
      "_nki_launch",
      [](const std::vector<std::shared_ptr<Program>>& progs, const py::list& bindings, int device,
         const std::string& name, bool check, int64_t max_iters,
         std::shared_ptr<pyglue::CheckState> check_state) {
        auto binds = pyglue::to_bindings(bindings, progs.size());
        rt::Runtime::get().device(device);  // validates the index
        // Read the environment here, so that a bad value fails the call, not the queued task.
        if (max_iters <= 0) max_iters = nki::max_loop_iterations_from_env();
        rt::Stream& stream = rt::current_stream(device);
        const double est = eager_nki_ns(progs);
        stream.launch(rt::intern("nki::" + name), [progs, binds, check, max_iters, check_state] {
          pyglue::run_all(progs, binds, check, false, max_iters);
          if (check && check_state) check_state->passed.store(true);
        }, est);
      },
      py::arg("programs"), py::arg("bindings"), py::arg("device"), py::arg("name"),
      py::arg("check"), py::arg("max_iterations") = 0, py::arg("check_state") = nullptr);
}

}  // namespace neuron::torch_glue
