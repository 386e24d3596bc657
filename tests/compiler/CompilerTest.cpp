// Import and code generation, checked by running the generated code through
// the runtime against references computed here.
#include "flowc/compiler/Compiler.h"
#include "flowc/compiler/GraphIr.h"

#include "flowc/compiler/OpRegistry.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"
#include "ImportBytes.h"

#include "flowc/runtime/PackedWeights.h"
#include "flowc/runtime/Session.h"
#include "flowc/support/Sha256.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

namespace flowc::compiler {
namespace {

using namespace flowc::testing;

/// Library kernel weights packed into the artifact as the worker does it;
/// `ForeignLayout` records them under a layout no kernel here wants (as if
/// packed on another CPU). `inUse`: sites that read them in place.
enum class Packing { None, Packed, ForeignLayout };
struct PackedWeights {
  Packing packing = Packing::None;
  size_t count = 0;
  int64_t inUse = 0;
};

/// Compiles `graph`, packs its weights into an artifact in `dir`, and runs it.
Expected<std::vector<runtime::Tensor>>
compileAndRun(const ImportedGraph &graph,
              const std::map<std::string, runtime::Tensor> &inputs, const TempDir &dir,
              const CompileOptions &options = {},
              KernelObjectCache *kernelCache = nullptr, CompileReport *report = nullptr,
              PackedWeights *packed = nullptr) {
  CompileReport ownReport;
  if (!report)
    report = &ownReport;
  FLOWC_ASSIGN_OR_RETURN(
      std::string code,
      compileToSharedObject(graph.irBytecode, options, dir.path(), report, kernelCache));
  const CodeWeights &weights = report->weights;
  runtime::Plan plan;
  plan.entry = kEntrySymbol;
  for (const auto &input : graph.inputs)
    plan.inputs.push_back({input.name, "float32", input.shape});
  for (const auto &output : graph.outputs)
    plan.outputs.push_back({output.name, "float32", output.shape});
  // What the code binds: graph weights by key, derived ones evaluated.
  auto graphWeight = [&](const std::string &key) -> const WeightRef & {
    return graph.weights.at(graph.weightIndex(key).value());
  };
  std::vector<std::string> derivedBytes;
  derivedBytes.reserve(weights.keys.size());
  std::vector<std::string_view> pieces;
  std::vector<std::vector<int64_t>> shapes;
  for (const std::string &key : weights.keys) {
    if (const DerivedWeight *derived = weights.findDerived(key)) {
      std::vector<std::string_view> inputs;
      for (const std::string &input : derived->inputs)
        inputs.push_back(graphWeight(input).bytes);
      FLOWC_ASSIGN_OR_RETURN(std::string bytes, evaluateDerivedWeight(*derived, inputs));
      derivedBytes.push_back(std::move(bytes));
      pieces.push_back(derivedBytes.back());
      shapes.push_back(derived->info.shape);
    } else {
      pieces.push_back(graphWeight(key).bytes);
      shapes.push_back(graphWeight(key).info.shape);
    }
  }
  size_t boundCount = pieces.size();
  // Artifacts name every weight by its digest (checked at open).
  auto pieceDigest = [](std::string_view bytes) {
    return "sha256:" + sha256Hex(sha256Of(bytes)) + "/" + std::to_string(bytes.size());
  };
  std::deque<std::string> packedBytes;
  for (const KernelWeight &weight : weights.kernelWeights) {
    if (!packed || packed->packing == Packing::None)
      break;
    size_t index = std::find(weights.keys.begin(), weights.keys.end(), weight.key) -
                   weights.keys.begin();
    FLOWC_ASSIGN_OR_RETURN(
        auto packing,
        runtime::packKernelWeight(static_cast<runtime::KernelKind>(weight.kind),
                                  weight.params, weight.buffer, pieces.at(index)));
    if (!packing)
      continue;
    std::string layout =
        packed->packing == Packing::Packed ? packing->layout : "another CPU's layout";
    packedBytes.push_back(std::move(packing->bytes));
    pieces.push_back(packedBytes.back());
    plan.packed.push_back({weight.site, weight.buffer, layout, pieceDigest(pieces.back()),
                           0, pieces.back().size()});
    ++packed->count;
  }
  std::string path = dir.file("model.fca");
  FLOWC_ASSIGN_OR_RETURN(auto writer, runtime::ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Metadata, "{}"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Code, code));
  FLOWC_ASSIGN_OR_RETURN(auto offsets, writer->addWeights(pieces));
  for (size_t i = 0; i < boundCount; ++i)
    plan.weights.push_back({{weights.keys[i], "float32", shapes[i]},
                            pieceDigest(pieces[i]),
                            offsets[i],
                            pieces[i].size()});
  for (size_t i = 0; i < plan.packed.size(); ++i)
    plan.packed[i].offset = offsets[boundCount + i];
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Plan, plan.toJson().dump()));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  FLOWC_ASSIGN_OR_RETURN(auto artifact, runtime::Artifact::open(path));
  FLOWC_ASSIGN_OR_RETURN(auto session, runtime::Session::create(artifact));
  auto outputs = session->run(inputs);
  if (packed)
    packed->inUse = session->prepackedWeightsInUse();
  return outputs;
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
  spec.nodes = {node("Det", {"x"}, {"y"}, "contract")};
  spec.inputs = {valueInfo("x", {2, 2})};
  spec.outputs = {valueInfo("y", {2, 2})};
  EXPECT_THAT(importBytes(model(spec), "m.onnx"),
              StatusIs(StatusCode::Unimplemented,
                       "m.onnx: node 'contract' (Det): unsupported op 'Det' (domain "
                       "'ai.onnx', opset 17)"));
}

