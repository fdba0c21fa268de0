// Elementwise/reduction fusion, GEMM epilogue fusion and view legalization.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>

#include "codegen.h"
#include "index_map.h"
#include "passes.h"

namespace neuron::cc {

bool is_dense_reduction(const Graph& g, const UseInfo& uses, const Node& n) {
  if (n.op != Op::sum && n.op != Op::mean && n.op != Op::prod && n.op != Op::amax &&
      n.op != Op::amin)
    return false;
  const int x = n.inputs[0];
  const TensorType& t = g.type(x);
  auto is_float = [](DType d) {
    return d == DType::Float32 || d == DType::BFloat16 || d == DType::Float16;
  };
  if (!is_float(t.dtype) || !is_float(g.type(n.outputs[0]).dtype) || t.rank() < 2) return false;
  std::vector<bool> red(t.shape.size(), false);
  const auto& dims = n.attrs.ints("dims");
  if (dims.empty()) return false;  // a full reduction reduces the innermost dim too
  for (int64_t d : dims) red[static_cast<size_t>(normalize_dim(d, t.rank(), "reduce"))] = true;
  const size_t last = t.shape.size() - 1;
  if (red[last] || t.shape[last] <= 1) return false;
  bool reduces = false;
  for (size_t d = 0; d < last; ++d) reduces = reduces || (red[d] && t.shape[d] > 1);
  if (!reduces) return false;
  // The input as the kernel will see it: a plain strided view whose innermost dim is dense.
  int root = x;
  while (true) {
    const int p = uses.producer[static_cast<size_t>(root)];
    if (p < 0 || op_kind(g.nodes[static_cast<size_t>(p)].op) != OpKind::Move) break;
    root = g.nodes[static_cast<size_t>(p)].inputs[0];
  }
  std::vector<int64_t> strides = layout_of(g, root);
  if (root != x) {
    std::string why;
    auto rv = resolve_view(g, uses, x, strides, is_contiguous_layout(g.type(root).shape, strides),
                           &why);
    if (!rv || rv->dom.rank() != t.rank()) return false;
    strides = rv->addr.strides;
  }
  return strides.size() == t.shape.size() && strides[last] == 1;
}

namespace {

bool fusable_node(const Graph& g, const UseInfo& uses, const Node& n) {
  const OpKind k = op_kind(n.op);
  if (n.op == Op::constant) return false;
  if (k == OpKind::Reduce && is_dense_reduction(g, uses, n)) return false;
  if (!(is_elementwise(n.op) || k == OpKind::Reduce || k == OpKind::Struct)) return false;
  for (int o : n.outputs)
    if (!fusable_dtype(g.type(o).dtype)) return false;
  for (int v : n.inputs)
    if (v < 0 || (!fusable_dtype(g.type(v).dtype) && g.type(v).dtype != DType::Float64))
      return false;
  return true;
}

std::vector<bool> reduce_mask(const Graph& g, const Node& n) {
  const Shape& s = g.type(n.inputs[0]).shape;
  std::vector<bool> red(s.size(), false);
  const auto& dims = n.attrs.ints("dims");
  if (dims.empty()) std::fill(red.begin(), red.end(), true);
  for (int64_t d : dims)
    red[static_cast<size_t>(normalize_dim(d, static_cast<int64_t>(s.size()), "reduce"))] = true;
  return red;
}

bool is_reduced_shape(const Shape& F, const std::vector<bool>& red, const Shape& s) {
  Shape keep, squeeze;
  for (size_t d = 0; d < F.size(); ++d) {
    keep.push_back(red[d] ? 1 : F[d]);
    if (!red[d]) squeeze.push_back(F[d]);
  }
  return s == keep || s == squeeze;
}

// A fused body built from member nodes of the main graph.
struct Body {
  std::shared_ptr<Graph> graph;
  std::vector<int> ext_inputs;  // main-graph values feeding body inputs
  std::vector<int> outputs;     // main-graph values produced as body outputs
};

// Copies `members` (node indices, topological) into a body; `outputs` are the main-graph
// values the body must produce.
Body build_body(const Graph& g, const UseInfo& uses, const std::vector<int>& members,
                const std::vector<int>& outputs, const std::string& name) {
  Body b;
  b.graph = std::make_shared<Graph>();
  Graph& body = *b.graph;
  body.name = name;
  std::set<int> member_set(members.begin(), members.end());
  std::map<int, int> vmap;  // main value -> body value
  std::function<int(int)> get = [&](int v) -> int {
    auto it = vmap.find(v);
    if (it != vmap.end()) return it->second;
    const int p = uses.producer[static_cast<size_t>(v)];
    int bv;
    if (p >= 0 && !member_set.count(p)) {
      const Node& n = g.nodes[static_cast<size_t>(p)];
      if (op_kind(n.op) == OpKind::Move) {
        const int src = get(n.inputs[0]);
        Node c;
        c.op = n.op;
        c.inputs = {src};
        c.attrs = n.attrs;
        c.outputs = {body.add_value(g.type(v))};
        body.nodes.push_back(std::move(c));
        bv = body.nodes.back().outputs[0];
        vmap[v] = bv;
        return bv;
      }
      if (n.op == Op::constant && !n.attrs.has("blob")) {
        Node c;
        c.op = n.op;
        c.attrs = n.attrs;
        c.outputs = {body.add_value(g.type(v))};
        body.nodes.push_back(std::move(c));
        bv = body.nodes.back().outputs[0];
        vmap[v] = bv;
        return bv;
      }
    }
    if (p >= 0 && member_set.count(p)) throw CompileError("fusion: member used before it is built");
    // External root: a body input.
    bv = body.add_input(g.type(v), {}, g.values[static_cast<size_t>(v)].name);
    b.ext_inputs.push_back(v);
    vmap[v] = bv;
    return bv;
  };
  for (int mi : members) {
    const Node& n = g.nodes[static_cast<size_t>(mi)];
    Node c;
    c.op = n.op;
    c.attrs = n.attrs;
    for (int v : n.inputs) c.inputs.push_back(get(v));
    for (int o : n.outputs) {
      c.outputs.push_back(body.add_value(g.type(o)));
      vmap[o] = c.outputs.back();
    }
    body.nodes.push_back(std::move(c));
  }
  for (int o : outputs) {
    body.outputs.push_back(vmap.at(o));
    b.outputs.push_back(o);
  }
  return b;
}

std::vector<LeafLayout> layouts_for(const Graph& g, const std::vector<int>& values) {
  std::vector<LeafLayout> r;
  for (int v : values) {
    LeafLayout l;
    l.strides = layout_of(g, v);
    l.contiguous = is_contiguous_layout(g.type(v).shape, l.strides);
    r.push_back(std::move(l));
  }
  return r;
}

struct Group {
  Shape F;
  std::vector<bool> red;  // empty: elementwise only
  std::vector<int> members;
  int slot = 0;
  bool has_red() const { return std::find(red.begin(), red.end(), true) != red.end(); }
};

// Node indices reading `v` directly or through views.
std::vector<int> readers_of(const Graph& g, const UseInfo& uses, int v) {
  std::vector<int> r;
  std::vector<int> work = {v};
  while (!work.empty()) {
    const int x = work.back();
    work.pop_back();
    for (int u : uses.users[static_cast<size_t>(x)]) {
      const Node& n = g.nodes[static_cast<size_t>(u)];
      if (op_kind(n.op) == OpKind::Move) {
        if (uses.output_uses[static_cast<size_t>(n.outputs[0])]) r.push_back(-1);
        work.push_back(n.outputs[0]);
      } else {
        r.push_back(u);
      }
    }
  }
  return r;
}

// Value produced by a non-Move node reached by following Move nodes up from v.
int chain_root(const Graph& g, const UseInfo& uses, int v) {
  while (true) {
    const int p = uses.producer[static_cast<size_t>(v)];
    if (p < 0) return v;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (op_kind(n.op) != OpKind::Move) return v;
    v = n.inputs[0];
  }
}

CodegenResult trial(const Graph& g, const UseInfo& uses, std::vector<int> members, const Shape& F,
                    const std::vector<bool>& red) {
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  // Every member that could leave the kernel must be storable on the domain; inlined
  // producers of another shape are only read inside it.
  const Domain dom = Domain::of(F, red.empty() ? std::vector<bool>(F.size(), false) : red);
  std::vector<int> outs;
  for (int mi : members)
    for (int o : g.nodes[static_cast<size_t>(mi)].outputs)
      if (dom.canonical(g.type(o).shape)) outs.push_back(o);
  Body b = build_body(g, uses, members, outs, "trial");
  std::vector<LeafLayout> in_l = layouts_for(g, b.ext_inputs);
  std::vector<LeafLayout> out_l;
  for (int o : outs) out_l.push_back(LeafLayout{contiguous_strides(g.type(o).shape), true});
  return codegen_fused(*b.graph, F, red.empty() ? std::vector<bool>(F.size(), false) : red, in_l,
                       out_l);
}

}  // namespace

PassStats fuse_elementwise(Graph& g, int max_members) {
  PassStats st;
  // A node whose inputs cannot be read by a kernel directly (a view chain whose reshape does
  // not map onto the domain, e.g. reshape(transpose(x))[::3]) gets the inputs of the reshapes
  // in that chain materialized by copies (a reshape of a contiguous buffer is always a view).
  for (int round = 0; round < 4; ++round) {
    UseInfo uses(g);
    std::set<size_t> fix_reshapes;  // node indices of reshapes whose input gets a copy
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (!fusable_node(g, uses, n)) continue;
      const bool red = op_kind(n.op) == OpKind::Reduce;
      const Shape F = red ? g.type(n.inputs[0]).shape : g.type(n.outputs[0]).shape;
      CodegenResult r =
          trial(g, uses, {static_cast<int>(i)}, F, red ? reduce_mask(g, n) : std::vector<bool>{});
      if (r.fused) continue;
      bool found = false;
      for (int v : n.inputs) {
        for (int x = v; x >= 0;) {
          const int p = uses.producer[static_cast<size_t>(x)];
          if (p < 0 || op_kind(g.nodes[static_cast<size_t>(p)].op) != OpKind::Move) break;
          const Node& mv = g.nodes[static_cast<size_t>(p)];
          if (mv.op == Op::reshape && chain_root(g, uses, mv.inputs[0]) != mv.inputs[0]) {
            fix_reshapes.insert(static_cast<size_t>(p));
            found = true;
          }
          x = mv.inputs[0];
        }
      }
      if (!found)
        throw CompileError(
            rt::str("cannot generate a kernel for `", print_node(g, n), "`: ", r.why));
    }
    if (fix_reshapes.empty()) break;
    std::vector<Node> out;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node n = g.nodes[i];
      if (fix_reshapes.count(i)) {
        Node c;
        c.op = Op::copy;
        c.inputs = {n.inputs[0]};
        c.outputs = {g.add_value(g.type(n.inputs[0]))};
        n.inputs[0] = c.outputs[0];
        out.push_back(std::move(c));
      }
      out.push_back(std::move(n));
    }
    g.nodes = std::move(out);
  }

  UseInfo uses(g);
  const size_t nn = g.nodes.size();
  std::vector<int> slot_of(g.values.size(), -1);
  std::vector<Group> groups;
  std::vector<int> group_of(nn, -1);
  std::vector<int> item_key(nn, 0);  // scheduling key of non-fused nodes
  int next_slot = 0;

  for (size_t i = 0; i < nn; ++i) {
    const Node& n = g.nodes[i];
    const OpKind k = op_kind(n.op);
    if (k == OpKind::Move) {
      for (int o : n.outputs)
        slot_of[static_cast<size_t>(o)] = slot_of[static_cast<size_t>(n.inputs[0])];
      continue;
    }
    if (n.op == Op::constant) continue;
    if (!fusable_node(g, uses, n)) {
      const int s = next_slot++;
      item_key[i] = s;
      for (int o : n.outputs) slot_of[static_cast<size_t>(o)] = s;
      continue;
    }
    const bool red = k == OpKind::Reduce;
    const Shape F_self = red ? g.type(n.inputs[0]).shape : g.type(n.outputs[0]).shape;
    const std::vector<bool> red_self = red ? reduce_mask(g, n) : std::vector<bool>{};
    int max_dep_slot = -1;
    std::set<int> cands;
    for (int v : n.inputs) {
      const int root = chain_root(g, uses, v);
      max_dep_slot = std::max(max_dep_slot, slot_of[static_cast<size_t>(root)]);
      const int p = uses.producer[static_cast<size_t>(root)];
      if (p >= 0 && group_of[static_cast<size_t>(p)] >= 0)
        cands.insert(group_of[static_cast<size_t>(p)]);
    }
    // Elementwise producers read only by this node (possibly through views of another shape)
    // are recomputed inside its kernel instead of being stored.
    std::vector<int> inl;
    {
      std::set<int> inl_set;
      std::vector<int> work(n.inputs.begin(), n.inputs.end());
      while (!work.empty()) {
        const int v = work.back();
        work.pop_back();
        if (v < 0) continue;
        const int root = chain_root(g, uses, v);
        const int p = uses.producer[static_cast<size_t>(root)];
        if (p < 0 || inl_set.count(p)) continue;
        const Node& pn = g.nodes[static_cast<size_t>(p)];
        if (!fusable_node(g, uses, pn) || op_kind(pn.op) == OpKind::Reduce ||
            op_kind(pn.op) == OpKind::Struct)
          continue;
        if (uses.output_uses[static_cast<size_t>(root)] > 0) continue;
        bool only_here = true;
        for (int r : readers_of(g, uses, root))
          if (r != static_cast<int>(i) && !inl_set.count(r)) only_here = false;
        if (!only_here) continue;
        inl_set.insert(p);
        inl.push_back(p);
        for (int u : pn.inputs) work.push_back(u);
      }
      std::set<int> produced;
      for (int p : inl)
        for (int o : g.nodes[static_cast<size_t>(p)].outputs) produced.insert(o);
      for (int p : inl)
        for (int u : g.nodes[static_cast<size_t>(p)].inputs) {
          const int root = chain_root(g, uses, u);
          if (!produced.count(root))
            max_dep_slot = std::max(max_dep_slot, slot_of[static_cast<size_t>(root)]);
        }
    }
    std::vector<int> order(cands.begin(), cands.end());
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return groups[static_cast<size_t>(a)].slot > groups[static_cast<size_t>(b)].slot;
    });
    int joined = -1;
    // Producers in several groups: try one kernel for all of them (the earlier groups move to
    // the latest one's slot when nothing in between reads them).
    if (order.size() >= 2 && max_members > 1) {
      Group& T = groups[static_cast<size_t>(order[0])];
      std::vector<int> members = T.members;
      std::vector<int> merged;
      bool ok = max_dep_slot <= T.slot && !red;
      const Shape& s_out = g.type(n.outputs[0]).shape;
      if (ok && (T.has_red() || s_out != T.F)) ok = false;
      for (size_t oi = 1; oi < order.size() && ok; ++oi) {
        const Group& O = groups[static_cast<size_t>(order[oi])];
        if (O.F != T.F || O.has_red()) {
          ok = false;
          break;
        }
        for (int mi : O.members)
          for (int o : g.nodes[static_cast<size_t>(mi)].outputs)
            for (int r : readers_of(g, uses, o)) {
              if (r < 0) continue;
              if (r == static_cast<int>(i) || group_of[static_cast<size_t>(r)] == order[oi] ||
                  group_of[static_cast<size_t>(r)] == order[0])
                continue;
              const int rs =
                  group_of[static_cast<size_t>(r)] >= 0
                      ? groups[static_cast<size_t>(group_of[static_cast<size_t>(r)])].slot
                      : item_key[static_cast<size_t>(r)];
              if (rs <= T.slot) ok = false;
            }
        members.insert(members.end(), O.members.begin(), O.members.end());
        merged.push_back(order[oi]);
      }
      if (ok && static_cast<int>(members.size()) < max_members) {
        members.push_back(static_cast<int>(i));
        if (trial(g, uses, members, T.F, {}).fused) {
          for (int oid : merged) {
            for (int mi : groups[static_cast<size_t>(oid)].members) {
              group_of[static_cast<size_t>(mi)] = order[0];
              for (int o : g.nodes[static_cast<size_t>(mi)].outputs)
                slot_of[static_cast<size_t>(o)] = T.slot;
            }
            groups[static_cast<size_t>(oid)].members.clear();
          }
          std::sort(members.begin(), members.end());
          T.members = std::move(members);
          joined = order[0];
          inl.clear();
        }
      }
    }
    for (int gid : order) {
      if (joined >= 0) break;
      Group& G = groups[static_cast<size_t>(gid)];
      if (max_dep_slot > G.slot) continue;
      Shape F = G.F;
      std::vector<bool> rm = G.red;
      if (red) {
        if (F_self != G.F) continue;
        if (G.has_red() && G.red != red_self) continue;
        rm = red_self;
      } else {
        const Shape& s = g.type(n.outputs[0]).shape;
        const bool vec = s == G.F;
        const bool sc =
            G.has_red() && is_reduced_shape(G.F, G.red, s) && op_kind(n.op) != OpKind::Struct;
        if (!vec && !sc) continue;
      }
      if (static_cast<int>(G.members.size()) >= max_members) continue;
      std::vector<int> members = G.members;
      members.push_back(static_cast<int>(i));
      bool with_inl = false;
      if (!inl.empty() && max_members > 1) {
        std::vector<int> mi = members;
        mi.insert(mi.end(), inl.begin(), inl.end());
        if (trial(g, uses, mi, F, rm).fused) {
          members = std::move(mi);
          with_inl = true;
        }
      }
      if (!with_inl && !trial(g, uses, members, F, rm).fused) continue;
      if (!with_inl) inl.clear();
      G.members = std::move(members);
      G.red = rm;
      joined = gid;
      break;
    }
    if (joined < 0) {
      Group G;
      G.F = F_self;
      G.red = red_self;
      G.members = {static_cast<int>(i)};
      if (!inl.empty() && max_members > 1) {
        std::vector<int> mi = G.members;
        mi.insert(mi.end(), inl.begin(), inl.end());
        if (trial(g, uses, mi, F_self, red_self).fused) {
          G.members = std::move(mi);
        } else {
          inl.clear();
        }
      } else {
        inl.clear();
      }
      G.slot = next_slot++;
      groups.push_back(std::move(G));
      joined = static_cast<int>(groups.size()) - 1;
    }
    Group& J = groups[static_cast<size_t>(joined)];
    for (int p : inl) {  // move inlined producers out of their old groups
      const int old = group_of[static_cast<size_t>(p)];
      if (old >= 0 && old != joined) {
        auto& om = groups[static_cast<size_t>(old)].members;
        om.erase(std::remove(om.begin(), om.end(), p), om.end());
      }
      group_of[static_cast<size_t>(p)] = joined;
      for (int o : g.nodes[static_cast<size_t>(p)].outputs)
        slot_of[static_cast<size_t>(o)] = J.slot;
    }
    std::sort(J.members.begin(), J.members.end());
    J.members.erase(std::unique(J.members.begin(), J.members.end()), J.members.end());
    group_of[i] = joined;
    for (int o : n.outputs) slot_of[static_cast<size_t>(o)] = J.slot;
  }

  // Which member values leave their group (used by non-members, possibly through views).
  auto used_outside = [&](int v, int gid) {
    std::vector<int> work = {v};
    while (!work.empty()) {
      const int x = work.back();
      work.pop_back();
      if (uses.output_uses[static_cast<size_t>(x)] > 0) return true;
      for (int u : uses.users[static_cast<size_t>(x)]) {
        const Node& un = g.nodes[static_cast<size_t>(u)];
        if (op_kind(un.op) == OpKind::Move) {
          work.push_back(un.outputs[0]);
        } else if (group_of[static_cast<size_t>(u)] != gid) {
          return true;
        }
      }
    }
    return false;
  };

  // New node list: fused nodes replace their members; order by a stable topological sort.
  std::vector<Node> fresh;
  std::vector<int> key;
  for (size_t i = 0; i < nn; ++i) {
    if (group_of[i] >= 0) continue;
    key.push_back(
        op_kind(g.nodes[i].op) == OpKind::Move || g.nodes[i].op == Op::constant ? -1 : item_key[i]);
    fresh.push_back(g.nodes[i]);
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& G = groups[gi];
    std::vector<int> outs;
    for (int mi : G.members)
      for (int o : g.nodes[static_cast<size_t>(mi)].outputs)
        if (used_outside(o, static_cast<int>(gi))) outs.push_back(o);
    if (outs.empty()) continue;
    Body b = build_body(g, uses, G.members, outs, "fused_" + std::to_string(gi));
    Node f;
    f.op = Op::fused;
    f.inputs = b.ext_inputs;
    f.outputs = b.outputs;
    f.body = b.graph;
    f.attrs.set("domain", G.F);
    std::vector<int64_t> rmask;
    for (bool r : G.red) rmask.push_back(r ? 1 : 0);
    f.attrs.set("reduced", rmask);
    fresh.push_back(std::move(f));
    key.push_back(G.slot);
    st.changed += static_cast<int>(G.members.size());
  }
  // Kahn's algorithm with (key, position) priority.
  std::map<int, int> producer;
  for (size_t i = 0; i < fresh.size(); ++i)
    for (int o : fresh[i].outputs) producer[o] = static_cast<int>(i);
  std::vector<int> indeg(fresh.size(), 0);
  std::vector<std::vector<int>> succ(fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    std::set<int> deps;
    for (int v : fresh[i].inputs) {
      if (v < 0) continue;
      auto it = producer.find(v);
      if (it != producer.end() && it->second != static_cast<int>(i)) deps.insert(it->second);
    }
    indeg[i] = static_cast<int>(deps.size());
    for (int d : deps) succ[static_cast<size_t>(d)].push_back(static_cast<int>(i));
  }
  using QItem = std::pair<int, int>;
  std::priority_queue<QItem, std::vector<QItem>, std::greater<QItem>> q;
  for (size_t i = 0; i < fresh.size(); ++i)
    if (indeg[i] == 0) q.push({key[i], static_cast<int>(i)});
  std::vector<Node> sorted;
  while (!q.empty()) {
    const int i = q.top().second;
    q.pop();
    sorted.push_back(std::move(fresh[static_cast<size_t>(i)]));
    for (int s : succ[static_cast<size_t>(i)])
      if (--indeg[static_cast<size_t>(s)] == 0) q.push({key[static_cast<size_t>(s)], s});
  }
  if (sorted.size() != fresh.size())
    throw CompileError("fusion produced a cyclic schedule (compiler bug)");
  g.nodes = std::move(sorted);
  dce(g);
  return st;
}

