#include "lower.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "codegen.h"
#include "index_map.h"
#include "kernels/dispatch.h"
#include "passes.h"

namespace neuron::cc {

namespace {

constexpr int64_t kAlign = 64;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

bool non_overlapping(const Shape& shape, const std::vector<int64_t>& strides) {
  if (strides.size() != shape.size()) return false;
  std::vector<size_t> order(shape.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t extent = 1;
  for (size_t i : order) {
    if (shape[i] == 1) continue;
    if (strides[i] < extent) return false;
    extent = strides[i] * shape[i];
  }
  return true;
}

int chain_root_of(const Graph& g, const UseInfo& uses, int v) {
  while (true) {
    const int p = uses.producer[static_cast<size_t>(v)];
    if (p < 0) return v;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (op_kind(n.op) != OpKind::Move) return v;
    v = n.inputs[0];
  }
}

// Node indices that read `v` directly or through views.
std::vector<int> readers(const Graph& g, const UseInfo& uses, int v) {
  std::vector<int> r;
  std::vector<int> work = {v};
  while (!work.empty()) {
    const int x = work.back();
    work.pop_back();
    for (int u : uses.users[static_cast<size_t>(x)]) {
      const Node& n = g.nodes[static_cast<size_t>(u)];
      if (op_kind(n.op) == OpKind::Move) {
        work.push_back(n.outputs[0]);
      } else {
        r.push_back(u);
      }
    }
  }
  return r;
}

// True when a graph output is `v` or a view of it (it is copied out at the end, after every
// step: an in-place write of v's buffer would change it).
bool returned(const Graph& g, const UseInfo& uses, int v) {
  for (int o : g.outputs)
    if (chain_root_of(g, uses, o) == v) return true;
  return false;
}

// A mutation whose value is one scatter into the input, or a chain of them, x -> s1 -> ... -> sk
// (each s_j = index_put/scatter/slice_scatter of s_{j-1}, or the output of a custom op - an NKI
// op - that declares it a new version of its input s_{j-1}; a stacked KV cache updated layer by
// layer), runs in place when every reader of each version runs before the node that makes
// the next one: each node then writes the input buffer and every version lives there.
bool inplace_scatter_chain(const Graph& g, const UseInfo& uses, const Mutation& m, Plan& p) {
  const int in_v = g.inputs[static_cast<size_t>(m.input_index)];
  std::vector<int> chain;     // producers, last first
  std::vector<int> versions;  // the version each of them makes
  int v = m.value;
  while (v != in_v) {
    const int prod = uses.producer[static_cast<size_t>(v)];
    if (prod < 0) return false;
    const Node& n = g.nodes[static_cast<size_t>(prod)];
    const bool scatter_like =
        n.op == Op::index_put || n.op == Op::scatter || n.op == Op::slice_scatter;
    int base = -1;
    if (scatter_like && !n.inputs.empty()) {
      if (n.outputs.empty() || n.outputs[0] != v) return false;
      base = n.inputs[0];
    } else if (n.op == Op::custom && n.attrs.has("inplace")) {
      const std::vector<int64_t>& ip = n.attrs.ints("inplace");
      for (size_t j = 0; j < n.outputs.size() && j < ip.size(); ++j)
        if (n.outputs[j] == v && ip[j] >= 0 && ip[j] < static_cast<int64_t>(n.inputs.size()))
          base = n.inputs[static_cast<size_t>(ip[j])];
    }
    if (base < 0) return false;
    // The version must be a plain intermediate: not returned, not placed anywhere yet, and
    // only read after this node through the chain.
    if (v != m.value && (uses.output_uses[static_cast<size_t>(v)] > 0 || p.loc[static_cast<size_t>(v)].set))
      return false;
    if (std::count(n.inputs.begin(), n.inputs.end(), base) != 1) return false;
    if (base == in_v && returned(g, uses, in_v)) return false;
    if (g.type(base) != g.type(v)) return false;
    for (int r : readers(g, uses, base))
      if (r != prod && r > prod) return false;
    chain.push_back(prod);
    versions.push_back(v);
    v = base;
  }
  const Location& last = p.loc[static_cast<size_t>(m.value)];
  if (last.set && last.space != Space::Output) return false;
  if (last.set) p.output_copy[static_cast<size_t>(last.index)] = m.value;
  for (size_t i = 0; i < chain.size(); ++i) {
    p.inplace[static_cast<size_t>(chain[i])] = true;
    const int out = versions[i];
    p.loc[static_cast<size_t>(out)] = Location{Space::Input, m.input_index, 0, g.strides_of(in_v), true};
  }
  ++p.inplace_mutations;
  return true;
}

std::vector<uint8_t> scalar_bytes(double v, int64_t iv, bool has_iv, DType t) {
  std::vector<uint8_t> out(kernels::element_size(t));
  kernels::dispatch_all(t, [&](auto tag) {
    using T = decltype(tag);
    T x;
    if constexpr (kernels::is_complex_v<T>) {
      x = T(static_cast<typename T::value_type>(v), 0);
    } else if constexpr (std::is_integral_v<T>) {
      x = has_iv ? static_cast<T>(iv) : kernels::convert<T>(v);
    } else {
      x = kernels::convert<T>(v);
    }
    std::memcpy(out.data(), &x, sizeof(T));
  });
  return out;
}

int64_t gemm_scratch_bytes(const Graph& g, const Node& n) {
  if (n.op != Op::fused || !n.attrs.has("gemm")) return 0;
  const Shape& a = g.type(n.inputs[0]).shape;
  const Shape& b = g.type(n.inputs[1]).shape;
  TensorType y{static_cast<DType>(n.attrs.i("gemm_dtype")), Shape(a.begin(), a.end() - 1)};
  y.shape.push_back(b.back());
  return align_up(y.nbytes());
}

}  // namespace

Plan plan_memory(const Graph& g, const std::vector<IOSpec>& output_specs) {
  Plan p;
  UseInfo uses(g);
  const size_t nv = g.values.size(), nn = g.nodes.size();
  p.loc.assign(nv, Location{});
  p.inplace.assign(nn, false);
  p.scratch_offset.assign(nn, 0);
  p.scratch_bytes.assign(nn, 0);
  p.outputs = output_specs;

  for (size_t k = 0; k < g.inputs.size(); ++k) {
    Location& l = p.loc[static_cast<size_t>(g.inputs[k])];
    l = Location{Space::Input, static_cast<int32_t>(k), 0, g.strides_of(g.inputs[k]), true};
  }
  // Constants read by dense kernels, fused kernels (blobs) or returned.
  std::set<int> const_needed;
  for (const Node& n : g.nodes) {
    if (op_kind(n.op) == OpKind::Move || n.op == Op::constant) continue;
    for (int v : n.inputs)
      if (v >= 0) const_needed.insert(chain_root_of(g, uses, v));
  }
  for (int v : g.outputs) const_needed.insert(chain_root_of(g, uses, v));
  for (const Mutation& m : g.mutations) const_needed.insert(chain_root_of(g, uses, m.value));
  for (const Node& n : g.nodes) {
    if (n.op != Op::constant || !const_needed.count(n.outputs[0])) continue;
    const int v = n.outputs[0];
    const TensorType& t = g.type(v);
    IOSpec spec{t.dtype, t.shape, contiguous_strides(t.shape), ""};
    std::vector<uint8_t> data;
    if (n.attrs.has("blob")) {
      data = g.blobs[static_cast<size_t>(n.attrs.i("blob"))];
    } else {
      data =
          scalar_bytes(n.attrs.f("value"), n.attrs.i("ivalue", 0), n.attrs.has("ivalue"), t.dtype);
    }
    p.loc[static_cast<size_t>(v)] =
        Location{Space::Constant, static_cast<int32_t>(p.constants.size()), 0, spec.strides, true};
    p.constants.push_back(spec);
    p.constant_data.push_back(std::move(data));
  }
  // Outputs written in place by their producer.
  p.output_copy.assign(g.outputs.size(), -1);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int v = g.outputs[k];
    IOSpec& spec = p.outputs[k];
    if (!non_overlapping(spec.shape, spec.strides)) spec.strides = contiguous_strides(spec.shape);
    const int prod = uses.producer[static_cast<size_t>(v)];
    const bool root = prod >= 0 && op_kind(g.nodes[static_cast<size_t>(prod)].op) != OpKind::Move &&
                      g.nodes[static_cast<size_t>(prod)].op != Op::constant;
    if (root && !p.loc[static_cast<size_t>(v)].set) {
      p.loc[static_cast<size_t>(v)] =
          Location{Space::Output, static_cast<int32_t>(k), 0, spec.strides, true};
      continue;
    }
    // A reshape of a computed value: compute the value straight into the output (same element
    // order when both are contiguous); its other readers read it there.
    int r = v;
    bool reshapes_only = true;
    while (true) {
      const int pr = uses.producer[static_cast<size_t>(r)];
      if (pr < 0 || op_kind(g.nodes[static_cast<size_t>(pr)].op) != OpKind::Move) break;
      if (g.nodes[static_cast<size_t>(pr)].op != Op::reshape || (uses.num_uses(r) != 1 && r != v))
        reshapes_only = false;
      r = g.nodes[static_cast<size_t>(pr)].inputs[0];
    }
    const int rp = uses.producer[static_cast<size_t>(r)];
    if (reshapes_only && r != v && rp >= 0 && g.nodes[static_cast<size_t>(rp)].op != Op::constant &&
        !p.loc[static_cast<size_t>(r)].set && is_contiguous_layout(spec.shape, spec.strides)) {
      p.loc[static_cast<size_t>(r)] = Location{Space::Output, static_cast<int32_t>(k), 0,
                                               contiguous_strides(g.type(r).shape), true};
      spec.strides = contiguous_strides(spec.shape);
      continue;
    }
    p.output_copy[k] = v;
  }
  // Mutations: write straight into the input when every other reader runs earlier.
  for (const Mutation& m : g.mutations) {
    const int in_v = g.inputs[static_cast<size_t>(m.input_index)];
    if (m.value == in_v) continue;
    const int prod = uses.producer[static_cast<size_t>(m.value)];
    bool done = false;
    if (prod >= 0) {
      const Node& n = g.nodes[static_cast<size_t>(prod)];
      std::vector<int> rd = readers(g, uses, in_v);
      bool others_before = !returned(g, uses, in_v);
      for (int r : rd)
        if (r != prod && r > prod) others_before = false;
      Location& l = p.loc[static_cast<size_t>(m.value)];
      const bool free_or_output = !l.set || l.space == Space::Output;
      // (Scatters into the input, one or a chain of them: inplace_scatter_chain below.)
      if (n.op == Op::custom && n.attrs.has("inplace") && others_before && free_or_output) {
        // A custom op that declares output j a new version of input k (an NKI op mutating
        // its argument) writes the input itself when it reads it through that input only.
        const std::vector<int64_t>& ip = n.attrs.ints("inplace");
        for (size_t j = 0; j < n.outputs.size() && j < ip.size(); ++j) {
          if (n.outputs[j] != m.value || ip[j] < 0 ||
              ip[j] >= static_cast<int64_t>(n.inputs.size()) ||
              n.inputs[static_cast<size_t>(ip[j])] != in_v)
            continue;
          done = std::count(n.inputs.begin(), n.inputs.end(), in_v) == 1 &&
                 g.type(m.value) == g.type(in_v);
        }
        if (done) p.inplace[static_cast<size_t>(prod)] = true;
      } else if (n.op == Op::fused && !n.attrs.has("gemm") && others_before && free_or_output) {
        // The kernel may overwrite the input only where it reads it at the same position.
        std::vector<LeafLayout> in_l, out_l;
        for (int v : n.inputs) {
          const std::vector<int64_t> s = p.loc[static_cast<size_t>(v)].set
                                             ? p.loc[static_cast<size_t>(v)].strides
                                             : layout_of(g, v);
          in_l.push_back(LeafLayout{s, is_contiguous_layout(g.type(v).shape, s)});
        }
        int out_pos = -1;
        for (size_t j = 0; j < n.outputs.size(); ++j) {
          const int o = n.outputs[j];
          const std::vector<int64_t> s = o == m.value ? g.strides_of(in_v) : layout_of(g, o);
          if (o == m.value) out_pos = static_cast<int>(j);
          out_l.push_back(LeafLayout{s, is_contiguous_layout(g.type(o).shape, s)});
        }
        std::vector<bool> red;
        for (int64_t r : n.attrs.ints("reduced")) red.push_back(r != 0);
        CodegenResult cg = codegen_fused(*n.body, n.attrs.ints("domain"), red, in_l, out_l);
        if (cg.fused && out_pos >= 0) {
          const vm::Kernel& k = cg.fused->kernel;
          const int out_buf = static_cast<int>(n.inputs.size()) + out_pos;
          const vm::Operand* store = nullptr;
          for (size_t o = 0; o < k.operands.size(); ++o)
            if (cg.fused->operand_buffer[o] == out_buf) store = &k.operands[o];
          bool ok = store != nullptr;
          for (size_t o = 0; o < k.operands.size() && ok; ++o) {
            const int b = cg.fused->operand_buffer[o];
            if (b >= static_cast<int>(n.inputs.size()) || n.inputs[static_cast<size_t>(b)] != in_v)
              continue;
            const vm::Operand& op = k.operands[o];
            if (!op.masks.empty() || op.strides != store->strides || op.offset != store->offset)
              ok = false;
          }
          done = ok;
        }
      }
      if (done) {
        if (l.set && l.space == Space::Output)
          p.output_copy[static_cast<size_t>(l.index)] = m.value;
        l = Location{Space::Input, m.input_index, 0, g.strides_of(in_v), true};
        ++p.inplace_mutations;
      }
    }
    if (!done) done = inplace_scatter_chain(g, uses, m, p);
    if (!done) p.end_copies.push_back(m);
  }
  // Outputs that are views of an input the program does not write, with the layout the caller
  // asked for, are that input seen through the view (no copy): AOT's forward graphs return the
  // transposed weights and the inputs their backward needs.
  std::set<int> mutated;
  for (const Mutation& m : g.mutations) mutated.insert(m.input_index);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int v = p.output_copy[k];
    if (v < 0) continue;
    const int root = chain_root_of(g, uses, v);
    if (g.type(root).dtype != g.type(v).dtype) continue;
    const Location& rl = p.loc[static_cast<size_t>(root)];
    int base = -1;
    bool of_output = false;
    std::vector<int64_t> strides;
    if (rl.set && rl.space == Space::Output && p.output_copy[static_cast<size_t>(rl.index)] < 0) {
      base = rl.index;  // a view of another output (computed in place there)
      of_output = true;
      strides = rl.strides;
    } else {
      const auto in_it = std::find(g.inputs.begin(), g.inputs.end(), root);
      if (in_it == g.inputs.end()) continue;
      base = static_cast<int>(in_it - g.inputs.begin());
      if (mutated.count(base)) continue;
      strides = g.strides_of(root);
    }
    int64_t offset = 0;
    if (root != v) {
      std::string why;
      auto rv = resolve_view(g, uses, v, strides,
                             is_contiguous_layout(g.type(root).shape, strides), &why);
      if (!rv || rv->dom.rank() != g.type(v).rank()) continue;
      strides = rv->addr.strides;
      offset = rv->addr.offset;
    }
    const IOSpec& spec = p.outputs[k];
    bool same = spec.strides.size() == strides.size();
    for (size_t d = 0; same && d < strides.size(); ++d)
      if (spec.shape[d] != 1 && spec.strides[d] != strides[d]) same = false;
    if (!same) continue;
    p.output_aliases.push_back(OutputAlias{static_cast<int32_t>(k), base, offset, of_output});
    p.output_copy[k] = -1;
  }
  // Everything else produced by a node lives in the arena.
  struct Buf {
    int value;  // -1: node scratch
    int node;
    int64_t bytes, first, last, offset = 0;
  };
  std::vector<Buf> bufs;
  std::map<int, size_t> buf_of_value;
  for (size_t i = 0; i < nn; ++i) {
    const Node& n = g.nodes[i];
    if (op_kind(n.op) == OpKind::Move || n.op == Op::constant) continue;
    for (int o : n.outputs) {
      Location& l = p.loc[static_cast<size_t>(o)];
      if (l.set) continue;
      l = Location{Space::Arena, 0, 0, contiguous_strides(g.type(o).shape), true};
      buf_of_value[o] = bufs.size();
      bufs.push_back(Buf{o, static_cast<int>(i), align_up(std::max<int64_t>(g.type(o).nbytes(), 1)),
                         static_cast<int64_t>(i), static_cast<int64_t>(i)});
    }
    const int64_t sb = gemm_scratch_bytes(g, n);
    if (sb > 0) {
      p.scratch_bytes[i] = sb;
      bufs.push_back(
          Buf{-1, static_cast<int>(i), sb, static_cast<int64_t>(i), static_cast<int64_t>(i)});
    }
  }
  for (const auto& entry : buf_of_value)
    for (int r : readers(g, uses, entry.first))
      bufs[entry.second].last = std::max<int64_t>(bufs[entry.second].last, r);
  const int64_t end = static_cast<int64_t>(nn);
  auto extend_to_end = [&](int v) {
    auto it = buf_of_value.find(chain_root_of(g, uses, v));
    if (it != buf_of_value.end()) bufs[it->second].last = end;
  };
  for (int v : p.output_copy)
    if (v >= 0) extend_to_end(v);
  for (const Mutation& m : p.end_copies) extend_to_end(m.value);
  // Greedy placement, largest first, at the lowest offset free over the buffer's lifetime.
  std::vector<size_t> order(bufs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bufs[a].bytes > bufs[b].bytes; });
  std::vector<size_t> placed;
  int64_t arena = 0;
  for (size_t bi : order) {
    Buf& b = bufs[bi];
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t pi : placed) {
      const Buf& o = bufs[pi];
      if (o.first <= b.last && b.first <= o.last) busy.push_back({o.offset, o.offset + o.bytes});
    }
    std::sort(busy.begin(), busy.end());
    int64_t off = 0;
    for (const auto& [lo, hi] : busy) {
      if (off + b.bytes <= lo) break;
      off = std::max(off, align_up(hi));
    }
    b.offset = off;
    arena = std::max(arena, off + b.bytes);
    placed.push_back(bi);
  }
  for (const Buf& b : bufs) {
    if (b.value >= 0) {
      p.loc[static_cast<size_t>(b.value)].byte_offset = b.offset;
    } else {
      p.scratch_offset[static_cast<size_t>(b.node)] = b.offset;
    }
  }
  p.arena_bytes = arena;
  return p;
}

