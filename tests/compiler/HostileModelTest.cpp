// Malformed and hostile ONNX models: each is refused with the status and a
// message naming the model, node and attribute or value at fault, and none
// takes the process down (issue 13: a Conv with strides 0 was a SIGFPE, a
// repeated graph output a SIGSEGV, ConstantOfShape of 2^60 elements and a
// folded Range(0, 1e12, 1) an abort).
#include "flowc/compiler/Compiler.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"
#include "ImportBytes.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include <unistd.h>

namespace flowc::compiler {
namespace {

using namespace flowc::testing;
using ::testing::HasSubstr;

Expected<ImportedGraph> importBytes(const std::string &bytes) {
  return flowc::testing::importBytes(bytes, "hostile.onnx");
}

/// One node `op` from x[1,3,8,8] (and a weight w[4,3,3,3] for Conv) to y.
std::string windowModel(const std::string &op,
                        const std::vector<std::string> &attributes) {
  GraphSpec spec;
  std::vector<std::string> inputs = {"x"};
  if (op == "Conv") {
    spec.initializers = {floatTensor("w", {4, 3, 3, 3}, std::vector<float>(108, 1.0f))};
    inputs.push_back("w");
  }
  spec.nodes = {node(op, inputs, {"y"}, "win", attributes)};
  spec.inputs = {valueInfo("x", {1, 3, 8, 8})};
  spec.outputs = {valueInfo("y", {})};
  return model(spec);
}

/// x[2,3] -> `nodes` -> y, with `initializers`.
std::string graphModel(const std::vector<std::string> &nodes,
                       const std::vector<std::string> &initializers = {},
                       const std::vector<int64_t> &inputShape = {2, 3}) {
  GraphSpec spec;
  spec.nodes = nodes;
  spec.initializers = initializers;
  spec.inputs = {valueInfo("x", inputShape)};
  spec.outputs = {valueInfo("y", {})};
  return model(spec);
}

std::string scalarInt64(const std::string &name, int64_t value) {
  return int64TensorOfShape(name, {}, {value});
}

// The four crashes of issue 13 ---------------------------------------------

TEST(HostileModelTest, ConvWithZeroStridesIsRefused) {
  auto graph = importBytes(windowModel("Conv", {intsAttribute("strides", {0, 0})}));
  EXPECT_THAT(graph, StatusIs(StatusCode::InvalidArgument,
                              "hostile.onnx: node 'win' (Conv): strides[0] = 0 is out of "
                              "range [1, 2147483647]"));
}

TEST(HostileModelTest, GraphOutputListedTwiceIsRefused) {
  GraphSpec spec;
  spec.nodes = {node("Relu", {"x"}, {"y"}, "act")};
  spec.inputs = {valueInfo("x", {2, 3})};
  spec.outputs = {valueInfo("y", {2, 3}), valueInfo("y", {2, 3})};
  auto parsed = parseOnnxModel(model(spec), "hostile.onnx");
  EXPECT_THAT(parsed, StatusIs(StatusCode::InvalidArgument,
                               "hostile.onnx: graph output 'y' is listed twice "
                               "(graph.output[0] and [1])"));
}

TEST(HostileModelTest, ConstantOfShapeOfTwoToTheSixtyIsRefusedBeforeAllocating) {
  auto graph = importBytes(
      graphModel({node("ConstantOfShape", {"shape"}, {"c"}, "fill"),
                  node("Add", {"x", "c"}, {"y"}, "add")},
                 {int64Tensor("shape", {int64_t{1} << 30, int64_t{1} << 30})}));
  EXPECT_THAT(graph, StatusIs(StatusCode::ResourceExhausted,
                              "hostile.onnx: node 'fill' (ConstantOfShape): folding its "
                              "[1073741824,1073741824] constant at import needs "
                              "1152921504606846976 elements of 8 bytes"));
  EXPECT_THAT(graph, StatusIs(StatusCode::ResourceExhausted, "over the limit of"));
}

TEST(HostileModelTest, RangeOfATrillionIsRefusedBeforeAllocating) {
  auto graph = importBytes(
      graphModel({node("Range", {"start", "limit", "delta"}, {"r"}, "range"),
                  node("Cast", {"r"}, {"rf"}, "cast", {intAttribute("to", 1)}),
                  node("Add", {"x", "rf"}, {"y"}, "add")},
                 {scalarInt64("start", 0), scalarInt64("limit", 1000000000000),
                  scalarInt64("delta", 1)},
                 {1}));
  EXPECT_THAT(graph,
              StatusIs(StatusCode::ResourceExhausted,
                       "node 'range' (Range): folding its [1000000000000] constant "
                       "at import needs 1000000000000 elements"));
}

TEST(HostileModelTest, OneValueReturnedAsTwoOutputsCompiles) {
  // Two outputs of one tensor (CSE makes the same of two equal nodes):
  // code generation gives each its own buffer instead of crashing.
  GraphSpec spec;
  spec.nodes = {node("Relu", {"x"}, {"r"}, "act"), node("Identity", {"r"}, {"y1"}, "i1"),
                node("Identity", {"r"}, {"y2"}, "i2")};
  spec.inputs = {valueInfo("x", {2, 3})};
  spec.outputs = {valueInfo("y1", {2, 3}), valueInfo("y2", {2, 3})};
  auto graph = importBytes(model(spec));
  ASSERT_TRUE(graph) << graph.status().toString();
  TempDir dir;
  auto code = compileToSharedObject(graph->irBytecode, {}, dir.path());
  EXPECT_TRUE(code) << code.status().toString();
}

// Attributes ----------------------------------------------------------------

TEST(HostileModelTest, WindowAttributesAreValidated) {
  struct Case {
    std::string op;
    std::vector<std::string> attributes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"Conv",
       {intsAttribute("dilations", {1, -2})},
       "dilations[1] = -2 is out of range"},
      {"Conv", {intsAttribute("strides", {1})}, "strides [1] has 1 values, expected 2"},
      {"Conv",
       {intsAttribute("pads", {0, -1, 0, 0})},
       "pads[1] = -1 is out of range [0,"},
      {"Conv",
       {intsAttribute("strides", {int64_t{1} << 40, 1})},
       "strides[0] = 1099511627776 is out of range"},
      {"Conv",
       {intsAttribute("kernel_shape", {2, 2})},
       "kernel_shape [2,2] does not match"},
      {"Conv",
       {intAttribute("group", 3)},
       "group=3 does not divide the 4 output channels"},
      {"MaxPool", {}, "kernel_shape is required"},
      {"MaxPool",
       {intsAttribute("kernel_shape", {0, 2})},
       "kernel_shape[0] = 0 is out of"},
      {"MaxPool",
       {intsAttribute("kernel_shape", {2, 2}), intsAttribute("strides", {0, 1})},
       "strides[0] = 0 is out of range"},
      {"AveragePool",
       {intsAttribute("kernel_shape", {2, 2}), intsAttribute("pads", {0, 2, 0, 0})},
       "pads[1] = 2 is not smaller than the kernel extent 2"},
      {"MaxPool",
       {intsAttribute("kernel_shape", {2, 2, 2})},
       "kernel_shape [2,2,2] has 3 values, expected 2"},
  };
  for (const Case &c : cases) {
    auto graph = importBytes(windowModel(c.op, c.attributes));
    EXPECT_THAT(graph, StatusIs(StatusCode::InvalidArgument,
                                "node 'win' (" + c.op + "): " + c.message))
        << c.op << " " << c.message;
  }
}

TEST(HostileModelTest, AttributeOfTheWrongKindIsRefused) {
  auto graph = importBytes(windowModel("Conv", {floatAttribute("strides", 2.0f)}));
  EXPECT_THAT(graph, StatusIs(StatusCode::InvalidArgument,
                              "node 'win' (Conv): attribute 'strides' must be ints, got "
                              "a float"));
}

TEST(HostileModelTest, AttributeGivenTwiceIsRefused) {
  auto parsed = parseOnnxModel(windowModel("Conv", {intsAttribute("strides", {1, 1}),
                                                    intsAttribute("strides", {0, 0})}),
                               "hostile.onnx");
  EXPECT_THAT(parsed, StatusIs(StatusCode::InvalidArgument,
                               "graph.node[0]: attribute 'strides' is given twice"));
}

TEST(HostileModelTest, AxesAndPermutationsAreValidated) {
  struct Case {
    std::vector<std::string> nodes;
    std::vector<std::string> initializers;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{node("Concat", {"x", "x"}, {"y"}, "n", {intAttribute("axis", 2)})},
       {},
       "node 'n' (Concat): axis 2 is out of range for rank 2"},
      {{node("Softmax", {"x"}, {"y"}, "n", {intAttribute("axis", -3)})},
       {},
       "node 'n' (Softmax): axis -3 is out of range for input [2,3]"},
      {{node("Gather", {"x", "i"}, {"y"}, "n", {intAttribute("axis", 7)})},
       {int64Tensor("i", {0})},
       "node 'n' (Gather): axis 7 is out of range for rank 2"},
      {{node("Transpose", {"x"}, {"y"}, "n", {intsAttribute("perm", {0, 0})})},
       {},
       "node 'n' (Transpose): perm [0,0] is not a permutation of rank 2"},
      {{node("Transpose", {"x"}, {"y"}, "n", {intsAttribute("perm", {0, 1, 2})})},
       {},
       "perm [0,1,2] is not a permutation of rank 2"},
      {{node("ReduceSum", {"x", "a"}, {"y"}, "n")},
       {int64Tensor("a", {1, -1})},
       "node 'n' (ReduceSum): axes [1,1] repeat an axis"},
      {{node("Flatten", {"x"}, {"y"}, "n", {intAttribute("axis", 3)})},
       {},
       "node 'n' (Flatten): axis 3 is out of range for input [2,3]"},
      {{node("Relu", {"x"}, {"r"}, "a"), node("Concat", {"x", "q"}, {"y"}, "n")},
       {floatTensor("q", {2, 3, 1}, std::vector<float>(6, 0.0f))},
       "node 'n' (Concat): input [2,3,1] does not match the others outside axis 0"},
  };
  for (const Case &c : cases)
    EXPECT_THAT(importBytes(graphModel(c.nodes, c.initializers)),
                StatusIs(StatusCode::InvalidArgument, c.message))
        << c.message;
}

