// The extension nki._nki_native: the NeuronCore model as python/nki drives it, without torch.
// The program builder the NKI tracer fills, the instruction-set table, synchronous execution on
// host memory (numpy arrays, CPU tensors), the cost model's estimates, and the translation of
// NKI errors into nki.NkiValidationError. Launches on neuron devices are torch_neuronx's
// (csrc/torch/NkiLaunch.cpp, registered with nki when torch_neuronx loads). The tracer hands
// over raw data pointers; only pybind11 and the layers below are used here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

#include "Interrupt.h"
#include "NkiRun.h"
#include "nki/cost_model.h"
#include "nki/error.h"
#include "nki/executor.h"
#include "nki/isa.h"
#include "nki/launch.h"
#include "nki/program.h"
#include "runtime/topology.h"

namespace py = pybind11;

namespace neuron::pyglue {
namespace {

using nki::Program;

// Raises nki._errors.NkiValidationError (an AssertionError) carrying
// kind/instruction/location/rule.
void translate_nki_error(const nki::NkiError& e) {
  py::gil_scoped_acquire gil;
  if (e.kind() == "interrupted") {  // Ctrl-C during a run on this thread
    set_interrupt_error(e.what());
    return;
  }
  py::object cls;
  try {
    if (e.kind() == "index") {  // an index outside a tensor: an IndexError, as in the simulator
      py::object inst = py::module_::import("nki._errors")
                            .attr("index_error")(e.message(), e.what(), e.instruction(),
                                                 e.location(), e.rule());
      PyErr_SetObject(PyExc_IndexError, inst.ptr());
      return;
    }
    cls = py::module_::import("nki._errors").attr("NkiValidationError");
  } catch (py::error_already_set&) {
    PyErr_Clear();
    PyErr_SetString(PyExc_AssertionError, e.what());
    return;
  }
  py::object inst = cls(e.what());
  inst.attr("kind") = e.kind();
  inst.attr("instruction") = e.instruction();
  inst.attr("location") = e.location();
  inst.attr("rule") = e.rule();
  PyErr_SetObject(cls.ptr(), inst.ptr());
}

nki::Ap to_ap(const py::handle& h) {
  nki::Ap a;
  if (h.is_none()) return a;
  auto t = h.cast<py::tuple>();
  if (t.size() != 7) throw std::invalid_argument("nki: malformed access pattern");
  a.buf = t[0].cast<int32_t>();
  const int dt = t[1].cast<int>();
  if (dt < 0 || dt >= nki::kNumDTypes) throw std::invalid_argument("nki: invalid dtype code");
  a.dtype = static_cast<nki::DT>(dt);
  a.offset = t[2].cast<int64_t>();
  auto steps = t[3].cast<std::vector<int64_t>>();
  auto nums = t[4].cast<std::vector<int64_t>>();
  if (steps.size() != nums.size() || steps.empty() || steps.size() > nki::kMaxApDims)
    throw std::invalid_argument("nki: access patterns have 1 to 6 dimensions, got " +
                                std::to_string(steps.size()));
  a.ndim = static_cast<int8_t>(steps.size());
  for (size_t d = 0; d < steps.size(); ++d) {
    a.step[d] = steps[d];
    a.num[d] = nums[d];
  }
  a.reg = static_cast<int16_t>(t[5].cast<int>());
  a.reg_scale = t[6].cast<int64_t>();
  return a;
}

py::dict target_dict(const nki::Target& t) {
  py::dict d;
  d["nc_version"] = t.nc_version;
  d["sbuf_bytes_per_partition"] = t.sbuf_bytes_per_partition;
  d["psum_bytes_per_partition"] = t.psum_bytes_per_partition;
  d["psum_banks"] = t.psum_banks;
  d["partitions"] = t.partitions;
  return d;
}

nki::Target target_from(const py::dict& d) {
  nki::Target t;
  t.nc_version = d["nc_version"].cast<int>();
  t.sbuf_bytes_per_partition = d["sbuf_bytes_per_partition"].cast<int64_t>();
  t.psum_bytes_per_partition = d["psum_bytes_per_partition"].cast<int64_t>();
  t.psum_banks = d["psum_banks"].cast<int>();
  t.partitions = d["partitions"].cast<int>();
  if (t.partitions <= 0 || t.partitions > 128 || t.psum_banks <= 0 ||
      t.sbuf_bytes_per_partition <= 0 || t.psum_bytes_per_partition <= 0)
    throw std::invalid_argument("nki: invalid target");
  return t;
}

// The instruction set as isa.def declares it, for the Python tracer (python/nki/_tracer.py):
// per instruction its opcode, API name, engines, operand names (and which it writes) and attribute
// slots, plus the names of every enum an attribute or operand can hold.
py::dict isa_table() {
  auto lower = [](std::string_view v) {
    std::string s(v);
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  py::dict ops;
  for (const auto& d : nki::isa::kInstrs) {
    py::list engines, operands, writes;
    for (int e = 0; e < nki::kNumEngines; ++e)
      if (d.engines & (1u << e))
        engines.append(lower(nki::engine_name(static_cast<nki::Engine>(e))));
    for (int k = 0; k < d.num_operands; ++k) {
      operands.append(std::string(d.operands[k].name));
      if (d.operands[k].writes()) writes.append(std::string(d.operands[k].name));
    }
    py::dict attrs;
    for (int k = 0; k < d.num_attrs; ++k) {
      const auto& a = d.attrs[k];
      attrs[py::str(std::string(a.name))] =
          py::make_tuple(std::string(nki::isa::attr_kind_name(a.kind)), a.slot, a.count);
    }
    py::dict e;
    e["code"] = static_cast<int>(d.op);
    e["api"] = std::string(d.api);
    e["engines"] = engines;
    e["operands"] = operands;
    e["writes"] = writes;  // the operands the instruction writes (dst, reduce_res, ...)
    e["attrs"] = attrs;
    ops[py::str(std::string(d.id))] = e;
  }
  py::list alu, act, engines, mems, cmds, dtypes;
  for (int i = 0; i < static_cast<int>(nki::Alu::Count); ++i)
    alu.append(std::string(nki::alu_name(static_cast<nki::Alu>(i))));
  for (int i = 0; i < static_cast<int>(nki::Act::Count); ++i)
    act.append(std::string(nki::act_name(static_cast<nki::Act>(i))));
  for (int i = 0; i < nki::kNumEngines; ++i)
    engines.append(lower(nki::engine_name(static_cast<nki::Engine>(i))));
  for (int i = 0; i < 3; ++i) mems.append(lower(nki::mem_name(static_cast<nki::Mem>(i))));
  for (int i = 0; i < static_cast<int>(nki::ReduceCmd::Count); ++i)
    cmds.append(std::string(nki::reduce_cmd_name(static_cast<nki::ReduceCmd>(i))));
  for (int i = 0; i < nki::kNumDTypes; ++i) {
    const auto t = static_cast<nki::DT>(i);
    dtypes.append(py::make_tuple(std::string(nki::dt_name(t)), nki::dt_size(t)));
  }
  py::dict out;
  out["ops"] = ops;
  out["alu"] = alu;
  out["act"] = act;
  out["engines"] = engines;
  out["mems"] = mems;
  out["reduce_cmd"] = cmds;
  out["dtypes"] = dtypes;
  out["max_operands"] = nki::kMaxOperands;
  out["num_ints"] = nki::kNumInts;
  out["num_floats"] = nki::kNumFloats;
  return out;
}

// The warm-call host launch of nki.jit (numpy arrays, CPU tensors); see init_module.
// Immutable after construction.
class HostLaunchTemplate {
 public:
  HostLaunchTemplate(std::vector<std::shared_ptr<Program>> progs, const py::list& slots,
                     std::vector<uintptr_t> consts, std::vector<int64_t> scratch)
      : progs_(std::move(progs)), tpl_(slots, progs_.size(), std::move(consts), std::move(scratch)) {}

  void run(const py::list& args, const py::list& shared, bool check) const {
    auto addrs = [](const py::list& l) {
      std::vector<uintptr_t> out;
      out.reserve(l.size());
      for (const auto& h : l) {
        if (py::isinstance<py::array>(h))
          out.push_back(reinterpret_cast<uintptr_t>(py::reinterpret_borrow<py::array>(h).data()));
        else
          out.push_back(h.cast<uintptr_t>());
      }
      return out;
    };
    std::vector<std::unique_ptr<uint8_t[]>> scratch;
    std::vector<uintptr_t> scratch_ptrs;
    for (int64_t n : tpl_.scratch_bytes()) {
      scratch.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(n, 1))]);
      scratch_ptrs.push_back(reinterpret_cast<uintptr_t>(scratch.back().get()));
    }
    const auto binds = tpl_.bind(addrs(args), addrs(shared), scratch_ptrs);
    py::gil_scoped_release nogil;
    run_all(progs_, binds, check, false, 0);
  }

