#include "index_map.h"

#include <algorithm>
#include <numeric>

namespace neuron::cc {

namespace {

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Affine scaled(const Affine& a, int64_t s) {
  Affine r = a;
  for (auto& x : r.c) x *= s;
  r.b *= s;
  return r;
}

void add_to(Affine& acc, const Affine& a) {
  for (size_t k = 0; k < acc.c.size(); ++k) acc.c[k] += a.c[k];
  acc.b += a.b;
}

// Splits l into (l div n, l mod n) when both parts stay affine on the domain; else asks for a
// domain split or fails.
bool divmod_affine(const Affine& l, int64_t n, const Domain& dom, Affine* hi, Affine* lo,
                   MapResult* res) {
  if (n == 1) {
    *hi = l;
    *lo = dom.zero();
    return true;
  }
  Affine h = dom.zero(), w = dom.zero();
  int64_t mn = 0, mx = 0;
  for (int k = 0; k < dom.rank(); ++k) {
    const int64_t c = l.c[static_cast<size_t>(k)];
    const int64_t N = dom.size[static_cast<size_t>(k)];
    if (c == 0 || N <= 1) continue;
    if (c % n == 0) {
      h.c[static_cast<size_t>(k)] = c / n;
    } else {
      w.c[static_cast<size_t>(k)] = c;
      mn += std::min<int64_t>(0, c * (N - 1));
      mx += std::max<int64_t>(0, c * (N - 1));
    }
  }
  const int64_t q = floor_div(l.b, n);
  const int64_t r = l.b - q * n;
  h.b = q;
  w.b = r;
  if (mn + r >= 0 && mx + r < n) {
    *hi = h;
    *lo = w;
    return true;
  }
  // A dim whose coefficient divides n and whose size is a multiple of the quotient can be
  // split so that its high digit moves into `hi`.
  for (int k = 0; k < dom.rank(); ++k) {
    const int64_t c = w.c[static_cast<size_t>(k)];
    const int64_t N = dom.size[static_cast<size_t>(k)];
    if (c <= 0 || n % c != 0) continue;
    const int64_t f = n / c;
    if (f > 1 && f < N && N % f == 0) {
      res->split_dim = k;
      res->split_factor = f;
      return false;
    }
  }
  res->why =
      rt::str("an index of the form ", affine_str(l), " cannot be split by ", n, " on this domain");
  return false;
}

}  // namespace

std::string affine_str(const Affine& a) {
  std::string s;
  for (size_t k = 0; k < a.c.size(); ++k) {
    if (a.c[k] == 0) continue;
    if (!s.empty()) s += " + ";
    s += std::to_string(a.c[k]) + "*d" + std::to_string(k);
  }
  if (a.b != 0 || s.empty()) s += (s.empty() ? "" : " + ") + std::to_string(a.b);
  return s;
}

Domain Domain::of(const Shape& F, const std::vector<bool>& reduced) {
  Domain d;
  d.F = F;
  for (size_t i = 0; i < F.size(); ++i) {
    d.size.push_back(F[i]);
    d.owner.push_back(static_cast<int>(i));
    d.mult.push_back(1);
    d.inner.push_back(i < reduced.size() && reduced[i]);
  }
  return d;
}

void Domain::split(int k, int64_t f) {
  const size_t K = static_cast<size_t>(k);
  const int64_t N = size[K];
  size[K] = N / f;
  size.insert(size.begin() + k + 1, f);
  owner.insert(owner.begin() + k + 1, owner[K]);
  mult.insert(mult.begin() + k + 1, mult[K]);
  mult[K] *= f;
  inner.insert(inner.begin() + k + 1, inner[K]);
}

std::optional<IndexMap> Domain::canonical(const Shape& s) const {
  const bool any_inner = std::find(inner.begin(), inner.end(), true) != inner.end();
  auto row_of = [&](int fdim) {
    Affine a = zero();
    for (int k = 0; k < rank(); ++k)
      if (owner[static_cast<size_t>(k)] == fdim)
        a.c[static_cast<size_t>(k)] = mult[static_cast<size_t>(k)];
    return a;
  };
  IndexMap m;
  if (s == F) {
    for (size_t d = 0; d < F.size(); ++d) m.rows.push_back(row_of(static_cast<int>(d)));
    return m;
  }
  if (!any_inner) return std::nullopt;
  std::vector<bool> red(F.size(), false);
  for (int k = 0; k < rank(); ++k)
    if (inner[static_cast<size_t>(k)])
      red[static_cast<size_t>(owner[static_cast<size_t>(k)])] = true;
  Shape keep, squeeze;
  for (size_t d = 0; d < F.size(); ++d) {
    keep.push_back(red[d] ? 1 : F[d]);
    if (!red[d]) squeeze.push_back(F[d]);
  }
  if (s == keep) {
    for (size_t d = 0; d < F.size(); ++d)
      m.rows.push_back(red[d] ? zero() : row_of(static_cast<int>(d)));
    return m;
  }
  if (s == squeeze) {
    for (size_t d = 0; d < F.size(); ++d)
      if (!red[d]) m.rows.push_back(row_of(static_cast<int>(d)));
    return m;
  }
  return std::nullopt;
}

IndexMap map_broadcast(const IndexMap& out, const Shape& result, const Shape& operand,
                       const Domain& dom) {
  IndexMap m;
  m.cons = out.cons;
  const size_t off = result.size() - operand.size();
  for (size_t d = 0; d < operand.size(); ++d) {
    if (operand[d] == 1 && result[off + d] != 1) {
      m.rows.push_back(dom.zero());
    } else {
      m.rows.push_back(out.rows[off + d]);
    }
  }
  return m;
}

MapResult map_reshape(const IndexMap& out, const Shape& from, const Shape& to, const Domain& dom) {
  MapResult res;
  IndexMap m;
  m.cons = out.cons;
  if (out.raw) {  // storage offsets are unchanged by a reshape of a contiguous root
    m = out;
    res.map = m;
    return res;
  }
  int64_t numel = 1;
  for (int64_t s : from) numel *= s;
  m.rows.assign(from.size(), dom.zero());
  if (numel == 0) {
    res.map = m;
    return res;
  }
  // Dims of size 1 carry no information; group the rest into runs of equal products.
  std::vector<size_t> fi, ti;
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1) fi.push_back(i);
  for (size_t j = 0; j < to.size(); ++j)
    if (to[j] != 1) ti.push_back(j);
  size_t a = 0, b = 0;
  while (a < fi.size() || b < ti.size()) {
    if (a >= fi.size() || b >= ti.size()) {
      res.why = "reshape dims do not pair up";
      return res;
    }
    size_t a1 = a + 1, b1 = b + 1;
    int64_t pa = from[fi[a]], pb = to[ti[b]];
    while (pa != pb) {
      if (pa < pb) {
        if (a1 >= fi.size()) {
          res.why = "reshape dims do not pair up";
          return res;
        }
        pa *= from[fi[a1++]];
      } else {
        if (b1 >= ti.size()) {
          res.why = "reshape dims do not pair up";
          return res;
        }
        pb *= to[ti[b1++]];
      }
    }
    // Linear index within the group (row-major over the output dims).
    Affine l = dom.zero();
    int64_t w = 1;
    for (size_t j = b1; j-- > b;) {
      add_to(l, scaled(out.rows[ti[j]], w));
      w *= to[ti[j]];
    }
    // Peel off the input digits, innermost first; the outermost takes the rest.
    for (size_t i = a1; i-- > a;) {
      if (i == a) {
        m.rows[fi[i]] = l;
        break;
      }
      Affine hi, lo;
      if (!divmod_affine(l, from[fi[i]], dom, &hi, &lo, &res)) return res;
      m.rows[fi[i]] = lo;
      l = hi;
    }
    a = a1;
    b = b1;
  }
  res.map = m;
  return res;
}