TEST(HostileModelTest, ShapesAndSizesAreValidated) {
  std::vector<int64_t> indices(20, 0);
  indices[17] = 3;
  struct Case {
    std::vector<std::string> nodes;
    std::vector<std::string> initializers;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{node("Reshape", {"x", "s"}, {"y"}, "n")},
       {int64Tensor("s", {-1, -1})},
       "node 'n' (Reshape): shape [-1,-1] has more than one -1"},
      {{node("Reshape", {"x", "s"}, {"y"}, "n")},
       {int64Tensor("s", {4, 2})},
       "node 'n' (Reshape): cannot reshape [2,3] to [4,2]"},
      {{node("Reshape", {"x", "s"}, {"y"}, "n")},
       {int64Tensor("s", {int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32})},
       "cannot reshape [2,3] to [4294967296,4294967296,4294967296]"},
      // Constant indices are checked however many: the runtime gather
      // (past 16 indices) would read where they point.
      {{node("Gather", {"x", "i"}, {"y"}, "n", {intAttribute("axis", 1)})},
       {int64Tensor("i", indices)},
       "node 'n' (Gather): index 3 is out of range for axis 1 of [2,3]"},
      {{node("Gather", {"x", "i"}, {"y"}, "n")},
       {int64Tensor("i", {-3})},
       "index -3 is out of range for axis 0 of [2,3]"},
      {{node("Split", {"x", "s"}, {"y", "z"}, "n", {intAttribute("axis", 1)})},
       {int64Tensor("s", {1, 1})},
       "node 'n' (Split): split sizes [1,1] do not add up to 3"},
      {{node("Split", {"x", "s"}, {"y", "z"}, "n", {intAttribute("axis", 1)})},
       {int64Tensor("s", {4, -1})},
       "node 'n' (Split): split sizes [4,-1] have a negative size"},
      {{node("Split", {"x"}, {"y", "z"}, "n", {intAttribute("num_outputs", 3)})},
       {},
       "node 'n' (Split): num_outputs=3 but the node has 2 outputs"},
      {{node("Slice", {"x", "b", "e", "a", "st"}, {"y"}, "n")},
       {int64Tensor("b", {0}), int64Tensor("e", {2}), int64Tensor("a", {1}),
        int64Tensor("st", {0})},
       "node 'n' (Slice): steps[0] is 0"},
      {{node("Slice", {"x", "b", "e", "a"}, {"y"}, "n")},
       {int64Tensor("b", {0, 0}), int64Tensor("e", {1, 1}), int64Tensor("a", {1, -1})},
       "node 'n' (Slice): axes [1,-1] repeat axis 1"},
      {{node("Expand", {"x", "s"}, {"y"}, "n")},
       {int64Tensor("s", {2, -3})},
       "node 'n' (Expand): shape [2,-3] has a negative dimension"},
      {{node("Expand", {"x", "s"}, {"y"}, "n")},
       {int64Tensor("s", {int64_t{1} << 31, int64_t{1} << 31, 2, 3})},
       "node 'n' (Expand): computes a tensor of shape [2147483648,2147483648,2,3], "
       "larger than any address space"},
      {{node("Unsqueeze", {"x", "a"}, {"y"}, "n")},
       {int64Tensor("a", std::vector<int64_t>(100, 0))},
       "node 'n' (Unsqueeze): inserts 100 axes; flowc takes ranks up to 64"},
      {{node("Range", {"s", "l", "d"}, {"r"}, "n"), node("Add", {"x", "r"}, {"y"}, "a")},
       {scalarInt64("s", 0), floatTensor("l", {}, {4.0f}), scalarInt64("d", 1)},
       "node 'n' (Range): start, limit and delta differ in type (int64, float32, int64)"},
      {{node("ConstantOfShape", {"s"}, {"y"}, "n",
             {tensorAttribute("value", floatTensor("v", {0}, {}))})},
       {int64Tensor("s", {2})},
       "node 'n' (ConstantOfShape): value must hold one element, it has shape [0]"},
  };
  for (const Case &c : cases)
    EXPECT_THAT(importBytes(graphModel(c.nodes, c.initializers)),
                StatusIs(StatusCode::InvalidArgument, c.message))
        << c.message;
}

