// Import and code generation, checked by running the generated code through
// the runtime against references computed here.
#include "flowc/compiler/Compiler.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

#include "flowc/runtime/Session.h"

#include <cmath>

namespace flowc::compiler {
namespace {

using namespace flowc::testing;

/// Weight views in the result point into `bytes`.
Expected<ImportedGraph> importBytes(const std::string &bytes, const std::string &name) {
  FLOWC_ASSIGN_OR_RETURN(OnnxModel model, parseOnnxModel(bytes, name));
  return importOnnx(model);
}

/// Compiles `graph`, packs its weights into an artifact in `dir`, and runs it.
Expected<std::vector<runtime::Tensor>>
compileAndRun(const ImportedGraph &graph,
              const std::map<std::string, runtime::Tensor> &inputs, const TempDir &dir) {
  FLOWC_ASSIGN_OR_RETURN(std::string code,
                         compileToSharedObject(graph.irBytecode, {}, dir.path()));
  runtime::Plan plan;
  plan.entry = kEntrySymbol;
  for (const auto &input : graph.inputs)
    plan.inputs.push_back({input.name, "float32", input.shape});
  for (const auto &output : graph.outputs)
    plan.outputs.push_back({output.name, "float32", output.shape});
  std::vector<std::string_view> pieces;
  for (const auto &weight : graph.weights)
    pieces.push_back(weight.bytes);
  std::string path = dir.file("model.fca");
  FLOWC_ASSIGN_OR_RETURN(auto writer, runtime::ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Metadata, "{}"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Code, code));
  FLOWC_ASSIGN_OR_RETURN(auto offsets, writer->addWeights(pieces));
  for (size_t i = 0; i < graph.weights.size(); ++i)
    plan.weights.push_back(
        {{graph.weights[i].key, "float32", graph.weights[i].info.shape},
         "",
         offsets[i],
         graph.weights[i].bytes.size()});
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Plan, plan.toJson().dump()));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  FLOWC_ASSIGN_OR_RETURN(auto artifact, runtime::Artifact::open(path));
  FLOWC_ASSIGN_OR_RETURN(auto session, runtime::Session::create(artifact));
  return session->run(inputs);
}

TEST(ImportTest, WeightsBecomeTaggedArgumentsNotData) {
  std::string bytes = denseReluModel();
  auto graph = importBytes(bytes, "dense.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  ASSERT_EQ(graph->weights.size(), 2u);
  EXPECT_EQ(graph->weights[0].key, "W");
  EXPECT_EQ(graph->opCounts["MatMul"], 1);
  // The IR names weights by key; their values are nowhere in it.
  auto text = printGraphIr(graph->irBytecode);
  ASSERT_TRUE(text);
  EXPECT_THAT(*text, ::testing::HasSubstr("flowc.weight = \"W\""));
  EXPECT_THAT(*text, ::testing::HasSubstr("tosa.matmul"));
  for (const WeightRef &weight : graph->weights)
    EXPECT_EQ(graph->irBytecode.find(weight.bytes), std::string::npos) << weight.key;
}

TEST(ImportTest, NewWeightValuesGiveIdenticalIr) {
  auto a = importBytes(denseReluModel(1.0f), "a.onnx");
  auto b = importBytes(denseReluModel(2.0f), "b.onnx");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->irBytecode, b->irBytecode);
}

TEST(ImportTest, UnsupportedOpNamesNodeOpDomainAndOpset) {
  GraphSpec spec;
  spec.nodes = {node("Einsum", {"x"}, {"y"}, "contract")};
  spec.inputs = {valueInfo("x", {2, 2})};
  spec.outputs = {valueInfo("y", {2, 2})};
  EXPECT_THAT(
      importBytes(model(spec), "m.onnx"),
      StatusIs(StatusCode::Unimplemented,
               "m.onnx: node 'contract' (Einsum): unsupported op 'Einsum' (domain "
               "'ai.onnx', opset 17)"));
}