// ---------------------------------------------------------------------------------------

PassStats fuse_gemm_epilogue(Graph& g) {
  PassStats st;
  UseInfo uses(g);
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& mm = g.nodes[i];
    if (mm.op != Op::matmul) continue;
    const int y = mm.outputs[0];
    if (uses.output_uses[static_cast<size_t>(y)] || uses.users[static_cast<size_t>(y)].size() != 1)
      continue;
    const int ui = uses.users[static_cast<size_t>(y)][0];
    Node& e = g.nodes[static_cast<size_t>(ui)];
    if (e.op != Op::fused || e.attrs.has("gemm")) continue;
    bool elementwise = true;
    for (int64_t r : e.attrs.ints("reduced"))
      if (r) elementwise = false;
    if (!elementwise) continue;
    // y must feed exactly one body input.
    int pos = -1, count = 0;
    for (size_t k = 0; k < e.inputs.size(); ++k)
      if (e.inputs[k] == y) {
        pos = static_cast<int>(k);
        ++count;
      }
    if (count != 1) continue;
    // Reorder so the accumulator is body input 0.
    Graph& body = *e.body;
    std::rotate(body.inputs.begin(), body.inputs.begin() + pos, body.inputs.begin() + pos + 1);
    std::vector<int> rest;
    for (size_t k = 0; k < e.inputs.size(); ++k)
      if (static_cast<int>(k) != pos) rest.push_back(e.inputs[k]);
    Node f;
    f.op = Op::fused;
    f.inputs = {mm.inputs[0], mm.inputs[1]};
    f.inputs.insert(f.inputs.end(), rest.begin(), rest.end());
    f.outputs = e.outputs;
    f.body = e.body;
    f.attrs = e.attrs;
    f.attrs.set("gemm", int64_t{1});
    f.attrs.set("gemm_dtype", static_cast<int64_t>(g.type(y).dtype));
    e = std::move(f);
    drop[i] = true;
    ++st.changed;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return st;
}

