#include "ir.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "hash.h"

namespace neuron::cc {

namespace {

const OpInfo kOps[] = {
#define OP(name, kind, min_in, max_in, outs) {#name, OpKind::kind, min_in, max_in, outs},
#include "ops.def"
#undef OP
};

constexpr int kNumOps = static_cast<int>(sizeof(kOps) / sizeof(kOps[0]));

struct DTypeName {
  DType t;
  const char* s;
};
const DTypeName kDTypeNames[] = {
    {DType::Bool, "b8"},
    {DType::UInt8, "u8"},
    {DType::Int8, "i8"},
    {DType::Int16, "i16"},
    {DType::Int32, "i32"},
    {DType::Int64, "i64"},
    {DType::UInt16, "u16"},
    {DType::UInt32, "u32"},
    {DType::UInt64, "u64"},
    {DType::Float16, "f16"},
    {DType::BFloat16, "bf16"},
    {DType::Float32, "f32"},
    {DType::Float64, "f64"},
    {DType::Complex64, "c64"},
    {DType::Complex128, "c128"},
    {DType::Float8_e4m3fn, "f8e4m3"},
    {DType::Float8_e5m2, "f8e5m2"},
};

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::string fmt_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s(buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

[[noreturn]] void bad(const Node& n, const std::string& why) {
  throw VerifyError(rt::str("'", op_name(n.op), "': ", why));
}

bool is_float(DType t) { return kernels::is_floating(t); }

// Result dtype of mixing `a` and `b` (torch promotion over the dtypes the IR computes with).
DType promote(DType a, DType b) {
  if (a == b) return a;
  if (is_float(a) || is_float(b)) {
    if (!is_float(a)) return b;
    if (!is_float(b)) return a;
    if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
    if (a == DType::Float32 || b == DType::Float32) return DType::Float32;
    return DType::Float32;  // bf16 with f16 (or fp8) -> f32
  }
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  return kernels::element_size(a) >= kernels::element_size(b) ? a : b;
}

}  // namespace

const OpInfo& op_info(Op op) { return kOps[static_cast<int>(op)]; }
int num_ops() { return kNumOps; }

std::optional<Op> op_from_name(std::string_view name) {
  for (int i = 0; i < kNumOps; ++i)
    if (name == kOps[i].name) return static_cast<Op>(i);
  return std::nullopt;
}

bool is_elementwise(Op op) {
  switch (op_kind(op)) {
    case OpKind::Const:
    case OpKind::Iota:
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Ternary:
    case OpKind::Cast:
      return true;
    default:
      return false;
  }
}

std::string_view dtype_short(DType t) {
  for (const auto& d : kDTypeNames)
    if (d.t == t) return d.s;
  return "undef";
}

std::optional<DType> dtype_from_short(std::string_view s) {
  for (const auto& d : kDTypeNames)
    if (s == d.s) return d.t;
  return std::nullopt;
}

std::string TensorType::str() const { return std::string(dtype_short(dtype)) + shape_str(shape); }

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    s[static_cast<size_t>(i)] = acc;
    acc *= std::max<int64_t>(shape[static_cast<size_t>(i)], 1);
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// Attrs

void Attrs::set(const std::string& key, AttrValue v) {
  auto it = std::lower_bound(items_.begin(), items_.end(), key,
                             [](const auto& kv, const std::string& k) { return kv.first < k; });
  if (it != items_.end() && it->first == key) {
    it->second = std::move(v);
  } else {
    items_.insert(it, {key, std::move(v)});
  }
}

const AttrValue* Attrs::find(std::string_view key) const {
  for (const auto& kv : items_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

bool Attrs::has(std::string_view key) const { return find(key) != nullptr; }

int64_t Attrs::i(std::string_view key) const {
  const AttrValue* v = find(key);
  if (!v) throw VerifyError(rt::str("missing integer attribute '", key, "'"));
  if (const auto* p = std::get_if<int64_t>(v)) return *p;
  if (const auto* d = std::get_if<double>(v)) return static_cast<int64_t>(*d);
  throw VerifyError(rt::str("attribute '", key, "' is not an integer"));
}
int64_t Attrs::i(std::string_view key, int64_t dflt) const { return has(key) ? i(key) : dflt; }

double Attrs::f(std::string_view key) const {
  const AttrValue* v = find(key);
  if (!v) throw VerifyError(rt::str("missing float attribute '", key, "'"));
  if (const auto* p = std::get_if<double>(v)) return *p;
  if (const auto* q = std::get_if<int64_t>(v)) return static_cast<double>(*q);
  throw VerifyError(rt::str("attribute '", key, "' is not a number"));
}
double Attrs::f(std::string_view key, double dflt) const { return has(key) ? f(key) : dflt; }

const std::vector<int64_t>& Attrs::ints(std::string_view key) const {
  const AttrValue* v = find(key);
  if (!v) throw VerifyError(rt::str("missing int-list attribute '", key, "'"));
  if (const auto* p = std::get_if<std::vector<int64_t>>(v)) return *p;
  throw VerifyError(rt::str("attribute '", key, "' is not an int list"));
}

const std::string& Attrs::s(std::string_view key) const {
  const AttrValue* v = find(key);
  if (!v) throw VerifyError(rt::str("missing string attribute '", key, "'"));
  if (const auto* p = std::get_if<std::string>(v)) return *p;
  throw VerifyError(rt::str("attribute '", key, "' is not a string"));
}

// ---------------------------------------------------------------------------------------
// Graph building

int Graph::add_value(TensorType t, std::string nm) {
  values.push_back(Value{std::move(t), {}, std::move(nm)});
  return static_cast<int>(values.size()) - 1;
}

int Graph::add_input(TensorType t, std::vector<int64_t> strides, std::string nm) {
  NEURON_CC_CHECK(strides.empty() || strides.size() == t.shape.size(), "input '", nm,
                  "': ", strides.size(), " strides for a rank-", t.shape.size(), " tensor");
  const int v = add_value(std::move(t), std::move(nm));
  values.back().strides = std::move(strides);
  inputs.push_back(v);
  return v;
}

std::vector<int> Graph::add_typed(Op op, std::vector<int> ins, Attrs attrs,
                                  std::vector<TensorType> outs) {
  Node n;
  n.op = op;
  n.inputs = std::move(ins);
  n.attrs = std::move(attrs);
  for (auto& t : outs) n.outputs.push_back(add_value(std::move(t)));
  nodes.push_back(std::move(n));
  return nodes.back().outputs;
}

std::vector<int> Graph::add(Op op, std::vector<int> ins, Attrs attrs) {
  Node probe;
  probe.op = op;
  probe.inputs = ins;
  probe.attrs = attrs;
  std::vector<TensorType> outs = infer_types(*this, probe);
  return add_typed(op, std::move(ins), std::move(attrs), std::move(outs));
}

int Graph::scalar(double v, DType dtype) {
  Attrs a;
  a.set("value", v);
  a.set("dtype", static_cast<int64_t>(dtype));
  a.set("shape", std::vector<int64_t>{});
  return add_typed(Op::constant, {}, std::move(a), {TensorType{dtype, {}}})[0];
}

int Graph::constant(TensorType t, std::vector<uint8_t> data) {
  NEURON_CC_CHECK(static_cast<int64_t>(data.size()) == t.nbytes(), "constant ", t.str(),
                  ": expected ", t.nbytes(), " bytes, got ", data.size());
  blobs.push_back(std::move(data));
  Attrs a;
  a.set("blob", static_cast<int64_t>(blobs.size() - 1));
  a.set("dtype", static_cast<int64_t>(t.dtype));
  a.set("shape", t.shape);
  return add_typed(Op::constant, {}, std::move(a), {std::move(t)})[0];
}

void Graph::set_outputs(std::vector<int> outs) { outputs = std::move(outs); }

std::vector<int64_t> Graph::strides_of(int v) const {
  const Value& val = values.at(static_cast<size_t>(v));
  if (!val.strides.empty() || val.type.shape.empty()) return val.strides;
  return contiguous_strides(val.type.shape);
}

// ---------------------------------------------------------------------------------------
// Type inference

std::optional<Shape> broadcast_shapes(const std::vector<const Shape*>& shapes) {
  size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (const Shape* s : shapes) {
    const size_t off = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      const int64_t d = (*s)[i];
      int64_t& o = out[off + i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return std::nullopt;
    }
  }
  return out;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const char* what) {
  const int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    throw VerifyError(
        rt::str(what, ": dim ", dim, " is out of range for a rank-", rank, " tensor"));
  return dim < 0 ? dim + r : dim;
}

namespace {

Shape conv_out_shape(const Node& n, const Shape& in, const Shape& w) {
  const auto& stride = n.attrs.ints("stride");
  const auto& pad = n.attrs.ints("padding");
  const auto& dil = n.attrs.ints("dilation");
  const int64_t groups = n.attrs.i("groups");
  const size_t sp = in.size() - 2;
  if (in.size() < 3 || w.size() != in.size())
    bad(n, "input and weight must be [N, C, *spatial] and [O, C/groups, *kernel]");
  if (stride.size() != sp || pad.size() != sp || dil.size() != sp)
    bad(n, "stride/padding/dilation must have one entry per spatial dim");
  if (groups < 1 || in[1] != w[1] * groups || w[0] % groups != 0)
    bad(n, rt::str("channels do not match: input ", shape_str(in), ", weight ", shape_str(w),
                   ", groups ", groups));
  Shape out = {in[0], w[0]};
  for (size_t i = 0; i < sp; ++i) {
    const int64_t eff = dil[i] * (w[2 + i] - 1) + 1;
    const int64_t o = (in[2 + i] + 2 * pad[i] - eff) / stride[i] + 1;
    if (o <= 0) bad(n, rt::str("output spatial size would be ", o, " for input ", shape_str(in)));
    out.push_back(o);
  }
  return out;
}

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t eff = d * (k - 1) + 1;
  int64_t num = in + 2 * p - eff;
  int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;  // last window must start inside the input
  return o;
}

Shape pool_out_shape(const Node& n, const Shape& in) {
  const auto& k = n.attrs.ints("kernel");
  const auto& s = n.attrs.ints("stride");
  const auto& p = n.attrs.ints("padding");
  const size_t sp = k.size();
  if (in.size() < sp + 1)
    bad(n, rt::str("input ", shape_str(in), " has fewer dims than the window"));
  std::vector<int64_t> d(sp, 1);
  if (n.attrs.has("dilation")) d = n.attrs.ints("dilation");
  const bool ceil_mode = n.attrs.i("ceil_mode", 0) != 0;
  Shape out(in.begin(), in.end() - static_cast<int64_t>(sp));
  for (size_t i = 0; i < sp; ++i) {
    if (p[i] * 2 > k[i]) bad(n, "padding must be at most half the kernel size");
    const int64_t o = pool_out(in[in.size() - sp + i], k[i], s[i], p[i], d[i], ceil_mode);
    if (o <= 0) bad(n, "output size would be empty");
    out.push_back(o);
  }
  return out;
}

DType elementwise_dtype(const Graph& g, const Node& n) {
  if (n.attrs.has("dtype")) return static_cast<DType>(n.attrs.i("dtype"));
  switch (n.op) {
    case Op::eq:
    case Op::ne:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
    case Op::logical_and:
    case Op::logical_or:
    case Op::logical_xor:
    case Op::logical_not:
    case Op::isnan:
    case Op::isinf:
      return DType::Bool;
    default:
      break;
  }
  size_t first = n.op == Op::where ? 1 : 0;
  DType t = g.type(n.inputs[first]).dtype;
  for (size_t i = first + 1; i < n.inputs.size(); ++i) t = promote(t, g.type(n.inputs[i]).dtype);
  return t;
}

}  // namespace

std::vector<TensorType> infer_types(const Graph& g, const Node& n) {
  const OpInfo& info = op_info(n.op);
  const int nin = static_cast<int>(n.inputs.size());
  if (nin < info.min_inputs || (info.max_inputs >= 0 && nin > info.max_inputs))
    bad(n, rt::str("expects ", info.min_inputs, info.max_inputs == info.min_inputs ? "" : "+",
                   " inputs, got ", nin));
  // index/index_put take optional index tensors ("none") after their fixed operands.
  const int first_optional = n.op == Op::index ? 1 : n.op == Op::index_put ? 2 : nin;
  for (int i = 0; i < nin; ++i) {
    const int v = n.inputs[static_cast<size_t>(i)];
    if (v == -1 && i >= first_optional) continue;
    if (v < 0 || v >= static_cast<int>(g.values.size()))
      bad(n, rt::str("operand %", v, " does not exist"));
  }
  auto in = [&](int i) -> const TensorType& { return g.type(n.inputs[static_cast<size_t>(i)]); };

  switch (info.kind) {
    case OpKind::Const:
    case OpKind::Iota: {
      const DType dt = static_cast<DType>(n.attrs.i("dtype"));
      const Shape& shape = n.attrs.ints("shape");
      for (int64_t s : shape)
        if (s < 0) bad(n, "negative size in shape");
      if (info.kind == OpKind::Iota)
        normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(shape.size()), "iota");
      if (n.op == Op::constant) {
        if (n.attrs.has("blob")) {
          const int64_t b = n.attrs.i("blob");
          if (b < 0 || b >= static_cast<int64_t>(g.blobs.size()))
            bad(n, rt::str("blob #", b, " does not exist"));
          const TensorType t{dt, shape};
          if (static_cast<int64_t>(g.blobs[static_cast<size_t>(b)].size()) != t.nbytes())
            bad(n, rt::str("blob #", b, " has ", g.blobs[static_cast<size_t>(b)].size(), " bytes, ",
                           t.str(), " needs ", t.nbytes()));
        } else if (!n.attrs.has("value")) {
          bad(n, "needs a 'value' or a 'blob'");
        }
      }
      return {TensorType{dt, shape}};
    }
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Ternary: {
      std::vector<const Shape*> shapes;
      for (int v : n.inputs) shapes.push_back(&g.type(v).shape);
      auto out = broadcast_shapes(shapes);
      if (!out) {
        std::string s;
        for (const Shape* sh : shapes) s += (s.empty() ? "" : ", ") + shape_str(*sh);
        bad(n, "operand shapes " + s + " do not broadcast");
      }
      return {TensorType{elementwise_dtype(g, n), *out}};
    }
    case OpKind::Cast:
      return {TensorType{static_cast<DType>(n.attrs.i("dtype")), in(0).shape}};
    case OpKind::Reduce: {
      const Shape& s = in(0).shape;
      std::vector<bool> red(s.size(), false);
      const auto& dims = n.attrs.ints("dims");
      if (dims.empty()) std::fill(red.begin(), red.end(), true);
      for (int64_t d : dims) {
        const int64_t nd = normalize_dim(d, static_cast<int64_t>(s.size()), op_name(n.op));
        if (s.empty()) continue;
        if (red[static_cast<size_t>(nd)]) bad(n, rt::str("dim ", d, " appears twice"));
        red[static_cast<size_t>(nd)] = true;
      }
      const bool keep = n.attrs.i("keepdim", 0) != 0;
      Shape out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (!red[i]) {
          out.push_back(s[i]);
        } else {
          if (s[i] == 0 &&
              (n.op == Op::amax || n.op == Op::amin || n.op == Op::argmax || n.op == Op::argmin))
            bad(n, rt::str("cannot reduce over an empty dim ", i, " of ", shape_str(s)));
          if (keep) out.push_back(1);
        }
      }
      DType dt = in(0).dtype;
      if (n.attrs.has("dtype")) {
        dt = static_cast<DType>(n.attrs.i("dtype"));
      } else if (n.op == Op::argmax || n.op == Op::argmin) {
        dt = DType::Int64;
      } else if (n.op == Op::any || n.op == Op::all) {
        dt = DType::Bool;
      } else if ((n.op == Op::sum || n.op == Op::prod) && !is_float(dt)) {
        dt = DType::Int64;
      }
      return {TensorType{dt, out}};
    }
    case OpKind::Move: {
      const Shape& s = in(0).shape;
      const DType dt = in(0).dtype;
      switch (n.op) {
        case Op::reshape: {
          const Shape& to = n.attrs.ints("shape");
          int64_t numel = 1;
          for (int64_t x : to) {
            if (x < 0) bad(n, "negative size in target shape");
            numel *= x;
          }
          if (numel != in(0).numel())
            bad(n, rt::str("cannot reshape ", shape_str(s), " (", in(0).numel(), " elements) to ",
                           shape_str(to)));
          return {TensorType{dt, to}};
        }
        case Op::permute: {
          const auto& p = n.attrs.ints("perm");
          if (p.size() != s.size())
            bad(n, rt::str("perm has ", p.size(), " entries for a rank-", s.size(), " tensor"));
          std::vector<bool> seen(s.size(), false);
          Shape out;
          for (int64_t d : p) {
            if (d < 0 || d >= static_cast<int64_t>(s.size()) || seen[static_cast<size_t>(d)])
              bad(n, "perm is not a permutation");
            seen[static_cast<size_t>(d)] = true;
            out.push_back(s[static_cast<size_t>(d)]);
          }
          return {TensorType{dt, out}};
        }
        case Op::expand: {
          const Shape& to = n.attrs.ints("shape");
          if (to.size() < s.size()) bad(n, "cannot expand to fewer dims");
          const size_t off = to.size() - s.size();
          for (size_t i = 0; i < s.size(); ++i)
            if (s[i] != to[off + i] && s[i] != 1)
              bad(n, rt::str("cannot expand ", shape_str(s), " to ", shape_str(to)));
          return {TensorType{dt, to}};
        }
        case Op::slice: {
          if (s.empty()) bad(n, "cannot slice a 0-dim tensor");
          const int64_t d =
              normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(s.size()), "slice");
          const int64_t start = n.attrs.i("start"), end = n.attrs.i("end"),
                        step = n.attrs.i("step", 1);
          if (step < 1 || start < 0 || end < start || end > s[static_cast<size_t>(d)])
            bad(n, rt::str("bad range [", start, ":", end, ":", step, "] for dim ", d, " of size ",
                           s[static_cast<size_t>(d)]));
          Shape out = s;
          out[static_cast<size_t>(d)] = (end - start + step - 1) / step;
          return {TensorType{dt, out}};
        }
        case Op::as_strided: {
          const Shape& to = n.attrs.ints("shape");
          const auto& st = n.attrs.ints("strides");
          if (st.size() != to.size()) bad(n, "strides and shape differ in rank");
          return {TensorType{dt, to}};
        }
        default:
          break;
      }
      break;
    }
    case OpKind::Struct: {
      if (n.op == Op::cat) {
        const Shape& s0 = in(0).shape;
        const int64_t d = normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(s0.size()), "cat");
        Shape out = s0;
        out[static_cast<size_t>(d)] = 0;
        DType dt = in(0).dtype;
        for (int i = 0; i < nin; ++i) {
          const Shape& si = in(i).shape;
          if (si.size() != s0.size()) bad(n, "inputs differ in rank");
          for (size_t k = 0; k < s0.size(); ++k)
            if (static_cast<int64_t>(k) != d && si[k] != s0[k])
              bad(n, rt::str("input ", i, " has shape ", shape_str(si), ", expected ",
                             shape_str(s0), " outside dim ", d));
          out[static_cast<size_t>(d)] += si[static_cast<size_t>(d)];
          dt = promote(dt, in(i).dtype);
        }
        if (n.attrs.has("dtype")) dt = static_cast<DType>(n.attrs.i("dtype"));
        return {TensorType{dt, out}};
      }
      // pad: pairs (before, after) from the last dim backwards, like constant_pad_nd
      const auto& pads = n.attrs.ints("pads");
      const Shape& s = in(0).shape;
      if (pads.size() % 2 || pads.size() / 2 > s.size())
        bad(n, "pads must be (before, after) pairs for at most every dim");
      Shape out = s;
      for (size_t i = 0; i < pads.size() / 2; ++i) {
        const size_t d = s.size() - 1 - i;
        out[d] += pads[2 * i] + pads[2 * i + 1];
        if (out[d] < 0) bad(n, "padding makes a dim negative");
      }
      return {TensorType{in(0).dtype, out}};
    }
    case OpKind::Composite: {
      const Shape& s = in(0).shape;
      normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(s.size()), op_name(n.op));
      if (nin == 2 && in(1).shape != s) bad(n, "grad and output shapes differ");
      const DType dt = n.attrs.has("dtype") ? static_cast<DType>(n.attrs.i("dtype")) : in(0).dtype;
      return {TensorType{dt, s}};
    }
    case OpKind::Heavy:
      switch (n.op) {
        case Op::matmul: {
          const Shape &a = in(0).shape, &b = in(1).shape;
          if (a.size() < 2 || a.size() != b.size())
            bad(n, rt::str("operands ", shape_str(a), " and ", shape_str(b),
                           " must have the same rank >= 2"));
          const size_t r = a.size();
          if (a[r - 1] != b[r - 2])
            bad(n, rt::str("inner dims differ: ", shape_str(a), " @ ", shape_str(b)));
          for (size_t i = 0; i + 2 < r; ++i)
            if (a[i] != b[i])
              bad(n, rt::str("batch dims differ: ", shape_str(a), " @ ", shape_str(b)));
          if (in(0).dtype != in(1).dtype) bad(n, "operand dtypes differ");
          Shape out(a.begin(), a.end() - 1);
          out.push_back(b[r - 1]);
          const DType dt =
              n.attrs.has("dtype") ? static_cast<DType>(n.attrs.i("dtype")) : in(0).dtype;
          return {TensorType{dt, out}};
        }
        case Op::attention: {
          const Shape &q = in(0).shape, &k = in(1).shape, &v = in(2).shape;
          if (q.size() != 4 || k.size() != 4 || v.size() != 4)
            bad(n, "q, k, v must be [B, H, S, D]");
          if (k[0] != q[0] || v[0] != q[0] || k[2] != v[2] || q[3] != k[3] || k[1] != v[1])
            bad(n, rt::str("q ", shape_str(q), ", k ", shape_str(k), ", v ", shape_str(v),
                           " do not match"));
          if (k[1] == 0 || q[1] % k[1] != 0)
            bad(n, rt::str("query heads ", q[1], " are not a multiple of kv heads ", k[1]));
          if (nin == 4) {
            const Shape full = {q[0], q[1], q[2], k[2]};
            auto b = broadcast_shapes({&in(3).shape, &full});
            if (!b || *b != full)
              bad(n, rt::str("mask ", shape_str(in(3).shape), " does not broadcast to ",
                             shape_str(full)));
          }
          const TensorType out{in(0).dtype, {q[0], q[1], q[2], v[3]}};
          if (n.attrs.i("lse", 0)) return {out, TensorType{DType::Float32, {q[0], q[1], q[2]}}};
          return {out};
        }
        case Op::attention_backward: {
          // dout, q, k, v, out, lse [, mask] -> dq, dk, dv
          const Shape &q = in(1).shape, &k = in(2).shape, &v = in(3).shape;
          if (q.size() != 4 || k.size() != 4 || v.size() != 4)
            bad(n, "q, k, v must be [B, H, S, D]");
          const Shape o = {q[0], q[1], q[2], v[3]};
          if (in(0).shape != o || in(4).shape != o)
            bad(n, rt::str("dout ", shape_str(in(0).shape), " and out ", shape_str(in(4).shape),
                           " must be ", shape_str(o)));
          if (in(5).shape != Shape{q[0], q[1], q[2]} || in(5).dtype != DType::Float32)
            bad(n, "lse must be f32 [B, Hq, Sq]");
          if (k[1] == 0 || q[1] % k[1] != 0 || k[2] != v[2] || q[3] != k[3])
            bad(n, "q, k, v do not match");
          return {in(1), in(2), in(3)};
        }
        case Op::index: {
          const Shape& s = in(0).shape;
          if (nin - 1 > static_cast<int>(s.size())) bad(n, "too many indices");
          std::vector<const Shape*> idx_shapes;
          int first = -1, last = -1;
          for (int i = 1; i < nin; ++i) {
            if (n.inputs[static_cast<size_t>(i)] < 0) continue;
            const TensorType& t = in(i);
            if (t.dtype != DType::Int64 && t.dtype != DType::Int32)
              bad(n, rt::str("index ", i - 1, " must be int32/int64, got ", dtype_short(t.dtype)));
            idx_shapes.push_back(&t.shape);
            if (first < 0) first = i - 1;
            last = i - 1;
          }
          if (idx_shapes.empty()) bad(n, "needs at least one index tensor");
          auto bs = broadcast_shapes(idx_shapes);
          if (!bs) bad(n, "index shapes do not broadcast");
          bool adjacent = true;
          for (int i = first; i <= last; ++i)
            if (n.inputs[static_cast<size_t>(i + 1)] < 0) adjacent = false;
          Shape out;
          if (adjacent) {
            for (int i = 0; i < first; ++i) out.push_back(s[static_cast<size_t>(i)]);
            out.insert(out.end(), bs->begin(), bs->end());
            for (size_t i = static_cast<size_t>(last) + 1; i < s.size(); ++i) out.push_back(s[i]);
          } else {
            out = *bs;
            for (size_t i = 0; i < s.size(); ++i) {
              const bool indexed = static_cast<int>(i) + 1 < nin && n.inputs[i + 1] >= 0;
              if (!indexed) out.push_back(s[i]);
            }
          }
          return {TensorType{in(0).dtype, out}};
        }
        case Op::index_put: {
          if (nin - 2 > in(0).rank()) bad(n, "too many indices");
          for (int i = 2; i < nin; ++i)
            if (n.inputs[static_cast<size_t>(i)] >= 0 && in(i).dtype != DType::Int64 &&
                in(i).dtype != DType::Int32)
              bad(n, "indices must be int32/int64");
          return {in(0)};
        }
        case Op::gather: {
          normalize_dim(n.attrs.i("dim"), in(0).rank(), "gather");
          if (in(1).rank() != in(0).rank() && in(0).rank() > 0)
            bad(n, "index must have the rank of the input");
          return {TensorType{in(0).dtype, in(1).shape}};
        }
        case Op::scatter: {
          normalize_dim(n.attrs.i("dim"), in(0).rank(), "scatter");
          if (in(1).rank() != in(0).rank() || in(2).rank() != in(0).rank())
            bad(n, "index and src must have the rank of the input");
          return {in(0)};
        }
        case Op::slice_scatter: {
          const Shape& s = in(0).shape;
          const int64_t d =
              normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(s.size()), "slice_scatter");
          const int64_t start = n.attrs.i("start"), end = n.attrs.i("end"),
                        step = n.attrs.i("step", 1);
          Shape expect = s;
          expect[static_cast<size_t>(d)] =
              step > 0 && end >= start ? (end - start + step - 1) / step : -1;
          if (in(1).shape != expect || start < 0 || end > s[static_cast<size_t>(d)])
            bad(n, rt::str("src ", shape_str(in(1).shape), " does not fill [", start, ":", end, ":",
                           step, "] of ", shape_str(s)));
          return {in(0)};
        }
        case Op::conv:
          if (nin == 3 && (in(2).rank() != 1 || in(2).shape[0] != in(1).shape[0]))
            bad(n, "bias must be [out_channels]");
          return {TensorType{in(0).dtype, conv_out_shape(n, in(0).shape, in(1).shape)}};
        case Op::conv_backward: {
          const Shape out = conv_out_shape(n, in(1).shape, in(2).shape);
          if (out != in(0).shape)
            bad(n, rt::str("grad_output ", shape_str(in(0).shape),
                           " does not match the forward output ", shape_str(out)));
          return {in(1), in(2), TensorType{in(2).dtype, {in(2).shape[0]}}};
        }
        case Op::max_pool: {
          const Shape out = pool_out_shape(n, in(0).shape);
          return {TensorType{in(0).dtype, out}, TensorType{DType::Int64, out}};
        }
        case Op::max_pool_backward:
          if (in(0).shape != pool_out_shape(n, in(1).shape) || in(2).shape != in(0).shape)
            bad(n, "grad/indices shapes do not match the pooling");
          return {in(1)};
        case Op::avg_pool:
          return {TensorType{in(0).dtype, pool_out_shape(n, in(0).shape)}};
        case Op::avg_pool_backward:
          if (in(0).shape != pool_out_shape(n, in(1).shape))
            bad(n, "grad shape does not match the pooling");
          return {in(1)};
        case Op::layer_norm:
        case Op::layer_norm_backward: {
          // Rows are the dims before `axis`, normalized elements the dims from it on; the
          // statistics keep the normalized dims as size 1 (ATen's layout).
          const bool bwd = n.op == Op::layer_norm_backward;
          const TensorType& x = in(bwd ? 1 : 0);
          const int64_t axis = n.attrs.i("axis");
          if (axis < 0 || axis > x.rank()) bad(n, "axis out of range");
          const Shape norm(x.shape.begin() + axis, x.shape.end());
          Shape stat(x.shape.begin(), x.shape.begin() + axis);
          stat.resize(x.shape.size(), 1);
          const int has_w = static_cast<int>(n.attrs.i("has_weight", 0));
          const int has_b = bwd ? 0 : static_cast<int>(n.attrs.i("has_bias", 0));
          if (nin != (bwd ? 4 : 1) + has_w + has_b) bad(n, "inputs do not match has_weight/has_bias");
          const int first_param = bwd ? 4 : 1;
          for (int i = first_param; i < nin; ++i)
            if (in(i).shape != norm || !is_float(in(i).dtype))
              bad(n, rt::str("weight/bias must be floating ", shape_str(norm)));
          if (!is_float(x.dtype)) bad(n, "input must be floating");
          if (!bwd) {
            const DType sd = static_cast<DType>(n.attrs.i("stat_dtype"));
            return {x, TensorType{sd, stat}, TensorType{sd, stat}};
          }
          if (in(0).shape != x.shape) bad(n, "grad_out must have the input's shape");
          if (in(2).shape != stat || in(3).shape != stat)
            bad(n, rt::str("mean/rstd must be ", shape_str(stat)));
          const TensorType p = has_w ? in(4) : TensorType{x.dtype, norm};
          return {x, p, p};
        }
        case Op::batch_norm:
        case Op::batch_norm_backward: {
          // Channels are dim 1; parameters and statistics are [C].
          const bool bwd = n.op == Op::batch_norm_backward;
          const TensorType& x = in(bwd ? 1 : 0);
          if (x.rank() < 2 || !is_float(x.dtype)) bad(n, "input must be floating, at least 2-D");
          const Shape c{x.shape[1]};
          const int has_w = static_cast<int>(n.attrs.i("has_weight", 0));
          const int has_b = bwd ? 0 : static_cast<int>(n.attrs.i("has_bias", 0));
          const int has_r = bwd ? 0 : static_cast<int>(n.attrs.i("has_running", 0));
          if (nin != (bwd ? 4 : 1) + has_w + has_b + 2 * has_r)
            bad(n, "inputs do not match has_weight/has_bias/has_running");
          for (int i = bwd ? 2 : 1; i < nin; ++i)
            if (in(i).shape != c || !is_float(in(i).dtype))
              bad(n, rt::str("parameters and statistics must be floating ", shape_str(c)));
          if (!bwd) {
            const DType sd = static_cast<DType>(n.attrs.i("stat_dtype"));
            std::vector<TensorType> r{x, TensorType{sd, c}, TensorType{sd, c}};
            if (has_r) {
              r.push_back(in(nin - 2));
              r.push_back(in(nin - 1));
            }
            return r;
          }
          if (in(0).shape != x.shape) bad(n, "grad_out must have the input's shape");
          const TensorType p = has_w ? in(4) : TensorType{in(2).dtype, c};
          return {x, p, p};
        }
        default:
          break;
      }
      break;
    case OpKind::Fused: {
      if (!n.body) bad(n, "has no body");
      // A GEMM epilogue takes (A, B, rest...) while its body takes (A @ B, rest...).
      const bool gemm = n.attrs.i("gemm", 0) != 0;
      std::vector<TensorType> passed;
      if (gemm) {
        if (nin < 2) bad(n, "a gemm epilogue needs the two matmul operands");
        Node mm;
        mm.op = Op::matmul;
        mm.inputs = {n.inputs[0], n.inputs[1]};
        mm.attrs.set("dtype", n.attrs.i("gemm_dtype"));
        passed.push_back(infer_types(g, mm)[0]);
        for (int i = 2; i < nin; ++i) passed.push_back(in(i));
      } else {
        for (int i = 0; i < nin; ++i) passed.push_back(in(i));
      }
      if (n.body->inputs.size() != passed.size())
        bad(n,
            rt::str("body takes ", n.body->inputs.size(), " inputs, node passes ", passed.size()));
      for (size_t i = 0; i < passed.size(); ++i)
        if (n.body->type(n.body->inputs[i]) != passed[i])
          bad(n, rt::str("body input ", i, " is ", n.body->type(n.body->inputs[i]).str(),
                         ", node passes ", passed[i].str()));
      std::vector<TensorType> outs;
      for (int o : n.body->outputs) outs.push_back(n.body->type(o));
      return outs;
    }
    case OpKind::Custom: {
      std::vector<TensorType> outs;
      for (int o : n.outputs) outs.push_back(g.type(o));
      if (outs.empty()) bad(n, "a custom op needs declared output types");
      (void)n.attrs.s("target");
      return outs;
    }
  }
  bad(n, "no type rule");
}