/// A model of one `op` node reading x [2, 3] (and `slope` [3] for PRelu).
std::string oneOpModel(const std::string &op, int64_t opset) {
  GraphSpec spec;
  bool prelu = op == "PRelu";
  spec.nodes = {prelu ? node(op, {"x", "slope"}, {"y"}, "act")
                      : node(op, {"x"}, {"y"}, "act")};
  spec.inputs = {valueInfo("x", {2, 3})};
  if (prelu)
    spec.inputs.push_back(valueInfo("slope", {3}));
  spec.outputs = {valueInfo("y", {2, 3})};
  spec.opset = opset;
  return model(spec);
}

TEST(ImportTest, OpOutsideItsOpsetRangeIsUnsupported) {
  // PRelu is imported from opset 7, where its slope broadcasts.
  EXPECT_THAT(
      importBytes(oneOpModel("PRelu", 6), "m.onnx"),
      StatusIs(StatusCode::Unimplemented,
               "m.onnx: node 'act' (PRelu): op 'PRelu' at opset 6 is not supported "
               "(flowc imports it at opsets 7 to 24)"));
  // Gelu entered the default domain at opset 20.
  EXPECT_THAT(importBytes(oneOpModel("Gelu", 17), "m.onnx"),
              StatusIs(StatusCode::Unimplemented,
                       "node 'act' (Gelu): op 'Gelu' at opset 17 is not supported (flowc "
                       "imports it at opsets 20 to 24)"));
  // Inside their ranges both import.
  EXPECT_TRUE(importBytes(oneOpModel("PRelu", 7), "m.onnx"));
  EXPECT_TRUE(importBytes(oneOpModel("Gelu", 20), "m.onnx"));
}

TEST(ImportTest, PReluSlopeMustBroadcastToTheInput) {
  // [2,1,3] broadcasts with x [2,3], but to [2,2,3]: not x's shape.
  GraphSpec spec;
  spec.nodes = {node("PRelu", {"x", "slope"}, {"y"}, "act")};
  spec.inputs = {valueInfo("x", {2, 3}), valueInfo("slope", {2, 1, 3})};
  spec.outputs = {valueInfo("y", {2, 3})};
  EXPECT_THAT(importBytes(model(spec), "m.onnx"),
              StatusIs(StatusCode::InvalidArgument,
                       "m.onnx: node 'act' (PRelu): slope [2,1,3] does not broadcast to "
                       "input [2,3]"));
}

TEST(OpRegistryTest, EntriesAreOrderedVersionedAndDoNotOverlap) {
  std::span<const OpInfo> ops = registeredOps();
  ASSERT_FALSE(ops.empty());
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpInfo &op = ops[i];
    // Each range is inside the opsets the loader reads.
    EXPECT_LE(kMinOpset, op.sinceVersion) << op.name;
    EXPECT_LE(op.sinceVersion, op.untilVersion) << op.name;
    EXPECT_LE(op.untilVersion, kMaxOpset) << op.name;
    EXPECT_LE(op.signature.minInputs, op.signature.maxInputs) << op.name;
    EXPECT_LE(op.signature.minOutputs, op.signature.maxOutputs) << op.name;
    // Lookups at either end of the range find this entry.
    EXPECT_EQ(findOp(op.name, op.sinceVersion), &op) << op.name;
    EXPECT_EQ(findOp(op.name, op.untilVersion), &op) << op.name;
    // Sorted by name, then range; two entries of one op never overlap.
    if (i > 0 && ops[i - 1].name == op.name) {
      EXPECT_LT(ops[i - 1].untilVersion, op.sinceVersion) << op.name;
    }
    if (i > 0) {
      EXPECT_LE(ops[i - 1].name, op.name);
    }
  }
  EXPECT_EQ(findOp("Det"), nullptr);
  EXPECT_EQ(findOp("PRelu", 6), nullptr);
  const OpInfo *div = findOp("Div", kMaxOpset);
  ASSERT_NE(div, nullptr);
  EXPECT_FALSE(div->mustBePositive(0));
  EXPECT_TRUE(div->mustBePositive(1));
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
              StatusIs(StatusCode::InvalidArgument,
                       "node 'relu' (Relu) reads 'nowhere', which no node, graph input "
                       "or initializer defines"));
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

