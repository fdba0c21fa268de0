#include "program.h"

#include <algorithm>
#include <sstream>

#include "nki_call.h"

namespace neuron::cc {

const char* step_kind_name(StepKind k) {
  switch (k) {
    case StepKind::Fused:
      return "fused";
    case StepKind::Gemm:
      return "gemm";
    case StepKind::Attention:
      return "attention";
    case StepKind::Index:
      return "index";
    case StepKind::IndexPut:
      return "index_put";
    case StepKind::Gather:
      return "gather";
    case StepKind::Scatter:
      return "scatter";
    case StepKind::SliceScatter:
      return "slice_scatter";
    case StepKind::Copy:
      return "copy";
    case StepKind::Conv:
      return "conv";
    case StepKind::ConvBackward:
      return "conv_backward";
    case StepKind::MaxPool:
      return "max_pool";
    case StepKind::MaxPoolBackward:
      return "max_pool_backward";
    case StepKind::AvgPool:
      return "avg_pool";
    case StepKind::AvgPoolBackward:
      return "avg_pool_backward";
    case StepKind::Custom:
      return "custom";
    case StepKind::AttentionBackward:
      return "attention_backward";
    case StepKind::Softmax:
      return "softmax";
    case StepKind::SoftmaxBackward:
      return "softmax_backward";
    case StepKind::LayerNorm:
      return "layer_norm";
    case StepKind::LayerNormBackward:
      return "layer_norm_backward";
    case StepKind::BatchNorm:
      return "batch_norm";
    case StepKind::BatchNormBackward:
      return "batch_norm_backward";
    case StepKind::Reduce:
      return "reduce";
  }
  return "?";
}

int64_t IOSpec::storage_elements() const {
  int64_t hi = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    const int64_t s = d < strides.size() ? strides[d] : 0;
    hi += (shape[d] - 1) * std::max<int64_t>(s, 0);
  }
  return hi + 1;
}

namespace {

void write_desc(ByteWriter& w, const TensorDesc& d) {
  w.u8(static_cast<uint8_t>(d.space));
  w.i32(d.index);
  w.i64(d.byte_offset);
  w.u8(static_cast<uint8_t>(d.dtype));
  w.i64s(d.sizes);
  w.i64s(d.strides);
  w.i64(d.offset);
}

TensorDesc read_desc(ByteReader& r) {
  TensorDesc d;
  const uint8_t sp = r.u8("desc.space");
  if (sp > static_cast<uint8_t>(Space::Constant)) r.fail("desc.space", "unknown buffer space");
  d.space = static_cast<Space>(sp);
  d.index = r.i32("desc.index");
  d.byte_offset = r.i64("desc.byte_offset");
  const uint8_t dt = r.u8("desc.dtype");
  if (dt >= static_cast<uint8_t>(DType::Undefined)) r.fail("desc.dtype", "unknown dtype");
  d.dtype = static_cast<DType>(dt);
  d.sizes = r.i64s("desc.sizes");
  d.strides = r.i64s("desc.strides");
  d.offset = r.i64("desc.offset");
  return d;
}

void write_spec(ByteWriter& w, const IOSpec& s) {
  w.u8(static_cast<uint8_t>(s.dtype));
  w.i64s(s.shape);
  w.i64s(s.strides);
  w.str(s.name);
}

IOSpec read_spec(ByteReader& r) {
  IOSpec s;
  const uint8_t dt = r.u8("spec.dtype");
  if (dt >= static_cast<uint8_t>(DType::Undefined)) r.fail("spec.dtype", "unknown dtype");
  s.dtype = static_cast<DType>(dt);
  s.shape = r.i64s("spec.shape");
  s.strides = r.i64s("spec.strides");
  s.name = r.str("spec.name");
  if (s.strides.size() != s.shape.size()) r.fail("spec.strides", "rank mismatch");
  for (int64_t x : s.shape)
    if (x < 0) r.fail("spec.shape", "negative size");
  return s;
}

}  // namespace