// ---------------------------------------------------------------------------------------

namespace {

// Operands of dense kernels that may be refined views: batch dims of matmul operands.
bool view_ok_for(const Node& n, size_t operand, const ResolvedView& rv, const Shape& logical) {
  if (rv.dom.rank() == static_cast<int>(logical.size())) return true;
  if (n.op != Op::matmul && !(n.op == Op::fused && n.attrs.has("gemm") && operand < 2))
    return false;
  // The two trailing logical dims must not be split.
  const int r = static_cast<int>(logical.size());
  int count_m = 0, count_k = 0;
  for (int k = 0; k < rv.dom.rank(); ++k) {
    if (rv.dom.owner[static_cast<size_t>(k)] == r - 2) ++count_m;
    if (rv.dom.owner[static_cast<size_t>(k)] == r - 1) ++count_k;
  }
  return count_m <= 1 && count_k <= 1;
}

}  // namespace

PassStats legalize_views(Graph& g) {
  PassStats st;
  UseInfo uses(g);
  std::vector<Node> out;
  const std::vector<Node> orig = g.nodes;  // chains are read from here while `out` grows
  std::map<int, int> materialized;         // value -> its copy
  for (Node n : orig) {
    const OpKind k = op_kind(n.op);
    if (k == OpKind::Move || n.op == Op::constant || (n.op == Op::fused && !n.attrs.has("gemm"))) {
      out.push_back(std::move(n));
      continue;
    }
    const size_t limit = n.op == Op::fused ? 2 : n.inputs.size();
    const bool is_mm = n.op == Op::matmul || n.op == Op::fused;
    std::vector<std::optional<ResolvedView>> views(limit);
    for (size_t i = 0; i < limit; ++i) {
      int& v = n.inputs[i];
      if (v < 0) continue;
      const int root = chain_root(g, uses, v);
      if (root == v) continue;
      std::string why;
      const std::vector<int64_t> rs = layout_of(g, root);
      auto rv = resolve_view(g, uses, v, rs, is_contiguous_layout(g.type(root).shape, rs), &why);
      bool ok = rv && view_ok_for(n, i, *rv, g.type(v).shape);
      if (ok && is_mm && i == 1 && views[0]) {
        // The batch splits of A and B must nest into one GEMM batch structure.
        const int r = g.type(v).rank();
        for (int d = 0; d + 2 < r && ok; ++d)
          if (!common_digits({digits_of(views[0]->dom, d), digits_of(rv->dom, d)})) ok = false;
      }
      if (ok) {
        views[i] = rv;
        continue;
      }
      // Materialize the view with a copy kernel, at the last reshape of its chain when there is
      // one: what follows a reshape (permute, slice, expand) is a strided view of the copy, so
      // operands seeing one reshaped value through different permutes (x and x^T of a backward
      // GEMM pair) share one copy. Copies are made once per value.
      std::vector<const Node*> chain;  // producers from v up to the root
      for (int x = v; x != root;) {
        const Node& mv = orig[static_cast<size_t>(uses.producer[static_cast<size_t>(x)])];
        chain.push_back(&mv);
        x = mv.inputs[0];
      }
      size_t cut = 0;  // chain[cut] makes the value that is copied
      for (size_t c = 0; c < chain.size(); ++c)
        if (chain[c]->op == Op::reshape) {
          cut = c;
          break;
        }
      const int target = chain[cut]->outputs[0];
      int cur;
      auto done = materialized.find(target);
      if (done != materialized.end()) {
        cur = done->second;
      } else {
        auto body = std::make_shared<Graph>();
        body->name = "view_copy";
        int b = body->add_input(g.type(root));
        for (size_t c = chain.size(); c-- > cut;) {
          Node m;
          m.op = chain[c]->op;
          m.attrs = chain[c]->attrs;
          m.inputs = {b};
          m.outputs = {body->add_value(g.type(chain[c]->outputs[0]))};
          b = m.outputs[0];
          body->nodes.push_back(std::move(m));
        }
        Node cp;
        cp.op = Op::copy;
        cp.inputs = {b};
        cp.outputs = {body->add_value(g.type(target))};
        body->nodes.push_back(cp);
        body->outputs = {cp.outputs[0]};
        Node f;
        f.op = Op::fused;
        f.inputs = {root};
        f.outputs = {g.add_value(g.type(target))};
        f.body = body;
        f.attrs.set("domain", g.type(target).shape);
        f.attrs.set("reduced", std::vector<int64_t>(g.type(target).shape.size(), 0));
        cur = f.outputs[0];
        materialized[target] = cur;
        out.push_back(std::move(f));
        ++st.changed;
      }
      for (size_t c = cut; c-- > 0;) {  // the views after the reshape, on the copy
        Node m = *chain[c];
        m.inputs = {cur};
        m.outputs = {g.add_value(g.type(chain[c]->outputs[0]))};
        cur = m.outputs[0];
        out.push_back(std::move(m));
      }
      v = cur;
    }
    out.push_back(std::move(n));
  }
  g.nodes = std::move(out);
  // A returned value that was materialized for a dense kernel is returned from its copy: the
  // copy is then made once, into the output buffer, instead of once more at the end.
  for (int& o : g.outputs) {
    auto m = materialized.find(o);
    if (m != materialized.end()) o = m->second;
  }
  return st;
}

}  // namespace neuron::cc
