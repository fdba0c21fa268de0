// Attention pattern fusion:
//   S = matmul(Q, K^T) [* or / scalar] [+ mask] ; P = softmax(S, -1) [cast] ; O = matmul(P, V)
// (with the batch/head reshapes the decomposition of torch.matmul introduces, optional
// scalar factors on Q and K, grouped-query heads expanded from fewer KV heads, and SDPA's
// "fully masked rows give 0" wrapper) becomes one `attention` node.
#include <cmath>
#include <optional>

#include "passes.h"

namespace neuron::cc {

namespace {

class Matcher {
 public:
  explicit Matcher(Graph& g) : g_(g), uses_(g) {}

  const Node* prod(int v) const {
    if (v < 0) return nullptr;
    const int p = uses_.producer[static_cast<size_t>(v)];
    return p < 0 ? nullptr : &g_.nodes[static_cast<size_t>(p)];
  }
  bool single_use(int v) const { return uses_.num_uses(v) == 1; }
  const Shape& shape(int v) const { return g_.type(v).shape; }

  std::optional<double> scalar_const(int v) const {
    const Node* n = prod(v);
    while (n && n->op == Op::expand) n = prod(n->inputs[0]);
    if (!n || n->op != Op::constant || !n->attrs.has("value")) return std::nullopt;
    if (!shape(n->outputs[0]).empty()) return std::nullopt;
    return n->attrs.f("value");
  }

  // Strips `x * c` (single use, scalar c) and returns x, multiplying `scale` by c.
  int strip_scale(int v, double* scale) const {
    const Node* n = prod(v);
    if (n && n->op == Op::mul && single_use(v)) {
      if (auto c = scalar_const(n->inputs[1])) {
        *scale *= *c;
        return n->inputs[0];
      }
      if (auto c = scalar_const(n->inputs[0])) {
        *scale *= *c;
        return n->inputs[1];
      }
    }
    return v;
  }

  // KV heads: x = reshape(expand(reshape(K4 [B,Hkv,S,D] -> [B,Hkv,1,S,D]) -> [B,Hkv,g,S,D]))
  // where the outer reshape gives [B,Hkv*g,S,D] (or [B*Hkv*g,S,D], see source4).
  int strip_gqa(int x) const {
    const Node* r = prod(x);
    if (!r || r->op != Op::reshape) return x;
    if (shape(x).size() == 3) {
      const Node* e = prod(r->inputs[0]);
      if (!e || e->op != Op::expand || shape(e->outputs[0]).size() != 5) return x;
      const Shape& es = shape(e->outputs[0]);
      const Node* r2 = prod(e->inputs[0]);
      if (!r2 || r2->op != Op::reshape) return x;
      const int k4 = r2->inputs[0];
      const Shape& ks = shape(k4);
      if (ks.size() != 4 || shape(e->inputs[0]) != Shape{ks[0], ks[1], 1, ks[2], ks[3]}) return x;
      if (es != Shape{ks[0], ks[1], es[2], ks[2], ks[3]} ||
          shape(x) != Shape{ks[0] * ks[1] * es[2], ks[2], ks[3]})
        return x;
      return k4;
    }
    if (shape(x).size() != 4) return x;
    const Node* e = prod(r->inputs[0]);
    if (!e || e->op != Op::expand) return x;
    const Shape& es = shape(e->outputs[0]);
    if (es.size() != 5) return x;
    const Node* r2 = prod(e->inputs[0]);
    if (!r2 || r2->op != Op::reshape) return x;
    const int k4 = r2->inputs[0];
    const Shape& ks = shape(k4);
    const Shape& xs = shape(x);
    if (ks.size() != 4 || shape(e->inputs[0]) != Shape{ks[0], ks[1], 1, ks[2], ks[3]}) return x;
    if (es != Shape{ks[0], ks[1], es[2], ks[2], ks[3]} ||
        xs != Shape{ks[0], ks[1] * es[2], ks[2], ks[3]})
      return x;
    return k4;
  }

