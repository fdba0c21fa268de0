#include "codegen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "index_map.h"

namespace neuron::cc {

namespace {

using vm::Opc;

bool is_int_dtype(DType t) {
  return !kernels::is_floating(t) && !kernels::is_complex(t) && t != DType::Bool;
}

struct EmitFail {
  int split_dim = -1;
  int64_t factor = 0;
  std::string why;
};

[[noreturn]] void fail(const std::string& why) { throw EmitFail{-1, 0, why}; }

struct VReg {
  bool is_int = false;
  bool scalar = false;
  bool dep_red = false;  // depends on a reduction result of this kernel
};

struct VInstr {
  vm::Instr in;
  int dst = -1, a = -1, b = -1, c = -1;
  bool init = false;  // runs once per row before the chunks
  bool dep_red = false;
};

class Emitter {
 public:
  Emitter(const Graph& body, const Domain& dom, const std::vector<LeafLayout>& inputs,
          const std::vector<LeafLayout>& outputs)
      : g_(body), uses_(body), dom_(dom), inputs_(inputs), outputs_(outputs) {
    has_red_ = std::find(dom.inner.begin(), dom.inner.end(), true) != dom.inner.end();
    for (size_t i = 0; i < body.inputs.size(); ++i)
      input_index_[body.inputs[i]] = static_cast<int>(i);
  }

  void run() {
    for (size_t j = 0; j < g_.outputs.size(); ++j) {
      const int v = g_.outputs[j];
      auto cm = dom_.canonical(g_.type(v).shape);
      if (!cm)
        fail(rt::str("output %", v, " ", g_.type(v).str(), " does not match the kernel domain"));
      const int r = emit(v, *cm);
      const Address a = address_of(*cm, outputs_[j].strides, dom_.rank());
      vm::Operand op;
      op.dtype = g_.type(v).dtype;
      op.strides = a.strides;
      op.offset = a.offset;
      const int oi = add_operand(std::move(op), static_cast<int>(g_.inputs.size() + j));
      VInstr st;
      st.in.op = Opc::Store;
      st.in.aux = oi;
      st.a = r;
      st.dep_red = regs_[static_cast<size_t>(r)].dep_red;
      code_.push_back(st);
    }
  }

  FusedKernel finish() {
    FusedKernel fk;
    vm::Kernel& k = fk.kernel;
    fk.operand_buffer = operand_buffer_;
    k.operands = operands_;
    // Sections: full-row mode when a vector instruction uses a reduction result.
    bool full_row = false;
    for (const VInstr& vi : code_)
      if (vi.dep_red && !vi.init && vi.dst >= 0 && !regs_[static_cast<size_t>(vi.dst)].scalar)
        full_row = true;
    std::vector<const VInstr*> order;
    for (const VInstr& vi : code_)
      if (vi.init) order.push_back(&vi);
    const size_t n_pre = order.size();
    for (const VInstr& vi : code_)
      if (!vi.init && (full_row || !vi.dep_red)) order.push_back(&vi);
    const size_t n_body = order.size() - n_pre;
    for (const VInstr& vi : code_)
      if (!vi.init && !full_row && vi.dep_red) order.push_back(&vi);
    allocate(order, &k);
    for (size_t i = 0; i < order.size(); ++i) {
      vm::Instr in = phys_[i];
      if (i < n_pre) {
        k.pre.push_back(in);
      } else if (i < n_pre + n_body) {
        k.body.push_back(in);
      } else {
        k.post.push_back(in);
      }
    }
    k.full_row = full_row;
    layout_domain(&k);
    return fk;
  }

  int emit(int v, const IndexMap& m) {
    auto key = std::make_pair(v, m);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const int r = emit_uncached(v, m);
    memo_[key] = r;
    return r;
  }

 private:
  // ---- registers and instructions ----
  int new_reg(bool is_int, bool scalar, bool dep_red) {
    regs_.push_back(VReg{is_int, scalar, dep_red});
    return static_cast<int>(regs_.size()) - 1;
  }
  const VReg& R(int r) const { return regs_[static_cast<size_t>(r)]; }