MapResult map_through_move(const Graph& g, const Node& n, const IndexMap& out, const Domain& dom) {
  MapResult res;
  const Shape& in_shape = g.type(n.inputs[0]).shape;
  const Shape& out_shape = g.type(n.outputs[0]).shape;
  if (out.raw && n.op != Op::reshape) {
    res.why = rt::str("'", op_name(n.op), "' below a storage-level view");
    return res;
  }
  switch (n.op) {
    case Op::reshape:
      return map_reshape(out, in_shape, out_shape, dom);
    case Op::permute: {
      const auto& p = n.attrs.ints("perm");
      IndexMap m;
      m.cons = out.cons;
      m.rows.assign(in_shape.size(), dom.zero());
      for (size_t i = 0; i < p.size(); ++i) m.rows[static_cast<size_t>(p[i])] = out.rows[i];
      res.map = m;
      return res;
    }
    case Op::expand:
      res.map = map_broadcast(out, out_shape, in_shape, dom);
      return res;
    case Op::slice: {
      const size_t d = static_cast<size_t>(
          normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(in_shape.size()), "slice"));
      IndexMap m = out;
      Affine& r = m.rows[d];
      r = scaled(r, n.attrs.i("step", 1));
      r.b += n.attrs.i("start");
      res.map = m;
      return res;
    }
    case Op::as_strided: {
      const auto& st = n.attrs.ints("strides");
      IndexMap m;
      m.cons = out.cons;
      m.raw = true;
      Affine a = dom.zero();
      for (size_t d = 0; d < st.size(); ++d) add_to(a, scaled(out.rows[d], st[d]));
      a.b += n.attrs.i("offset", 0);
      m.rows.push_back(a);
      res.map = m;
      return res;
    }
    default:
      res.why = rt::str("'", op_name(n.op), "' is not a view op");
      return res;
  }
}