// Conv (1x1, 2 -> 3 channels, bias) -> BatchNormalization -> Relu, and a
// BatchNormalization of the input on its own.
GraphSpec convBatchNormSpec() {
  GraphSpec spec;
  spec.initializers = {
      floatTensor("w", {3, 2, 1, 1}, {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}),
      floatTensor("b", {3}, {0.1f, -0.2f, 0.3f}),
      floatTensor("s", {3}, {1.5f, -0.5f, 2.0f}),
      floatTensor("bb", {3}, {0.25f, 1.0f, -0.5f}),
      floatTensor("m", {3}, {0.2f, -0.4f, 1.0f}),
      floatTensor("v", {3}, {0.5f, 2.0f, 0.1f}),
      floatTensor("s2", {2}, {2.0f, 0.5f}),
      floatTensor("b2", {2}, {-1.0f, 1.0f}),
      floatTensor("m2", {2}, {0.5f, -0.5f}),
      floatTensor("v2", {2}, {4.0f, 0.25f})};
  spec.nodes = {node("Conv", {"x", "w", "b"}, {"c"}, "conv"),
                node("BatchNormalization", {"c", "s", "bb", "m", "v"}, {"n"}, "bn"),
                node("Relu", {"n"}, {"y"}, "relu"),
                node("BatchNormalization", {"x", "s2", "b2", "m2", "v2"}, {"z"}, "bn2")};
  spec.inputs = {valueInfo("x", {1, 2, 3, 3})};
  spec.outputs = {valueInfo("y", {1, 3, 3, 3}), valueInfo("z", {1, 2, 3, 3})};
  return spec;
}

