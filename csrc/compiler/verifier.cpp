#include "verifier.h"

#include <vector>

namespace neuron::cc {

namespace {

class Verifier {
 public:
  Verifier(const Graph& g, std::string stage) : g_(g), stage_(std::move(stage)) {}

  void run(bool is_body) {
    const size_t nv = g_.values.size();
    defined_.assign(nv, false);
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      const int v = g_.inputs[i];
      if (v < 0 || static_cast<size_t>(v) >= nv)
        fail_graph(rt::str("input #", i, " refers to value %", v, " which does not exist"));
      if (defined_[static_cast<size_t>(v)]) fail_graph(rt::str("value %", v, " is an input twice"));
      defined_[static_cast<size_t>(v)] = true;
      const Value& val = g_.values[static_cast<size_t>(v)];
      if (!val.strides.empty() && val.strides.size() != val.type.shape.size())
        fail_graph(rt::str("input %", v, " has ", val.strides.size(), " strides for a rank-",
                           val.type.rank(), " tensor"));
      for (int64_t s : val.type.shape)
        if (s < 0) fail_graph(rt::str("input %", v, " has a negative size"));
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) check_node(i, is_body);
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const int v = g_.outputs[i];
      if (v < 0 || static_cast<size_t>(v) >= nv || !defined_[static_cast<size_t>(v)])
        fail_graph(rt::str("output #", i, " refers to %", v, " which is not defined"));
      const Value& val = g_.values[static_cast<size_t>(v)];
      if (!val.strides.empty() && val.strides.size() != val.type.shape.size())
        fail_graph(rt::str("output %", v, " has ", val.strides.size(), " strides for a rank-",
                           val.type.rank(), " tensor"));
    }
    for (const Mutation& m : g_.mutations) {
      if (m.input_index < 0 || static_cast<size_t>(m.input_index) >= g_.inputs.size())
        fail_graph(rt::str("mutation of input #", m.input_index, ": the graph has ",
                           g_.inputs.size(), " inputs"));
      if (m.value < 0 || static_cast<size_t>(m.value) >= nv ||
          !defined_[static_cast<size_t>(m.value)])
        fail_graph(rt::str("mutation of input #", m.input_index, " uses %", m.value,
                           " which is not defined"));
      const TensorType& want = g_.type(g_.inputs[static_cast<size_t>(m.input_index)]);
      if (g_.type(m.value) != want)
        fail_graph(rt::str("mutation of input #", m.input_index, " (", want.str(), ") with %",
                           m.value, " of type ", g_.type(m.value).str()));
    }
  }

 private:
  void check_node(size_t idx, bool is_body) {
    const Node& n = g_.nodes[idx];
    const size_t nv = g_.values.size();
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int v = n.inputs[i];
      if (v == -1 && (n.op == Op::index || n.op == Op::index_put) &&
          i >= (n.op == Op::index ? 1u : 2u))
        continue;
      if (v < 0 || static_cast<size_t>(v) >= nv)
        fail(idx, rt::str("operand %", v, " does not exist"));
      if (!defined_[static_cast<size_t>(v)])
        fail(idx, rt::str("operand %", v, " is used before it is defined"));
    }
    const OpInfo& info = op_info(n.op);
    if (info.outputs >= 0 && static_cast<int>(n.outputs.size()) != info.outputs)
      fail(idx, rt::str("has ", n.outputs.size(), " results, expected ", info.outputs));
    if (is_body) {
      const OpKind k = info.kind;
      if (k == OpKind::Heavy || k == OpKind::Fused || k == OpKind::Custom || k == OpKind::Composite)
        fail(idx,
             "is not allowed inside a fused body (only elementwise, reduction, view, cat and pad "
             "ops)");
    }
    std::vector<TensorType> expect;
    try {
      expect = infer_types(g_, n);
    } catch (const VerifyError& e) {
      fail(idx, e.what());
    }
    if (expect.size() != n.outputs.size())
      fail(idx, rt::str("has ", n.outputs.size(), " results, its inputs give ", expect.size()));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const int o = n.outputs[i];
      if (o < 0 || static_cast<size_t>(o) >= nv)
        fail(idx, rt::str("result %", o, " does not exist"));
      if (defined_[static_cast<size_t>(o)])
        fail(idx, rt::str("result %", o, " is already defined"));
      if (g_.type(o) != expect[i])
        fail(idx, rt::str("result %", o, " is declared ", g_.type(o).str(), " but the inputs give ",
                          expect[i].str()));
      defined_[static_cast<size_t>(o)] = true;
    }
    if (n.body) {
      try {
        Verifier(*n.body, "").run(true);
      } catch (const VerifyError& e) {
        fail(idx, rt::str("invalid body: ", e.what()));
      }
    }
  }

  [[noreturn]] void fail(size_t idx, const std::string& why) const {
    std::string text = print_node(g_, g_.nodes[idx]);
    const size_t nl = text.find('\n');
    if (nl != std::string::npos) text = text.substr(0, nl) + " ...";
    throw VerifyError(rt::str(prefix(), "node #", idx, " `", text, "`: ", why));
  }
  [[noreturn]] void fail_graph(const std::string& why) const { throw VerifyError(prefix() + why); }
  std::string prefix() const {
    return rt::str("IR verifier", stage_.empty() ? "" : " (" + stage_ + ")", ": graph @", g_.name,
                   ": ");
  }

  const Graph& g_;
  std::string stage_;
  std::vector<bool> defined_;
};

}  // namespace

void verify(const Graph& g, const std::string& stage) { Verifier(g, stage).run(false); }

}  // namespace neuron::cc