Address address_of(const IndexMap& m, const std::vector<int64_t>& strides, int domain_rank) {
  Address a;
  const size_t R = static_cast<size_t>(domain_rank);
  a.strides.assign(R, 0);
  if (m.raw) {
    a.strides = m.rows[0].c;
    a.offset = m.rows[0].b;
    return a;
  }
  for (size_t d = 0; d < m.rows.size(); ++d) {
    const int64_t s = d < strides.size() ? strides[d] : 0;
    for (size_t k = 0; k < R; ++k) a.strides[k] += s * m.rows[d].c[k];
    a.offset += s * m.rows[d].b;
  }
  return a;
}

ViewChain view_chain(const Graph& g, const UseInfo& uses, int value) {
  ViewChain c;
  int v = value;
  while (true) {
    const int p = uses.producer[static_cast<size_t>(v)];
    if (p < 0) break;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (op_kind(n.op) != OpKind::Move) break;
    c.moves.push_back(&n);
    v = n.inputs[0];
  }
  c.root = v;
  return c;
}

std::optional<ResolvedView> resolve_view(const Graph& g, const UseInfo& uses, int value,
                                         const std::vector<int64_t>& root_strides,
                                         bool root_contiguous, std::string* why) {
  const ViewChain chain = view_chain(g, uses, value);
  Domain dom = Domain::of(g.type(value).shape, {});
  for (int attempt = 0; attempt < 64; ++attempt) {
    IndexMap m = *dom.canonical(g.type(value).shape);
    bool ok = true;
    for (size_t i = 0; i < chain.moves.size(); ++i) {
      const Node& mv = *chain.moves[i];
      // A reshape whose input is the contiguous root itself (through reshapes only) keeps the
      // storage order: address it as a raw offset instead of decomposing the index.
      bool only_reshapes_below = root_contiguous && mv.op == Op::reshape;
      for (size_t j = i + 1; j < chain.moves.size() && only_reshapes_below; ++j)
        if (chain.moves[j]->op != Op::reshape) only_reshapes_below = false;
      if (only_reshapes_below && !m.raw) {
        const Shape& s = g.type(mv.outputs[0]).shape;
        const Shape cs = contiguous_strides(s);
        IndexMap r;
        r.raw = true;
        r.cons = m.cons;
        Affine a = dom.zero();
        for (size_t d = 0; d < s.size(); ++d) add_to(a, scaled(m.rows[d], cs[d]));
        r.rows.push_back(a);
        m = r;
        continue;
      }
      MapResult mr = map_through_move(g, mv, m, dom);
      if (mr.needs_split()) {
        dom.split(mr.split_dim, mr.split_factor);
        ok = false;
        break;
      }
      if (!mr.map) {
        if (why) *why = mr.why;
        return std::nullopt;
      }
      m = *mr.map;
    }
    if (!ok) continue;
    if (!m.cons.empty()) {
      if (why) *why = "masked view";
      return std::nullopt;
    }
    ResolvedView rv;
    rv.dom = dom;
    rv.addr = address_of(m, root_strides, dom.rank());
    rv.root = chain.root;
    return rv;
  }
  if (why) *why = "too many domain refinements";
  return std::nullopt;
}

std::vector<int64_t> digits_of(const Domain& dom, int d) {
  std::vector<int64_t> r;
  for (int k = 0; k < dom.rank(); ++k)
    if (dom.owner[static_cast<size_t>(k)] == d) r.push_back(dom.size[static_cast<size_t>(k)]);
  return r;
}

std::optional<std::vector<int64_t>> common_digits(const std::vector<std::vector<int64_t>>& splits) {
  std::vector<int64_t> cum;  // inner cumulative products of every split
  int64_t total = -1;
  for (const auto& s : splits) {
    int64_t c = 1;
    for (size_t i = s.size(); i-- > 0;) {
      c *= s[i];
      cum.push_back(c);
    }
    if (s.empty()) cum.push_back(1);
    if (total >= 0 && c != total) return std::nullopt;
    total = c;
  }
  std::sort(cum.begin(), cum.end());
  cum.erase(std::unique(cum.begin(), cum.end()), cum.end());
  std::vector<int64_t> digits;  // inner first
  int64_t prev = 1;
  for (int64_t c : cum) {
    if (c == 1) continue;
    if (prev == 0 || c % prev != 0) return std::nullopt;
    digits.push_back(c / prev);
    prev = c;
  }
  std::reverse(digits.begin(), digits.end());
  if (digits.empty()) digits.push_back(total < 0 ? 1 : total);
  return digits;
}

}  // namespace neuron::cc