void serialize(const Program& p, ByteWriter& w) {
  auto specs = [&](const std::vector<IOSpec>& v) {
    w.u64(v.size());
    for (const IOSpec& s : v) write_spec(w, s);
  };
  specs(p.inputs);
  specs(p.outputs);
  specs(p.constants);
  w.u64(p.constant_data.size());
  for (const auto& c : p.constant_data) w.bytes(c.data(), c.size());
  w.i32s(p.mutated_inputs);
  w.u64(p.output_aliases.size());
  for (const OutputAlias& a : p.output_aliases) {
    w.i32(a.output);
    w.i32(a.input);
    w.i64(a.offset);
    w.u8(a.of_output ? 1 : 0);
  }
  w.i64(p.arena_bytes);
  w.u64(p.steps.size());
  for (const Step& s : p.steps) {
    w.u8(static_cast<uint8_t>(s.kind));
    w.str(s.name);
    w.u64(s.tensors.size());
    for (const TensorDesc& d : s.tensors) write_desc(w, d);
    w.i64s(s.ints);
    w.u64(s.floats.size());
    for (double f : s.floats) w.f64(f);
    w.str(s.text);
    w.str(s.payload);
    w.u8(s.kernel ? 1 : 0);
    if (s.kernel) vm::serialize(*s.kernel, w);
    w.i32s(s.kernel_buffers);
    w.i64(s.scratch_offset);
    w.i64(s.scratch_bytes);
  }
}

Program deserialize_program(ByteReader& r, bool check) {
  Program p;
  auto specs = [&](std::vector<IOSpec>& v, const char* what) {
    const uint64_t n = r.count(what, 25);
    for (uint64_t i = 0; i < n; ++i) v.push_back(read_spec(r));
  };
  specs(p.inputs, "program.inputs");
  specs(p.outputs, "program.outputs");
  specs(p.constants, "program.constants");
  const uint64_t nc = r.count("program.constant_data", 8);
  for (uint64_t i = 0; i < nc; ++i) p.constant_data.push_back(r.bytes("constant"));
  p.mutated_inputs = r.i32s("program.mutated_inputs");
  const uint64_t na = r.count("program.output_aliases", 16);
  for (uint64_t i = 0; i < na; ++i) {
    OutputAlias a;
    a.output = r.i32("alias.output");
    a.input = r.i32("alias.input");
    a.offset = r.i64("alias.offset");
    a.of_output = r.u8("alias.of_output") != 0;
    p.output_aliases.push_back(a);
  }
  p.arena_bytes = r.i64("program.arena_bytes");
  const uint64_t ns = r.count("program.steps", 40);
  for (uint64_t i = 0; i < ns; ++i) {
    Step s;
    const uint8_t k = r.u8("step.kind");
    if (k >= kNumStepKinds) r.fail("step.kind", "unknown step kind");
    s.kind = static_cast<StepKind>(k);
    s.name = r.str("step.name");
    const uint64_t nt = r.count("step.tensors", 30);
    for (uint64_t t = 0; t < nt; ++t) s.tensors.push_back(read_desc(r));
    s.ints = r.i64s("step.ints");
    const uint64_t nf = r.count("step.floats", 8);
    for (uint64_t f = 0; f < nf; ++f) s.floats.push_back(r.f64("step.float"));
    s.text = r.str("step.text");
    s.payload = r.str("step.payload");
    if (r.u8("step.has_kernel")) s.kernel = std::make_shared<vm::Kernel>(vm::deserialize(r));
    s.kernel_buffers = r.i32s("step.kernel_buffers");
    s.scratch_offset = r.i64("step.scratch_offset");
    s.scratch_bytes = r.i64("step.scratch_bytes");
    p.steps.push_back(std::move(s));
  }
  if (check) validate(p);
  return p;
}