TEST(HostileModelTest, InputAndOutputCountsAreValidated) {
  EXPECT_THAT(
      importBytes(graphModel({node("Add", {"x", "x", "x"}, {"y"}, "n")})),
      StatusIs(StatusCode::InvalidArgument, "node 'n' (Add): has 3 inputs, Add takes 2"));
  EXPECT_THAT(importBytes(graphModel({node("Relu", {"x"}, {"y", "z"}, "n")})),
              StatusIs(StatusCode::InvalidArgument,
                       "node 'n' (Relu): has 2 outputs, Relu gives 1"));
  EXPECT_THAT(importBytes(graphModel({node("Where", {"x", "", "x"}, {"y"}, "n")})),
              StatusIs(StatusCode::InvalidArgument,
                       "node 'n' (Where): required input #1 is empty"));
  EXPECT_THAT(importBytes(graphModel({node("Concat", {"x", ""}, {"y"}, "n")})),
              StatusIs(StatusCode::InvalidArgument,
                       "node 'n' (Concat): required input #1 is empty"));
}

// Graph structure -----------------------------------------------------------

TEST(HostileModelTest, GraphStructureIsValidated) {
  struct Case {
    GraphSpec spec;
    std::string message;
  };
  auto spec = [](std::vector<std::string> nodes,
                 std::vector<std::string> initializers = {},
                 std::vector<std::string> inputs = {valueInfo("x", {2, 3})},
                 std::vector<std::string> outputs = {valueInfo("y", {2, 3})}) {
    GraphSpec s;
    s.nodes = std::move(nodes);
    s.initializers = std::move(initializers);
    s.inputs = std::move(inputs);
    s.outputs = std::move(outputs);
    return s;
  };
  std::string w = floatTensor("w", {2, 3}, std::vector<float>(6, 1.0f));
  const std::vector<Case> cases = {
      {spec({node("Relu", {"x"}, {"y"}, "a"), node("Neg", {"x"}, {"y"}, "b")}),
       "node 'b' (Neg) writes 'y', which node 'a' (Relu) already defines"},
      {spec({node("Relu", {"x"}, {"x"}, "a"), node("Neg", {"x"}, {"y"}, "b")}),
       "node 'a' (Relu) writes 'x', which graph input #0 already defines"},
      {spec({node("Relu", {"x"}, {"w"}, "a"), node("Add", {"x", "w"}, {"y"}, "b")}, {w}),
       "node 'a' (Relu) writes 'w', which initializer #0 already defines"},
      {spec({node("Add", {"x", "w"}, {"y"}, "a")}, {w, w}),
       "initializer #1 writes 'w', which initializer #0 already defines"},
      {spec({node("Relu", {"x"}, {"y"}, "a")}, {},
            {valueInfo("x", {2, 3}), valueInfo("x", {2, 3})}),
       "graph input #1 writes 'x', which graph input #0 already defines"},
      {spec({node("Add", {"x", "ghost"}, {"y"}, "a")}),
       "node 'a' (Add) reads 'ghost', which no node, graph input or initializer defines"},
      {spec({node("Add", {"x", "b"}, {"a"}, "na"), node("Relu", {"a"}, {"b"}, "nb"),
             node("Relu", {"a"}, {"y"}, "nc")}),
       "the graph has a cycle: node 'nb' (Relu) -> node 'na' (Add) -> node 'nb' (Relu)"},
      {spec({node("Relu", {"r"}, {"y"}, "late"), node("Relu", {"x"}, {"r"}, "early")}),
       "node 'late' (Relu) reads 'r' before node 'early' (Relu) writes it (ONNX nodes "
       "are listed in topological order)"},
      {spec({node("Relu", {"x"}, {"r"}, "a")}),
       "graph output 'y' is not computed by any node"},
  };
  for (const Case &c : cases)
    EXPECT_THAT(parseOnnxModel(model(c.spec), "hostile.onnx"),
                StatusIs(StatusCode::InvalidArgument, "hostile.onnx: " + c.message))
        << c.message;
}