TEST(CodegenTest, BatchNormFoldsIntoDerivedWeightsAndMatchesTheReference) {
  std::string bytes = model(convBatchNormSpec());
  auto graph = importBytes(bytes, "convbn.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  std::vector<float> xs(18);
  for (int i = 0; i < 18; ++i)
    xs[i] = static_cast<float>(i % 5) - 1.5f;
  runtime::Tensor x = runtime::Tensor::fromFloats({1, 2, 3, 3}, xs);
  const float w[3][2] = {{0.5f, -1.0f}, {2.0f, 0.25f}, {-0.75f, 1.5f}};
  const float b[3] = {0.1f, -0.2f, 0.3f}, s[3] = {1.5f, -0.5f, 2.0f},
              bb[3] = {0.25f, 1.0f, -0.5f}, m[3] = {0.2f, -0.4f, 1.0f},
              v[3] = {0.5f, 2.0f, 0.1f};
  const float s2[2] = {2.0f, 0.5f}, b2[2] = {-1.0f, 1.0f}, m2[2] = {0.5f, -0.5f},
              v2[2] = {4.0f, 0.25f};
  // -O0 computes BatchNorm in generated code; -O2 folds it.
  for (int level : {0, 2}) {
    SCOPED_TRACE("-O" + std::to_string(level));
    CompileOptions options;
    options.optLevel = level;
    TempDir dir;
    auto outputs = compileAndRun(*graph, {{"x", x}}, dir, options);
    ASSERT_TRUE(outputs) << outputs.status().toString();
    std::vector<float> y = (*outputs)[0].floats(), z = (*outputs)[1].floats();
    for (int o = 0; o < 3; ++o)
      for (int p = 0; p < 9; ++p) {
        float conv = w[o][0] * xs[p] + w[o][1] * xs[9 + p] + b[o];
        float norm = (conv - m[o]) / std::sqrt(v[o] + 1e-5f) * s[o] + bb[o];
        EXPECT_NEAR(y[o * 9 + p], std::max(norm, 0.0f), 1e-5) << o << "," << p;
      }
    for (int c = 0; c < 2; ++c)
      for (int p = 0; p < 9; ++p)
        EXPECT_NEAR(z[c * 9 + p],
                    (xs[c * 9 + p] - m2[c]) / std::sqrt(v2[c] + 1e-5f) * s2[c] + b2[c],
                    1e-5);
  }
}

TEST(CodegenTest, FoldedCodeBindsDerivedWeightsInsteadOfBatchNormParameters) {
  std::string bytes = model(convBatchNormSpec());
  auto graph = importBytes(bytes, "convbn.onnx");
  ASSERT_TRUE(graph);
  TempDir dir;
  CompileReport report;
  const CodeWeights &weights = report.weights;
  ASSERT_TRUE(compileToSharedObject(graph->irBytecode, {}, dir.path(), &report));
  // Conv weights and bias (BatchNorm folded in), then the standalone
  // BatchNorm's scale and shift: no source weight is bound any more.
  ASSERT_EQ(weights.derived.size(), 4u);
  ASSERT_EQ(weights.keys.size(), 4u);
  for (const std::string &key : weights.keys)
    EXPECT_NE(weights.findDerived(key), nullptr) << key;
  EXPECT_EQ(weights.derived[0].info.shape, (std::vector<int64_t>{3, 1, 1, 2}));
  EXPECT_EQ(weights.derived[0].inputs, (std::vector<std::string>{"w", "s", "v"}));
  // The recipe holds the computation, never weight values.
  for (const WeightRef &weight : graph->weights)
    EXPECT_EQ(weights.derived[0].recipe.find(weight.bytes), std::string::npos);
  // The switch turns it off: every graph weight bound as is.
  CompileOptions options;
  options.disabledPasses = {"flowc-derive-weights"};
  ASSERT_TRUE(compileToSharedObject(graph->irBytecode, options, dir.path(), &report));
  EXPECT_TRUE(weights.derived.empty());
  EXPECT_EQ(weights.keys.size(), graph->weights.size());
}

/// An in-memory kernel cache that counts what it is asked.
class MemoryKernelCache final : public KernelObjectCache {
public:
  std::optional<std::string> lookup(const std::string &key) override {
    auto found = objects.find(key);
    if (found == objects.end())
      return std::nullopt;
    return found->second;
  }
  void store(const std::string &key, const std::string &object) override {
    objects[key] = object;
  }
  std::map<std::string, std::string> objects;
};

std::vector<float> centeringReference(const std::vector<float> &x, bool sigmoid) {
  auto centerRelu = [](std::vector<float> v) {
    for (size_t row = 0; row < 8; ++row) {
      double mean = 0;
      for (size_t i = 0; i < 4096; ++i)
        mean += v[row * 4096 + i];
      mean /= 4096;
      for (size_t i = 0; i < 4096; ++i)
        v[row * 4096 + i] = std::max(0.0f, v[row * 4096 + i] - static_cast<float>(mean));
    }
    return v;
  };
  std::vector<float> y = centerRelu(centerRelu(x));
  for (float &v : y)
    v = sigmoid ? 1.0f / (1.0f + std::exp(-v)) : std::tanh(v);
  return y;
}

TEST(CodegenTest, KernelsAreCompiledOnceAndReusedAcrossCompiles) {
  std::string sigmoidBytes = centeringModel("Sigmoid"),
              tanhBytes = centeringModel("Tanh");
  auto sigmoid = importBytes(sigmoidBytes, "sigmoid.onnx");
  auto tanh = importBytes(tanhBytes, "tanh.onnx");
  ASSERT_TRUE(sigmoid && tanh);
  std::vector<float> xs(8 * 4096);
  for (size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>((i * 37) % 101) / 25.0f - 2.0f;
  runtime::Tensor x = runtime::Tensor::fromFloats({8, 4096}, xs);
  auto expectMatches = [&](const Expected<std::vector<runtime::Tensor>> &outputs,
                           bool isSigmoid) {
    ASSERT_TRUE(outputs) << outputs.status().toString();
    std::vector<float> expected = centeringReference(xs, isSigmoid);
    std::vector<float> y = (*outputs)[0].floats();
    ASSERT_EQ(y.size(), expected.size());
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], expected[i], 1e-5) << i;
  };
  MemoryKernelCache cache;
  TempDir dir;

  // Cold: every distinct kernel compiled and stored; the repeated block
  // calls the same kernels twice.
  CompileReport cold;
  expectMatches(compileAndRun(*sigmoid, {{"x", x}}, dir, {}, &cache, &cold), true);
  EXPECT_GE(cold.loopKernels, 2);
  EXPECT_GT(cold.loopKernelCalls, cold.loopKernels);
  EXPECT_EQ(cold.cachedLoopKernels, 0);
  EXPECT_EQ(cache.objects.size(), static_cast<size_t>(cold.loopKernels));

  // The same graph again: every kernel from the cache.
  CompileReport warm;
  expectMatches(compileAndRun(*sigmoid, {{"x", x}}, dir, {}, &cache, &warm), true);
  EXPECT_EQ(warm.cachedLoopKernels, warm.loopKernels);

  // One op edited: only the kernels holding it are compiled.
  CompileReport edited;
  expectMatches(compileAndRun(*tanh, {{"x", x}}, dir, {}, &cache, &edited), false);
  EXPECT_GT(edited.cachedLoopKernels, 0);
  EXPECT_LT(edited.cachedLoopKernels, edited.loopKernels);
  EXPECT_EQ(cache.objects.size(),
            static_cast<size_t>(cold.loopKernels + edited.loopKernels -
                                edited.cachedLoopKernels));

  // Another LLVM optimization level is another kernel; without the pass
  // there is nothing to cache.
  CompileOptions o1;
  o1.optLevel = 1;
  CompileReport other;
  expectMatches(compileAndRun(*sigmoid, {{"x", x}}, dir, o1, &cache, &other), true);
  EXPECT_EQ(other.cachedLoopKernels, 0);
  CompileOptions whole;
  whole.disabledPasses = {"flowc-partition-kernels"};
  CompileReport unpartitioned;
  expectMatches(compileAndRun(*sigmoid, {{"x", x}}, dir, whole, &cache, &unpartitioned),
                true);
  EXPECT_EQ(unpartitioned.loopKernels, 0);

  // Printing the IR lowers every kernel, cache or not, and shows each.
  CompileOptions print;
  print.printIrAfter = "convert-func-to-llvm";
  CompileReport printed;
  ASSERT_TRUE(
      compileToSharedObject(sigmoid->irBytecode, print, dir.path(), &printed, &cache));
  EXPECT_EQ(printed.cachedLoopKernels, 0);
  int dumps = 0;
  for (size_t at = printed.printedIr.find("IR Dump After"); at != std::string::npos;
       at = printed.printedIr.find("IR Dump After", at + 1))
    ++dumps;
  EXPECT_EQ(dumps, 1 + printed.loopKernels);
}

