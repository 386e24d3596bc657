// The static profile: exact FLOPs for the ops with formulas, estimates
// flagged for the rest, folded nodes free, totals and order.
#include "flowc/compiler/Profile.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

namespace flowc::compiler {
namespace {

using namespace flowc::testing;

/// An imported model and the ONNX model it came from (its views point into
/// `bytes`, which the fixture keeps alive).
struct Profiled {
  std::string bytes;
  OnnxModel model;
  ImportedGraph graph;
  GraphProfile profile;
};

std::unique_ptr<Profiled> profileOf(const GraphSpec &spec) {
  auto result = std::make_unique<Profiled>();
  result->bytes = model(spec);
  auto parsed = parseOnnxModel(result->bytes, "profile.onnx");
  EXPECT_TRUE(parsed) << parsed.status().toString();
  if (!parsed)
    return nullptr;
  result->model = parsed.takeValue();
  auto graph = importOnnx(result->model);
  EXPECT_TRUE(graph) << graph.status().toString();
  if (!graph)
    return nullptr;
  result->graph = graph.takeValue();
  result->profile = profileGraph(result->graph, &result->model);
  return result;
}

const OpProfile *row(const GraphProfile &profile, const std::string &op) {
  for (const OpProfile &entry : profile.ops)
    if (entry.opType == op)
      return &entry;
  return nullptr;
}

std::vector<float> zeros(size_t n) { return std::vector<float>(n, 0.0f); }

TEST(ProfileTest, ConvCountsKernelMultiplyAddsAndBias) {
  // x[1,3,8,8] * W[4,3,3,3] + B[4], padding 1: output [1,4,8,8].
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {4, 3, 3, 3}, zeros(108)),
                       floatTensor("B", {4}, zeros(4))};
  spec.nodes = {
      node("Conv", {"x", "W", "B"}, {"y"}, "conv",
           {intsAttribute("kernel_shape", {3, 3}), intsAttribute("pads", {1, 1, 1, 1})})};
  spec.inputs = {valueInfo("x", {1, 3, 8, 8})};
  spec.outputs = {valueInfo("y", {1, 4, 8, 8})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  const OpProfile *conv = row(profiled->profile, "Conv");
  ASSERT_TRUE(conv);
  // 2 * N*Cout*H*W * Cin*kh*kw, plus one add per output for the bias.
  EXPECT_EQ(conv->flops, 2u * 256 * 27 + 256);
  EXPECT_EQ(conv->parameters, 108u + 4);
  EXPECT_EQ(conv->activationBytes, 256u * 4);
  EXPECT_FALSE(conv->estimated);
}

TEST(ProfileTest, GroupedConvDividesInputChannels) {
  // Two groups: each output channel reads Cin/group = 2 input channels.
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {4, 2, 3, 3}, zeros(72))};
  spec.nodes = {node("Conv", {"x", "W"}, {"y"}, "conv",
                     {intsAttribute("kernel_shape", {3, 3}), intAttribute("group", 2)})};
  spec.inputs = {valueInfo("x", {1, 4, 6, 6})};
  spec.outputs = {valueInfo("y", {1, 4, 4, 4})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  EXPECT_EQ(profiled->profile.total.flops, 2u * 64 * 2 * 9);
}

TEST(ProfileTest, GemmWithTransposedWeightAndBias) {
  // a[2,8] · W[4,8]^T + C[4]: M=2, N=4, K=8.
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {4, 8}, zeros(32)),
                       floatTensor("C", {4}, zeros(4))};
  spec.nodes = {node("Gemm", {"a", "W", "C"}, {"y"}, "fc", {intAttribute("transB", 1)})};
  spec.inputs = {valueInfo("a", {2, 8})};
  spec.outputs = {valueInfo("y", {2, 4})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  const OpProfile *gemm = row(profiled->profile, "Gemm");
  ASSERT_TRUE(gemm);
  EXPECT_EQ(gemm->flops, 2u * 2 * 4 * 8 + 2 * 4);
  EXPECT_EQ(gemm->parameters, 36u);
}

TEST(ProfileTest, BatchedMatMulCountsEveryBatch) {
  // a[3,2,5] · W[3,5,4] = [3,2,4]: 24 dot products of length 5.
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {3, 5, 4}, zeros(60))};
  spec.nodes = {node("MatMul", {"a", "W"}, {"y"}, "bmm")};
  spec.inputs = {valueInfo("a", {3, 2, 5})};
  spec.outputs = {valueInfo("y", {3, 2, 4})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  EXPECT_EQ(profiled->profile.total.flops, 2u * 24 * 5);
  EXPECT_EQ(profiled->profile.total.activationBytes, 24u * 4);
}