  int op1(Opc op, bool is_int_dst, int a) {
    const int d = new_reg(is_int_dst, R(a).scalar, R(a).dep_red);
    VInstr vi;
    vi.in.op = op;
    vi.dst = d;
    vi.a = a;
    vi.dep_red = R(a).dep_red;
    code_.push_back(vi);
    return d;
  }
  int op2(Opc op, bool is_int_dst, int a, int b) {
    const int d = new_reg(is_int_dst, R(a).scalar && R(b).scalar, R(a).dep_red || R(b).dep_red);
    VInstr vi;
    vi.in.op = op;
    vi.dst = d;
    vi.a = a;
    vi.b = b;
    vi.dep_red = R(d).dep_red;
    code_.push_back(vi);
    return d;
  }
  int op3(Opc op, bool is_int_dst, int a, int b, int c) {
    const int d = new_reg(is_int_dst, R(a).scalar && R(b).scalar && R(c).scalar,
                          R(a).dep_red || R(b).dep_red || R(c).dep_red);
    VInstr vi;
    vi.in.op = op;
    vi.dst = d;
    vi.a = a;
    vi.b = b;
    vi.c = c;
    vi.dep_red = R(d).dep_red;
    code_.push_back(vi);
    return d;
  }
  int fconst(double v, bool init = false, bool dep_red = false) {
    const int d = new_reg(false, true, dep_red);
    VInstr vi;
    vi.in.op = Opc::Const;
    vi.in.imm = v;
    vi.dst = d;
    vi.init = init;
    code_.push_back(vi);
    return d;
  }
  int iconst(int64_t v, bool init = false) {
    const int d = new_reg(true, true, false);
    VInstr vi;
    vi.in.op = Opc::IConst;
    vi.in.lo = v;
    vi.dst = d;
    vi.init = init;
    code_.push_back(vi);
    return d;
  }
  int to_f(int r) { return R(r).is_int ? op1(Opc::I2F, false, r) : r; }
  int to_i(int r) { return R(r).is_int ? r : op1(Opc::F2I, true, r); }
  int round_to(int r, DType t) {
    switch (t) {
      case DType::BFloat16:
        return op1(Opc::RoundBF16, false, to_f(r));
      case DType::Float16:
        return op1(Opc::RoundF16, false, to_f(r));
      case DType::Float8_e4m3fn:
        return op1(Opc::RoundF8E4M3, false, to_f(r));
      case DType::Float8_e5m2:
        return op1(Opc::RoundF8E5M2, false, to_f(r));
      case DType::Bool:
        return op1(Opc::ToBool, false, to_f(r));
      default:
        return r;
    }
  }
  // Converts a computed register to the representation of dtype t.
  int finish_value(int r, DType t) {
    if (is_int_dtype(t)) return to_i(r);
    return round_to(to_f(r), t);
  }

  int add_operand(vm::Operand op, int buffer) {
    for (size_t i = 0; i < operands_.size(); ++i) {
      const vm::Operand& o = operands_[i];
      if (operand_buffer_[i] == buffer && o.dtype == op.dtype && o.strides == op.strides &&
          o.offset == op.offset && o.masks.size() == op.masks.size()) {
        bool same = true;
        for (size_t m = 0; m < o.masks.size(); ++m)
          if (o.masks[m].dim != op.masks[m].dim || o.masks[m].lo != op.masks[m].lo ||
              o.masks[m].hi != op.masks[m].hi)
            same = false;
        if (same) return static_cast<int>(i);
      }
    }
    operands_.push_back(std::move(op));
    operand_buffer_.push_back(buffer);
    return static_cast<int>(operands_.size()) - 1;
  }

  // Index value of an affine expression of the domain (int register).
  int emit_affine(const Affine& a) {
    int acc = -1;
    for (int k = 0; k < dom_.rank(); ++k) {
      const int64_t c = a.c[static_cast<size_t>(k)];
      if (c == 0 || dom_.size[static_cast<size_t>(k)] <= 1) continue;
      const bool scalar = !dom_.inner[static_cast<size_t>(k)] && has_red_;
      const int d = new_reg(true, scalar, false);
      VInstr vi;
      vi.in.op = Opc::Iota;
      vi.in.aux = k;
      vi.in.lo = 0;
      vi.in.hi = c;
      vi.dst = d;
      code_.push_back(vi);
      acc = acc < 0 ? d : op2(Opc::IAdd, true, acc, d);
    }
    if (acc < 0) return iconst(a.b);
    if (a.b != 0) acc = op2(Opc::IAdd, true, acc, iconst(a.b));
    return acc;
  }

  bool affine_is_const(const Affine& a) const {
    for (int k = 0; k < dom_.rank(); ++k)
      if (a.c[static_cast<size_t>(k)] != 0 && dom_.size[static_cast<size_t>(k)] > 1) return false;
    return true;
  }

  // ---- emission ----
  int emit_uncached(int v, const IndexMap& m) {
    auto in_it = input_index_.find(v);
    if (in_it != input_index_.end()) return emit_leaf(in_it->second, v, m);
    const int p = uses_.producer[static_cast<size_t>(v)];
    if (p < 0) fail(rt::str("value %", v, " has no producer in the body"));
    const Node& n = g_.nodes[static_cast<size_t>(p)];
    const DType out = g_.type(v).dtype;
    if (!fusable_dtype(out))
      fail(rt::str("dtype ", dtype_short(out), " is not supported in fused kernels"));
    switch (op_kind(n.op)) {
      case OpKind::Move:
        return emit_move(n, m);
      case OpKind::Const: {
        if (n.attrs.has("blob")) fail("blob constants must be kernel inputs");
        if (is_int_dtype(out)) {
          const int64_t iv = n.attrs.has("ivalue") ? n.attrs.i("ivalue")
                                                   : static_cast<int64_t>(n.attrs.f("value"));
          return iconst(iv);
        }
        double fv = n.attrs.f("value");
        if (out == DType::Bool) fv = fv != 0.0 ? 1.0 : 0.0;
        // The constant takes its dtype's precision (a bf16 constant is a bf16 value).
        const int r = fconst(fv);
        return out == DType::Float32 || out == DType::Bool ? r : round_to(r, out);
      }
      case OpKind::Iota: {
        const int64_t dim =
            normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(g_.type(v).shape.size()), "iota");
        const int idx = emit_affine(m.rows[static_cast<size_t>(dim)]);
        const double start = n.attrs.f("start", 0.0), step = n.attrs.f("step", 1.0);
        if (is_int_dtype(out)) {
          int r = idx;
          if (step != 1.0) r = op2(Opc::IMul, true, r, iconst(static_cast<int64_t>(step)));
          if (start != 0.0) r = op2(Opc::IAdd, true, r, iconst(static_cast<int64_t>(start)));
          return r;
        }
        int r = to_f(idx);
        if (step != 1.0) r = op2(Opc::Mul, false, r, fconst(step));
        if (start != 0.0) r = op2(Opc::Add, false, r, fconst(start));
        return round_to(r, out);
      }
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Ternary:
      case OpKind::Cast:
        return emit_elementwise(n, m);
      case OpKind::Reduce:
        return emit_reduce(n, m);
      case OpKind::Struct:
        return n.op == Op::cat ? emit_cat(n, m) : emit_pad(n, m);
      default:
        fail(rt::str("'", op_name(n.op), "' cannot be part of a fused kernel"));
    }
  }