std::string print_plan(const Graph& g, const Plan& p) {
  std::ostringstream os;
  os << "memory plan: arena " << p.arena_bytes << " bytes, " << p.constants.size() << " constants, "
     << p.inplace_mutations << " in-place mutations, " << p.end_copies.size()
     << " copied mutations\n";
  for (size_t v = 0; v < p.loc.size(); ++v) {
    const Location& l = p.loc[v];
    if (!l.set) continue;
    os << "  %" << v << " " << g.type(static_cast<int>(v)).str() << " -> ";
    switch (l.space) {
      case Space::Input:
        os << "input#" << l.index;
        break;
      case Space::Output:
        os << "output#" << l.index;
        break;
      case Space::Constant:
        os << "const#" << l.index;
        break;
      case Space::Arena:
        os << "arena+" << l.byte_offset;
        break;
    }
    os << "\n";
  }
  for (const OutputAlias& a : p.output_aliases)
    os << "  output#" << a.output << " is a view of " << (a.of_output ? "output#" : "input#")
       << a.input << " (offset " << a.offset << ")\n";
  for (size_t i = 0; i < p.inplace.size(); ++i)
    if (p.inplace[i])
      os << "  node #" << i << " (" << op_name(g.nodes[i].op) << ") writes its input in place\n";
  return os.str();
}