 private:
  std::vector<std::shared_ptr<Program>> progs_;
  BindingTemplate tpl_;
};

// The environment a trace depends on besides its arguments, as one bytes value: the topology
// variables default_target() reads plus `extra` variables (the ones nki._jit consults before it
// takes a cached trace). The warm-call fast path keys its cache by it: a few getenv calls, so
// that a changed variable retraces exactly as the full path does. Immutable after construction.
class EnvKey {
 public:
  explicit EnvKey(std::vector<std::string> extra) : extra_(std::move(extra)) {}
  py::bytes operator()() const {
    std::string key;
    for (const auto& [k, v] : rt::read_topology_env()) {
      key += k;
      key += '=';
      key += v;
      key += '\0';
    }
    key += '\1';
    for (const auto& k : extra_) {
      const char* v = std::getenv(k.c_str());
      key += v != nullptr ? "=" + std::string(v) : std::string("-");
      key += '\0';
    }
    return py::bytes(key);
  }

 private:
  std::vector<std::string> extra_;
};

void init_module(py::module_& m) {
  m.doc() = "The NeuronCore model behind the nki package (no torch)";
  install_interrupt_poll();  // Ctrl-C stops a kernel running on the host
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const nki::NkiError& e) {
      translate_nki_error(e);
    }
  });

  m.def("isa_table", &isa_table);
  m.def("engines_can_start", &nki::isa::engines_can_start, py::arg("first_partition"), py::arg("num"));

  py::class_<EnvKey>(m, "EnvKey")
      .def(py::init<std::vector<std::string>>(), py::arg("extra"))
      .def("__call__", &EnvKey::operator());

  // The machine of the configured instance profile (NEURON_EMU_INSTANCE_TYPE), without starting
  // the runtime.
  m.def("default_target", [] {
    const rt::Topology topo = rt::Topology::from_env(rt::read_topology_env());
    nki::Target t;
    t.nc_version = topo.profile.nc_version;
    t.sbuf_bytes_per_partition = static_cast<int64_t>(topo.profile.sbuf_bytes_per_partition);
    t.psum_bytes_per_partition = static_cast<int64_t>(topo.profile.psum_bytes_per_partition);
    t.psum_banks = topo.profile.psum_banks;
    t.partitions = topo.profile.sbuf_partitions;
    py::dict d = target_dict(t);
    d["lnc"] = topo.lnc;
    d["instance_type"] = topo.profile.name;
    return d;
  });

  py::class_<Trace, std::shared_ptr<Trace>>(m, "Trace")
      .def_property_readonly("instructions", [](const Trace& t) { return t.instructions; })
      .def("__len__", [](const Trace& t) { return t.records.size(); });

  py::class_<nki::Estimate>(m, "Estimate")
      .def_readonly("total_ns", &nki::Estimate::total_ns)
      .def_readonly("instructions", &nki::Estimate::instructions)
      .def_readonly("hbm_read_bytes", &nki::Estimate::hbm_read_bytes)
      .def_readonly("hbm_write_bytes", &nki::Estimate::hbm_write_bytes)
      .def_readonly("flops", &nki::Estimate::flops)
      .def_readonly("events_truncated", &nki::Estimate::events_truncated)
      .def_property_readonly(
          "busy_ns",
          [](const nki::Estimate& e) {
            py::dict d;
            for (int i = 0; i < nki::kNumEngines; ++i)
              d[py::str(std::string(nki::engine_name(static_cast<nki::Engine>(i))))] = e.busy_ns[i];
            return d;
          })
      .def_property_readonly("utilization", [](const nki::Estimate& e) {
        py::dict d;
        for (int i = 0; i < nki::kNumEngines; ++i) {
          const auto en = static_cast<nki::Engine>(i);
          d[py::str(std::string(nki::engine_name(en)))] = e.utilization(en);
        }
        return d;
      });

  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def(py::init(
          [](const py::dict& target) { return std::make_shared<Program>(target_from(target)); }))
      .def_property_readonly("target", [](const Program& p) { return target_dict(p.target()); })
      .def("intern", &Program::intern)
      .def("add_buffer",
           [](Program& p, int mem, int dtype, std::vector<int64_t> shape, std::string name,
              int32_t loc, bool is_input, int32_t fixed_partition, int64_t fixed_offset) {
             if (mem < 0 || mem > 2 || dtype < 0 || dtype >= nki::kNumDTypes)
               throw std::invalid_argument("nki: invalid memory or dtype code");
             nki::Buffer b;
             b.mem = static_cast<nki::Mem>(mem);
             b.dtype = static_cast<nki::DT>(dtype);
             b.shape = std::move(shape);
             b.name = std::move(name);
             b.loc = loc;
             b.is_input = is_input;
             b.fixed_partition = fixed_partition;
             b.fixed_offset = fixed_offset;
             return p.add_buffer(std::move(b));
           })
      .def("add_register", &Program::add_register)
      .def("add",
           [](Program& p, int op, int engine, const py::list& aps, const std::vector<int64_t>& ints,
              const std::vector<double>& floats, int32_t loc, int32_t api) {
             if (op < 0 || op >= static_cast<int>(nki::Op::Count) || engine < 0 ||
                 engine >= nki::kNumEngines)
               throw std::invalid_argument("nki: invalid opcode or engine");
             if (aps.size() > nki::kMaxOperands || ints.size() > nki::kNumInts ||
                 floats.size() > nki::kNumFloats)
               throw std::invalid_argument("nki: too many instruction operands");
             nki::Instr in;
             in.op = static_cast<nki::Op>(op);
             in.engine = static_cast<nki::Engine>(engine);
             for (const auto& a : aps) in.ap[in.nap++] = to_ap(a);
             for (size_t k = 0; k < ints.size(); ++k) in.i[k] = ints[k];
             for (size_t k = 0; k < floats.size(); ++k) in.f[k] = floats[k];
             in.loc = loc;
             in.api = api;
             p.add(in);
           })
      .def("size", &Program::size)
      .def("pop_last", &Program::pop_last)
      .def("buffer_written", &Program::buffer_written)
      .def("finalize", &Program::finalize)
      .def_property_readonly("finalized", &Program::finalized)
      .def_property_readonly("dynamic", &Program::dynamic)
      .def_property_readonly("needs_recheck", &Program::needs_recheck)
      .def_property_readonly("num_slots", &Program::num_slots)
      .def("dump", &Program::dump)
      .def_property_readonly("plan",
                             [](const Program& p) {
                               // The execution plan of unchecked runs (program.h, Plan).
                               const nki::Plan& pl = p.plan();
                               py::list skipped;
                               for (size_t i = 0; i < pl.skip.size(); ++i)
                                 if (pl.skip[i]) skipped.append(i);
                               py::dict d;
                               d["elided_dmas"] = pl.elided;
                               d["in_place_operands"] = pl.redirected;
                               d["matmul_runs"] = pl.runs;
                               d["fused_runs"] = static_cast<int64_t>(pl.fused_runs.size());
                               d["fused_instructions"] = pl.fused;
                               d["elided"] = skipped;
                               return d;
                             })
      .def("serialize", [](const Program& p) { return py::bytes(p.serialize()); })
      .def_static("deserialize",
                  [](const py::bytes& b) {
                    std::string s = b;
                    return Program::deserialize(s);
                  })
      .def("hbm_buffers",
           [](const Program& p) {
             py::list out;
             for (const auto& b : p.buffers())
               if (b.mem == nki::Mem::Hbm)
                 out.append(py::make_tuple(b.slot, b.name, static_cast<int>(b.dtype), b.shape,
                                           b.is_input, b.written, b.total_bytes));
             return out;
           })
      .def("onchip_usage",
           [](const Program& p) {
             // Peak bytes per partition of live SBUF/PSUM tensors after placement.
             int64_t sbuf = 0, psum = 0;
             for (const auto& b : p.buffers()) {
               if (b.addr < 0) continue;
               if (b.mem == nki::Mem::Sbuf) sbuf = std::max(sbuf, b.addr + b.bytes_per_partition);
               if (b.mem == nki::Mem::Psum) psum = std::max(psum, b.addr + b.bytes_per_partition);
             }
             return py::make_tuple(sbuf, psum);
           })
      .def(
          "estimate",
          [](const Program& p, std::shared_ptr<Trace> trace, size_t max_events) {
            if (!p.finalized())
              throw std::invalid_argument("nki: estimate needs a finalized program");
            if (p.dynamic() && !trace)
              throw std::invalid_argument(
                  "nki: a program with runtime loops needs the trace of a run to be estimated");
            py::gil_scoped_release nogil;
            return nki::estimate(p, trace ? &trace->records : nullptr,
                                 nki::CostParams::for_version(p.target().nc_version), max_events);
          },
          py::arg("trace") = nullptr, py::arg("max_events") = 0)
      .def("timeline_json",
           [](const Program& p, const nki::Estimate& e, int pid, const std::string& name,
              double offset_ns) { return nki::timeline_json(p, e, pid, name, offset_ns); })
      .def("cost_params", [](const Program& p) {
        const auto c = nki::CostParams::for_version(p.target().nc_version);
        py::dict d;
        d["tensor_ghz"] = c.tensor_ghz;
        d["vector_ghz"] = c.vector_ghz;
        d["scalar_ghz"] = c.scalar_ghz;
        d["gpsimd_ghz"] = c.gpsimd_ghz;
        d["dma_engines"] = c.dma_engines;
        d["dma_bytes_per_ns"] = c.dma_bytes_per_ns;
        d["dma_fixed_ns"] = c.dma_fixed_ns;
        d["peak_bf16_tflops"] = c.peak_bf16_tflops;
        d["peak_fp8_tflops"] = c.peak_fp8_tflops;
        d["peak_fp32_tflops"] = c.peak_fp32_tflops;
        d["hbm_bytes_per_ns"] = c.hbm_bytes_per_ns;
        return d;
      });

  // Every instance of a launch on `cores` physical cores (waves, synchronised at their
  // rendezvous): (estimates, start offsets in ns).
  m.def(
      "estimate_launch",
      [](const std::vector<std::shared_ptr<Program>>& progs,
         const std::vector<std::shared_ptr<Trace>>& traces, int cores, size_t max_events) {
        std::vector<const Program*> ps;
        std::vector<const std::vector<nki::ExecRecord>*> ts;
        for (size_t i = 0; i < progs.size(); ++i) {
          const Program& p = *progs[i];
          const auto& t = i < traces.size() ? traces[i] : nullptr;
          if (!p.finalized()) throw std::invalid_argument("nki: estimate needs a finalized program");
          if (p.dynamic() && !t)
            throw std::invalid_argument(
                "nki: a program with runtime loops needs the trace of a run to be estimated");
          ps.push_back(&p);
          ts.push_back(t && p.dynamic() ? &t->records : nullptr);
        }
        std::vector<double> offsets;
        std::vector<nki::Estimate> est;
        {
          py::gil_scoped_release nogil;
          est = nki::estimate_launch(ps, ts, cores, max_events, &offsets);
        }
        return py::make_tuple(est, offsets);
      },
      py::arg("programs"), py::arg("traces"), py::arg("cores"), py::arg("max_events") = 0);

  // Synchronous execution on host memory. bindings: per instance, a list of
  // (data_ptr, nbytes, name, is_input, is_scratch) indexed by HBM slot.
  m.def(
      "run",
      [](const std::vector<std::shared_ptr<Program>>& progs, const py::list& bindings, bool check,
         bool record, int64_t max_iters) {
        auto binds = to_bindings(bindings, progs.size());
        py::gil_scoped_release nogil;
        return run_all(progs, binds, check, record, max_iters);
      },
      py::arg("programs"), py::arg("bindings"), py::arg("check"), py::arg("record") = false,
      py::arg("max_iterations") = 0);

  // The warm-call fast path's host launch (numpy arrays, CPU tensors): built once per trace and
  // call structure with each binding's role, size and name (slots: per instance, (pool, index,
  // bytes, name, is_input, scratch); pool 0 = argument, 1 = shared output, 2 = scratch buffer,
  // 3 = constant address) and the scratch sizes; run(args, shared, check) takes each argument
  // and output as an address (int) or a numpy array (its data pointer, read here: no copy and
  // no ctypes object), allocates the scratch buffers and runs synchronously.
  py::class_<HostLaunchTemplate>(m, "HostLaunchTemplate")
      .def(py::init<std::vector<std::shared_ptr<Program>>, const py::list&, std::vector<uintptr_t>,
                    std::vector<int64_t>>(),
           py::arg("programs"), py::arg("slots"), py::arg("consts"), py::arg("scratch"))
      .def("run", &HostLaunchTemplate::run, py::arg("args"), py::arg("shared"), py::arg("check"));

  py::class_<CheckState, std::shared_ptr<CheckState>>(m, "CheckState")
      .def(py::init<>())
      .def_property_readonly("passed", [](const CheckState& s) { return s.passed.load(); });

  // NEURON_EMU_NKI_CHECK as the launches apply it ("first", "always", "never"); raises for a
  // value it does not know.
  m.def("check_policy",
        [] { return std::string(nki::check_policy_name(nki::check_policy_from_env())); });
}

}  // namespace
}  // namespace neuron::pyglue

PYBIND11_MODULE(_nki_native, m) { neuron::pyglue::init_module(m); }