  int emit_leaf(int input, int v, const IndexMap& m) {
    const TensorType& t = g_.type(v);
    if (!fusable_dtype(t.dtype) && t.dtype != DType::Float64)
      fail(rt::str("cannot load ", dtype_short(t.dtype)));
    const LeafLayout& lay = inputs_[static_cast<size_t>(input)];
    if (m.raw && !lay.contiguous) fail("storage-level view of a non-contiguous buffer");
    const Address a = address_of(m, lay.strides, dom_.rank());
    vm::Operand op;
    op.dtype = t.dtype;
    op.strides = a.strides;
    op.offset = a.offset;
    for (const Constraint& c : m.cons) {
      int dim = -1;
      int64_t coef = 0;
      for (int k = 0; k < dom_.rank(); ++k) {
        const int64_t ck = c.e.c[static_cast<size_t>(k)];
        if (ck == 0 || dom_.size[static_cast<size_t>(k)] <= 1) continue;
        if (dim >= 0) fail("a masked load depends on more than one domain dim");
        dim = k;
        coef = ck;
      }
      if (dim < 0) {
        if (c.e.b < c.lo || c.e.b >= c.hi) return is_int_dtype(t.dtype) ? iconst(0) : fconst(0.0);
        continue;
      }
      if (coef < 0) fail("a masked load with a negative index step");
      auto ceil_div = [](int64_t x, int64_t y) { return x >= 0 ? (x + y - 1) / y : -((-x) / y); };
      vm::Mask mk;
      mk.dim = dim;
      mk.lo = std::max<int64_t>(0, ceil_div(c.lo - c.e.b, coef));
      mk.hi = std::min<int64_t>(dom_.size[static_cast<size_t>(dim)], ceil_div(c.hi - c.e.b, coef));
      mk.hi = std::max(mk.hi, mk.lo);
      bool merged = false;
      for (vm::Mask& e : op.masks)
        if (e.dim == dim) {
          e.lo = std::max(e.lo, mk.lo);
          e.hi = std::min(e.hi, mk.hi);
          e.hi = std::max(e.hi, e.lo);
          merged = true;
        }
      if (!merged) op.masks.push_back(mk);
    }
    bool scalar = has_red_;
    for (int k = 0; k < dom_.rank() && scalar; ++k)
      if (dom_.inner[static_cast<size_t>(k)] && dom_.size[static_cast<size_t>(k)] > 1 &&
          op.strides[static_cast<size_t>(k)] != 0)
        scalar = false;
    for (const vm::Mask& mk : op.masks)
      if (dom_.inner[static_cast<size_t>(mk.dim)]) scalar = false;
    const bool is_int = is_int_dtype(t.dtype);
    const int oi = add_operand(std::move(op), input);
    const int d = new_reg(is_int, scalar, false);
    VInstr vi;
    vi.in.op = Opc::Load;
    vi.in.aux = oi;
    vi.dst = d;
    code_.push_back(vi);
    return d;
  }

  int emit_move(const Node& n, const IndexMap& m) {
    // A reshape of a contiguous leaf (through reshapes only) keeps the storage order.
    if (n.op == Op::reshape && !m.raw) {
      int v = n.inputs[0];
      bool ok = true;
      while (ok) {
        if (input_index_.count(v)) break;
        const int p = uses_.producer[static_cast<size_t>(v)];
        if (p < 0 || g_.nodes[static_cast<size_t>(p)].op != Op::reshape)
          ok = false;
        else
          v = g_.nodes[static_cast<size_t>(p)].inputs[0];
      }
      if (ok && inputs_[static_cast<size_t>(input_index_.at(v))].contiguous) {
        const Shape& s = g_.type(n.outputs[0]).shape;
        const Shape cs = contiguous_strides(s);
        IndexMap r;
        r.raw = true;
        r.cons = m.cons;
        Affine a = dom_.zero();
        for (size_t d = 0; d < s.size(); ++d)
          for (int k = 0; k < dom_.rank(); ++k)
            a.c[static_cast<size_t>(k)] += cs[d] * m.rows[d].c[static_cast<size_t>(k)];
        for (size_t d = 0; d < s.size(); ++d) a.b += cs[d] * m.rows[d].b;
        r.rows.push_back(a);
        return emit(v, r);
      }
    }
    MapResult mr = map_through_move(g_, n, m, dom_);
    if (mr.needs_split()) throw EmitFail{mr.split_dim, mr.split_factor, ""};
    if (!mr.map) fail(mr.why);
    return emit(n.inputs[0], *mr.map);
  }

  std::vector<int> emit_operands(const Node& n, const IndexMap& m) {
    const Shape& rs = g_.type(n.outputs[0]).shape;
    std::vector<int> regs;
    for (int u : n.inputs) regs.push_back(emit(u, map_broadcast(m, rs, g_.type(u).shape, dom_)));
    return regs;
  }