// ---------------------------------------------------------------------------------------

namespace {

class Lowerer {
 public:
  Lowerer(const Graph& g, const Plan& plan) : g_(g), plan_(plan), uses_(g) {}

  TensorDesc root_desc(int v) const {
    const Location& l = plan_.loc.at(static_cast<size_t>(v));
    if (!l.set) throw CompileError(rt::str("lowering: value %", v, " has no buffer"));
    TensorDesc d;
    d.space = l.space;
    d.index = l.index;
    d.byte_offset = l.byte_offset;
    d.dtype = g_.type(v).dtype;
    d.sizes = g_.type(v).shape;
    d.strides = l.strides;
    return d;
  }

  // A value seen through its view chain (same logical rank unless `allow_refined`).
  TensorDesc view_desc(int v, bool allow_refined = false) const {
    const int root = chain_root_of(g_, uses_, v);
    if (root == v) return root_desc(v);
    const Location& l = plan_.loc.at(static_cast<size_t>(root));
    std::string why;
    auto rv = resolve_view(g_, uses_, v, l.strides,
                           is_contiguous_layout(g_.type(root).shape, l.strides), &why);
    if (!rv)
      throw CompileError(
          rt::str("lowering: view %", v, " cannot be expressed with strides: ", why));
    if (!allow_refined && rv->dom.rank() != g_.type(v).rank())
      throw CompileError(rt::str("lowering: view %", v, " needs a split domain"));
    TensorDesc d = root_desc(root);
    d.dtype = g_.type(v).dtype;
    d.sizes = rv->dom.size;
    d.strides = rv->addr.strides;
    d.offset = rv->addr.offset;
    return d;
  }

