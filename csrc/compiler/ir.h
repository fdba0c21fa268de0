// Neuron IR: a graph of tensor operations with static shapes. Values are typed tensors
// (dtype + shape; graph inputs and outputs also carry strides); nodes are listed in execution
// (topological) order. A `fused` node owns a nested body graph. Every graph prints as text
// (print()) and serializes to bytes (serialize(), the input of the cache key).
// Thread-safety: plain data; a Graph is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bytes.h"
#include "error.h"
#include "kernels/dtype.h"

namespace neuron::cc {

using kernels::DType;
using Shape = std::vector<int64_t>;

enum class Op : uint8_t {
#define OP(name, kind, min_in, max_in, outs) name,
#include "ops.def"
#undef OP
};

enum class OpKind : uint8_t {
  Const,
  Iota,
  Unary,
  Binary,
  Ternary,
  Cast,
  Reduce,
  Move,
  Struct,
  Composite,
  Heavy,
  Fused,
  Custom
};

struct OpInfo {
  const char* name;
  OpKind kind;
  int min_inputs;
  int max_inputs;  // -1: variadic
  int outputs;     // -1: variadic
};

const OpInfo& op_info(Op op);
inline const char* op_name(Op op) { return op_info(op).name; }
inline OpKind op_kind(Op op) { return op_info(op).kind; }
std::optional<Op> op_from_name(std::string_view name);
int num_ops();

// True for ops computed element by element in the fused-kernel VM (incl. cast, iota, const).
bool is_elementwise(Op op);
// Short dtype names used in the text format: f32, bf16, i64, b8, ...
std::string_view dtype_short(DType t);
std::optional<DType> dtype_from_short(std::string_view s);

struct TensorType {
  DType dtype = DType::Float32;
  Shape shape;

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  int64_t nbytes() const { return numel() * static_cast<int64_t>(kernels::element_size(dtype)); }
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
  std::string str() const;  // "f32[2,10]"
};

Shape contiguous_strides(const Shape& shape);

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

// Node attributes, kept sorted by key (deterministic printing and hashing).
class Attrs {
 public:
  void set(const std::string& key, AttrValue v);
  bool has(std::string_view key) const;
  int64_t i(std::string_view key) const;
  int64_t i(std::string_view key, int64_t dflt) const;
  double f(std::string_view key) const;
  double f(std::string_view key, double dflt) const;
  const std::vector<int64_t>& ints(std::string_view key) const;
  const std::string& s(std::string_view key) const;
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool operator==(const Attrs& o) const { return items_ == o.items_; }

 private:
  const AttrValue* find(std::string_view key) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

struct Graph;

struct Node {
  Op op = Op::copy;
  std::vector<int> inputs;   // value ids; -1 marks an absent optional input (index: None)
  std::vector<int> outputs;  // value ids
  Attrs attrs;
  std::shared_ptr<Graph> body;  // fused: the kernel body (inputs = this node's inputs)
};

struct Value {
  TensorType type;
  std::vector<int64_t> strides;  // graph inputs/outputs: the runtime layout (elements)
  std::string name;              // optional, for dumps
};

// Input #input_index of the graph receives `value` when the program finishes (in-place
// mutation of an input after functionalization, e.g. a KV-cache update).
struct Mutation {
  int input_index = 0;
  int value = -1;
};

struct Graph {
  std::string name = "graph";
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<Mutation> mutations;
  std::vector<std::vector<uint8_t>> blobs;  // constant data, referenced by attr "blob"

  // --- building ---
  int add_value(TensorType t, std::string name = {});
  int add_input(TensorType t, std::vector<int64_t> strides = {}, std::string name = {});
  // Appends a node; output types are inferred from the inputs and attrs. Returns the outputs.
  std::vector<int> add(Op op, std::vector<int> inputs, Attrs attrs = {});
  // Appends a node whose output types are given (inference still checks them in verify()).
  std::vector<int> add_typed(Op op, std::vector<int> inputs, Attrs attrs,
                             std::vector<TensorType> outs);
  // Single-output convenience.
  int add1(Op op, std::vector<int> inputs, Attrs attrs = {}) {
    return add(op, std::move(inputs), std::move(attrs))[0];
  }
  int scalar(double v, DType dtype);
  int constant(TensorType t, std::vector<uint8_t> data);
  void set_outputs(std::vector<int> outs);

  const TensorType& type(int v) const { return values.at(static_cast<size_t>(v)).type; }
  // Strides of an input/output value (contiguous when none were recorded).
  std::vector<int64_t> strides_of(int v) const;
};

// Output types of `n` given the types of its inputs (throws VerifyError on bad inputs).
std::vector<TensorType> infer_types(const Graph& g, const Node& n);

// Broadcast shape of numpy-style operands; nullopt when incompatible.
std::optional<Shape> broadcast_shapes(const std::vector<const Shape*>& shapes);

// Normalizes a possibly negative dim against `rank`; throws VerifyError when out of range.
int64_t normalize_dim(int64_t dim, int64_t rank, const char* what);

// --- textual form ---
std::string print(const Graph& g);
std::string print_node(const Graph& g, const Node& n, int indent = 0);

// --- binary form (deterministic: the cache key hashes it) ---
void serialize(const Graph& g, ByteWriter& w);
Graph deserialize(ByteReader& r);

// Per-value def/use information of a graph (rebuild after rewriting nodes).
struct UseInfo {
  std::vector<int> producer;            // node index per value, -1 for inputs/unused
  std::vector<std::vector<int>> users;  // node indices per value (dup when used twice)
  std::vector<int> output_uses;         // times a value appears in outputs/mutations
  explicit UseInfo(const Graph& g);
  int num_uses(int v) const {
    return static_cast<int>(users[static_cast<size_t>(v)].size()) +
           output_uses[static_cast<size_t>(v)];
  }
};

}  // namespace neuron::cc
