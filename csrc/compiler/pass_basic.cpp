// DCE, CSE, canonicalization and composite expansion.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "passes.h"

namespace neuron::cc {

void replace_uses(Graph& g, int from, int to) {
  for (Node& n : g.nodes)
    for (int& v : n.inputs)
      if (v == from) v = to;
  for (int& v : g.outputs)
    if (v == from) v = to;
  for (Mutation& m : g.mutations)
    if (m.value == from) m.value = to;
}

bool is_contiguous_layout(const Shape& shape, const std::vector<int64_t>& strides) {
  if (strides.empty()) return true;
  int64_t expect = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    const size_t d = static_cast<size_t>(i);
    if (shape[d] != 1 && strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

std::vector<int64_t> layout_of(const Graph& g, int value) {
  for (int in : g.inputs)
    if (in == value) return g.strides_of(value);
  for (int out : g.outputs)
    if (out == value) return g.strides_of(value);
  return contiguous_strides(g.type(value).shape);
}

// ---------------------------------------------------------------------------------------

PassStats dce(Graph& g) {
  PassStats st;
  std::vector<bool> live(g.values.size(), false);
  for (int v : g.outputs) live[static_cast<size_t>(v)] = true;
  for (const Mutation& m : g.mutations) live[static_cast<size_t>(m.value)] = true;
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    bool used = false;
    for (int o : n.outputs)
      if (live[static_cast<size_t>(o)]) used = true;
    if (!used) continue;
    keep[i] = true;
    for (int v : n.inputs)
      if (v >= 0) live[static_cast<size_t>(v)] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (keep[i]) {
      kept.push_back(std::move(g.nodes[i]));
    } else {
      ++st.changed;
    }
  }
  g.nodes = std::move(kept);
  return st;
}

// ---------------------------------------------------------------------------------------

namespace {

struct NodeKey {
  Op op;
  std::vector<int> inputs;
  std::vector<std::pair<std::string, AttrValue>> attrs;
  std::vector<TensorType> types;
  const std::vector<uint8_t>* blob = nullptr;
  bool operator<(const NodeKey& o) const {
    if (op != o.op) return op < o.op;
    if (inputs != o.inputs) return inputs < o.inputs;
    if (attrs != o.attrs) return attrs < o.attrs;
    if (types.size() != o.types.size()) return types.size() < o.types.size();
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i].dtype != o.types[i].dtype) return types[i].dtype < o.types[i].dtype;
      if (types[i].shape != o.types[i].shape) return types[i].shape < o.types[i].shape;
    }
    if ((blob == nullptr) != (o.blob == nullptr)) return blob == nullptr;
    if (blob && *blob != *o.blob) return *blob < *o.blob;
    return false;
  }
};

}  // namespace

PassStats cse(Graph& g) {
  PassStats st;
  std::map<NodeKey, size_t> seen;
  std::vector<Node> kept;
  for (Node& n : g.nodes) {
    if (n.body || op_kind(n.op) == OpKind::Custom) {
      kept.push_back(std::move(n));
      continue;
    }
    NodeKey key;
    key.op = n.op;
    key.inputs = n.inputs;
    for (const auto& kv : n.attrs.items())
      if (kv.first != "blob") key.attrs.push_back(kv);
    for (int o : n.outputs) key.types.push_back(g.type(o));
    if (n.op == Op::constant && n.attrs.has("blob"))
      key.blob = &g.blobs[static_cast<size_t>(n.attrs.i("blob"))];
    auto it = seen.find(key);
    if (it != seen.end()) {
      const Node& prev = kept[it->second];
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        const int from = n.outputs[i], to = prev.outputs[i];
        for (Node& k : kept)
          for (int& v : k.inputs)
            if (v == from) v = to;
        // Later nodes are rewritten as they are visited.
        for (Node& later : g.nodes)
          for (int& v : later.inputs)
            if (v == from) v = to;
        for (int& v : g.outputs)
          if (v == from) v = to;
        for (Mutation& m : g.mutations)
          if (m.value == from) m.value = to;
      }
      ++st.changed;
      continue;
    }
    seen.emplace(std::move(key), kept.size());
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return st;
}

// ---------------------------------------------------------------------------------------

namespace {

// v is zeros: a scalar constant 0 seen through expand/reshape views.
bool is_zero_fill(const Graph& g, const UseInfo& uses, int v) {
  while (true) {
    const int p = uses.producer[static_cast<size_t>(v)];
    if (p < 0) return false;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.op == Op::expand || n.op == Op::reshape) {
      v = n.inputs[0];
      continue;
    }
    return n.op == Op::constant && !n.attrs.has("blob") && n.attrs.f("value", 1.0) == 0.0 &&
           n.attrs.i("ivalue", 0) == 0;
  }
}

struct ScatterPiece {
  int64_t start, end;
  int src;
};

// The terms of `v` = a tree of adds (inner adds used only there) of slice_scatters of values
// into zeros, all of type `t` along one dim with step 1.
bool scatter_pieces(const Graph& g, const UseInfo& uses, int v, bool top, const TensorType& t,
                    int64_t* dim, std::vector<ScatterPiece>* out) {
  const int p = uses.producer[static_cast<size_t>(v)];
  if (p < 0 || g.type(v) != t) return false;
  const Node& n = g.nodes[static_cast<size_t>(p)];
  if (n.op == Op::add && (top || uses.num_uses(v) == 1))
    return scatter_pieces(g, uses, n.inputs[0], false, t, dim, out) &&
           scatter_pieces(g, uses, n.inputs[1], false, t, dim, out);
  if (n.op != Op::slice_scatter || n.attrs.i("step", 1) != 1 ||
      g.type(n.inputs[1]).dtype != t.dtype || !is_zero_fill(g, uses, n.inputs[0]))
    return false;
  const int64_t d = normalize_dim(n.attrs.i("dim"), t.rank(), "slice_scatter");
  if (*dim >= 0 && *dim != d) return false;
  *dim = d;
  out->push_back(ScatterPiece{n.attrs.i("start"), n.attrs.i("end"), n.inputs[1]});
  return true;
}

