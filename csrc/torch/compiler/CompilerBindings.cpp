// torch_neuronx._C._cc: the bridge between the Python Dynamo backend and the graph compiler.
// Python builds Neuron IR node by node (GraphBuilder), compile() returns an Executable from
// the NEFF cache (compiling on a miss), and Executable.run() launches the whole program as one
// task on the current stream of the inputs' device. Tasks capture raw pointers and the
// immutable NEFF only (never at::Tensor).
#include <ATen/EmptyTensor.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "../Common.h"
#include "../DeviceTime.h"
#include "../NeuronAllocator.h"
#include "compiler/device_time.h"
#include "compiler/cache.h"
#include "compiler/compiler.h"
#include "compiler/dense.h"
#include "compiler/driver.h"
#include "compiler/metrics.h"
#include "compiler/neff.h"
#include "compiler/nki_call.h"
#include "compiler/verifier.h"
#include "kernels/dispatch.h"
#include "runtime/cache_file.h"
#include "runtime/env.h"

namespace py = pybind11;

namespace neuron::torch_glue {

namespace {

at::ScalarType to_scalar_type(kernels::DType t) {
  using K = kernels::DType;
  switch (t) {
    case K::Bool:
      return at::kBool;
    case K::UInt8:
      return at::kByte;
    case K::Int8:
      return at::kChar;
    case K::Int16:
      return at::kShort;
    case K::Int32:
      return at::kInt;
    case K::Int64:
      return at::kLong;
    case K::UInt16:
      return at::kUInt16;
    case K::UInt32:
      return at::kUInt32;
    case K::UInt64:
      return at::kUInt64;
    case K::Float16:
      return at::kHalf;
    case K::BFloat16:
      return at::kBFloat16;
    case K::Float32:
      return at::kFloat;
    case K::Float64:
      return at::kDouble;
    case K::Complex64:
      return at::kComplexFloat;
    case K::Complex128:
      return at::kComplexDouble;
    case K::Float8_e4m3fn:
      return at::kFloat8_e4m3fn;
    case K::Float8_e5m2:
      return at::kFloat8_e5m2;
    default:
      TORCH_CHECK(false, "neuron compiler: unsupported dtype");
  }
}

kernels::DType parse_dtype(const std::string& s) {
  auto d = cc::dtype_from_short(s);
  TORCH_CHECK(d.has_value(), "neuron compiler: unknown dtype '", s, "'");
  return *d;
}

template <typename F>
decltype(auto) cc_errors(F&& fn) {
  try {
    return fn();
  } catch (const cc::VerifyError& e) {
    throw py::value_error(e.what());
  } catch (const rt::Error& e) {
    TORCH_CHECK(false, e.what());
  }
}

cc::AttrValue to_attr(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return static_cast<int64_t>(v.cast<bool>());
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::bytes>(v)) return std::string(v.cast<py::bytes>());
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::vector<int64_t> r;
    for (auto x : v) r.push_back(x.cast<int64_t>());
    return r;
  }
  throw py::type_error(
      "neuron compiler: attribute values must be int, float, str, bytes or a list of ints");
}

cc::TargetProfile current_target() {
  cc::TargetProfile t;
  const rt::Topology& topo = rt::Runtime::get().topology();
  t.instance_type = topo.profile.name;
  t.nc_version = static_cast<uint32_t>(topo.profile.nc_version);
  t.target = topo.profile.nc_version >= 3 ? "trn2" : "trn1";
  t.lnc = static_cast<uint32_t>(topo.lnc);
  return t;
}

// Python-side graph construction.
class GraphBuilder {
 public:
  explicit GraphBuilder(const std::string& name) { g_.name = name; }

  int input(const std::string& dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
            const std::string& name) {
    return cc_errors([&] {
      return g_.add_input(cc::TensorType{parse_dtype(dtype), std::move(shape)}, std::move(strides),
                          name);
    });
  }

