// IR: printing, serialization round trip, type inference and the verifier's messages.
#include "compiler/verifier.h"
#include "test_util.h"

namespace neuron::cc::test {
namespace {

Attrs A(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

Graph small() {
  Graph g;
  g.name = "small";
  const int x = g.add_input(TensorType{DType::Float32, {2, 3}}, {}, "x");
  const int w = g.add_input(TensorType{DType::BFloat16, {3}}, {}, "w");
  const int y = g.add1(Op::mul, {x, w}, A({{"dtype", static_cast<int64_t>(DType::Float32)}}));
  const int s =
      g.add1(Op::sum, {y}, A({{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{1}}}));
  g.set_outputs({g.add1(Op::sub, {y, s}), s});
  return g;
}

TEST(CompilerIR, PrintsReadableText) {
  const std::string text = print(small());
  EXPECT_NE(text.find("graph @small(%0: f32[2,3] \"x\", %1: bf16[3] \"w\") {"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%2 = mul(%0, %1) {dtype=11} : f32[2,3]"), std::string::npos) << text;
  EXPECT_NE(text.find("%3 = sum(%2) {dims=[1], keepdim=1} : f32[2,1]"), std::string::npos) << text;
  EXPECT_NE(text.find("return %4, %3"), std::string::npos) << text;
}

TEST(CompilerIR, SerializationRoundTrips) {
  Graph g = small();
  g.blobs.push_back({1, 2, 3, 4});
  ByteWriter w;
  serialize(g, w);
  const auto bytes = w.take();
  ByteReader r(bytes.data(), bytes.size(), "test");
  const Graph back = deserialize(r);
  EXPECT_TRUE(r.done());
  EXPECT_EQ(print(back), print(g));
  EXPECT_EQ(back.blobs, g.blobs);
  verify(back);
}

TEST(CompilerIR, TruncatedSerializationIsAnError) {
  ByteWriter w;
  serialize(small(), w);
  auto bytes = w.take();
  bytes.resize(bytes.size() / 2);
  ByteReader r(bytes.data(), bytes.size(), "half.ir");
  EXPECT_THROW(deserialize(r), NeffError);
}

TEST(CompilerIR, TypeInference) {
  Graph g;
  const int a = g.add_input(TensorType{DType::BFloat16, {4, 1, 5}});
  const int b = g.add_input(TensorType{DType::Float32, {3, 1}});
  EXPECT_EQ(g.type(g.add1(Op::add, {a, b})).str(), "f32[4,3,5]");
  EXPECT_EQ(g.type(g.add1(Op::lt, {a, b})).str(), "b8[4,3,5]");
  EXPECT_EQ(g.type(g.add1(Op::permute, {a}, A({{"perm", std::vector<int64_t>{2, 0, 1}}}))).str(),
            "bf16[5,4,1]");
  EXPECT_EQ(g.type(g.add1(Op::slice, {a},
                          A({{"dim", int64_t{2}},
                             {"start", int64_t{1}},
                             {"end", int64_t{5}},
                             {"step", int64_t{2}}})))
                .str(),
            "bf16[4,1,2]");
  EXPECT_EQ(g.type(g.add1(Op::argmax, {a},
                          A({{"dims", std::vector<int64_t>{2}}, {"keepdim", int64_t{0}}})))
                .str(),
            "i64[4,1]");
  const int q = g.add_input(TensorType{DType::Float32, {1, 8, 3, 16}});
  const int k = g.add_input(TensorType{DType::Float32, {1, 2, 10, 16}});
  EXPECT_EQ(g.type(g.add1(Op::attention, {q, k, k}, A({{"scale", 0.25}}))).str(), "f32[1,8,3,16]");
}

std::string verify_error(const Graph& g) {
  try {
    verify(g, "test");
  } catch (const VerifyError& e) {
    return e.what();
  }
  return "";
}

TEST(CompilerIR, VerifierNamesTheNodeAndTheRule) {
  {
    Graph g = small();
    g.nodes[1].inputs[0] = 42;  // undefined operand
    const std::string e = verify_error(g);
    EXPECT_NE(e.find("IR verifier (test): graph @small: node #1 `%3 = sum(%42)"), std::string::npos)
        << e;
    EXPECT_NE(e.find("operand %42 does not exist"), std::string::npos) << e;
  }
  {
    Graph g = small();
    std::swap(g.nodes[0], g.nodes[1]);  // use before definition
    const std::string e = verify_error(g);
    EXPECT_NE(e.find("operand %2 is used before it is defined"), std::string::npos) << e;
  }
  {
    Graph g = small();
    g.values[3].type.shape = {2, 3};  // declared type disagrees with inference
    const std::string e = verify_error(g);
    EXPECT_NE(e.find("result %3 is declared f32[2,3] but the inputs give f32[2,1]"),
              std::string::npos)
        << e;
  }
  {
    Graph g = small();
    g.mutations.push_back(Mutation{1, 2});  // bf16[3] input mutated with f32[2,3]
    const std::string e = verify_error(g);
    EXPECT_NE(e.find("mutation of input #1 (bf16[3]) with %2 of type f32[2,3]"), std::string::npos)
        << e;
  }
  {
    Graph g = small();
    g.outputs.push_back(99);
    const std::string e = verify_error(g);
    EXPECT_NE(e.find("output #2 refers to %99 which is not defined"), std::string::npos) << e;
  }
}

TEST(CompilerIR, VerifierRejectsHeavyOpsInFusedBodies) {
  Graph g;
  const int a = g.add_input(TensorType{DType::Float32, {2, 2}});
  auto body = std::make_shared<Graph>();
  const int ba = body->add_input(TensorType{DType::Float32, {2, 2}});
  body->set_outputs({body->add1(Op::matmul, {ba, ba})});
  Node f;
  f.op = Op::fused;
  f.inputs = {a};
  f.body = body;
  f.outputs = {g.add_value(TensorType{DType::Float32, {2, 2}})};
  g.nodes.push_back(f);
  g.set_outputs({f.outputs[0]});
  const std::string e = verify_error(g);
  EXPECT_NE(e.find("invalid body"), std::string::npos) << e;
  EXPECT_NE(e.find("is not allowed inside a fused body"), std::string::npos) << e;
}

TEST(CompilerIR, CompileRejectsMalformedInput) {
  Graph g = small();
  g.nodes[0].attrs.set("dtype", static_cast<int64_t>(DType::Int32));
  EXPECT_THROW(compile(g, CompileOptions{}), VerifyError);
}

}  // namespace
}  // namespace neuron::cc::test