// Conv 16 -> 32 channels, 3x3, padding 1, on 1x16x6x6, then Relu: large
// enough that the library wants its weights in a blocked layout.
TEST(CodegenTest, PackedKernelWeightsAreReadInPlaceOrRepackedWhenForeign) {
  std::vector<float> w(32 * 16 * 9), b(32), xs(16 * 36);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>(i % 5) * 0.1f - 0.2f;
  for (size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>((i * 11) % 17) / 17.0f - 0.4f;
  GraphSpec spec;
  spec.initializers = {floatTensor("w", {32, 16, 3, 3}, w), floatTensor("b", {32}, b)};
  spec.nodes = {
      node("Conv", {"x", "w", "b"}, {"c"}, "conv", {intsAttribute("pads", {1, 1, 1, 1})}),
      node("Relu", {"c"}, {"y"}, "relu")};
  spec.inputs = {valueInfo("x", {1, 16, 6, 6})};
  spec.outputs = {valueInfo("y", {1, 32, 6, 6})};
  std::string bytes = model(spec);
  auto graph = importBytes(bytes, "conv16.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  std::vector<float> expected(32 * 36);
  for (int o = 0; o < 32; ++o)
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 6; ++x) {
        float acc = b[o];
        for (int i = 0; i < 16; ++i)
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              int iy = y + ky - 1, ix = x + kx - 1;
              if (iy >= 0 && iy < 6 && ix >= 0 && ix < 6)
                acc += w[((o * 16 + i) * 3 + ky) * 3 + kx] * xs[(i * 6 + iy) * 6 + ix];
            }
        expected[(o * 6 + y) * 6 + x] = std::max(acc, 0.0f);
      }
  runtime::Tensor input = runtime::Tensor::fromFloats({1, 16, 6, 6}, xs);
  KernelWeight filter;
  for (Packing packing : {Packing::None, Packing::Packed, Packing::ForeignLayout}) {
    TempDir dir;
    PackedWeights packed{packing};
    CompileReport report;
    auto outputs =
        compileAndRun(*graph, {{"x", input}}, dir, {}, nullptr, &report, &packed);
    ASSERT_TRUE(outputs) << outputs.status().toString();
    std::vector<float> got = (*outputs)[0].floats();
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], expected[i], 1e-4) << i;
    // The filter is the one constant kernel weight (read through its OIHW
    // transpose).
    ASSERT_EQ(report.weights.kernelWeights.size(), 1u);
    filter = report.weights.kernelWeights[0];
    EXPECT_EQ(filter.key, "w");
    EXPECT_EQ(filter.buffer, 1);
    if (packing == Packing::None)
      continue;
    // In place when the layout is the one wanted; repacked otherwise.
    ASSERT_EQ(packed.count, 1u);
    EXPECT_EQ(packed.inUse, packing == Packing::Packed ? 1 : 0);
  }
  // Bad input to the packer: a filter of the wrong size.
  EXPECT_THAT(runtime::packKernelWeight(runtime::KernelKind::Conv2d, filter.params, 1,
                                        std::string(100, '\0')),
              StatusIs(StatusCode::InvalidArgument, "has 18432 bytes, not 100"));
  // A buffer that is not a constant weight has nothing to pack.
  auto source = runtime::packKernelWeight(runtime::KernelKind::Conv2d, filter.params, 0,
                                          std::string(100, '\0'));
  ASSERT_TRUE(source);
  EXPECT_FALSE(source->has_value());
}