  std::vector<int> node(const std::string& op, std::vector<int> inputs, const py::dict& attrs,
                        const py::object& out_types) {
    return cc_errors([&] {
      auto o = cc::op_from_name(op);
      if (!o) throw cc::CompileError("neuron compiler: unknown IR op '" + op + "'");
      cc::Attrs a;
      for (auto kv : attrs) a.set(kv.first.cast<std::string>(), to_attr(kv.second));
      if (out_types.is_none()) return g_.add(*o, std::move(inputs), std::move(a));
      std::vector<cc::TensorType> outs;
      for (auto t : out_types) {
        auto tup = t.cast<py::tuple>();
        outs.push_back(cc::TensorType{parse_dtype(tup[0].cast<std::string>()),
                                      tup[1].cast<std::vector<int64_t>>()});
      }
      // Declared types are checked against inference (except for custom ops).
      auto ids = g_.add_typed(*o, std::move(inputs), std::move(a), std::move(outs));
      if (cc::op_kind(*o) != cc::OpKind::Custom) {
        const cc::Node& n = g_.nodes.back();
        auto inferred = cc::infer_types(g_, n);
        for (size_t i = 0; i < ids.size(); ++i)
          if (inferred[i] != g_.type(ids[i]))
            throw cc::VerifyError("neuron compiler: '" + op + "' result is " + inferred[i].str() +
                                  ", traced as " + g_.type(ids[i]).str());
      }
      return ids;
    });
  }

  int scalar(double v, const std::string& dtype) { return g_.scalar(v, parse_dtype(dtype)); }
  int scalar_int(int64_t v, const std::string& dtype) {
    const int id = g_.scalar(static_cast<double>(v), parse_dtype(dtype));
    g_.nodes.back().attrs.set("ivalue", v);
    return id;
  }

  int constant(const at::Tensor& t) {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const auto dt = to_kernel_dtype(c.scalar_type());
    TORCH_CHECK(dt != kernels::DType::Undefined, "neuron compiler: constant of unsupported dtype ",
                c.scalar_type());
    std::vector<uint8_t> bytes(c.nbytes());
    if (c.nbytes()) std::memcpy(bytes.data(), c.data_ptr(), c.nbytes());
    return cc_errors([&] {
      return g_.constant(cc::TensorType{dt, c.sizes().vec()}, std::move(bytes));
    });
  }

  void set_outputs(std::vector<int> outs, std::vector<std::vector<int64_t>> strides) {
    TORCH_CHECK(strides.empty() || strides.size() == outs.size(),
                "neuron compiler: one stride list per output");
    g_.set_outputs(outs);
    for (size_t i = 0; i < strides.size(); ++i) {
      cc::Value& v = g_.values.at(static_cast<size_t>(outs[i]));
      if (v.strides.empty() && !strides[i].empty()) v.strides = strides[i];
    }
  }
  void mutation(int input_index, int value) {
    g_.mutations.push_back(cc::Mutation{input_index, value});
  }
  std::string text() const { return cc::print(g_); }
  void verify() const {
    cc_errors([&] { cc::verify(g_, "built graph"); });
  }
  const cc::Graph& graph() const { return g_; }
  py::tuple type(int v) const {
    TORCH_CHECK(v >= 0 && static_cast<size_t>(v) < g_.values.size(), "neuron compiler: no value %",
                v);
    const cc::TensorType& t = g_.type(v);
    return py::make_tuple(std::string(cc::dtype_short(t.dtype)), t.shape);
  }
  int num_nodes() const { return static_cast<int>(g_.nodes.size()); }

 private:
  cc::Graph g_;
};

// A loaded NEFF plus its device-resident constants.
class Executable {
 public:
  Executable(std::shared_ptr<const cc::Neff> neff, std::string key, std::string graph_hash,
             std::string source, std::string path)
      : neff_(std::move(neff)),
        key_(std::move(key)),
        graph_hash_(std::move(graph_hash)),
        source_(std::move(source)),
        path_(std::move(path)) {
    auto it = neff_->metadata.find("graph");
    task_name_ = rt::intern("neuron::compiled_graph(" +
                            (it != neff_->metadata.end() ? it->second : key_) + ")");
    aliased_.assign(neff_->program.outputs.size(), false);
    for (const cc::OutputAlias& a : neff_->program.output_aliases)
      aliased_.at(static_cast<size_t>(a.output)) = true;
  }