TEST(HostileModelTest, OpsetAndIrVersionOutsideTheSupportedRangeAreUnsupported) {
  GraphSpec spec;
  spec.nodes = {node("Relu", {"x"}, {"y"}, "a")};
  spec.inputs = {valueInfo("x", {2, 3})};
  spec.outputs = {valueInfo("y", {2, 3})};
  spec.opset = 99;
  EXPECT_THAT(parseOnnxModel(model(spec), "hostile.onnx"),
              StatusIs(StatusCode::Unimplemented,
                       "hostile.onnx: ModelProto: opset 99 of the default domain is not "
                       "supported (flowc reads opsets 1 to 24)"));
  spec.opset = 17;
  spec.irVersion = 13;
  EXPECT_THAT(parseOnnxModel(model(spec), "hostile.onnx"),
              StatusIs(StatusCode::Unimplemented,
                       "hostile.onnx: ModelProto: ir_version 13 is not supported (flowc "
                       "reads IR versions 3 to 12)"));
  spec.irVersion = 2;
  EXPECT_THAT(parseOnnxModel(model(spec), "hostile.onnx"),
              StatusIs(StatusCode::Unimplemented, "ir_version 2 is not supported"));
}

// Sizes ---------------------------------------------------------------------

TEST(HostileModelTest, InitializerWhoseElementCountOverflowsIsRefused) {
  // 2^40 x 2^40 x 0 holds no bytes, but its dimensions multiply past int64
  // wherever a part of the shape is used.
  ProtoWriter tensor;
  tensor.varint(1, uint64_t{1} << 40).varint(1, uint64_t{1} << 40).varint(1, 0);
  tensor.varint(2, 1).bytes(8, "w").bytes(9, "");
  auto parsed = parseOnnxModel(
      graphModel({node("Add", {"x", "w"}, {"y"}, "a")}, {tensor.str()}), "hostile.onnx");
  EXPECT_THAT(parsed, StatusIs(StatusCode::InvalidArgument,
                               "graph.initializer[0] 'w': shape "
                               "[1099511627776,1099511627776,0] has more elements than "
                               "int64 can count"));
}