// ---------------------------------------------------------------------------------------
// Printing

namespace {

std::string attr_str(const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return fmt_double(*d);
  if (const auto* l = std::get_if<std::vector<int64_t>>(&v)) return shape_str(*l);
  const std::string& s = std::get<std::string>(v);
  // Binary or long strings (custom-op payloads such as NKI call plans) print as their size and
  // content hash: the text form stays readable and still tells different payloads apart.
  bool binary = s.size() > 200;
  for (char c : s) binary = binary || static_cast<unsigned char>(c) >= 127;
  if (binary) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "<%zu bytes, hash %016llx>", s.size(),
                  static_cast<unsigned long long>(hash64(s.data(), s.size())));
    return buf;
  }
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) < 32) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
      r += buf;
    } else {
      r += c;
    }
  }
  return r + "\"";
}

void print_graph(std::ostringstream& os, const Graph& g, int indent, const char* keyword);

}  // namespace

std::string print_node(const Graph& g, const Node& n, int indent) {
  std::ostringstream os;
  const std::string pad(static_cast<size_t>(indent), ' ');
  os << pad;
  for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", %" : "%") << n.outputs[i];
  if (!n.outputs.empty()) os << " = ";
  os << op_name(n.op) << "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (i) os << ", ";
    if (n.inputs[i] < 0) {
      os << "none";
    } else {
      os << "%" << n.inputs[i];
    }
  }
  os << ")";
  bool first = true;
  for (const auto& [k, v] : n.attrs.items()) {
    if (k == "dtype" || k == "shape") {
      if (n.op == Op::constant || n.op == Op::iota || n.op == Op::cast)
        continue;  // shown in the type
    }
    os << (first ? " {" : ", ") << k << "=" << attr_str(v);
    first = false;
  }
  if (!first) os << "}";
  os << " : ";
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (i) os << ", ";
    const int o = n.outputs[i];
    if (o >= 0 && o < static_cast<int>(g.values.size())) {
      os << g.type(o).str();
    } else {
      os << "<bad value %" << o << ">";
    }
  }
  if (n.body) {
    os << " {\n";
    print_graph(os, *n.body, indent + 4, "body");
    os << pad << "}";
  }
  return os.str();
}