  // One call of the compiled graph. This is on the path of every call of a compiled function:
  // the per-call work is the argument checks, one allocation per output (straight from the
  // device allocator, not through the dispatcher) and the arena, and one launch.
  py::list run(const py::sequence& args) {
    const cc::Program& p = neff_->program;
    const size_t nargs = args.size();
    TORCH_CHECK(nargs == p.inputs.size(), "compiled graph expects ", p.inputs.size(),
                " inputs, got ", nargs);
    std::vector<at::Tensor> ins;
    ins.reserve(nargs);
    c10::optional<c10::Device> device;
    bool all_neuron = true;
    for (size_t i = 0; i < nargs; ++i) {
      PyObject* a = PyTuple_Check(args.ptr()) ? PyTuple_GET_ITEM(args.ptr(), i)
                    : PyList_Check(args.ptr())  ? PyList_GET_ITEM(args.ptr(), i)
                                                : nullptr;
      py::object held;  // another sequence type: its item, owned here
      if (!a) {
        held = args[i];
        a = held.ptr();
      }
      TORCH_CHECK(THPVariable_Check(a), "compiled graph: input ", i, " is a ",
                  Py_TYPE(a)->tp_name, ", expected a tensor");
      at::Tensor t = THPVariable_Unpack(a);
      if (is_neuron(t)) {
        if (!device) device = t.device();
        TORCH_CHECK(t.device() == *device, "compiled graph: input ", i, " is on ", t.device(),
                    " but input tensors are on ", *device);
      } else {
        all_neuron = false;
      }
      ins.push_back(std::move(t));
    }
    const c10::Device dev =
        device ? *device
               : c10::Device(kNeuron, static_cast<c10::DeviceIndex>(rt::current_device()));
    const bool no_autocopy =
        !all_neuron && rt::getenv_bool("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", false);
    // Tensors whose layout differs from the compiled one go through a staging copy; mutated
    // ones are copied back after the program.
    std::vector<std::pair<at::Tensor, at::Tensor>> write_back;
    std::vector<void*> in_ptrs(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      at::Tensor& t = ins[i];
      const cc::IOSpec& s = p.inputs[i];
      if (!is_neuron(t)) {
        TORCH_CHECK(!no_autocopy, "Input tensor at index ", i, " is on ",
                    t.device().type() == c10::DeviceType::CPU ? "cpu" : t.device().str(),
                    " device (TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1: move inputs to neuron "
                    "before calling the compiled function)");
      }
      TORCH_CHECK(to_kernel_dtype(t.scalar_type()) == s.dtype &&
                      t.sizes() == c10::IntArrayRef(s.shape),
                  "compiled graph: input ", i, " is ", t.scalar_type(), t.sizes(),
                  ", the graph was compiled for ", cc::dtype_short(s.dtype), "[",
                  c10::IntArrayRef(s.shape), "]");
      const bool layout_ok = is_neuron(t) && t.device() == dev && strides_match(t, s.strides);
      if (!layout_ok) {
        at::Tensor staged = at::empty_strided(s.shape, s.strides, t.options().device(dev));
        staged.copy_(t);
        if (std::find(p.mutated_inputs.begin(), p.mutated_inputs.end(), static_cast<int>(i)) !=
            p.mutated_inputs.end())
          write_back.push_back({t, staged});
        t = staged;
      }
      in_ptrs[i] = t.numel() ? t.data_ptr() : nullptr;
    }
    c10::DeviceGuard guard(dev);
    const DeviceConstants& consts = constants_on(dev);
    std::vector<void*> out_ptrs(p.outputs.size());
    std::vector<at::Tensor> outs(p.outputs.size());
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      if (aliased_[k]) continue;
      const cc::IOSpec& s = p.outputs[k];
      outs[k] = device_empty(s.shape, s.strides, s.dtype);
      out_ptrs[k] = outs[k].numel() ? outs[k].data_ptr() : nullptr;
    }
    // Views of inputs the program does not write, or of other outputs.
    for (const cc::OutputAlias& a : p.output_aliases) {
      const cc::IOSpec& s = p.outputs[static_cast<size_t>(a.output)];
      const at::Tensor& base = (a.of_output ? outs : ins)[static_cast<size_t>(a.input)];
      outs[static_cast<size_t>(a.output)] =
          base.as_strided(s.shape, s.strides, base.storage_offset() + a.offset);
    }
    at::Tensor arena;
    void* arena_ptr = nullptr;
    if (p.arena_bytes > 0) {
      const int64_t n = p.arena_bytes;
      arena = device_empty(c10::IntArrayRef(&n, 1), c10::IntArrayRef(kUnitStride, 1),
                           kernels::DType::UInt8);
      arena_ptr = arena.data_ptr();
    }
    cc::Buffers bufs;
    bufs.inputs = std::move(in_ptrs);
    bufs.outputs = std::move(out_ptrs);
    bufs.constants = consts.ptrs;
    bufs.arena = arena_ptr;
    std::shared_ptr<const cc::Neff> neff = neff_;
    launch_est(dev.index(), task_name_,
               [neff, bufs = std::move(bufs)] { cc::execute(neff->program, bufs); },
               program_time().total_ns);
    cc::add_metric("executions", 1);
    for (auto& [orig, staged] : write_back) orig.copy_(staged);
    py::list result(outs.size());
    for (size_t k = 0; k < outs.size(); ++k) result[k] = py::cast(std::move(outs[k]));
    return result;
  }

  // The program's estimated Trainium2 time (compiler/device_time.h), computed once.
  const cc::ProgramTime& program_time() {
    std::call_once(time_once_, [this] {
      time_ = cc::estimate_program(neff_->program, device_time_params());
    });
    return time_;
  }
  py::dict estimate() {
    const cc::ProgramTime& t = program_time();
    py::dict d;
    d["launch_us"] = t.launch_ns / 1e3;
    d["total_us"] = t.total_ns / 1e3;
    py::list steps;
    for (const cc::StepTime& s : t.steps)
      steps.append(py::make_tuple(s.name, std::string(cc::step_kind_name(s.kind)), s.ns / 1e3,
                                  s.work.hbm_bytes, s.work.flops_bf16 + s.work.flops_fp32));
    d["steps"] = steps;
    return d;
  }

  std::string key() const { return key_; }
  std::string graph_hash() const { return graph_hash_; }
  std::string source() const { return source_; }
  std::string path() const { return path_; }
  std::string describe() const { return cc::dump_neff(*neff_, true); }
  py::dict info() const {
    py::dict d;
    const cc::Program& p = neff_->program;
    d["steps"] = p.steps.size();
    d["arena_bytes"] = p.arena_bytes;
    d["constants"] = p.constants.size();
    d["mutated_inputs"] = p.mutated_inputs;
    py::list kinds;
    for (const auto& s : p.steps) kinds.append(std::string(cc::step_kind_name(s.kind)));
    d["step_kinds"] = kinds;
    py::list outs;
    for (const auto& s : p.outputs)
      outs.append(py::make_tuple(std::string(cc::dtype_short(s.dtype)), s.shape, s.strides));
    d["outputs"] = outs;
    for (const auto& [k, v] : neff_->metadata) d[py::str("meta_" + k)] = v;
    return d;
  }

 private:
  static bool strides_match(const at::Tensor& t, const std::vector<int64_t>& s) {
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.size(d) != 1 && t.stride(d) != s[static_cast<size_t>(d)]) return false;
    return true;
  }

  // A device tensor of the current device, allocated without a dispatcher round trip.
  static at::Tensor device_empty(c10::IntArrayRef shape, c10::IntArrayRef strides,
                                 kernels::DType dtype) {
    return at::detail::empty_strided_generic(shape, strides, device_allocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                             to_scalar_type(dtype));
  }
  static constexpr int64_t kUnitStride[1] = {1};

  struct DeviceConstants {
    std::vector<at::Tensor> tensors;
    std::vector<const void*> ptrs;  // what the program reads (nullptr for empty ones)
  };

  const DeviceConstants& constants_on(const c10::Device& dev) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = consts_.find(dev.index());
    if (it != consts_.end()) return it->second;
    DeviceConstants v;
    const cc::Program& p = neff_->program;
    for (size_t i = 0; i < p.constants.size(); ++i) {
      const auto& data = p.constant_data[i];
      at::Tensor cpu = at::empty({static_cast<int64_t>(data.size())}, at::kByte);
      if (!data.empty()) std::memcpy(cpu.data_ptr(), data.data(), data.size());
      v.tensors.push_back(cpu.to(dev));
      v.ptrs.push_back(v.tensors.back().numel() ? v.tensors.back().data_ptr() : nullptr);
    }
    return consts_.emplace(dev.index(), std::move(v)).first->second;
  }

  std::shared_ptr<const cc::Neff> neff_;
  std::string key_, graph_hash_, source_, path_;
  const char* task_name_ = nullptr;
  std::once_flag time_once_;
  cc::ProgramTime time_;
  std::mutex mu_;
  std::unordered_map<int, DeviceConstants> consts_;  // by device index; entries never move
  std::vector<bool> aliased_;                            // outputs that are views (no buffer)
};