// Gradients of a split (the packed q/k/v projection of attention, select/slice backward) arrive
// as a sum of slice_scatters into zeros covering the tensor: that sum is a cat of the pieces
// (one fused pass instead of a zero fill, a scatter and an add per piece; a -0.0 piece stays
// -0.0 where the sum gave +0.0).
int scatter_sums_to_cat(Graph& g) {
  UseInfo uses(g);
  int changed = 0;
  for (Node& n : g.nodes) {
    if (n.op != Op::add || n.outputs.size() != 1) continue;
    const TensorType t = g.type(n.outputs[0]);
    if (t.rank() == 0) continue;
    int64_t dim = -1;
    std::vector<ScatterPiece> pieces;
    if (!scatter_pieces(g, uses, n.outputs[0], true, t, &dim, &pieces) || pieces.size() < 2)
      continue;
    std::sort(pieces.begin(), pieces.end(),
              [](const ScatterPiece& a, const ScatterPiece& b) { return a.start < b.start; });
    int64_t at = 0;
    bool cover = true;
    for (const ScatterPiece& pc : pieces) {
      if (pc.start != at || pc.end <= pc.start) cover = false;
      at = pc.end;
    }
    if (!cover || at != t.shape[static_cast<size_t>(dim)]) continue;
    n.op = Op::cat;
    n.inputs.clear();
    for (const ScatterPiece& pc : pieces) n.inputs.push_back(pc.src);
    Attrs a;
    a.set("dim", dim);
    a.set("dtype", static_cast<int64_t>(t.dtype));
    n.attrs = a;
    ++changed;
  }
  return changed;
}

}  // namespace

PassStats canonicalize(Graph& g) {
  PassStats st;
  bool again = true;
  while (again) {
    again = false;
    UseInfo uses(g);
    for (Node& n : g.nodes) {
      if (n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] < 0) continue;
      const int in = n.inputs[0], out = n.outputs[0];
      const TensorType& it = g.type(in);
      const TensorType& ot = g.type(out);
      bool identity = false;
      switch (n.op) {
        case Op::cast:
        case Op::copy:
          identity = it == ot;
          break;
        case Op::reshape:
        case Op::expand:
          identity = it.shape == ot.shape;
          break;
        case Op::permute: {
          const auto& p = n.attrs.ints("perm");
          identity = true;
          for (size_t i = 0; i < p.size(); ++i)
            if (p[i] != static_cast<int64_t>(i) && it.shape[static_cast<size_t>(p[i])] != 1)
              identity = false;
          identity = identity && it.shape == ot.shape;
          // A permute that only moves size-1 dims is a reshape.
          if (!identity) {
            Shape a, b;
            for (int64_t s : it.shape)
              if (s != 1) a.push_back(s);
            bool order_kept = true;
            int64_t last = -1;
            for (int64_t d : p) {
              if (it.shape[static_cast<size_t>(d)] == 1) continue;
              if (d < last) order_kept = false;
              last = d;
            }
            if (order_kept) {
              n.op = Op::reshape;
              Attrs at;
              at.set("shape", ot.shape);
              n.attrs = at;
              ++st.changed;
              again = true;
            }
          }
          break;
        }
        case Op::slice:
          identity = it.shape == ot.shape && n.attrs.i("start") == 0 && n.attrs.i("step", 1) == 1;
          break;
        default:
          break;
      }
      if (identity) {
        // Never make an output name an input directly here: lowering copies if needed.
        replace_uses(g, out, in);
        ++st.changed;
        again = true;
        continue;
      }
      // reshape(reshape(x)) -> reshape(x); permute(permute(x)) -> permute(x)
      const int p = uses.producer[static_cast<size_t>(in)];
      if (p < 0) continue;
      const Node& prev = g.nodes[static_cast<size_t>(p)];
      if (n.op == Op::reshape && prev.op == Op::reshape) {
        n.inputs[0] = prev.inputs[0];
        ++st.changed;
        again = true;
      } else if (n.op == Op::permute && prev.op == Op::permute) {
        const auto& p1 = prev.attrs.ints("perm");
        const auto& p2 = n.attrs.ints("perm");
        std::vector<int64_t> comp(p2.size());
        for (size_t i = 0; i < p2.size(); ++i) comp[i] = p1[static_cast<size_t>(p2[i])];
        n.attrs.set("perm", comp);
        n.inputs[0] = prev.inputs[0];
        ++st.changed;
        again = true;
      } else if (n.op == Op::cast && prev.op == Op::cast) {
        // cast(cast(x, wider), narrower-or-same) where the first cast is exact -> cast(x)
        const DType a = g.type(prev.inputs[0]).dtype, b = it.dtype, c = ot.dtype;
        const bool exact_widen =
            (a == DType::BFloat16 || a == DType::Float16) && b == DType::Float32;
        if (exact_widen &&
            (c == a || c == DType::Float32 || c == DType::BFloat16 || c == DType::Float16)) {
          n.inputs[0] = prev.inputs[0];
          ++st.changed;
          again = true;
        }
      }
    }
    if (again) dce(g);
  }
  if (const int c = scatter_sums_to_cat(g)) {
    st.changed += c;
    dce(g);
  }
  return st;
}

}  // namespace neuron::cc