// Attention scores as BERT exports them: (Q x K^T) / 2 + mask, with a mask
// that hides some key positions; the scale and the mask ride on the product.
TEST(CodegenTest, AttentionScoresWithAMaskMatchTheReference) {
  GraphSpec spec;
  spec.initializers = {floatTensor("half", {1, 1, 1, 1}, {0.5f}),
                       int64Tensor("shape", {1, 2, 8, 8})};
  spec.nodes = {node("MatMul", {"q", "k"}, {"s"}, "scores"),
                node("Reshape", {"s", "shape"}, {"r"}, "reshape"),
                node("Mul", {"r", "half"}, {"m"}, "scale"),
                node("Add", {"m", "mask"}, {"y"}, "mask")};
  spec.inputs = {valueInfo("q", {2, 8, 4}), valueInfo("k", {2, 4, 8}),
                 valueInfo("mask", {1, 1, 1, 8})};
  spec.outputs = {valueInfo("y", {1, 2, 8, 8})};
  std::string bytes = model(spec);
  auto graph = importBytes(bytes, "attention.onnx");
  ASSERT_TRUE(graph) << graph.status().toString();
  std::vector<float> q(2 * 8 * 4), k(2 * 4 * 8), mask(8);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = static_cast<float>((i * 5) % 11) / 11.0f - 0.5f;
  for (size_t i = 0; i < k.size(); ++i)
    k[i] = static_cast<float>((i * 3) % 7) / 7.0f - 0.3f;
  for (size_t i = 0; i < mask.size(); ++i)
    mask[i] = i % 3 == 2 ? -10000.0f : 0.0f;
  for (int level : {0, 3}) {
    CompileOptions options;
    options.optLevel = level;
    TempDir dir;
    auto outputs =
        compileAndRun(*graph,
                      {{"q", runtime::Tensor::fromFloats({2, 8, 4}, q)},
                       {"k", runtime::Tensor::fromFloats({2, 4, 8}, k)},
                       {"mask", runtime::Tensor::fromFloats({1, 1, 1, 8}, mask)}},
                      dir, options);
    ASSERT_TRUE(outputs) << outputs.status().toString();
    std::vector<float> y = (*outputs)[0].floats();
    ASSERT_EQ(y.size(), 2u * 8 * 8);
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) {
          float dot = 0;
          for (int t = 0; t < 4; ++t)
            dot += q[(b * 8 + i) * 4 + t] * k[(b * 4 + t) * 8 + j];
          ASSERT_NEAR(y[(b * 8 + i) * 8 + j], dot * 0.5f + mask[j], 1e-4)
              << "-O" << level << " " << b << "," << i << "," << j;
        }
  }
}

TEST(DerivedWeightTest, EvaluatesARecipeAndRejectsBadInputs) {
  DerivedWeight weight;
  weight.key = "flowc.derived/0";
  weight.inputs = {"a", "b"};
  weight.recipe = R"mlir(
func.func @derive(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>) -> tensor<3x2xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %p = tosa.mul %a, %b, %shift : (tensor<2x3xf32>, tensor<1x3xf32>, tensor<1xi8>) -> tensor<2x3xf32>
  %r = tosa.rsqrt %b : (tensor<1x3xf32>) -> tensor<1x3xf32>
  %s = tosa.sub %p, %r : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  %t = tosa.transpose %s {perms = array<i32: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %t : tensor<3x2xf32>
}
)mlir";
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {4, 1, 0.25f};
  auto bytesOf = [](const std::vector<float> &values) {
    return std::string_view(reinterpret_cast<const char *>(values.data()),
                            values.size() * sizeof(float));
  };
  auto result = evaluateDerivedWeight(weight, {bytesOf(a), bytesOf(b)});
  ASSERT_TRUE(result) << result.status().toString();
  ASSERT_EQ(result->size(), 6 * sizeof(float));
  std::vector<float> out(6);
  std::memcpy(out.data(), result->data(), result->size());
  // out[j][i] = a[i][j] * b[j] - 1 / sqrt(b[j])
  std::vector<float> expected = {4 - 0.5f, 16 - 0.5f, 2 - 1, 5 - 1, 0.75f - 2, 1.5f - 2};
  for (size_t i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(out[i], expected[i]) << i;

  EXPECT_THAT(evaluateDerivedWeight(weight, {bytesOf(a)}),
              StatusIs(StatusCode::InvalidArgument, "takes 2 weights, got 1"));
  EXPECT_THAT(evaluateDerivedWeight(weight, {bytesOf(b), bytesOf(b)}),
              StatusIs(StatusCode::InvalidArgument, "source weight 'a' has 12 bytes"));
  weight.recipe = "func.func @derive(";
  EXPECT_THAT(evaluateDerivedWeight(weight, {bytesOf(a), bytesOf(b)}),
              StatusIs(StatusCode::InvalidArgument, "does not parse"));
}