std::shared_ptr<Executable> compile_graph(const GraphBuilder& b, const py::dict& options) {
  cc::CompileRequest r;
  r.name = options.contains("name") ? options["name"].cast<std::string>() : b.graph().name;
  r.flags = options.contains("flags") ? options["flags"].cast<std::string>() : "";
  r.default_opt_level = options.contains("opt_level") ? options["opt_level"].cast<int>() : 2;
  r.dump_dir = options.contains("dump_dir") ? options["dump_dir"].cast<std::string>() : "";
  const std::string neff_copy =
      options.contains("neff_copy") ? options["neff_copy"].cast<std::string>() : "";
  r.target = current_target();
  return cc_errors([&] {
    cc::Artifact a;
    {
      py::gil_scoped_release nogil;
      a = cc::compile_cached(b.graph(), r);
    }
    if (!neff_copy.empty()) {
      const auto bytes = cc::write_neff(*a.neff);
      std::ofstream f(neff_copy, std::ios::binary);
      f.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    }
    return std::make_shared<Executable>(a.neff, a.key, a.graph_hash, cc::source_name(a.source),
                                        a.path);
  });
}

// Loads a cached NEFF by key without compiling (warm start); None when absent or unusable.
std::shared_ptr<Executable> load_cached(const std::string& key, const std::string& graph_hash) {
  return cc_errors([&]() -> std::shared_ptr<Executable> {
    std::optional<cc::Artifact> a;
    {
      py::gil_scoped_release nogil;
      a = cc::load_cached(key, graph_hash, current_target());
    }
    if (!a) return nullptr;
    return std::make_shared<Executable>(a->neff, a->key, a->graph_hash, cc::source_name(a->source),
                                        a->path);
  });
}

