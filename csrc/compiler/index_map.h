// Index maps: how the points of a kernel's iteration domain address a tensor. Every view op
// (reshape, permute, expand, slice, as_strided) and every implicit broadcast is applied
// *backwards*, from the consumer to the producer, turning the map on an op's output into the
// map on its input. Maps are affine in the domain coordinates:
//     index[d] = sum_k coef[d][k] * dom[k] + base[d]
// A reshape that merges dims needs division/modulo; instead of emitting them, the domain is
// refined (a dim of size N*f is split into (N, f)), which keeps every map affine.
// Cat and pad add range constraints (masks) expressed on the domain as well.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir.h"

namespace neuron::cc {

struct Affine {
  std::vector<int64_t> c;  // one coefficient per domain dim
  int64_t b = 0;
  bool operator==(const Affine& o) const { return c == o.c && b == o.b; }
  bool operator<(const Affine& o) const { return c != o.c ? c < o.c : b < o.b; }
};

// lo <= e(dom) < hi must hold for the point to read real data (else it reads 0).
struct Constraint {
  Affine e;
  int64_t lo = 0, hi = 0;
  bool operator==(const Constraint& o) const { return e == o.e && lo == o.lo && hi == o.hi; }
  bool operator<(const Constraint& o) const {
    if (!(e == o.e)) return e < o.e;
    return lo != o.lo ? lo < o.lo : hi < o.hi;
  }
};

struct IndexMap {
  std::vector<Affine> rows;  // one per tensor dim; or one storage offset when `raw`
  bool raw = false;          // rows[0] is an element offset into the root's storage
  std::vector<Constraint> cons;
  bool operator==(const IndexMap& o) const {
    return rows == o.rows && raw == o.raw && cons == o.cons;
  }
  bool operator<(const IndexMap& o) const {
    if (raw != o.raw) return raw < o.raw;
    if (!(rows == o.rows)) return rows < o.rows;
    return cons < o.cons;
  }
};

// The iteration domain of a kernel: refined dims of a logical shape F. Domain dim k is a
// digit of F's dim owner[k] with weight mult[k]; inner dims are the reduced dims.
struct Domain {
  std::vector<int64_t> size;
  std::vector<int> owner;
  std::vector<int64_t> mult;
  std::vector<bool> inner;
  Shape F;

  static Domain of(const Shape& F, const std::vector<bool>& reduced);
  int rank() const { return static_cast<int>(size.size()); }
  // Splits dim k into (size/f, f) (outer digit first).
  void split(int k, int64_t f);
  // The map of a value whose shape is F itself, or F with the reduced dims kept as 1 or dropped.
  std::optional<IndexMap> canonical(const Shape& s) const;
  Affine zero() const { return Affine{std::vector<int64_t>(size.size(), 0), 0}; }
};

// Outcome of pushing a map through an op: the map, or a domain split that would make it
// affine, or a failure with a reason.
struct MapResult {
  std::optional<IndexMap> map;
  int split_dim = -1;
  int64_t split_factor = 0;
  std::string why;
  bool needs_split() const { return split_dim >= 0; }
};

// Map on a Move node's input given the map on its output.
MapResult map_through_move(const Graph& g, const Node& move, const IndexMap& out,
                           const Domain& dom);
// Map on an elementwise operand of shape `operand` given the map on the result of shape `result`.
IndexMap map_broadcast(const IndexMap& out, const Shape& result, const Shape& operand,
                       const Domain& dom);
// Reshape `out` (a map on a tensor of shape `to`) back onto shape `from`.
MapResult map_reshape(const IndexMap& out, const Shape& from, const Shape& to, const Domain& dom);

// Element strides per domain dim and the element offset of a map applied to a buffer with
// `strides` (ignored for raw maps: they address the storage directly).
struct Address {
  std::vector<int64_t> strides;
  int64_t offset = 0;
};
Address address_of(const IndexMap& m, const std::vector<int64_t>& strides, int domain_rank);

// A chain of Move nodes from a value down to its root (the first non-Move producer, or a
// graph input).
struct ViewChain {
  int root = -1;
  std::vector<const Node*> moves;  // from the value down to the root
};
ViewChain view_chain(const Graph& g, const UseInfo& uses, int value);

// Resolves `value` (a view chain over a root with layout `root_strides`) for a domain equal
// to the value's own shape, refining the domain as needed. Returns the domain and address on
// success (used for operands of dense kernels), or nullopt with `why`.
struct ResolvedView {
  Domain dom;
  Address addr;
  int root = -1;
};
std::optional<ResolvedView> resolve_view(const Graph& g, const UseInfo& uses, int value,
                                         const std::vector<int64_t>& root_strides,
                                         bool root_contiguous, std::string* why);

// Digits of logical dim `d` in a (refined) domain: sizes of its sub-dims, outer first.
std::vector<int64_t> digits_of(const Domain& dom, int d);
// The finest common digit split of several splits of the same extent (each list outer
// first); nullopt when they do not nest.
std::optional<std::vector<int64_t>> common_digits(const std::vector<std::vector<int64_t>>& splits);

std::string affine_str(const Affine& a);

}  // namespace neuron::cc