  // A value as (desc with refined dims, digits per logical dim).
  std::pair<TensorDesc, std::vector<std::vector<std::pair<int64_t, int64_t>>>> digits_desc(
      int v) const {
    const int root = chain_root_of(g_, uses_, v);
    const int r = g_.type(v).rank();
    std::vector<std::vector<std::pair<int64_t, int64_t>>> dg(static_cast<size_t>(r));
    if (root == v) {
      TensorDesc d = root_desc(v);
      for (int k = 0; k < r; ++k)
        dg[static_cast<size_t>(k)].push_back(
            {d.sizes[static_cast<size_t>(k)], d.strides[static_cast<size_t>(k)]});
      return {d, dg};
    }
    const Location& l = plan_.loc.at(static_cast<size_t>(root));
    std::string why;
    auto rv = resolve_view(g_, uses_, v, l.strides,
                           is_contiguous_layout(g_.type(root).shape, l.strides), &why);
    if (!rv)
      throw CompileError(
          rt::str("lowering: view %", v, " cannot be expressed with strides: ", why));
    TensorDesc d = root_desc(root);
    d.dtype = g_.type(v).dtype;
    d.sizes = rv->dom.size;
    d.strides = rv->addr.strides;
    d.offset = rv->addr.offset;
    for (int k = 0; k < rv->dom.rank(); ++k)
      dg[static_cast<size_t>(rv->dom.owner[static_cast<size_t>(k)])].push_back(
          {rv->dom.size[static_cast<size_t>(k)], rv->addr.strides[static_cast<size_t>(k)]});
    return {d, dg};
  }