namespace {

// Byte extent [lo, hi) a strided view touches relative to its buffer start.
bool extent(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t offset,
            size_t esize, int64_t* lo, int64_t* hi) {
  int64_t mn = offset, mx = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) {
      *lo = *hi = 0;
      return false;
    }
    const int64_t s = strides[d] * (sizes[d] - 1);
    if (s < 0)
      mn += s;
    else
      mx += s;
  }
  *lo = mn * static_cast<int64_t>(esize);
  *hi = (mx + 1) * static_cast<int64_t>(esize);
  return true;
}

void check_desc(const Program& p, const Step& s, const TensorDesc& d) {
  auto bad = [&](const std::string& why) {
    throw NeffError(rt::str("program step '", s.name, "' (", step_kind_name(s.kind), "): ", why));
  };
  if (d.sizes.size() != d.strides.size() || d.sizes.size() > static_cast<size_t>(kernels::kMaxDims))
    bad("tensor rank mismatch");
  for (int64_t x : d.sizes)
    if (x < 0) bad("negative size");
  int64_t lo, hi;
  if (!extent(d.sizes, d.strides, d.offset, kernels::element_size(d.dtype), &lo, &hi)) return;
  int64_t cap = 0;
  switch (d.space) {
    case Space::Input:
    case Space::Output: {
      const auto& v = d.space == Space::Input ? p.inputs : p.outputs;
      if (d.index < 0 || static_cast<size_t>(d.index) >= v.size()) bad("buffer index out of range");
      const IOSpec& sp = v[static_cast<size_t>(d.index)];
      cap = sp.storage_elements() * static_cast<int64_t>(kernels::element_size(sp.dtype));
      break;
    }
    case Space::Constant:
      if (d.index < 0 || static_cast<size_t>(d.index) >= p.constant_data.size())
        bad("constant index out of range");
      cap = static_cast<int64_t>(p.constant_data[static_cast<size_t>(d.index)].size());
      break;
    case Space::Arena:
      lo += d.byte_offset;
      hi += d.byte_offset;
      cap = p.arena_bytes;
      break;
  }
  if (lo < 0 || hi > cap)
    bad(rt::str("a tensor reaches bytes [", lo, ", ", hi, ") of a ", cap, "-byte buffer"));
}

}  // namespace