namespace {

void print_graph(std::ostringstream& os, const Graph& g, int indent, const char* keyword) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  os << pad << keyword << " @" << g.name << "(";
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const int v = g.inputs[i];
    const Value& val = g.values.at(static_cast<size_t>(v));
    os << (i ? ", " : "") << "%" << v << ": " << val.type.str();
    if (!val.strides.empty() && val.strides != contiguous_strides(val.type.shape))
      os << " strides=" << shape_str(val.strides);
    if (!val.name.empty()) os << " \"" << val.name << "\"";
  }
  os << ") {\n";
  for (const Node& n : g.nodes) os << print_node(g, n, indent + 2) << "\n";
  for (const Mutation& m : g.mutations)
    os << pad << "  mutate input#" << m.input_index << " <- %" << m.value << "\n";
  os << pad << "  return";
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int v = g.outputs[i];
    os << (i ? ", %" : " %") << v;
    if (v >= 0 && v < static_cast<int>(g.values.size())) {
      const Value& val = g.values[static_cast<size_t>(v)];
      if (!val.strides.empty() && val.strides != contiguous_strides(val.type.shape))
        os << " strides=" << shape_str(val.strides);
    }
  }
  os << "\n" << pad << "}\n";
}

}  // namespace

std::string print(const Graph& g) {
  std::ostringstream os;
  print_graph(os, g, 0, "graph");
  return os.str();
}