  // Splits (size, stride) digits to the finer `target` sizes (both outer first).
  static std::vector<std::pair<int64_t, int64_t>> split_digits(
      const std::vector<std::pair<int64_t, int64_t>>& cur, const std::vector<int64_t>& target,
      const std::string& what) {
    std::vector<std::pair<int64_t, int64_t>> out;
    size_t t = target.size();
    for (size_t i = cur.size(); i-- > 0;) {
      int64_t need = cur[i].first, stride = cur[i].second;
      std::vector<std::pair<int64_t, int64_t>> part;
      while (need > 1) {
        if (t == 0 || need % target[t - 1] != 0)
          throw CompileError(what + ": batch dims of the matmul operands do not nest");
        part.push_back({target[t - 1], stride});
        stride *= target[t - 1];
        need /= target[t - 1];
        --t;
      }
      out.insert(out.begin(), part.rbegin(), part.rend());
    }
    return out;
  }

  // A, B and C of a GEMM with one common split of their batch dims. `c` = -1 uses `*scratch`.
  std::vector<TensorDesc> matmul_operands(int a, int b, int c, const std::string& what,
                                          const TensorDesc* scratch = nullptr) const {
    auto [da, ga] = digits_desc(a);
    auto [db, gb] = digits_desc(b);
    TensorDesc dc;
    std::vector<std::vector<std::pair<int64_t, int64_t>>> gc;
    if (c >= 0) {
      std::tie(dc, gc) = digits_desc(c);
    } else {
      dc = *scratch;
      for (size_t k = 0; k < dc.sizes.size(); ++k) gc.push_back({{dc.sizes[k], dc.strides[k]}});
    }
    const size_t r = ga.size();
    std::vector<TensorDesc> out = {da, db, dc};
    using Dg = std::vector<std::vector<std::pair<int64_t, int64_t>>>;
    std::vector<Dg*> gs = {&ga, &gb, &gc};
    for (TensorDesc& d : out) {
      d.sizes.clear();
      d.strides.clear();
    }
    for (size_t d = 0; d + 2 < r; ++d) {
      std::vector<std::vector<int64_t>> splits;
      for (auto* g : gs) {
        std::vector<int64_t> s;
        for (auto& [sz, st] : (*g)[d]) {
          (void)st;
          s.push_back(sz);
        }
        splits.push_back(s);
      }
      auto common = common_digits(splits);
      if (!common) throw CompileError(what + ": batch dims of the matmul operands do not nest");
      for (size_t o = 0; o < 3; ++o)
        for (auto& [sz, st] : split_digits((*gs[o])[d], *common, what)) {
          out[o].sizes.push_back(sz);
          out[o].strides.push_back(st);
        }
    }
    for (size_t o = 0; o < 3; ++o)
      for (size_t d = r - 2; d < r; ++d) {
        auto& dg = (*gs[o])[d];
        int64_t size = 1, stride = 0;
        for (auto& [sz, st] : dg)
          if (sz != 1) {
            if (size != 1) throw CompileError(what + ": a matrix dim of a matmul operand is split");
            size = sz;
            stride = st;
          }
        out[o].sizes.push_back(size);
        out[o].strides.push_back(stride);
      }
    return out;
  }

  // A copy of `v` (any view) into `dst` (a buffer with v's logical shape): when the view
  // needs a refined domain, both sides are split the same way.
  Step copy_step(int v, TensorDesc dst, const std::string& name) const {
    Step s;
    s.kind = StepKind::Copy;
    s.name = name;
    const int root = chain_root_of(g_, uses_, v);
    if (root == v) {
      s.tensors = {root_desc(v), dst};
      return s;
    }
    const Location& l = plan_.loc.at(static_cast<size_t>(root));
    std::string why;
    auto rv = resolve_view(g_, uses_, v, l.strides,
                           is_contiguous_layout(g_.type(root).shape, l.strides), &why);
    if (!rv)
      throw CompileError(
          rt::str("lowering: view %", v, " cannot be expressed with strides: ", why));
    TensorDesc src = root_desc(root);
    src.dtype = g_.type(v).dtype;
    src.sizes = rv->dom.size;
    src.strides = rv->addr.strides;
    src.offset = rv->addr.offset;
    std::vector<int64_t> ds;
    for (int k = 0; k < rv->dom.rank(); ++k)
      ds.push_back(dst.strides[static_cast<size_t>(rv->dom.owner[static_cast<size_t>(k)])] *
                   rv->dom.mult[static_cast<size_t>(k)]);
    dst.sizes = rv->dom.size;
    dst.strides = ds;
    s.tensors = {src, dst};
    return s;
  }