// Sealed cache files (runtime/cache_file.h) for the Python-side caches: `write` is atomic,
// `read` returns the payload or None (a damaged or foreign entry is counted, reported and
// removed).
bool cache_file_write(const std::string& path, const std::string& kind, const std::string& key,
                      const py::bytes& payload) {
  const std::string data = payload;
  const auto sealed = rt::seal(kind, key, data.data(), data.size());
  std::string why;
  if (rt::write_file_atomic(path, sealed.data(), sealed.size(), &why)) return true;
  cc::push_warning(rt::str("could not write the cache entry ", path, ": ", why));
  return false;
}

py::object cache_file_read(const std::string& path, const std::string& kind,
                           const std::string& key) {
  std::vector<uint8_t> file, payload;
  std::string why;
  rt::ReadStatus st = rt::read_file(path, &file, &why);
  if (st == rt::ReadStatus::Missing) return py::none();
  const bool is_file = st == rt::ReadStatus::Ok;
  if (is_file) st = rt::unseal(file, kind, key, &payload, &why);
  if (st == rt::ReadStatus::Ok)
    return py::bytes(reinterpret_cast<const char*>(payload.data()), payload.size());
  cc::add_metric("cache_corrupted", 1);
  cc::push_warning(rt::str("cache entry ", path, " rejected: ", why));
  if (is_file) std::remove(path.c_str());
  return py::none();
}

// NKI call plans (compiler/nki_call.h) from the Python description the NKI lowering records.
cc::nki_call::View to_view(const py::handle& h) {
  auto t = h.cast<py::tuple>();
  cc::nki_call::View v;
  v.root = t[0].cast<int32_t>();
  const int dt = t[1].cast<int>();
  TORCH_CHECK(dt >= 0 && dt < static_cast<int>(kernels::DType::Undefined),
              "NKI call plan: bad dtype code ", dt);
  v.dtype = static_cast<kernels::DType>(dt);
  v.offset = t[2].cast<int64_t>();
  v.sizes = t[3].cast<std::vector<int64_t>>();
  v.strides = t[4].cast<std::vector<int64_t>>();
  return v;
}