TEST(HostileModelTest, InputLargerThanAnyAddressSpaceIsRefused) {
  auto graph = importBytes(graphModel({node("Relu", {"x"}, {"y"}, "a")}, {},
                                      {int64_t{1} << 32, int64_t{1} << 32}));
  EXPECT_THAT(graph,
              StatusIs(StatusCode::InvalidArgument,
                       "hostile.onnx: input 'x' has shape [4294967296,4294967296], "
                       "larger than any address space"));
}

// TOSA's verifier would refuse it later, as an internal error.
TEST(HostileModelTest, InputWithoutElementsIsUnsupported) {
  auto graph = importBytes(graphModel({node("Relu", {"x"}, {"y"}, "a")}, {}, {0, 3}));
  EXPECT_THAT(graph,
              StatusIs(StatusCode::Unimplemented,
                       "hostile.onnx: input 'x' has shape [0,3], with no elements"));
}

TEST(HostileModelTest, FoldedConstantsShareOneBudget) {
  // Each Expand alone is under the limit (8 bytes an element); together
  // they are not.
  std::vector<std::string> nodes;
  for (int i = 0; i < 3; ++i)
    nodes.push_back(node("Expand", {"one", "s"}, {"e" + std::to_string(i)},
                         "expand" + std::to_string(i)));
  nodes.push_back(node("Shape", {"x"}, {"y"}, "shape"));
  std::string bytes =
      graphModel(nodes, {int64Tensor("one", {1}), int64Tensor("s", {10})});
  auto parsed = parseOnnxModel(bytes, "hostile.onnx"); // views into `bytes`
  ASSERT_TRUE(parsed) << parsed.status().toString();
  // An Expand takes 2 x 80 bytes: its target shape, then the result.
  EXPECT_TRUE(importOnnx(*parsed, ImportLimits{480}));
  EXPECT_THAT(
      importOnnx(*parsed, ImportLimits{390}),
      StatusIs(StatusCode::ResourceExhausted,
               "hostile.onnx: node 'expand2' (Expand): folding its [10] constant at "
               "import needs 10 elements of 8 bytes (320 already folded), over the "
               "limit of 390 bytes"));
}