void validate(const Program& p) {
  if (p.arena_bytes < 0) throw NeffError("program: negative arena size");
  if (p.constants.size() != p.constant_data.size())
    throw NeffError("program: constant table size mismatch");
  for (size_t i = 0; i < p.constants.size(); ++i) {
    const IOSpec& c = p.constants[i];
    const int64_t need =
        c.storage_elements() * static_cast<int64_t>(kernels::element_size(c.dtype));
    if (static_cast<int64_t>(p.constant_data[i].size()) < need)
      throw NeffError(rt::str("program: constant #", i, " is truncated"));
  }
  for (int m : p.mutated_inputs)
    if (m < 0 || static_cast<size_t>(m) >= p.inputs.size())
      throw NeffError("program: mutated input out of range");
  std::vector<bool> aliased(p.outputs.size(), false);
  for (const OutputAlias& a : p.output_aliases) {
    if (a.output < 0 || static_cast<size_t>(a.output) >= p.outputs.size() ||
        aliased[static_cast<size_t>(a.output)])
      throw NeffError("program: output alias out of range");
    aliased[static_cast<size_t>(a.output)] = true;
  }
  for (const OutputAlias& a : p.output_aliases) {
    const auto& bases = a.of_output ? p.outputs : p.inputs;
    const char* what = a.of_output ? "output" : "input";
    if (a.input < 0 || static_cast<size_t>(a.input) >= bases.size() ||
        (a.of_output && (a.input == a.output || aliased[static_cast<size_t>(a.input)])))
      throw NeffError(rt::str("program: output #", a.output, " aliases a bad ", what));
    if (!a.of_output && std::find(p.mutated_inputs.begin(), p.mutated_inputs.end(), a.input) !=
                            p.mutated_inputs.end())
      throw NeffError(rt::str("program: output #", a.output, " aliases input #", a.input,
                              ", which the program writes"));
    const IOSpec& in = bases[static_cast<size_t>(a.input)];
    const IOSpec& out = p.outputs[static_cast<size_t>(a.output)];
    int64_t lo, hi;
    if (out.dtype != in.dtype || out.strides.size() != out.shape.size())
      throw NeffError(rt::str("program: output #", a.output, " cannot alias ", what, " #", a.input));
    if (extent(out.shape, out.strides, a.offset, kernels::element_size(out.dtype), &lo, &hi) &&
        (lo < 0 || hi > in.storage_elements() * static_cast<int64_t>(kernels::element_size(in.dtype))))
      throw NeffError(rt::str("program: output #", a.output, " reaches outside ", what, " #", a.input));
  }
  for (const Step& s : p.steps) {
    for (const TensorDesc& d : s.tensors) {
      check_desc(p, s, d);
      if (d.space == Space::Output && aliased[static_cast<size_t>(d.index)])
        throw NeffError(rt::str("program step '", s.name, "' writes output #", d.index,
                                ", a view of an input"));
    }
    if (s.kind == StepKind::Reduce &&
        (s.tensors.size() != 2 || s.ints.size() != 1 || s.ints[0] < 0 || s.ints[0] > 4 ||
         s.tensors[0].sizes.size() != s.tensors[1].sizes.size()))
      throw NeffError(rt::str("program step '", s.name, "': malformed reduction"));
    if (s.kind == StepKind::BatchNorm || s.kind == StepKind::BatchNormBackward) {
      const bool bwd = s.kind == StepKind::BatchNormBackward;
      bool ok = s.ints.size() == (bwd ? 4u : 3u) && s.floats.size() == (bwd ? 1u : 2u);
      if (ok) {
        const size_t w = s.ints[0] != 0, b = bwd ? 0 : s.ints[1] != 0,
                     r = bwd ? 0 : 2 * (s.ints[2] != 0);
        ok = s.tensors.size() == (bwd ? 4 + w + 3 : 1 + w + b + r + 3 + r);
      }
      if (!ok) throw NeffError(rt::str("program step '", s.name, "': malformed batch norm"));
    }
    if (s.kind == StepKind::Custom) {
      if (s.ints.empty() || s.ints[0] < 0 || s.ints[0] > static_cast<int64_t>(s.tensors.size()))
        throw NeffError(rt::str("program step '", s.name, "': bad input count"));
      if (s.text == nki_call::kTarget) {
        try {
          nki_call::check(s.payload, static_cast<int32_t>(s.ints[0]),
                          static_cast<int32_t>(s.tensors.size() - static_cast<size_t>(s.ints[0])));
        } catch (const NeffError& e) {
          throw NeffError(rt::str("program step '", s.name, "': ", e.what()));
        }
      }
    }
    if (s.scratch_bytes < 0 || s.scratch_offset < 0 ||
        s.scratch_offset + s.scratch_bytes > p.arena_bytes)
      throw NeffError(rt::str("program step '", s.name, "': scratch outside the arena"));
    if (s.kernel) {
      vm::validate(*s.kernel);
      if (s.kernel_buffers.size() != s.kernel->operands.size())
        throw NeffError(rt::str("program step '", s.name, "': kernel operand table mismatch"));
      for (size_t o = 0; o < s.kernel_buffers.size(); ++o) {
        const int b = s.kernel_buffers[o];
        if (b < 0 || static_cast<size_t>(b) >= s.tensors.size())
          throw NeffError(rt::str("program step '", s.name, "': bad kernel buffer"));
        // The VM addresses the buffer through the operand's own strides: check that extent too.
        const TensorDesc& base = s.tensors[static_cast<size_t>(b)];
        const vm::Operand& op = s.kernel->operands[o];
        TensorDesc probe = base;
        probe.dtype = op.dtype;
        probe.sizes = s.kernel->shape;
        probe.strides = op.strides;
        probe.offset = base.offset + op.offset;
        if (op.masks.empty()) check_desc(p, s, probe);
      }
    }
  }
}