// ---------------------------------------------------------------------------------------
// Serialization

void serialize(const Graph& g, ByteWriter& w) {
  w.str(g.name);
  w.u64(g.values.size());
  for (const Value& v : g.values) {
    w.u8(static_cast<uint8_t>(v.type.dtype));
    w.i64s(v.type.shape);
    w.i64s(v.strides);
    w.str(v.name);
  }
  w.u64(g.nodes.size());
  for (const Node& n : g.nodes) {
    w.u32(static_cast<uint32_t>(n.op));
    w.i32s(n.inputs);
    w.i32s(n.outputs);
    w.u64(n.attrs.items().size());
    for (const auto& [k, v] : n.attrs.items()) {
      w.str(k);
      w.u8(static_cast<uint8_t>(v.index()));
      if (const auto* i = std::get_if<int64_t>(&v)) w.i64(*i);
      if (const auto* d = std::get_if<double>(&v)) w.f64(*d);
      if (const auto* l = std::get_if<std::vector<int64_t>>(&v)) w.i64s(*l);
      if (const auto* s = std::get_if<std::string>(&v)) w.str(*s);
    }
    w.u8(n.body ? 1 : 0);
    if (n.body) serialize(*n.body, w);
  }
  w.i32s(g.inputs);
  w.i32s(g.outputs);
  w.u64(g.mutations.size());
  for (const Mutation& m : g.mutations) {
    w.i32(m.input_index);
    w.i32(m.value);
  }
  w.u64(g.blobs.size());
  for (const auto& b : g.blobs) w.bytes(b.data(), b.size());
}