  // pow with a constant exponent becomes cheaper exact ops (like ATen does).
  std::optional<double> const_value(int v) const {
    const int p = uses_.producer[static_cast<size_t>(v)];
    if (p < 0) return std::nullopt;
    const Node& n = g_.nodes[static_cast<size_t>(p)];
    if (n.op == Op::constant && n.attrs.has("value")) return n.attrs.f("value");
    if (op_kind(n.op) == OpKind::Move) return const_value(n.inputs[0]);
    return std::nullopt;
  }

  int emit_elementwise(const Node& n, const IndexMap& m) {
    const DType out = g_.type(n.outputs[0]).dtype;
    std::vector<int> in = emit_operands(n, m);
    std::vector<DType> idt;
    for (int u : n.inputs) idt.push_back(g_.type(u).dtype);
    bool any_float_in = false;
    for (DType t : idt)
      if (kernels::is_floating(t)) any_float_in = true;
    const bool int_out = is_int_dtype(out);

    if (n.op == Op::cast || n.op == Op::copy) return finish_value(in[0], out);

    if (op_kind(n.op) == OpKind::Unary) {
      if (int_out) {
        const int a = to_i(in[0]);
        switch (n.op) {
          case Op::neg:
            return op1(Opc::INeg, true, a);
          case Op::abs:
            return op1(Opc::IAbs, true, a);
          case Op::sign:
            return op1(Opc::ISign, true, a);
          case Op::bitwise_not:
            return op1(Opc::IBitNot, true, a);
          case Op::floor:
          case Op::ceil:
          case Op::round:
          case Op::trunc:
          case Op::relu:
            return n.op == Op::relu ? op2(Opc::IMax, true, a, iconst(0)) : a;
          default:
            fail(rt::str("'", op_name(n.op), "' on integers"));
        }
      }
      const int a = to_f(in[0]);
      Opc op;
      switch (n.op) {
        case Op::neg:
          op = Opc::Neg;
          break;
        case Op::abs:
          op = Opc::Abs;
          break;
        case Op::exp:
          op = Opc::Exp;
          break;
        case Op::exp2:
          op = Opc::Exp2;
          break;
        case Op::expm1:
          op = Opc::Expm1;
          break;
        case Op::log:
          op = Opc::Log;
          break;
        case Op::log2:
          op = Opc::Log2;
          break;
        case Op::log10:
          op = Opc::Log10;
          break;
        case Op::log1p:
          op = Opc::Log1p;
          break;
        case Op::sqrt:
          op = Opc::Sqrt;
          break;
        case Op::rsqrt:
          op = Opc::Rsqrt;
          break;
        case Op::reciprocal:
          op = Opc::Recip;
          break;
        case Op::sin:
          op = Opc::Sin;
          break;
        case Op::cos:
          op = Opc::Cos;
          break;
        case Op::tan:
          op = Opc::Tan;
          break;
        case Op::asin:
          op = Opc::Asin;
          break;
        case Op::acos:
          op = Opc::Acos;
          break;
        case Op::atan:
          op = Opc::Atan;
          break;
        case Op::sinh:
          op = Opc::Sinh;
          break;
        case Op::cosh:
          op = Opc::Cosh;
          break;
        case Op::tanh:
          op = Opc::Tanh;
          break;
        case Op::asinh:
          op = Opc::Asinh;
          break;
        case Op::acosh:
          op = Opc::Acosh;
          break;
        case Op::atanh:
          op = Opc::Atanh;
          break;
        case Op::sigmoid:
          op = Opc::Sigmoid;
          break;
        case Op::relu:
          op = Opc::Relu;
          break;
        case Op::gelu:
          op = Opc::Gelu;
          break;
        case Op::gelu_tanh:
          op = Opc::GeluTanh;
          break;
        case Op::silu:
          op = Opc::Silu;
          break;
        case Op::erf:
          op = Opc::Erf;
          break;
        case Op::erfc:
          op = Opc::Erfc;
          break;
        case Op::floor:
          op = Opc::Floor;
          break;
        case Op::ceil:
          op = Opc::Ceil;
          break;
        case Op::round:
          op = Opc::Round;
          break;
        case Op::trunc:
          op = Opc::Trunc;
          break;
        case Op::sign:
          op = Opc::Sign;
          break;
        case Op::logical_not:
          op = Opc::Not;
          break;
        case Op::bitwise_not:
          if (out != DType::Bool) fail("bitwise_not on floats");
          op = Opc::Not;
          break;
        case Op::isnan:
          op = Opc::IsNan;
          break;
        case Op::isinf:
          op = Opc::IsInf;
          break;
        default:
          fail(rt::str("no VM op for '", op_name(n.op), "'"));
      }
      return finish_value(op1(op, false, a), out);
    }

    if (n.op == Op::where) {
      const int c = to_f(in[0]);
      if (int_out) return op3(Opc::IWhere, true, c, to_i(in[1]), to_i(in[2]));
      return finish_value(op3(Opc::Where, false, c, to_f(in[1]), to_f(in[2])), out);
    }

    // Binary.
    const bool cmp = n.op == Op::eq || n.op == Op::ne || n.op == Op::lt || n.op == Op::le ||
                     n.op == Op::gt || n.op == Op::ge;
    if (cmp) {
      if (!any_float_in) {
        const Opc op = n.op == Op::eq   ? Opc::IEq
                       : n.op == Op::ne ? Opc::INe
                       : n.op == Op::lt ? Opc::ILt
                       : n.op == Op::le ? Opc::ILe
                       : n.op == Op::gt ? Opc::IGt
                                        : Opc::IGe;
        bool all_bool = true;
        for (DType t : idt)
          if (t != DType::Bool) all_bool = false;
        if (!all_bool) return finish_value(op2(op, false, to_i(in[0]), to_i(in[1])), out);
      }
      const Opc op = n.op == Op::eq   ? Opc::Eq
                     : n.op == Op::ne ? Opc::Ne
                     : n.op == Op::lt ? Opc::Lt
                     : n.op == Op::le ? Opc::Le
                     : n.op == Op::gt ? Opc::Gt
                                      : Opc::Ge;
      return finish_value(op2(op, false, to_f(in[0]), to_f(in[1])), out);
    }
    if (n.op == Op::logical_and || n.op == Op::logical_or || n.op == Op::logical_xor) {
      const Opc op = n.op == Op::logical_and  ? Opc::And
                     : n.op == Op::logical_or ? Opc::Or
                                              : Opc::Xor;
      return finish_value(op2(op, false, to_f(in[0]), to_f(in[1])), out);
    }
    if (int_out) {
      const int a = to_i(in[0]), b = to_i(in[1]);
      switch (n.op) {
        case Op::add:
          return op2(Opc::IAdd, true, a, b);
        case Op::sub:
          return op2(Opc::ISub, true, a, b);
        case Op::mul:
          return op2(Opc::IMul, true, a, b);
        case Op::floordiv:
          return op2(Opc::IFloorDiv, true, a, b);
        case Op::remainder:
          return op2(Opc::IRem, true, a, b);
        case Op::fmod:
          return op2(Opc::IFmod, true, a, b);
        case Op::maximum:
          return op2(Opc::IMax, true, a, b);
        case Op::minimum:
          return op2(Opc::IMin, true, a, b);
        case Op::bitwise_and:
          return op2(Opc::IBitAnd, true, a, b);
        case Op::bitwise_or:
          return op2(Opc::IBitOr, true, a, b);
        case Op::bitwise_xor:
          return op2(Opc::IBitXor, true, a, b);
        default:
          fail(rt::str("'", op_name(n.op), "' on integers"));
      }
    }
    if (out == DType::Bool &&
        (n.op == Op::bitwise_and || n.op == Op::bitwise_or || n.op == Op::bitwise_xor)) {
      const Opc op = n.op == Op::bitwise_and  ? Opc::And
                     : n.op == Op::bitwise_or ? Opc::Or
                                              : Opc::Xor;
      return op2(op, false, to_f(in[0]), to_f(in[1]));
    }
    const int a = to_f(in[0]);
    if (n.op == Op::pow) {
      if (auto e = const_value(n.inputs[1])) {
        if (*e == 2.0) return finish_value(op2(Opc::Mul, false, a, a), out);
        if (*e == 1.0) return finish_value(a, out);
        if (*e == 0.5) return finish_value(op1(Opc::Sqrt, false, a), out);
        if (*e == -0.5) return finish_value(op1(Opc::Rsqrt, false, a), out);
        if (*e == -1.0) return finish_value(op1(Opc::Recip, false, a), out);
        if (*e == 3.0)
          return finish_value(op2(Opc::Mul, false, op2(Opc::Mul, false, a, a), a), out);
        if (*e == 0.0)
          return finish_value(
              op2(Opc::Max, false, op2(Opc::Mul, false, a, fconst(0.0)), fconst(1.0)), out);
      }
    }
    const int b = to_f(in[1]);
    Opc op;
    switch (n.op) {
      case Op::add:
        op = Opc::Add;
        break;
      case Op::sub:
        op = Opc::Sub;
        break;
      case Op::mul:
        op = Opc::Mul;
        break;
      case Op::div:
        op = Opc::Div;
        break;
      case Op::floordiv:
        op = Opc::FloorDiv;
        break;
      case Op::remainder:
        op = Opc::Rem;
        break;
      case Op::fmod:
        op = Opc::Fmod;
        break;
      case Op::pow:
        op = Opc::Pow;
        break;
      case Op::maximum:
        op = Opc::Max;
        break;
      case Op::minimum:
        op = Opc::Min;
        break;
      case Op::atan2:
        op = Opc::Atan2;
        break;
      case Op::gelu_backward:
        op = Opc::GeluBackward;
        break;
      case Op::gelu_tanh_backward:
        op = Opc::GeluTanhBackward;
        break;
      case Op::silu_backward:
        op = Opc::SiluBackward;
        break;
      default:
        fail(rt::str("no VM op for '", op_name(n.op), "' on ", dtype_short(out)));
    }
    return finish_value(op2(op, false, a, b), out);
  }