TEST(ProfileTest, LstmCountsBothProductsOfEveryStepAndDirection) {
  // x[5,2,3] through a bidirectional LSTM of hidden size 4 (16 gate rows):
  // per direction and row of seq x batch, x·Wᵀ (3 wide) and h·Rᵀ (4 wide)
  // into 16 gates, and ten elementwise ops per hidden unit.
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {2, 16, 3}, zeros(96)),
                       floatTensor("R", {2, 16, 4}, zeros(128))};
  spec.nodes = {node(
      "LSTM", {"x", "W", "R"}, {"y"}, "lstm",
      {intAttribute("hidden_size", 4), stringAttribute("direction", "bidirectional")})};
  spec.inputs = {valueInfo("x", {5, 2, 3})};
  spec.outputs = {valueInfo("y", {5, 2, 2, 4})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  const OpProfile *lstm = row(profiled->profile, "LSTM");
  ASSERT_TRUE(lstm);
  EXPECT_EQ(lstm->flops, 2u * 10 * (2 * 16 * (3 + 4) + 10 * 4));
  EXPECT_EQ(lstm->parameters, 96u + 128);
  EXPECT_FALSE(lstm->estimated);
}

TEST(ProfileTest, PoolWindowComesFromTheSourceNode) {
  // 3x3 windows, stride 1, no padding over [1,2,6,6]: 32 outputs x 9.
  GraphSpec spec;
  spec.nodes = {
      node("MaxPool", {"x"}, {"y"}, "pool", {intsAttribute("kernel_shape", {3, 3})})};
  spec.inputs = {valueInfo("x", {1, 2, 6, 6})};
  spec.outputs = {valueInfo("y", {1, 2, 4, 4})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  EXPECT_EQ(profiled->profile.total.flops, 32u * 9);
  EXPECT_FALSE(profiled->profile.total.estimated);
  // Without the ONNX node the window is estimated from the shapes.
  GraphProfile alone = profileGraph(profiled->graph, nullptr);
  EXPECT_TRUE(alone.total.estimated);
  EXPECT_GT(alone.total.flops, 0u);
}

TEST(ProfileTest, PReluCountsACompareAndAMultiplyPerElement) {
  // x[1,4,3,3] with a per-channel slope [4,1,1]: 36 outputs x 2.
  GraphSpec spec;
  spec.initializers = {floatTensor("slope", {4, 1, 1}, zeros(4))};
  spec.nodes = {node("PRelu", {"x", "slope"}, {"y"}, "act")};
  spec.inputs = {valueInfo("x", {1, 4, 3, 3})};
  spec.outputs = {valueInfo("y", {1, 4, 3, 3})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  const OpProfile *prelu = row(profiled->profile, "PRelu");
  ASSERT_NE(prelu, nullptr);
  EXPECT_EQ(prelu->flops, 72u);
  EXPECT_EQ(prelu->parameters, 4u);
  EXPECT_FALSE(prelu->estimated);
}

TEST(ProfileTest, FoldedNodesCostNothingButAreCounted) {
  // Shape(x) is computed at import; Reshape moves data; Relu is one per element.
  GraphSpec spec;
  spec.nodes = {node("Shape", {"x"}, {"s"}, "shape"),
                node("Reshape", {"x", "s"}, {"r"}, "reshape"),
                node("Relu", {"r"}, {"y"}, "relu")};
  spec.inputs = {valueInfo("x", {2, 3})};
  spec.outputs = {valueInfo("y", {2, 3})};
  auto profiled = profileOf(spec);
  ASSERT_TRUE(profiled);
  const OpProfile *shape = row(profiled->profile, "Shape");
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->count, 1u);
  EXPECT_EQ(shape->folded, 1u);
  EXPECT_EQ(shape->flops, 0u);
  EXPECT_EQ(shape->activationBytes, 0u);
  EXPECT_EQ(row(profiled->profile, "Reshape")->flops, 0u);
  EXPECT_EQ(profiled->profile.total.flops, 6u);
  EXPECT_EQ(profiled->profile.total.count, 3u);
  EXPECT_EQ(profiled->profile.total.folded, 1u);
  // Sorted by FLOPs: Relu first.
  EXPECT_EQ(profiled->profile.ops.front().opType, "Relu");
}

TEST(ProfileTest, OpWithoutFormulaIsEstimatedFromItsOutput) {
  NodeRecord record{
      "gelu", "Gelu", {{"x", DType::F32, {2, 3}}}, {{"y", DType::F32, {2, 3}}}, 0, false};
  NodeCost cost = nodeCost(record, nullptr);
  EXPECT_TRUE(cost.estimated);
  EXPECT_EQ(cost.flops, 6u);
  EXPECT_EQ(cost.activationBytes, 24u);
}

} // namespace
} // namespace flowc::compiler
