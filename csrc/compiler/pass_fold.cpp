// Constant folding: the subgraph computable from constants alone is compiled and run on the
// host once, and its results become constants.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "compiler.h"
#include "passes.h"

namespace neuron::cc {

PassStats fold_constants(Graph& g, int64_t max_elements) {
  PassStats st;
  UseInfo uses(g);
  const size_t nv = g.values.size();
  std::vector<bool> is_const(nv, false);
  std::vector<int> const_nodes;  // nodes computable from constants, in order
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const OpKind k = op_kind(n.op);
    if (k == OpKind::Custom || k == OpKind::Fused) continue;
    bool all = true;
    for (int v : n.inputs)
      if (v >= 0 && !is_const[static_cast<size_t>(v)]) all = false;
    if (!all) continue;
    for (int o : n.outputs) is_const[static_cast<size_t>(o)] = true;
    const_nodes.push_back(static_cast<int>(i));
  }
  // Fold values that feed non-constant consumers, when they are worth computing ahead:
  // results of real computation (not constants or views of constants) of bounded size.
  std::set<int> targets;
  auto consider = [&](int v) {
    if (v < 0 || !is_const[static_cast<size_t>(v)]) return;
    const int p = uses.producer[static_cast<size_t>(v)];
    if (p < 0) return;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.op == Op::constant || op_kind(n.op) == OpKind::Move) return;
    if (g.type(v).numel() > max_elements) return;
    targets.insert(v);
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    bool node_const = true;
    for (int o : n.outputs)
      if (!is_const[static_cast<size_t>(o)]) node_const = false;
    if (node_const && !n.outputs.empty()) continue;
    for (int v : n.inputs) {
      // Follow views back to the value that is computed.
      int x = v;
      while (x >= 0) {
        const int p = uses.producer[static_cast<size_t>(x)];
        if (p < 0 || op_kind(g.nodes[static_cast<size_t>(p)].op) != OpKind::Move) break;
        x = g.nodes[static_cast<size_t>(p)].inputs[0];
      }
      consider(x);
    }
  }
  for (int v : g.outputs) consider(v);
  for (const Mutation& m : g.mutations) consider(m.value);
  if (targets.empty()) return st;

  // The constant subgraph with the targets as outputs.
  Graph sub;
  sub.name = g.name + "_fold";
  std::vector<int> map(nv, -1);
  for (int i : const_nodes) {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    Node c;
    c.op = n.op;
    c.attrs = n.attrs;
    for (int v : n.inputs) c.inputs.push_back(v < 0 ? -1 : map[static_cast<size_t>(v)]);
    for (int o : n.outputs) {
      map[static_cast<size_t>(o)] = sub.add_value(g.type(o));
      c.outputs.push_back(map[static_cast<size_t>(o)]);
    }
    if (n.op == Op::constant && n.attrs.has("blob")) {
      sub.blobs.push_back(g.blobs[static_cast<size_t>(n.attrs.i("blob"))]);
      c.attrs.set("blob", static_cast<int64_t>(sub.blobs.size() - 1));
    }
    sub.nodes.push_back(std::move(c));
  }
  std::vector<int> tv(targets.begin(), targets.end());
  for (int v : tv) sub.outputs.push_back(map[static_cast<size_t>(v)]);
  dce(sub);
  CompileOptions opts;
  opts.fold_constants = false;
  opts.opt_level = 1;
  Compiled c = compile(std::move(sub), opts);
  const Program& prog = c.program;
  Buffers b;
  std::vector<std::vector<uint8_t>> outs(prog.outputs.size());
  for (size_t k = 0; k < prog.outputs.size(); ++k) {
    const IOSpec& s = prog.outputs[k];
    outs[k].assign(static_cast<size_t>(std::max<int64_t>(s.storage_elements(), 1)) *
                       kernels::element_size(s.dtype),
                   0);
    b.outputs.push_back(outs[k].data());
  }
  for (const auto& d : prog.constant_data) b.constants.push_back(d.data());
  std::vector<uint8_t> arena(static_cast<size_t>(std::max<int64_t>(prog.arena_bytes, 1)));
  b.arena = arena.data();
  execute(prog, b);

  // New constants, placed first; every use of a target now reads its constant.
  std::vector<Node> fresh;
  for (size_t k = 0; k < tv.size(); ++k) {
    const TensorType t = g.type(tv[k]);
    const IOSpec& s = prog.outputs[k];
    // Re-pack to contiguous order.
    std::vector<uint8_t> data(static_cast<size_t>(t.nbytes()));
    const size_t es = kernels::element_size(t.dtype);
    const Shape cs = contiguous_strides(t.shape);
    for (int64_t e = 0; e < t.numel(); ++e) {
      int64_t rem = e, off = 0;
      for (size_t d = t.shape.size(); d-- > 0;) {
        off += (rem % t.shape[d]) * s.strides[d];
        rem /= t.shape[d];
      }
      std::memcpy(data.data() + static_cast<size_t>(e) * es,
                  outs[k].data() + static_cast<size_t>(off) * es, es);
    }
    g.blobs.push_back(std::move(data));
    Node n;
    n.op = Op::constant;
    n.attrs.set("blob", static_cast<int64_t>(g.blobs.size() - 1));
    n.attrs.set("dtype", static_cast<int64_t>(t.dtype));
    n.attrs.set("shape", t.shape);
    n.outputs = {g.add_value(t)};
    replace_uses(g, tv[k], n.outputs[0]);
    fresh.push_back(std::move(n));
    ++st.changed;
  }
  fresh.insert(fresh.end(), std::make_move_iterator(g.nodes.begin()),
               std::make_move_iterator(g.nodes.end()));
  g.nodes = std::move(fresh);
  dce(g);
  return st;
}

}  // namespace neuron::cc