  Program run(const std::vector<IOSpec>& input_specs) {
    Program p;
    p.inputs = input_specs;
    p.outputs = plan_.outputs;
    p.output_aliases = plan_.output_aliases;
    p.constants = plan_.constants;
    p.constant_data = plan_.constant_data;
    p.arena_bytes = plan_.arena_bytes;
    for (const Mutation& m : g_.mutations) p.mutated_inputs.push_back(m.input_index);
    std::sort(p.mutated_inputs.begin(), p.mutated_inputs.end());
    p.mutated_inputs.erase(std::unique(p.mutated_inputs.begin(), p.mutated_inputs.end()),
                           p.mutated_inputs.end());
    for (size_t i = 0; i < g_.nodes.size(); ++i) lower_node(i, &p);
    for (size_t k = 0; k < plan_.output_copy.size(); ++k) {
      const int v = plan_.output_copy[k];
      if (v < 0) continue;
      TensorDesc d;
      d.space = Space::Output;
      d.index = static_cast<int32_t>(k);
      d.dtype = plan_.outputs[k].dtype;
      d.sizes = plan_.outputs[k].shape;
      d.strides = plan_.outputs[k].strides;
      p.steps.push_back(copy_step(v, d, rt::str("output #", k)));
    }
    for (const Mutation& m : plan_.end_copies)
      p.steps.push_back(copy_step(m.value, root_desc(g_.inputs[static_cast<size_t>(m.input_index)]),
                                  rt::str("mutation of input #", m.input_index)));
    return p;
  }

 private:
  std::string node_name(size_t i) const {
    const Node& n = g_.nodes[i];
    const int out = n.outputs.empty() ? -1 : n.outputs[0];
    if (n.op == Op::custom)
      return rt::str(n.attrs.has("name") ? n.attrs.s("name") : n.attrs.s("target"), " %", out);
    return rt::str(op_name(n.op), " %", out);
  }

  void add_fused(const Node& n, size_t i, Program* p) {
    std::vector<bool> red;
    for (int64_t r : n.attrs.ints("reduced")) red.push_back(r != 0);
    const bool gemm = n.attrs.has("gemm");
    Step s;
    s.name = node_name(i);
    std::vector<LeafLayout> in_l, out_l;
    std::vector<int> body_buffers;  // body input j -> step tensor index
    if (gemm) {
      s.kind = StepKind::Gemm;
      const TensorType yt = n.body->type(n.body->inputs[0]);
      TensorDesc y;
      y.space = Space::Arena;
      y.byte_offset = plan_.scratch_offset[i];
      y.dtype = yt.dtype;
      y.sizes = yt.shape;
      y.strides = contiguous_strides(yt.shape);
      s.tensors = matmul_operands(n.inputs[0], n.inputs[1], -1, s.name, &y);
      s.scratch_offset = plan_.scratch_offset[i];
      s.scratch_bytes = plan_.scratch_bytes[i];
      s.floats = {1.0, 0.0};
      s.tensors.push_back(y);
      in_l.push_back(LeafLayout{y.strides, true});
      body_buffers.push_back(3);
      for (size_t j = 2; j < n.inputs.size(); ++j) {
        body_buffers.push_back(static_cast<int>(s.tensors.size()));
        s.tensors.push_back(root_desc(n.inputs[j]));
        in_l.push_back(
            LeafLayout{s.tensors.back().strides,
                       is_contiguous_layout(s.tensors.back().sizes, s.tensors.back().strides)});
      }
    } else {
      s.kind = StepKind::Fused;
      for (int v : n.inputs) {
        body_buffers.push_back(static_cast<int>(s.tensors.size()));
        s.tensors.push_back(root_desc(v));
        in_l.push_back(
            LeafLayout{s.tensors.back().strides,
                       is_contiguous_layout(s.tensors.back().sizes, s.tensors.back().strides)});
      }
    }
    std::vector<int> out_buffers;
    for (int o : n.outputs) {
      out_buffers.push_back(static_cast<int>(s.tensors.size()));
      s.tensors.push_back(root_desc(o));
      out_l.push_back(
          LeafLayout{s.tensors.back().strides,
                     is_contiguous_layout(s.tensors.back().sizes, s.tensors.back().strides)});
    }
    CodegenResult cg = codegen_fused(*n.body, n.attrs.ints("domain"), red, in_l, out_l);
    if (!cg.fused) throw CompileError(rt::str("lowering ", s.name, ": ", cg.why));
    s.kernel = std::make_shared<vm::Kernel>(std::move(cg.fused->kernel));
    const int nin = static_cast<int>(n.body->inputs.size());
    for (int b : cg.fused->operand_buffer)
      s.kernel_buffers.push_back(b < nin ? body_buffers[static_cast<size_t>(b)]
                                         : out_buffers[static_cast<size_t>(b - nin)]);
    p->steps.push_back(std::move(s));
  }