TEST(DerivedWeightTest, WidensHalfSources) {
  DerivedWeight weight;
  weight.key = "flowc.derived/0";
  weight.inputs = {"h", "b"};
  weight.recipe = R"mlir(
func.func @derive(%h: tensor<2xf16>, %b: tensor<2xbf16>) -> tensor<2xf32> {
  %h32 = tosa.cast %h : (tensor<2xf16>) -> tensor<2xf32>
  %b32 = tosa.cast %b : (tensor<2xbf16>) -> tensor<2xf32>
  %s = tosa.add %h32, %b32 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %s : tensor<2xf32>
}
)mlir";
  // float16 1.5 and -0.25; bfloat16 2.0 and 1/3 rounded (0x3eab).
  uint16_t half[] = {0x3e00, 0xb400}, bfloat[] = {0x4000, 0x3eab};
  std::string_view halfBytes(reinterpret_cast<const char *>(half), sizeof half);
  std::string_view bfloatBytes(reinterpret_cast<const char *>(bfloat), sizeof bfloat);
  auto result = evaluateDerivedWeight(weight, {halfBytes, bfloatBytes});
  ASSERT_TRUE(result) << result.status().toString();
  ASSERT_EQ(result->size(), 2 * sizeof(float));
  float out[2];
  std::memcpy(out, result->data(), sizeof out);
  EXPECT_EQ(out[0], 3.5f);
  EXPECT_EQ(out[1], -0.25f + 0.333984375f);
  // A float32 source where the recipe wants half is refused by its size.
  float single[] = {1, 2};
  std::string_view singleBytes(reinterpret_cast<const char *>(single), sizeof single);
  EXPECT_THAT(evaluateDerivedWeight(weight, {singleBytes, bfloatBytes}),
              StatusIs(StatusCode::InvalidArgument,
                       "source weight 'h' has 8 bytes, the recipe expects a float16 "
                       "tensor of 2 elements"));
}

TEST(DerivedWeightTest, DequantizesInt8AndUint8Sources) {
  // The importer's dequantization of an int8 weight, and of a uint8 one
  // (i8 bytes; 256 added to the negatives with a clamp), as a recipe.
  DerivedWeight weight;
  weight.key = "flowc.derived/0";
  weight.inputs = {"q", "u"};
  weight.recipe = R"mlir(
func.func @derive(%q: tensor<3xi8>, %u: tensor<3xi8>) -> tensor<3xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zp = "tosa.const"() <{values = dense<-2.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %scale = "tosa.const"() <{values = dense<0.5> : tensor<1xf32>}> : () -> tensor<1xf32>
  %k = "tosa.const"() <{values = dense<256.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %q32 = tosa.cast %q : (tensor<3xi8>) -> tensor<3xf32>
  %centered = tosa.sub %q32, %zp : (tensor<3xf32>, tensor<1xf32>) -> tensor<3xf32>
  %dq = tosa.mul %centered, %scale, %shift : (tensor<3xf32>, tensor<1xf32>, tensor<1xi8>) -> tensor<3xf32>
  %s32 = tosa.cast %u : (tensor<3xi8>) -> tensor<3xf32>
  %negative = tosa.clamp %s32 {min_val = -1.0 : f32, max_val = 0.0 : f32} : (tensor<3xf32>) -> tensor<3xf32>
  %wrap = tosa.mul %negative, %k, %shift : (tensor<3xf32>, tensor<1xf32>, tensor<1xi8>) -> tensor<3xf32>
  %u32 = tosa.sub %s32, %wrap : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %sum = tosa.add %dq, %u32 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %sum : tensor<3xf32>
}
)mlir";
  int8_t q[] = {-128, 0, 127};
  uint8_t u[] = {255, 0, 128};
  auto result = evaluateDerivedWeight(
      weight, {std::string_view(reinterpret_cast<const char *>(q), sizeof q),
               std::string_view(reinterpret_cast<const char *>(u), sizeof u)});
  ASSERT_TRUE(result) << result.status().toString();
  ASSERT_EQ(result->size(), 3 * sizeof(float));
  float out[3];
  std::memcpy(out, result->data(), sizeof out);
  EXPECT_EQ(out[0], (-128 + 2) * 0.5f + 255);
  EXPECT_EQ(out[1], (0 + 2) * 0.5f + 0);
  EXPECT_EQ(out[2], (127 + 2) * 0.5f + 128);
  // Bytes where float32 is due are refused by their size.
  EXPECT_THAT(evaluateDerivedWeight(weight, {std::string_view("\1\2\3\4", 4),
                                             std::string_view("\1\2\3", 3)}),
              StatusIs(StatusCode::InvalidArgument,
                       "source weight 'q' has 4 bytes, the recipe expects a 8-bit "
                       "tensor of 3 elements"));
}