  // A matmul operand [B*H, M, N] (or [B, H, M, N]) seen as a 4-D tensor; `transposed` wants
  // the source as [B, H, N, M] through a permute of its last two dims.
  std::optional<int> source4(int v, bool transposed, double* scale) const {
    int x = v;
    if (shape(x).size() == 3 && !transposed) {
      const int g = strip_gqa(x);  // reshape(expand(...)) straight to [B*Hq, S, D]
      if (g != x) return strip_scale(g, scale);
    }
    if (shape(x).size() == 3) {
      const Node* r = prod(x);
      if (!r || r->op != Op::reshape) return std::nullopt;
      x = r->inputs[0];
      const Shape& s4 = shape(x);
      if (s4.size() != 4 || s4[0] * s4[1] != shape(v)[0] || s4[2] != shape(v)[1] ||
          s4[3] != shape(v)[2])
        return std::nullopt;
    }
    if (shape(x).size() != 4) return std::nullopt;
    if (transposed) {
      const Node* p = prod(x);
      if (!p || p->op != Op::permute || p->attrs.ints("perm") != std::vector<int64_t>{0, 1, 3, 2})
        return std::nullopt;
      x = p->inputs[0];
    }
    x = strip_gqa(x);
    x = strip_scale(x, scale);
    return x;
  }

  // Follows single-use casts.
  int skip_casts_down(int v) const {
    while (true) {
      if (uses_.users[static_cast<size_t>(v)].size() != 1 ||
          uses_.output_uses[static_cast<size_t>(v)])
        return v;
      const Node& u = g_.nodes[static_cast<size_t>(uses_.users[static_cast<size_t>(v)][0])];
      if (u.op != Op::cast) return v;
      v = u.outputs[0];
    }
  }
  int skip_casts_up(int v) const {
    while (true) {
      const Node* n = prod(v);
      if (!n || n->op != Op::cast || !single_use(v)) return v;
      v = n->inputs[0];
    }
  }