TEST(ImportTest, ShapeMismatchNamesTheNode) {
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {3, 2}, std::vector<float>(6, 1.0f))};
  spec.nodes = {node("MatMul", {"x", "W"}, {"y"}, "proj")};
  spec.inputs = {valueInfo("x", {2, 4})};
  spec.outputs = {valueInfo("y", {2, 2})};
  EXPECT_THAT(importBytes(model(spec), "m.onnx"),
              StatusIs(StatusCode::InvalidArgument,
                       "node 'proj' (MatMul): inner dimensions differ"));
}

TEST(ImportTest, UndefinedInputIsAnError) {
  GraphSpec spec;
  spec.nodes = {node("Relu", {"nowhere"}, {"y"}, "relu")};
  spec.inputs = {valueInfo("x", {2})};
  spec.outputs = {valueInfo("y", {2})};
  EXPECT_THAT(importBytes(model(spec), "m.onnx"),
              StatusIs(StatusCode::InvalidArgument, "input 'nowhere' is not produced"));
}

TEST(ImportTest, SymbolicInputShapeIsReported) {
  GraphSpec spec;
  spec.nodes = {node("Relu", {"x"}, {"y"}, "relu")};
  spec.inputs = {valueInfo("x", {-1, 4})};
  spec.outputs = {valueInfo("y", {-1, 4})};
  EXPECT_THAT(importBytes(model(spec), "m.onnx"),
              StatusIs(StatusCode::Unimplemented, "symbolic shape"));
}

TEST(ImportTest, ConcatShapeMismatchNamesTheNode) {
  GraphSpec spec;
  spec.nodes = {node("Concat", {"a", "b"}, {"y"}, "join", {intAttribute("axis", 1)})};
  spec.inputs = {valueInfo("a", {2, 3}), valueInfo("b", {4, 3})};
  spec.outputs = {valueInfo("y", {2, 6})};
  EXPECT_THAT(
      importBytes(model(spec), "m.onnx"),
      StatusIs(
          StatusCode::InvalidArgument,
          "node 'join' (Concat): input [4,3] does not match the others outside axis 1"));
}

TEST(ImportTest, SqueezeOfANonUnitAxisIsAnError) {
  GraphSpec spec;
  spec.initializers = {int64Tensor("axes", {0})};
  spec.nodes = {node("Squeeze", {"x", "axes"}, {"y"}, "sq")};
  spec.inputs = {valueInfo("x", {2, 3})};
  spec.outputs = {valueInfo("y", {3})};
  EXPECT_THAT(importBytes(model(spec), "m.onnx"),
              StatusIs(StatusCode::InvalidArgument, "cannot squeeze axis 0 of size 2"));
}

TEST(ImportTest, GroupThatDoesNotDivideChannelsIsAnError) {
  GraphSpec spec;
  spec.initializers = {floatTensor("w", {4, 1, 1, 1}, std::vector<float>(4, 1.0f))};
  spec.nodes = {node("Conv", {"x", "w"}, {"y"}, "conv", {intAttribute("group", 3)})};
  spec.inputs = {valueInfo("x", {1, 3, 2, 2})};
  spec.outputs = {valueInfo("y", {1, 4, 2, 2})};
  EXPECT_THAT(importBytes(model(spec), "m.onnx"),
              StatusIs(StatusCode::InvalidArgument,
                       "group=3 does not divide the 4 output channels"));
}

TEST(ImportTest, BatchNormalizationWithWrongParameterShape) {
  GraphSpec spec;
  spec.initializers = {floatTensor("s", {2}, {1, 1}), floatTensor("b", {3}, {0, 0, 0}),
                       floatTensor("m", {3}, {0, 0, 0}),
                       floatTensor("v", {3}, {1, 1, 1})};
  spec.nodes = {node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, "bn")};
  spec.inputs = {valueInfo("x", {1, 3, 2, 2})};
  spec.outputs = {valueInfo("y", {1, 3, 2, 2})};
  EXPECT_THAT(
      importBytes(model(spec), "m.onnx"),
      StatusIs(StatusCode::InvalidArgument, "input #1 has shape [2], expected [3]"));
}