Graph deserialize(ByteReader& r) {
  Graph g;
  g.name = r.str("graph.name");
  const uint64_t nv = r.count("graph.values", 17);
  for (uint64_t i = 0; i < nv; ++i) {
    Value v;
    const uint8_t dt = r.u8("value.dtype");
    if (dt >= static_cast<uint8_t>(DType::Undefined)) r.fail("value.dtype", "unknown dtype");
    v.type.dtype = static_cast<DType>(dt);
    v.type.shape = r.i64s("value.shape");
    v.strides = r.i64s("value.strides");
    v.name = r.str("value.name");
    g.values.push_back(std::move(v));
  }
  const uint64_t nn = r.count("graph.nodes", 21);
  for (uint64_t i = 0; i < nn; ++i) {
    Node n;
    const uint32_t op = r.u32("node.op");
    if (op >= static_cast<uint32_t>(num_ops())) r.fail("node.op", "unknown op");
    n.op = static_cast<Op>(op);
    n.inputs = r.i32s("node.inputs");
    n.outputs = r.i32s("node.outputs");
    const uint64_t na = r.count("node.attrs", 9);
    for (uint64_t a = 0; a < na; ++a) {
      std::string k = r.str("attr.key");
      switch (r.u8("attr.kind")) {
        case 0:
          n.attrs.set(k, r.i64("attr.int"));
          break;
        case 1:
          n.attrs.set(k, r.f64("attr.float"));
          break;
        case 2:
          n.attrs.set(k, r.i64s("attr.ints"));
          break;
        case 3:
          n.attrs.set(k, r.str("attr.str"));
          break;
        default:
          r.fail("attr.kind", "unknown attribute kind");
      }
    }
    if (r.u8("node.body")) n.body = std::make_shared<Graph>(deserialize(r));
    g.nodes.push_back(std::move(n));
  }
  g.inputs = r.i32s("graph.inputs");
  g.outputs = r.i32s("graph.outputs");
  const uint64_t nm = r.count("graph.mutations", 8);
  for (uint64_t i = 0; i < nm; ++i) {
    Mutation m;
    m.input_index = r.i32("mutation.input");
    m.value = r.i32("mutation.value");
    g.mutations.push_back(m);
  }
  const uint64_t nb = r.count("graph.blobs", 8);
  for (uint64_t i = 0; i < nb; ++i) g.blobs.push_back(r.bytes("blob"));
  return g;
}

// ---------------------------------------------------------------------------------------

UseInfo::UseInfo(const Graph& g)
    : producer(g.values.size(), -1), users(g.values.size()), output_uses(g.values.size(), 0) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (int o : n.outputs)
      if (o >= 0 && o < static_cast<int>(g.values.size()))
        producer[static_cast<size_t>(o)] = static_cast<int>(i);
    for (int v : n.inputs)
      if (v >= 0 && v < static_cast<int>(g.values.size()))
        users[static_cast<size_t>(v)].push_back(static_cast<int>(i));
  }
  for (int o : g.outputs)
    if (o >= 0 && o < static_cast<int>(g.values.size())) ++output_uses[static_cast<size_t>(o)];
  for (const Mutation& m : g.mutations)
    if (m.value >= 0 && m.value < static_cast<int>(g.values.size()))
      ++output_uses[static_cast<size_t>(m.value)];
}

}  // namespace neuron::cc