TEST(DerivedWeightTest, PadsWithItsValueAndRejectsANegativePad) {
  // A transposed convolution's kernel padded to whole phases.
  DerivedWeight weight;
  weight.key = "flowc.derived/0";
  weight.inputs = {"a"};
  auto recipe = [](const std::string &padding) {
    return R"mlir(
func.func @derive(%a: tensor<2x3xf32>) -> tensor<3x6xf32> {
  %padding = tosa.const_shape {values = dense<[)mlir" +
           padding + R"mlir(]> : tensor<4xindex>} : () -> !tosa.shape<4>
  %fill = "tosa.const"() <{values = dense<7.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %p = tosa.pad %a, %padding, %fill : (tensor<2x3xf32>, !tosa.shape<4>, tensor<1xf32>) -> tensor<3x6xf32>
  return %p : tensor<3x6xf32>
}
)mlir";
  };
  weight.recipe = recipe("1, 0, 2, 1");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::string_view bytes(reinterpret_cast<const char *>(a.data()),
                         a.size() * sizeof(float));
  auto result = evaluateDerivedWeight(weight, {bytes});
  ASSERT_TRUE(result) << result.status().toString();
  ASSERT_EQ(result->size(), 18 * sizeof(float));
  std::vector<float> out(18);
  std::memcpy(out.data(), result->data(), result->size());
  std::vector<float> expected = {7, 7, 7, 7, 7, 7, //
                                 7, 7, 1, 2, 3, 7, //
                                 7, 7, 4, 5, 6, 7};
  EXPECT_EQ(out, expected);
  weight.recipe = recipe("1, 0, 4, -1");
  EXPECT_THAT(evaluateDerivedWeight(weight, {bytes}),
              StatusIs(StatusCode::InvalidArgument, "non-negative padding"));
}

TEST(CodegenTest, RejectsUnknownTarget) {
  EXPECT_THAT(parseTarget("tpu"),
              StatusIs(StatusCode::InvalidArgument, "unknown target 'tpu'"));
}

TEST(CodegenTest, RejectsCorruptBytecode) {
  TempDir dir;
  EXPECT_THAT(compileToSharedObject("not bytecode", {}, dir.path()),
              StatusIs(StatusCode::DataLoss, "does not parse"));
}

// Run-time checks are @main's last results; the signature keeps them apart
// from the outputs the graph declares.
std::string checkedMain(const std::string &checks, const std::string &checkType) {
  return "func.func @main(%x: tensor<2xf32>, %c: " + checkType + ") -> (tensor<2xf32>, " +
         checkType + ") attributes {flowc.checks = " + checks +
         "} {\n  return %x, %c : " + "tensor<2xf32>, " + checkType + "\n}\n";
}

TEST(GraphSignatureTest, ChecksAreTheLastResultsAndNotOutputs) {
  Expected<GraphSignature> signature =
      readGraphSignature(checkedMain(R"(["index out of range"])", "tensor<1xi1>"));
  ASSERT_TRUE(signature) << signature.status().message();
  EXPECT_EQ(signature->outputs.size(), 1u);
  EXPECT_EQ(signature->checks, std::vector<std::string>{"index out of range"});
}

TEST(GraphSignatureTest, MalformedChecksAreRefused) {
  Expected<GraphSignature> tooMany =
      readGraphSignature(checkedMain(R"(["a", "b", "c"])", "tensor<1xi1>"));
  ASSERT_FALSE(tooMany);
  EXPECT_EQ(tooMany.status().code(), StatusCode::InvalidArgument);
  EXPECT_NE(tooMany.status().message().find("names 3 checks, but @main has 2 results"),
            std::string::npos)
      << tooMany.status().message();
  Expected<GraphSignature> notAFlag =
      readGraphSignature(checkedMain(R"(["a"])", "tensor<2xi1>"));
  ASSERT_FALSE(notAFlag);
  EXPECT_NE(notAFlag.status().message().find("@main result 1, a check, is not a "
                                             "tensor<1xi1>"),
            std::string::npos)
      << notAFlag.status().message();
}

} // namespace
} // namespace flowc::compiler
