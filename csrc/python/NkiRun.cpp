#include "NkiRun.h"

#include "nki/launch.h"

namespace py = pybind11;

namespace neuron::pyglue {

std::vector<std::vector<PyBinding>> to_bindings(const py::list& per_instance, size_t num_programs) {
  if (per_instance.size() != num_programs)
    throw std::invalid_argument("nki: one binding list per program");
  std::vector<std::vector<PyBinding>> out;
  for (const auto& inst : per_instance) {
    std::vector<PyBinding> v;
    for (const auto& item : inst.cast<py::list>()) {
      auto t = item.cast<py::tuple>();
      PyBinding b;
      b.ptr = t[0].cast<uintptr_t>();
      b.bytes = t[1].cast<int64_t>();
      b.name = t[2].cast<std::string>();
      b.is_input = t[3].cast<bool>();
      b.scratch = t[4].cast<bool>();
      v.push_back(std::move(b));
    }
    out.push_back(std::move(v));
  }
  return out;
}

BindingTemplate::BindingTemplate(const py::list& slots, size_t num_programs, std::vector<uintptr_t> consts,
                                 std::vector<int64_t> scratch)
    : consts_(std::move(consts)), scratch_(std::move(scratch)) {
  if (slots.size() != num_programs) throw std::invalid_argument("nki: one slot list per program");
  for (const auto& inst : slots) {
    std::vector<Slot> v;
    for (const auto& item : inst.cast<py::list>()) {
      auto t = item.cast<py::tuple>();
      Slot s;
      s.pool = t[0].cast<int>();
      s.index = t[1].cast<size_t>();
      s.b.bytes = t[2].cast<int64_t>();
      s.b.name = t[3].cast<std::string>();
      s.b.is_input = t[4].cast<bool>();
      s.b.scratch = t[5].cast<bool>();
      if (s.pool < 0 || s.pool > 3 || (s.pool == 2 && s.index >= scratch_.size()) ||
          (s.pool == 3 && s.index >= consts_.size()))
        throw std::invalid_argument("nki: launch template slot out of range");
      v.push_back(std::move(s));
    }
    slots_.push_back(std::move(v));
  }
}

std::vector<std::vector<PyBinding>> BindingTemplate::bind(const std::vector<uintptr_t>& args,
                                                          const std::vector<uintptr_t>& shared,
                                                          const std::vector<uintptr_t>& scratch) const {
  const std::vector<uintptr_t>* pools[4] = {&args, &shared, &scratch, &consts_};
  std::vector<std::vector<PyBinding>> out;
  out.reserve(slots_.size());
  for (const auto& inst : slots_) {
    std::vector<PyBinding> v;
    v.reserve(inst.size());
    for (const Slot& s : inst) {
      const std::vector<uintptr_t>& pool = *pools[s.pool];
      if (s.index >= pool.size()) throw std::invalid_argument("nki: launch template buffer missing");
      PyBinding b = s.b;
      b.ptr = pool[s.index];
      v.push_back(std::move(b));
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::shared_ptr<Trace>> run_all(
    const std::vector<std::shared_ptr<nki::Program>>& progs,
    const std::vector<std::vector<PyBinding>>& binds, bool check, bool record, int64_t max_iters) {
  std::vector<const nki::Program*> ps;
  std::vector<std::vector<nki::HbmArg>> args;
  for (size_t i = 0; i < progs.size(); ++i) {
    ps.push_back(progs[i].get());
    std::vector<nki::HbmArg> a;
    for (const PyBinding& pb : binds[i])
      a.push_back(nki::HbmArg{reinterpret_cast<uint8_t*>(pb.ptr), pb.bytes, pb.name, pb.is_input,
                              pb.scratch});
    args.push_back(std::move(a));
  }
  nki::LaunchOptions opt;
  opt.check_uninit = check;
  opt.record_trace = record;
  opt.max_loop_iterations = max_iters;
  std::vector<nki::ExecReport> reps = nki::run_launch(ps, args, opt);
  std::vector<std::shared_ptr<Trace>> traces;
  for (auto& rep : reps) {
    auto t = std::make_shared<Trace>();
    t->records = std::move(rep.trace);
    t->instructions = rep.instructions;
    traces.push_back(std::move(t));
  }
  return traces;
}

}  // namespace neuron::pyglue