  void lower_node(size_t i, Program* p) {
    const Node& n = g_.nodes[i];
    if (op_kind(n.op) == OpKind::Move || n.op == Op::constant) return;
    if (n.op == Op::fused) return add_fused(n, i, p);
    Step s;
    s.name = node_name(i);
    auto in_view = [&](size_t k) { return view_desc(n.inputs[k]); };
    switch (n.op) {
      case Op::matmul:
        s.kind = StepKind::Gemm;
        s.tensors = matmul_operands(n.inputs[0], n.inputs[1], n.outputs[0], s.name);
        s.floats = {1.0, 0.0};
        break;
      case Op::attention:
        s.kind = StepKind::Attention;
        s.tensors = {in_view(0), in_view(1), in_view(2), root_desc(n.outputs[0])};
        if (n.inputs.size() == 4) s.tensors.push_back(in_view(3));
        if (n.outputs.size() == 2) s.tensors.push_back(root_desc(n.outputs[1]));
        s.floats = {n.attrs.f("scale")};
        s.ints = {n.attrs.i("causal", 0), n.attrs.i("zero_masked_rows", 0),
                  n.inputs.size() == 4 ? 1 : 0, n.outputs.size() == 2 ? 1 : 0};
        break;
      case Op::attention_backward:
        s.kind = StepKind::AttentionBackward;
        for (size_t k = 0; k < 6; ++k) s.tensors.push_back(in_view(k));
        for (int o : n.outputs) s.tensors.push_back(root_desc(o));
        if (n.inputs.size() == 7) s.tensors.push_back(in_view(6));
        s.floats = {n.attrs.f("scale")};
        s.ints = {n.attrs.i("causal", 0), n.inputs.size() == 7 ? 1 : 0};
        break;
      case Op::index: {
        s.kind = StepKind::Index;
        s.tensors = {in_view(0), root_desc(n.outputs[0])};
        for (size_t k = 1; k < n.inputs.size(); ++k) {
          if (n.inputs[k] < 0) continue;
          s.tensors.push_back(in_view(k));
          s.ints.push_back(static_cast<int64_t>(k - 1));
        }
        break;
      }
      case Op::index_put: {
        s.kind = StepKind::IndexPut;
        s.tensors = {in_view(0), in_view(1), root_desc(n.outputs[0])};
        s.ints = {n.attrs.i("accumulate", 0), plan_.inplace[i] ? 1 : 0};
        for (size_t k = 2; k < n.inputs.size(); ++k) {
          if (n.inputs[k] < 0) continue;
          s.tensors.push_back(in_view(k));
          s.ints.push_back(static_cast<int64_t>(k - 2));
        }
        break;
      }
      case Op::gather:
        s.kind = StepKind::Gather;
        s.tensors = {in_view(0), in_view(1), root_desc(n.outputs[0])};
        s.ints = {normalize_dim(n.attrs.i("dim"), g_.type(n.inputs[0]).rank(), "gather")};
        break;
      case Op::scatter:
        s.kind = StepKind::Scatter;
        s.tensors = {in_view(0), in_view(1), in_view(2), root_desc(n.outputs[0])};
        s.ints = {normalize_dim(n.attrs.i("dim"), g_.type(n.inputs[0]).rank(), "scatter"),
                  n.attrs.s("reduce") == "add" ? 1 : 0, plan_.inplace[i] ? 1 : 0};
        break;
      case Op::slice_scatter:
        s.kind = StepKind::SliceScatter;
        s.tensors = {in_view(0), in_view(1), root_desc(n.outputs[0])};
        s.ints = {normalize_dim(n.attrs.i("dim"), g_.type(n.inputs[0]).rank(), "slice_scatter"),
                  n.attrs.i("start"), n.attrs.i("end"), n.attrs.i("step", 1),
                  plan_.inplace[i] ? 1 : 0};
        break;
      case Op::conv:
      case Op::conv_backward: {
        const bool bwd = n.op == Op::conv_backward;
        s.kind = bwd ? StepKind::ConvBackward : StepKind::Conv;
        const auto& st = n.attrs.ints("stride");
        s.ints.push_back(static_cast<int64_t>(st.size()));
        for (const char* key : {"stride", "padding", "dilation"})
          for (int64_t x : n.attrs.ints(key)) s.ints.push_back(x);
        s.ints.push_back(n.attrs.i("groups"));
        for (size_t k = 0; k < n.inputs.size(); ++k) s.tensors.push_back(in_view(k));
        if (!bwd) {
          s.ints.push_back(n.inputs.size() == 3 ? 1 : 0);
          s.tensors.push_back(root_desc(n.outputs[0]));
        } else {
          UseInfo& u = const_cast<UseInfo&>(uses_);
          for (int o : n.outputs) {
            const bool used = u.num_uses(o) > 0;
            s.ints.push_back(used ? 1 : 0);
            s.tensors.push_back(root_desc(o));
          }
        }
        break;
      }
      case Op::max_pool:
      case Op::max_pool_backward:
      case Op::avg_pool:
      case Op::avg_pool_backward: {
        const bool maxp = n.op == Op::max_pool || n.op == Op::max_pool_backward;
        s.kind = n.op == Op::max_pool            ? StepKind::MaxPool
                 : n.op == Op::max_pool_backward ? StepKind::MaxPoolBackward
                 : n.op == Op::avg_pool          ? StepKind::AvgPool
                                                 : StepKind::AvgPoolBackward;
        for (const char* key : {"kernel", "stride", "padding"})
          for (int64_t x : n.attrs.ints(key)) s.ints.push_back(x);
        if (maxp) {
          const std::vector<int64_t> d =
              n.attrs.has("dilation") ? n.attrs.ints("dilation") : std::vector<int64_t>{1, 1};
          s.ints.insert(s.ints.end(), d.begin(), d.end());
          s.ints.push_back(n.attrs.i("ceil_mode", 0));
        } else {
          s.ints.push_back(n.attrs.i("ceil_mode", 0));
          s.ints.push_back(n.attrs.i("count_include_pad", 1));
          s.ints.push_back(n.attrs.i("divisor", 0));
        }
        if (g_.type(n.outputs[0]).rank() < 2 || n.attrs.ints("kernel").size() != 2)
          throw CompileError(rt::str("lowering ", s.name, ": only 2-D pooling is compiled"));
        if (n.op == Op::max_pool) {
          s.tensors = {in_view(0), root_desc(n.outputs[0]), root_desc(n.outputs[1])};
        } else if (n.op == Op::max_pool_backward) {
          s.tensors = {in_view(0), in_view(2), root_desc(n.outputs[0])};
        } else if (n.op == Op::avg_pool) {
          s.tensors = {in_view(0), root_desc(n.outputs[0])};
        } else {
          s.tensors = {in_view(0), root_desc(n.outputs[0])};
        }
        break;
      }
      case Op::layer_norm:
      case Op::layer_norm_backward: {
        const bool bwd = n.op == Op::layer_norm_backward;
        s.kind = bwd ? StepKind::LayerNormBackward : StepKind::LayerNorm;
        for (size_t k = 0; k < n.inputs.size(); ++k) s.tensors.push_back(in_view(k));
        s.ints = {n.attrs.i("axis"), n.attrs.i("has_weight", 0), n.attrs.i("has_bias", 0)};
        UseInfo& u = const_cast<UseInfo&>(uses_);
        for (int o : n.outputs) {
          s.tensors.push_back(root_desc(o));
          if (bwd) s.ints.push_back(u.num_uses(o) > 0 ? 1 : 0);
        }
        s.floats = {bwd ? 0.0 : n.attrs.f("eps")};
        break;
      }
      case Op::batch_norm:
      case Op::batch_norm_backward: {
        const bool bwd = n.op == Op::batch_norm_backward;
        s.kind = bwd ? StepKind::BatchNormBackward : StepKind::BatchNorm;
        for (size_t k = 0; k < n.inputs.size(); ++k) s.tensors.push_back(in_view(k));
        s.ints = {n.attrs.i("has_weight", 0)};
        if (!bwd) s.ints.insert(s.ints.end(), {n.attrs.i("has_bias", 0), n.attrs.i("has_running", 0)});
        UseInfo& u = const_cast<UseInfo&>(uses_);
        for (int o : n.outputs) {
          s.tensors.push_back(root_desc(o));
          if (bwd) s.ints.push_back(u.num_uses(o) > 0 ? 1 : 0);
        }
        if (bwd)
          s.floats = {n.attrs.f("eps")};
        else
          s.floats = {n.attrs.f("momentum"), n.attrs.f("eps")};
        break;
      }
      case Op::softmax:
      case Op::log_softmax:
      case Op::softmax_backward:
      case Op::log_softmax_backward: {
        const bool bwd = n.op == Op::softmax_backward || n.op == Op::log_softmax_backward;
        s.kind = bwd ? StepKind::SoftmaxBackward : StepKind::Softmax;
        s.tensors = {in_view(0)};
        if (bwd) s.tensors.push_back(in_view(1));
        s.tensors.push_back(root_desc(n.outputs[0]));
        s.ints = {normalize_dim(n.attrs.i("dim"), g_.type(n.inputs[0]).rank(), op_name(n.op)),
                  n.op == Op::log_softmax || n.op == Op::log_softmax_backward ? 1 : 0};
        break;
      }
      case Op::sum:
      case Op::mean:
      case Op::prod:
      case Op::amax:
      case Op::amin: {  // is_dense_reduction(): the eager reduction kernel over the keepdim form
        s.kind = StepKind::Reduce;
        const TensorType& xt = g_.type(n.inputs[0]);
        std::vector<bool> red(xt.shape.size(), false);
        const auto& dims = n.attrs.ints("dims");
        if (dims.empty()) std::fill(red.begin(), red.end(), true);
        for (int64_t d : dims)
          red[static_cast<size_t>(normalize_dim(d, xt.rank(), op_name(n.op)))] = true;
        TensorDesc out = root_desc(n.outputs[0]), keep = out;
        const bool keepdim = n.attrs.i("keepdim", 0) != 0;
        keep.sizes.clear();
        keep.strides.clear();
        size_t src = 0;
        for (size_t d = 0; d < red.size(); ++d) {
          if (red[d]) {
            keep.sizes.push_back(1);
            keep.strides.push_back(0);
            if (keepdim) ++src;
          } else {
            keep.sizes.push_back(out.sizes.at(src));
            keep.strides.push_back(out.strides.at(src));
            ++src;
          }
        }
        s.tensors = {in_view(0), keep};
        s.ints = {n.op == Op::sum    ? 0
                  : n.op == Op::mean ? 1
                  : n.op == Op::prod ? 2
                  : n.op == Op::amax ? 3
                                     : 4};
        break;
      }
      case Op::custom:
        s.kind = StepKind::Custom;
        s.text = n.attrs.s("target");
        s.payload = n.attrs.has("payload") ? n.attrs.s("payload") : "";
        for (size_t k = 0; k < n.inputs.size(); ++k) s.tensors.push_back(in_view(k));
        for (int o : n.outputs) s.tensors.push_back(root_desc(o));
        s.ints = {static_cast<int64_t>(n.inputs.size())};
        break;
      default:
        throw CompileError(rt::str("lowering: no kernel for '", op_name(n.op), "' (", s.name, ")"));
    }
    p->steps.push_back(std::move(s));
  }

  const Graph& g_;
  const Plan& plan_;
  UseInfo uses_;
};

}  // namespace

Program lower(const Graph& g, const Plan& plan, const std::vector<IOSpec>& input_specs) {
  Program p = Lowerer(g, plan).run(input_specs);
  validate(p);
  return p;
}

}  // namespace neuron::cc