  int emit_reduce(const Node& n, const IndexMap& m) {
    const TensorType& it = g_.type(n.inputs[0]);
    const TensorType& ot = g_.type(n.outputs[0]);
    if (it.shape != dom_.F) fail("reduction input does not span the kernel domain");
    // The reduced dims must be exactly the domain's inner dims.
    std::vector<bool> red(it.shape.size(), false);
    const auto& dims = n.attrs.ints("dims");
    if (dims.empty()) std::fill(red.begin(), red.end(), true);
    for (int64_t d : dims) red[static_cast<size_t>(normalize_dim(d, it.rank(), "reduce"))] = true;
    for (int k = 0; k < dom_.rank(); ++k)
      if (dom_.inner[static_cast<size_t>(k)] !=
          (it.shape.empty() ? false : red[static_cast<size_t>(dom_.owner[static_cast<size_t>(k)])]))
        fail("reductions over different dims in one kernel");
    auto cm = dom_.canonical(ot.shape);
    if (!cm || m.raw || !(cm->rows == m.rows)) fail("a reduction result is used through a view");
    const int x = emit(n.inputs[0], *dom_.canonical(it.shape));
    int64_t L = 1;
    for (int k = 0; k < dom_.rank(); ++k)
      if (dom_.inner[static_cast<size_t>(k)]) L *= dom_.size[static_cast<size_t>(k)];
    const DType out = ot.dtype;
    auto reduce_into = [&](Opc op, int acc, int src) {
      VInstr vi;
      vi.in.op = op;
      vi.dst = acc;
      vi.a = src;
      vi.dep_red = R(src).dep_red;
      code_.push_back(vi);
    };
    auto mark = [&](int r) {
      regs_[static_cast<size_t>(r)].dep_red = true;
      return r;
    };
    switch (n.op) {
      case Op::sum:
      case Op::mean:
      case Op::prod: {
        const bool prod = n.op == Op::prod;
        if (is_int_dtype(out)) {
          const int acc = iconst(prod ? 1 : 0, true);
          reduce_into(prod ? Opc::IRProd : Opc::IRSum, acc, to_i(x));
          return mark(acc);
        }
        const int acc = fconst(prod ? 1.0 : 0.0, true);
        reduce_into(prod ? Opc::RProd : Opc::RSum, acc, to_f(x));
        mark(acc);
        int r = acc;
        if (n.op == Op::mean)
          r = op2(Opc::Mul, false, acc, fconst(L ? 1.0 / static_cast<double>(L) : std::nan("")));
        return finish_value(r, out);
      }
      case Op::amax:
      case Op::amin: {
        const bool mx = n.op == Op::amax;
        if (is_int_dtype(out)) {
          const int acc = iconst(
              mx ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(), true);
          reduce_into(mx ? Opc::IRMax : Opc::IRMin, acc, to_i(x));
          return mark(acc);
        }
        const int acc = fconst(mx ? -INFINITY : INFINITY, true);
        reduce_into(mx ? Opc::RMax : Opc::RMin, acc, to_f(x));
        mark(acc);
        return finish_value(acc, out);
      }
      case Op::any:
      case Op::all: {
        const bool any = n.op == Op::any;
        const int acc = fconst(any ? 0.0 : 1.0, true);
        reduce_into(any ? Opc::RMax : Opc::RMin, acc, op1(Opc::ToBool, false, to_f(x)));
        mark(acc);
        return finish_value(acc, out);
      }
      case Op::argmax:
      case Op::argmin: {
        const bool mx = n.op == Op::argmax;
        const int best = fconst(mx ? -INFINITY : INFINITY, true);
        const int idx = iconst(0, true);
        VInstr vi;
        vi.in.op = mx ? Opc::RArgMax : Opc::RArgMin;
        vi.dst = idx;
        vi.a = to_f(x);
        vi.b = best;
        vi.dep_red = R(vi.a).dep_red;
        code_.push_back(vi);
        mark(best);
        return finish_value(mark(idx), out);
      }
      default:
        fail(rt::str("no VM reduction for '", op_name(n.op), "'"));
    }
  }