TEST(HostileModelTest, FoldedConstantLimitFollowsTheModelsWeights) {
  uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                 static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(foldedConstantLimit(OnnxModel{}), std::min(ram / 4, kGiB));
  // 1 GiB of weights lifts it to 4 GiB unless RAM / 4 is lower. (A view of
  // that size over one byte: the limit reads sizes, never bytes.)
  OnnxModel heavy;
  TensorData tensor;
  static const char byte = 0;
  tensor.bytes = std::string_view(&byte, kGiB);
  heavy.initializers.push_back(tensor);
  EXPECT_EQ(foldedConstantLimit(heavy), std::min(ram / 4, 4 * kGiB));
}

TEST(HostileModelTest, IntegerFoldingWrapsInsteadOfTrapping) {
  // INT64_MIN / -1 traps on x86 (SIGFPE) unless the folder avoids it; and a
  // Range spanning all of int64 has 4 steps of 2^62.
  int64_t min = std::numeric_limits<int64_t>::min();
  auto graph = importBytes(
      graphModel({node("Div", {"m", "n"}, {"q"}, "div"),
                  node("Range", {"m", "big", "step"}, {"r"}, "range"),
                  node("Concat", {"q", "r"}, {"y"}, "cat", {intAttribute("axis", 0)})},
                 {int64Tensor("m", {min}), int64Tensor("n", {-1}),
                  scalarInt64("big", std::numeric_limits<int64_t>::max()),
                  scalarInt64("step", int64_t{1} << 62)}));
  ASSERT_TRUE(graph) << graph.status().toString();
  // The folded output is returned from its weight argument.
  std::optional<size_t> index = graph->weightIndex("y");
  ASSERT_TRUE(index);
  const WeightRef &folded = graph->weights[*index];
  ASSERT_EQ(folded.info.shape, (std::vector<int64_t>{5}));
  int64_t values[5];
  ASSERT_EQ(folded.bytes.size(), sizeof values);
  std::memcpy(values, folded.bytes.data(), sizeof values);
  int64_t quarter = int64_t{1} << 62;
  EXPECT_EQ(values[0], min); // -INT64_MIN wraps to itself
  EXPECT_EQ(values[1], min);
  EXPECT_EQ(values[2], min + quarter);
  EXPECT_EQ(values[3], 0);
  EXPECT_EQ(values[4], quarter);
}

} // namespace
} // namespace flowc::compiler