TEST(CodegenTest, DenseReluMatchesReference) {
  TempDir dir;
  std::string bytes = denseReluModel(); // weight views point into it
  auto graph = importBytes(bytes, "dense.onnx");
  ASSERT_TRUE(graph);
  runtime::Tensor x = runtime::Tensor::fromFloats({2, 4}, {1, -2, 3, 0.5f, -1, 0, 2, 4});
  auto outputs = compileAndRun(*graph, {{"x", x}}, dir);
  ASSERT_TRUE(outputs) << outputs.status().toString();
  std::vector<float> expected = denseReluReference(x.floats());
  std::vector<float> y = (*outputs)[0].floats();
  ASSERT_EQ(y.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(y[i], expected[i], 1e-5) << i;
}

TEST(CodegenTest, StridedConvPoolAndSoftmaxMatchReference) {
  // Conv 1->1, 3x3 all-ones kernel, stride 2, pads 1 on a 1x1x5x5 input,
  // then MaxPool 2x2 stride 1, Flatten and Softmax.
  GraphSpec spec;
  spec.initializers = {floatTensor("k", {1, 1, 3, 3}, std::vector<float>(9, 1.0f))};
  spec.nodes = {
      node("Conv", {"x", "k"}, {"c"}, "conv",
           {intsAttribute("strides", {2, 2}), intsAttribute("pads", {1, 1, 1, 1})}),
      node("MaxPool", {"c"}, {"p"}, "pool", {intsAttribute("kernel_shape", {2, 2})}),
      node("Flatten", {"p"}, {"f"}, "flat"), node("Softmax", {"f"}, {"y"}, "softmax")};
  spec.inputs = {valueInfo("x", {1, 1, 5, 5})};
  spec.outputs = {valueInfo("y", {1, 4})};
  std::string bytes = model(spec);
  auto graph = importBytes(bytes, "conv.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  std::vector<float> xs;
  for (int i = 0; i < 25; ++i)
    xs.push_back(static_cast<float>(i % 7) - 3.0f);
  runtime::Tensor x = runtime::Tensor::fromFloats({1, 1, 5, 5}, xs);
  TempDir dir;
  auto outputs = compileAndRun(*graph, {{"x", x}}, dir);
  ASSERT_TRUE(outputs) << outputs.status().toString();

  // Reference, computed directly.
  float conv[3][3];
  for (int oy = 0; oy < 3; ++oy)
    for (int ox = 0; ox < 3; ++ox) {
      float acc = 0;
      for (int ky = 0; ky < 3; ++ky)
        for (int kx = 0; kx < 3; ++kx) {
          int iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
          if (iy >= 0 && iy < 5 && ix >= 0 && ix < 5)
            acc += xs[iy * 5 + ix];
        }
      conv[oy][ox] = acc;
    }
  std::vector<float> pooled;
  for (int oy = 0; oy < 2; ++oy)
    for (int ox = 0; ox < 2; ++ox)
      pooled.push_back(std::max(
          {conv[oy][ox], conv[oy][ox + 1], conv[oy + 1][ox], conv[oy + 1][ox + 1]}));
  float max = *std::max_element(pooled.begin(), pooled.end()), sum = 0;
  for (float v : pooled)
    sum += std::exp(v - max);
  std::vector<float> y = (*outputs)[0].floats();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(y[i], std::exp(pooled[i] - max) / sum, 1e-6) << i;
}

TEST(CodegenTest, RejectsUnknownTarget) {
  CompileOptions options;
  options.target = "tpu";
  EXPECT_THAT(compileToSharedObject("", options, "/tmp"),
              StatusIs(StatusCode::InvalidArgument, "unknown target 'tpu'"));
}

TEST(CodegenTest, RejectsCorruptBytecode) {
  TempDir dir;
  EXPECT_THAT(compileToSharedObject("not bytecode", {}, dir.path()),
              StatusIs(StatusCode::DataLoss, "does not parse"));
}

} // namespace
} // namespace flowc::compiler