  int select_chain(const std::vector<int>& vals, const std::vector<int>& conds, DType out) {
    // vals[0] unless a later condition holds (conds[i] selects vals[i]).
    int r = vals[0];
    for (size_t i = 1; i < vals.size(); ++i) {
      if (is_int_dtype(out)) {
        r = op3(Opc::IWhere, true, conds[i], to_i(vals[i]), to_i(r));
      } else {
        r = op3(Opc::Where, false, conds[i], to_f(vals[i]), to_f(r));
      }
    }
    return r;
  }

  int emit_cat(const Node& n, const IndexMap& m) {
    const DType out = g_.type(n.outputs[0]).dtype;
    const Shape& os = g_.type(n.outputs[0]).shape;
    const size_t dim = static_cast<size_t>(
        normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(os.size()), "cat"));
    const Affine& row = m.rows[dim];
    std::vector<int> vals, conds;
    int64_t off = 0;
    if (affine_is_const(row)) {  // the whole map lands in one input
      for (int u : n.inputs) {
        const int64_t len = g_.type(u).shape[dim];
        if (row.b >= off && row.b < off + len) {
          IndexMap mi = m;
          mi.rows[dim].b -= off;
          return finish_value(emit(u, mi), out);
        }
        off += len;
      }
      fail("cat index out of range");
    }
    int idx = -1;
    for (int u : n.inputs) {
      const int64_t len = g_.type(u).shape[dim];
      if (len == 0) continue;
      IndexMap mi = m;
      mi.rows[dim].b -= off;
      mi.cons.push_back(Constraint{row, off, off + len});
      std::sort(mi.cons.begin(), mi.cons.end());
      vals.push_back(finish_value(emit(u, mi), out));
      if (vals.size() == 1) {
        conds.push_back(-1);
      } else {
        if (idx < 0) idx = emit_affine(row);
        conds.push_back(op2(Opc::IGe, false, idx, iconst(off)));
      }
      off += len;
    }
    if (vals.empty()) return is_int_dtype(out) ? iconst(0) : fconst(0.0);
    return select_chain(vals, conds, out);
  }