std::string describe(const Program& p) {
  std::ostringstream os;
  auto spec_str = [](const IOSpec& s) {
    std::string r = std::string(dtype_short(s.dtype)) + "[";
    for (size_t i = 0; i < s.shape.size(); ++i) r += (i ? "," : "") + std::to_string(s.shape[i]);
    r += "]";
    if (!s.name.empty()) r += " \"" + s.name + "\"";
    return r;
  };
  os << "inputs:\n";
  for (size_t i = 0; i < p.inputs.size(); ++i)
    os << "  in" << i << ": " << spec_str(p.inputs[i]) << "\n";
  os << "outputs:\n";
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    os << "  out" << i << ": " << spec_str(p.outputs[i]);
    for (const OutputAlias& a : p.output_aliases)
      if (a.output == static_cast<int32_t>(i)) {
        os << " = view of " << (a.of_output ? "out" : "in") << a.input << " (strides";
        for (int64_t st : p.outputs[i].strides) os << " " << st;
        os << ", offset " << a.offset << ")";
      }
    os << "\n";
  }
  os << "constants: " << p.constants.size() << "\n";
  for (size_t i = 0; i < p.constants.size(); ++i)
    os << "  c" << i << ": " << spec_str(p.constants[i]) << "\n";
  if (!p.mutated_inputs.empty()) {
    os << "mutated inputs:";
    for (int m : p.mutated_inputs) os << " in" << m;
    os << "\n";
  }
  os << "arena: " << p.arena_bytes << " bytes\n";
  os << "steps: " << p.steps.size() << "\n";
  auto desc_str = [](const TensorDesc& d) {
    const char* sp = d.space == Space::Input      ? "in"
                     : d.space == Space::Output   ? "out"
                     : d.space == Space::Constant ? "c"
                                                  : "arena";
    std::string r = std::string(sp);
    if (d.space == Space::Arena) {
      r += "@" + std::to_string(d.byte_offset);
    } else {
      r += std::to_string(d.index);
    }
    r += ":" + std::string(dtype_short(d.dtype)) + "[";
    for (size_t i = 0; i < d.sizes.size(); ++i) r += (i ? "," : "") + std::to_string(d.sizes[i]);
    r += "]";
    return r;
  };
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    os << "  #" << i << " " << step_kind_name(s.kind) << " " << s.name << ":";
    for (const TensorDesc& d : s.tensors) os << " " << desc_str(d);
    os << "\n";
    if (s.kernel) os << vm::disassemble(*s.kernel, 6);
    if (s.kind == StepKind::Custom && s.text == nki_call::kTarget)
      os << nki_call::describe(s.payload);
  }
  return os.str();
}

kernels::TensorRef resolve(const TensorDesc& d, const Buffers& b) {
  kernels::TensorRef r;
  char* base = nullptr;
  switch (d.space) {
    case Space::Input:
      base = static_cast<char*>(b.inputs[static_cast<size_t>(d.index)]);
      break;
    case Space::Output:
      base = static_cast<char*>(b.outputs[static_cast<size_t>(d.index)]);
      break;
    case Space::Constant:
      base = const_cast<char*>(static_cast<const char*>(b.constants[static_cast<size_t>(d.index)]));
      break;
    case Space::Arena:
      base = static_cast<char*>(b.arena) + d.byte_offset;
      break;
  }
  r.data = base ? base + d.offset * static_cast<int64_t>(kernels::element_size(d.dtype)) : nullptr;
  r.dtype = d.dtype;
  r.ndim = static_cast<int>(d.sizes.size());
  for (int i = 0; i < r.ndim; ++i) {
    r.sizes[i] = d.sizes[static_cast<size_t>(i)];
    r.strides[i] = d.strides[static_cast<size_t>(i)];
  }
  return r;
}

}  // namespace neuron::cc
