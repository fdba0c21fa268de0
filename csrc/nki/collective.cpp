#include "collective.h"

#include <set>
#include <stdexcept>

namespace neuron::nki::coll {

namespace {

int parse_rank(const std::string& t, const std::string& whole) {
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 6)
    throw std::invalid_argument("'" + whole + "' is not a list of rank numbers");
  return std::stoi(t);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (;;) {
    const size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) return out;
    b = e + 1;
  }
}

template <Op O>
Info with_groups(const Program& prog, const Instr& in, Kind k) {
  const isa::Fields<O> f{in};
  Info x;
  x.kind = k;
  x.groups = parse_groups(prog.str(static_cast<int32_t>(f.template i<"groups">())));
  x.ranks = static_cast<int>(x.groups.front().size());
  return x;
}

}  // namespace

bool moves_data(Op op) {
  switch (op) {
    case Op::AllReduce:
    case Op::AllGather:
    case Op::ReduceScatter:
    case Op::AllToAll:
    case Op::CollectivePermute:
    case Op::PermuteImplicit:
    case Op::PermuteImplicitReduce:
      return true;
    default:
      return false;
  }
}

std::vector<std::vector<int>> parse_groups(const std::string& text) {
  std::vector<std::vector<int>> groups;
  std::set<int> seen;
  if (text.empty()) throw std::invalid_argument("the replica group is empty");
  for (const std::string& g : split(text, ';')) {
    std::vector<int> members;
    for (const std::string& r : split(g, ',')) {
      const int v = parse_rank(r, text);
      if (!seen.insert(v).second)
        throw std::invalid_argument("rank " + std::to_string(v) + " appears twice in the replica groups");
      members.push_back(v);
    }
    groups.push_back(std::move(members));
  }
  for (const auto& g : groups)
    if (g.size() != groups.front().size())
      throw std::invalid_argument("replica groups " + groups_text(groups) + " differ in size");
  return groups;
}

std::vector<std::pair<int, int>> parse_pairs(const std::string& text) {
  std::vector<std::pair<int, int>> pairs;
  std::set<int> targets;
  if (text.empty()) throw std::invalid_argument("no source-target pairs");
  for (const std::string& p : split(text, ';')) {
    const auto st = split(p, '>');
    if (st.size() != 2) throw std::invalid_argument("'" + text + "' is not a list of (source, target) pairs");
    pairs.emplace_back(parse_rank(st[0], text), parse_rank(st[1], text));
    if (!targets.insert(pairs.back().second).second)
      throw std::invalid_argument("rank " + std::to_string(pairs.back().second) +
                                  " is the target of two source-target pairs");
  }
  return pairs;
}

std::string groups_text(const std::vector<std::vector<int>>& groups) {
  std::string s = "[";
  for (size_t i = 0; i < groups.size(); ++i) {
    s += i ? ", [" : "[";
    for (size_t j = 0; j < groups[i].size(); ++j) s += (j ? ", " : "") + std::to_string(groups[i][j]);
    s += "]";
  }
  return s + "]";
}

std::string pairs_text(const std::vector<std::pair<int, int>>& pairs) {
  std::string s = "[";
  for (size_t i = 0; i < pairs.size(); ++i)
    s += (i ? ", (" : "(") + std::to_string(pairs[i].first) + ", " + std::to_string(pairs[i].second) + ")";
  return s + "]";
}

std::pair<std::vector<int>, int> group_of(const std::vector<std::vector<int>>& groups, int rank) {
  for (const auto& g : groups)
    for (size_t j = 0; j < g.size(); ++j)
      if (g[j] == rank) return {g, static_cast<int>(j)};
  return {{}, -1};
}

int ring_rank(const std::vector<std::vector<int>>& groups, int rank, int64_t step) {
  const auto [g, j] = group_of(groups, rank);
  if (j < 0) return -1;
  const int64_t n = static_cast<int64_t>(g.size());
  return g[static_cast<size_t>(((j - step) % n + n) % n)];
}

Info info_of(const Program& prog, const Instr& in) {
  Info x;
  switch (in.op) {
    case Op::AllReduce:
      x = with_groups<Op::AllReduce>(prog, in, Kind::AllReduce);
      x.op = isa::Fields<Op::AllReduce>{in}.alu<"op">();
      break;
    case Op::AllGather:
      x = with_groups<Op::AllGather>(prog, in, Kind::AllGather);
      x.dim = static_cast<int>(isa::Fields<Op::AllGather>{in}.i<"collective_dim">());
      break;
    case Op::ReduceScatter: {
      x = with_groups<Op::ReduceScatter>(prog, in, Kind::ReduceScatter);
      const isa::Fields<Op::ReduceScatter> f{in};
      x.op = f.alu<"op">();
      x.dim = static_cast<int>(f.i<"collective_dim">());
      break;
    }
    case Op::AllToAll:
      x = with_groups<Op::AllToAll>(prog, in, Kind::AllToAll);
      x.dim = static_cast<int>(isa::Fields<Op::AllToAll>{in}.i<"collective_dim">());
      break;
    case Op::CollectivePermute: {
      x.kind = Kind::Permute;
      x.pairs = parse_pairs(prog.str(static_cast<int32_t>(isa::Fields<Op::CollectivePermute>{in}.i<"pairs">())));
      std::set<int> named;
      for (const auto& [s, t] : x.pairs) named.insert({s, t});
      x.ranks = static_cast<int>(named.size());
      break;
    }
    case Op::PermuteImplicit:
      x = with_groups<Op::PermuteImplicit>(prog, in, Kind::Ring);
      x.channel = static_cast<int>(isa::Fields<Op::PermuteImplicit>{in}.i<"channel">());
      break;
    case Op::PermuteImplicitReduce: {
      x = with_groups<Op::PermuteImplicitReduce>(prog, in, Kind::RingReduce);
      const isa::Fields<Op::PermuteImplicitReduce> f{in};
      x.op = f.alu<"op">();
      x.channel = static_cast<int>(f.i<"channel">());
      x.src1 = isa::Fields<Op::PermuteImplicitReduce>::k<"src1">;
      break;
    }
    default:
      throw std::invalid_argument("not a data collective");
  }
  return x;
}

}  // namespace neuron::nki::coll