  int emit_pad(const Node& n, const IndexMap& m) {
    const DType out = g_.type(n.outputs[0]).dtype;
    const Shape& is = g_.type(n.inputs[0]).shape;
    const auto& pads = n.attrs.ints("pads");
    IndexMap mi = m;
    int cond = -1;
    for (size_t i = 0; i < pads.size() / 2; ++i) {
      const size_t d = is.size() - 1 - i;
      const int64_t before = pads[2 * i];
      mi.rows[d].b -= before;
      const Affine row = m.rows[d];
      const int64_t lo = before, hi = before + is[d];
      if (before <= 0 && pads[2 * i + 1] <= 0) continue;  // cropping only
      mi.cons.push_back(Constraint{row, lo, hi});
      if (affine_is_const(row)) {
        if (row.b < lo || row.b >= hi) return finish_value(fconst(n.attrs.f("value", 0.0)), out);
        continue;
      }
      const int idx = emit_affine(row);
      const int c = op2(Opc::And, false, op2(Opc::IGe, false, idx, iconst(lo)),
                        op2(Opc::ILt, false, idx, iconst(hi)));
      cond = cond < 0 ? c : op2(Opc::And, false, cond, c);
    }
    std::sort(mi.cons.begin(), mi.cons.end());
    const int x = finish_value(emit(n.inputs[0], mi), out);
    if (cond < 0) return x;
    const double pv = n.attrs.f("value", 0.0);
    if (is_int_dtype(out)) return op3(Opc::IWhere, true, cond, x, iconst(static_cast<int64_t>(pv)));
    return finish_value(op3(Opc::Where, false, cond, x, fconst(pv)), out);
  }