py::bytes encode_nki_plan(const py::dict& d) {
  namespace nc = cc::nki_call;
  nc::Plan p;
  p.op = d["op"].cast<std::string>();
  p.n_inputs = d["n_inputs"].cast<int32_t>();
  p.n_outputs = d["n_outputs"].cast<int32_t>();
  p.scratch_output = d["scratch_output"].cast<int32_t>();
  p.scratch_bytes = d["scratch_bytes"].cast<int64_t>();
  for (auto h : d["roots"]) {
    auto t = h.cast<py::tuple>();
    nc::Root r;
    const int kind = t[0].cast<int>();
    TORCH_CHECK(kind >= 0 && kind <= 2, "NKI call plan: bad root kind ", kind);
    r.kind = static_cast<nc::RootKind>(kind);
    r.index = t[1].cast<int32_t>();
    const int dt = t[2].cast<int>();
    TORCH_CHECK(dt >= 0 && dt < static_cast<int>(kernels::DType::Undefined),
                "NKI call plan: bad dtype code ", dt);
    r.dtype = static_cast<kernels::DType>(dt);
    r.numel = t[3].cast<int64_t>();
    r.offset = t[4].cast<int64_t>();
    r.bytes = t[5].cast<int64_t>();
    r.name = t[6].cast<std::string>();
    p.roots.push_back(std::move(r));
  }
  for (auto h : d["programs"]) p.programs.push_back(std::string(h.cast<py::bytes>()));
  for (auto h : d["ops"]) {
    auto t = h.cast<py::tuple>();
    const std::string kind = t[0].cast<std::string>();
    nc::Op o;
    if (kind == "copy") {
      o.kind = nc::OpKind::Copy;
      o.dst = to_view(t[1]);
      o.src = to_view(t[2]);
    } else if (kind == "fill") {
      o.kind = nc::OpKind::Fill;
      o.dst = to_view(t[1]);
      o.fvalue = t[2].cast<double>();
      o.ivalue = t[3].cast<int64_t>();
      o.integral = t[4].cast<bool>();
    } else if (kind == "launch") {
      o.kind = nc::OpKind::Launch;
      o.kernel = t[1].cast<std::string>();
      o.programs = t[2].cast<std::vector<int32_t>>();
      for (auto inst : t[3]) {
        std::vector<nc::Arg> args;
        for (auto a : inst) {
          auto at = a.cast<py::tuple>();
          args.push_back(nc::Arg{at[0].cast<int32_t>(), at[1].cast<int64_t>(),
                                 at[2].cast<int64_t>(), at[3].cast<std::string>(),
                                 at[4].cast<bool>(), at[5].cast<bool>()});
        }
        o.args.push_back(std::move(args));
      }
    } else {
      TORCH_CHECK(false, "NKI call plan: unknown op '", kind, "'");
    }
    p.ops.push_back(std::move(o));
  }
  return py::bytes(cc_errors([&] { return cc::nki_call::encode(p); }));
}

py::dict metrics_dict() {
  const cc::Metrics m = cc::metrics();
  py::dict d;
  d["graphs_compiled"] = m.graphs_compiled;
  d["cache_hits_memory"] = m.cache_hits_memory;
  d["cache_hits_disk"] = m.cache_hits_disk;
  d["cache_misses"] = m.cache_misses;
  d["cache_corrupted"] = m.cache_corrupted;
  d["cache_lock_waits"] = m.cache_lock_waits;
  d["cache_writes"] = m.cache_writes;
  d["executions"] = m.executions;
  d["compile_time_s"] = m.compile_seconds;
  d["cache_load_time_s"] = m.cache_load_seconds;
  return d;
}

}  // namespace