  Graph& g_;
  UseInfo uses_;
};

bool is_zero_fill(const Matcher& m, int v) {
  auto c = m.scalar_const(v);
  return c && *c == 0.0;
}

// c == logical_not(any(logical_not(eq(scores, -inf)), -1, keepdim)): "the row is fully masked".
bool is_all_masked_cond(const Matcher& m, int c, int scores) {
  const Node* n1 = m.prod(c);
  if (!n1 || n1->op != Op::logical_not) return false;
  const Node* n2 = m.prod(n1->inputs[0]);
  if (!n2 || n2->op != Op::any || n2->attrs.i("keepdim", 0) != 1) return false;
  const auto& dims = n2->attrs.ints("dims");
  if (dims.size() != 1 || normalize_dim(dims[0], 4, "any") != 3) return false;
  const Node* n3 = m.prod(n2->inputs[0]);
  if (!n3 || n3->op != Op::logical_not) return false;
  const Node* n4 = m.prod(n3->inputs[0]);
  if (!n4 || n4->op != Op::eq) return false;
  auto v = m.scalar_const(n4->inputs[1]);
  if (!v || !std::isinf(*v) || *v > 0) return false;
  return m.skip_casts_up(n4->inputs[0]) == m.skip_casts_up(scores) || n4->inputs[0] == scores;
}

}  // namespace

PassStats fuse_attention(Graph& g) {
  PassStats st;
  bool again = true;
  while (again) {
    again = false;
    Matcher m(g);
    for (size_t si = 0; si < g.nodes.size() && !again; ++si) {
      const Node& sm = g.nodes[si];
      if (sm.op != Op::softmax) continue;
      const int sin = sm.inputs[0];
      if (m.shape(sin).size() != 4 || normalize_dim(sm.attrs.i("dim"), 4, "softmax") != 3) continue;
      // Softmax output -> [casts] -> [SDPA zero-row wrapper] -> [casts] -> reshape -> matmul.
      int p = m.skip_casts_down(sm.outputs[0]);
      bool zero_rows = false;
      if (m.uses_.users[static_cast<size_t>(p)].size() == 1 &&
          !m.uses_.output_uses[static_cast<size_t>(p)]) {
        const Node& w = g.nodes[static_cast<size_t>(m.uses_.users[static_cast<size_t>(p)][0])];
        if (w.op == Op::where && w.inputs[2] == p && is_zero_fill(m, w.inputs[1]) &&
            is_all_masked_cond(m, w.inputs[0], sin)) {
          zero_rows = true;
          p = m.skip_casts_down(w.outputs[0]);
        }
      }
      if (m.uses_.users[static_cast<size_t>(p)].size() != 1 ||
          m.uses_.output_uses[static_cast<size_t>(p)])
        continue;
      int user = m.uses_.users[static_cast<size_t>(p)][0];
      int pv = p;
      if (g.nodes[static_cast<size_t>(user)].op == Op::reshape) {
        pv = g.nodes[static_cast<size_t>(user)].outputs[0];
        if (m.uses_.users[static_cast<size_t>(pv)].size() != 1 ||
            m.uses_.output_uses[static_cast<size_t>(pv)])
          continue;
        user = m.uses_.users[static_cast<size_t>(pv)][0];
      }
      const Node& mm2 = g.nodes[static_cast<size_t>(user)];
      if (mm2.op != Op::matmul || mm2.inputs[0] != pv) continue;
      double unused = 1.0;
      auto v4 = m.source4(mm2.inputs[1], false, &unused);
      if (!v4 || unused != 1.0) continue;
      // Scores: [cast] [+ mask] [* or / c] reshape(matmul(Q, K^T)).
      double scale = 1.0;
      int s = m.skip_casts_up(sin);
      int mask = -1;
      const Node* an = m.prod(s);
      if (an && an->op == Op::add && (zero_rows ? true : m.single_use(s))) {
        const int a0 = an->inputs[0], a1 = an->inputs[1];
        const Node* p0 = m.prod(m.skip_casts_up(a0));
        const bool first_is_scores = p0 && (p0->op == Op::reshape || p0->op == Op::mul ||
                                            p0->op == Op::div || p0->op == Op::matmul);
        s = first_is_scores ? a0 : a1;
        mask = first_is_scores ? a1 : a0;
      }
      s = m.skip_casts_up(s);
      const Node* sc = m.prod(s);
      if (sc && (sc->op == Op::mul || sc->op == Op::div) && m.single_use(s)) {
        if (auto c = m.scalar_const(sc->inputs[1])) {
          scale *= sc->op == Op::mul ? *c : 1.0 / *c;
          s = sc->inputs[0];
        }
      }
      const Node* r1 = m.prod(s);
      int mm1_out = s;
      if (r1 && r1->op == Op::reshape && m.single_use(s)) mm1_out = r1->inputs[0];
      const Node* mm1 = m.prod(mm1_out);
      if (!mm1 || mm1->op != Op::matmul || !m.single_use(mm1_out)) continue;
      auto q4 = m.source4(mm1->inputs[0], false, &scale);
      auto k4 = m.source4(mm1->inputs[1], true, &scale);
      if (!q4 || !k4) continue;
      const Shape &qs = m.shape(*q4), &ks = m.shape(*k4), &vs = m.shape(*v4);
      if (ks[0] != qs[0] || vs[0] != qs[0] || ks[1] != vs[1] || ks[2] != vs[2] || qs[3] != ks[3])
        continue;
      if (ks[1] == 0 || qs[1] % ks[1] != 0) continue;
      const Shape full = {qs[0], qs[1], qs[2], ks[2]};
      if (m.shape(sin) != full) continue;
      if (g.type(*q4).dtype != g.type(*k4).dtype || g.type(*q4).dtype != g.type(*v4).dtype)
        continue;
      if (mask >= 0) {
        auto b = broadcast_shapes({&m.shape(mask), &full});
        if (!b || *b != full) continue;
      }
      // Build: [expand mask] attention -> reshape to the second matmul's result.
      std::vector<Node> fresh;
      auto add = [&](Op op, std::vector<int> ins, Attrs at) {
        Node probe;
        probe.op = op;
        probe.inputs = ins;
        probe.attrs = at;
        auto types = infer_types(g, probe);
        Node n;
        n.op = op;
        n.inputs = std::move(ins);
        n.attrs = std::move(at);
        for (auto& t : types) n.outputs.push_back(g.add_value(t));
        fresh.push_back(n);
        return fresh.back().outputs[0];
      };
      std::vector<int> ins = {*q4, *k4, *v4};
      if (mask >= 0) {
        int mk = mask;
        if (m.shape(mk) != full) {
          Attrs ea;
          ea.set("shape", full);
          mk = add(Op::expand, {mk}, ea);
        }
        ins.push_back(mk);
      }
      Attrs aa;
      aa.set("scale", scale);
      aa.set("causal", int64_t{0});
      aa.set("zero_masked_rows", int64_t{zero_rows ? 1 : 0});
      int o4 = add(Op::attention, ins, aa);
      const int old = mm2.outputs[0];
      if (g.type(o4).dtype != g.type(old).dtype) {
        Attrs ca;
        ca.set("dtype", static_cast<int64_t>(g.type(old).dtype));
        o4 = add(Op::cast, {o4}, ca);
      }
      Attrs ra;
      ra.set("shape", m.shape(old));
      const int o = add(Op::reshape, {o4}, ra);
      replace_uses(g, old, o);
      g.nodes.insert(g.nodes.begin() + user, fresh.begin(), fresh.end());
      dce(g);
      ++st.changed;
      again = true;
    }
  }
  return st;
}

}  // namespace neuron::cc