  // ---- register allocation (linear scan per register file) ----
  void allocate(const std::vector<const VInstr*>& order, vm::Kernel* k) {
    const size_t nr = regs_.size();
    std::vector<int> last(nr, -1), first(nr, -1);
    auto touch = [&](int r, int i) {
      if (r < 0) return;
      if (first[static_cast<size_t>(r)] < 0) first[static_cast<size_t>(r)] = i;
      last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], i);
    };
    for (size_t i = 0; i < order.size(); ++i) {
      const VInstr* vi = order[i];
      touch(vi->dst, static_cast<int>(i));
      touch(vi->a, static_cast<int>(i));
      touch(vi->b, static_cast<int>(i));
      touch(vi->c, static_cast<int>(i));
    }
    // Reduction accumulators are read and written across chunks: keep them for the whole row.
    for (const VInstr* vi : order)
      if (vi->init) last[static_cast<size_t>(vi->dst)] = static_cast<int>(order.size());
    std::vector<int> phys(nr, -1);
    std::vector<std::vector<int>> free_list(4);
    int count[4] = {0, 0, 0, 0};
    auto file = [&](int r) { return (R(r).is_int ? 2 : 0) + (R(r).scalar ? 1 : 0); };
    std::vector<std::vector<int>> expiring(order.size() + 1);
    for (size_t r = 0; r < nr; ++r)
      if (last[r] >= 0 && last[r] < static_cast<int>(order.size()))
        expiring[static_cast<size_t>(last[r])].push_back(static_cast<int>(r));
    phys_.assign(order.size(), vm::Instr{});
    for (size_t i = 0; i < order.size(); ++i) {
      const VInstr* vi = order[i];
      // Operands whose last use is this instruction free their registers first, so the
      // destination may reuse one (elementwise loops allow in-place).
      const bool inplace_ok = vi->in.op != Opc::RArgMax && vi->in.op != Opc::RArgMin;
      auto release = [&]() {
        for (int r : expiring[i])
          if (phys[static_cast<size_t>(r)] >= 0 && r != vi->dst)
            free_list[static_cast<size_t>(file(r))].push_back(phys[static_cast<size_t>(r)]);
      };
      if (inplace_ok) release();
      if (vi->dst >= 0 && phys[static_cast<size_t>(vi->dst)] < 0) {
        auto& fl = free_list[static_cast<size_t>(file(vi->dst))];
        if (!fl.empty()) {
          phys[static_cast<size_t>(vi->dst)] = fl.back();
          fl.pop_back();
        } else {
          phys[static_cast<size_t>(vi->dst)] = count[file(vi->dst)]++;
        }
      }
      if (!inplace_ok) release();
      vm::Instr in = vi->in;
      auto enc = [&](int r) -> uint16_t {
        if (r < 0) return 0;
        return vm::make_reg(R(r).is_int, R(r).scalar, phys[static_cast<size_t>(r)]);
      };
      in.dst = enc(vi->dst);
      in.a = enc(vi->a);
      in.b = enc(vi->b);
      in.c = enc(vi->c);
      phys_[i] = in;
    }
    k->nf_vec = count[0];
    k->nf_sc = count[1];
    k->ni_vec = count[2];
    k->ni_sc = count[3];
  }

  // ---- domain layout: inner dims last, merge dims, choose the row ----
  void layout_domain(vm::Kernel* k) {
    std::vector<int64_t> size = dom_.size;
    std::vector<bool> inner = dom_.inner;
    std::vector<int> perm;
    for (int d = 0; d < dom_.rank(); ++d)
      if (!inner[static_cast<size_t>(d)]) perm.push_back(d);
    for (int d = 0; d < dom_.rank(); ++d)
      if (inner[static_cast<size_t>(d)]) perm.push_back(d);
    std::vector<int> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inv[static_cast<size_t>(perm[i])] = static_cast<int>(i);
    auto apply_perm = [&](std::vector<int64_t>& v) {
      std::vector<int64_t> r(v.size());
      for (size_t i = 0; i < perm.size(); ++i) r[i] = v[static_cast<size_t>(perm[i])];
      v = r;
    };
    apply_perm(size);
    {
      std::vector<bool> ni(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) ni[i] = inner[static_cast<size_t>(perm[i])];
      inner = ni;
    }
    for (vm::Operand& op : k->operands) {
      apply_perm(op.strides);
      for (vm::Mask& mk : op.masks) mk.dim = inv[static_cast<size_t>(mk.dim)];
    }
    std::vector<bool> pinned(size.size(), false);  // dims named by iota or masks
    auto remap_iota = [&](std::vector<vm::Instr>& code) {
      for (vm::Instr& in : code)
        if (in.op == Opc::Iota) {
          in.aux = inv[static_cast<size_t>(in.aux)];
          pinned[static_cast<size_t>(in.aux)] = true;
        }
    };
    remap_iota(k->pre);
    remap_iota(k->body);
    remap_iota(k->post);
    for (const vm::Operand& op : k->operands)
      for (const vm::Mask& mk : op.masks) pinned[static_cast<size_t>(mk.dim)] = true;
    // Merge dim d into d+1 where every operand walks them as one.
    std::vector<int> new_index(size.size());
    for (size_t i = 0; i < size.size(); ++i) new_index[i] = static_cast<int>(i);
    for (int d = static_cast<int>(size.size()) - 2; d >= 0; --d) {
      const size_t a = static_cast<size_t>(d), b = a + 1;
      if (inner[a] != inner[b] || pinned[a] || pinned[b]) continue;
      bool ok = true;
      for (const vm::Operand& op : k->operands)
        if (op.strides[a] != op.strides[b] * size[b]) ok = false;
      if (!ok && size[a] != 1 && size[b] != 1) continue;
      if (!ok) {  // a size-1 dim merges with anything: keep the other dim's stride
        if (size[b] == 1)
          for (vm::Operand& op : k->operands) op.strides[b] = op.strides[a];
      }
      size[b] *= size[a];
      size.erase(size.begin() + d);
      inner.erase(inner.begin() + d);
      pinned.erase(pinned.begin() + d);
      for (vm::Operand& op : k->operands) {
        op.strides.erase(op.strides.begin() + d);
        for (vm::Mask& mk : op.masks)
          if (mk.dim > d) --mk.dim;
      }
      auto shift = [&](std::vector<vm::Instr>& code) {
        for (vm::Instr& in : code)
          if (in.op == Opc::Iota && in.aux > d) --in.aux;
      };
      shift(k->pre);
      shift(k->body);
      shift(k->post);
    }
    int n_inner = 0;
    for (bool b : inner) n_inner += b ? 1 : 0;
    const bool reduction = n_inner > 0 || !k->pre.empty();
    if (size.empty() || (reduction && n_inner == 0)) {
      size.push_back(1);
      for (vm::Operand& op : k->operands) op.strides.push_back(0);
      n_inner = 1;
    }
    if (!reduction) {
      // Elementwise: the row is the trailing dims up to ~4K elements (at least one dim).
      n_inner = 1;
      int64_t prod = size.back();
      while (n_inner < static_cast<int>(size.size()) &&
             prod * size[size.size() - 1 - static_cast<size_t>(n_inner)] <= 4096) {
        prod *= size[size.size() - 1 - static_cast<size_t>(n_inner)];
        ++n_inner;
      }
    }
    k->shape = size;
    k->n_inner = n_inner;
    k->chunk = reduction ? 4096 : 2048;
  }

  const Graph& g_;
  UseInfo uses_;
  Domain dom_;
  const std::vector<LeafLayout>& inputs_;
  const std::vector<LeafLayout>& outputs_;
  bool has_red_ = false;
  std::map<int, int> input_index_;
  std::map<std::pair<int, IndexMap>, int> memo_;
  std::vector<VReg> regs_;
  std::vector<VInstr> code_;
  std::vector<vm::Instr> phys_;
  std::vector<vm::Operand> operands_;
  std::vector<int> operand_buffer_;
};

}  // namespace

bool fusable_dtype(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Complex64:
    case DType::Complex128:
    case DType::Undefined:
      return false;
    default:
      return true;
  }
}

CodegenResult codegen_fused(const Graph& body, const Shape& F, const std::vector<bool>& reduced,
                            const std::vector<LeafLayout>& inputs,
                            const std::vector<LeafLayout>& outputs) {
  CodegenResult res;
  if (inputs.size() != body.inputs.size() || outputs.size() != body.outputs.size()) {
    res.why = "layout count mismatch";
    return res;
  }
  Domain dom = Domain::of(F, reduced);
  for (int attempt = 0; attempt < 64; ++attempt) {
    Emitter e(body, dom, inputs, outputs);
    try {
      e.run();
      res.fused = e.finish();
      return res;
    } catch (const EmitFail& f) {
      if (f.split_dim >= 0) {
        dom.split(f.split_dim, f.factor);
        continue;
      }
      res.why = f.why;
      return res;
    }
  }
  res.why = "the kernel domain needs too many refinements";
  return res;
}

}  // namespace neuron::cc