void init_compiler_bindings(py::module& parent) {
  py::module m = parent.def_submodule("_cc", "neuron-emu graph compiler");
  py::class_<GraphBuilder>(m, "GraphBuilder")
      .def(py::init<const std::string&>())
      .def("input", &GraphBuilder::input, py::arg("dtype"), py::arg("shape"), py::arg("strides"),
           py::arg("name") = "")
      .def("node", &GraphBuilder::node, py::arg("op"), py::arg("inputs"),
           py::arg("attrs") = py::dict(), py::arg("out_types") = py::none())
      .def("scalar", &GraphBuilder::scalar)
      .def("scalar_int", &GraphBuilder::scalar_int)
      .def("constant", &GraphBuilder::constant)
      .def("set_outputs", &GraphBuilder::set_outputs, py::arg("outputs"),
           py::arg("strides") = std::vector<std::vector<int64_t>>{})
      .def("mutation", &GraphBuilder::mutation)
      .def("text", &GraphBuilder::text)
      .def("verify", &GraphBuilder::verify)
      .def("num_nodes", &GraphBuilder::num_nodes)
      .def("type", &GraphBuilder::type);
  py::class_<Executable, std::shared_ptr<Executable>>(m, "Executable")
      .def("run", &Executable::run)
      .def_property_readonly("key", &Executable::key)
      .def_property_readonly("graph_hash", &Executable::graph_hash)
      .def_property_readonly("source", &Executable::source)
      .def_property_readonly("path", &Executable::path)
      .def("describe", &Executable::describe)
      .def("info", &Executable::info)
      .def("estimate", &Executable::estimate);
  m.def("compile", &compile_graph, py::arg("builder"), py::arg("options") = py::dict());
  m.def("load_cached", &load_cached, py::arg("key"), py::arg("graph_hash") = "");
  m.def("cache_file_write", &cache_file_write, py::arg("path"), py::arg("kind"), py::arg("key"),
        py::arg("payload"));
  m.def("cache_file_read", &cache_file_read, py::arg("path"), py::arg("kind"), py::arg("key"));
  m.def("is_cache_key", [](const std::string& k) { return rt::is_cache_key(k); });
  m.def("metrics", &metrics_dict);
  m.def("reset_metrics", [] { cc::reset_metrics(); });
  m.def("drain_warnings", [] { return cc::drain_warnings(); });
  m.def("clear_memory_cache", [] { cc::NeffCache::instance().clear_memory(); });
  {
    py::dict codes;
    for (int i = 0; i < static_cast<int>(kernels::DType::Undefined); ++i) {
      const auto t = static_cast<kernels::DType>(i);
      codes[py::str(std::string(cc::dtype_short(t)))] = i;
    }
    m.attr("DTYPE_CODES") = codes;
  }
  m.def("compiler_version", [] { return std::string(cc::compiler_build_id()); });
  m.def("ops", [] {
    py::list l;
    for (int i = 0; i < cc::num_ops(); ++i)
      l.append(std::string(cc::op_name(static_cast<cc::Op>(i))));
    return l;
  });
  m.def("dump_neff", [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    TORCH_CHECK(f.good(), "cannot open ", path);
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
    return cc_errors(
        [&] { return cc::dump_neff(cc::read_neff(data.data(), data.size(), path), true); });
  });
  m.def("set_step_profiling", [](bool on) { cc::set_step_profiling(on); });
  m.def(
      "step_profile",
      [](bool reset) {
        py::dict d;
        for (const auto& [k, v] : cc::step_profile(reset))
          d[py::str(k)] = py::make_tuple(v.first, v.second);
        return d;
      },
      py::arg("reset") = true);
  cc::nki_call::register_kernel();
  m.def("encode_nki_plan", &encode_nki_plan);
  m.def("describe_nki_plan",
        [](const py::bytes& b) { return cc::nki_call::describe(std::string(b)); });
  m.def("nki_cached_plans", [] { return cc::nki_call::cached_plans(); });
  m.def("nki_target", [] { return std::string(cc::nki_call::kTarget); });
  m.def("has_custom_kernel",
        [](const std::string& name) { return cc::dense::has_custom_kernel(name); });
  // A native kernel for the custom-op test: out = a * scale + b (float32), scale from the payload.
  m.def("_register_test_custom_kernel", [] {
    cc::dense::register_custom_kernel(
        "neuron_emu_test::scale_add",
        [](const std::vector<kernels::TensorRef>& in, const std::vector<kernels::TensorRef>& out,
           const std::string& payload) {
          if (in.size() != 2 || out.size() != 1)
            throw cc::ExecError("scale_add: expects 2 inputs and 1 output");
          const float scale = payload.empty() ? 1.0f : std::stof(payload);
          const auto& a = in[0];
          const auto& b = in[1];
          const auto& o = out[0];
          if (a.dtype != kernels::DType::Float32 || !a.is_contiguous() || !b.is_contiguous() ||
              !o.is_contiguous())
            throw cc::ExecError("scale_add: float32 contiguous tensors only");
          const int64_t n = a.numel();
          for (int64_t i = 0; i < n; ++i)
            static_cast<float*>(o.data)[i] =
                static_cast<const float*>(a.data)[i] * scale + static_cast<const float*>(b.data)[i];
        });
  });
}

}  // namespace neuron::torch_glue
