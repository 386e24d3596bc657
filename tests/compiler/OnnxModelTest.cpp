#include "flowc/compiler/OnnxModel.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

namespace flowc::compiler {
namespace {

using namespace flowc::testing;

TEST(OnnxModelTest, ParsesGraphInitializersAndShapes) {
  std::string bytes = denseReluModel();
  auto model = parseOnnxModel(bytes, "dense.onnx");
  ASSERT_TRUE(model) << model.status().toString();
  EXPECT_EQ(model->opsetVersion, 17);
  EXPECT_EQ(model->irVersion, 8);
  ASSERT_EQ(model->inputs.size(), 1u);
  EXPECT_EQ(model->inputs[0].name, "x");
  EXPECT_EQ(model->inputs[0].shape, (std::vector<int64_t>{2, 4}));
  ASSERT_EQ(model->nodes.size(), 3u);
  EXPECT_EQ(model->nodes[0].opType, "MatMul");
  ASSERT_EQ(model->initializers.size(), 2u);
  EXPECT_EQ(model->initializers[0].info.name, "W");
  EXPECT_EQ(model->initializers[0].bytes.size(), 48u);
}

TEST(OnnxModelTest, InitializerBytesAreViewsIntoTheFile) {
  std::string bytes = denseReluModel();
  auto model = parseOnnxModel(bytes, "dense.onnx");
  ASSERT_TRUE(model);
  const char *data = model->initializers[0].bytes.data();
  EXPECT_GE(data, bytes.data());
  EXPECT_LT(data, bytes.data() + bytes.size());
}

TEST(OnnxModelTest, DecodesTypedInt64Data) {
  ProtoWriter tensor;
  tensor.varint(1, 2).varint(2, 7).bytes(8, "shape");
  tensor.varint(7, 3).varint(7, static_cast<uint64_t>(-1));
  GraphSpec spec;
  spec.initializers = {tensor.str()};
  spec.nodes = {node("Reshape", {"x", "shape"}, {"y"}, "r")};
  spec.inputs = {valueInfo("x", {3, 2})};
  spec.outputs = {valueInfo("y", {3, 2})};
  std::string bytes = model(spec);
  auto parsed = parseOnnxModel(bytes, "typed.onnx");
  ASSERT_TRUE(parsed) << parsed.status().toString();
  const TensorData &shape = parsed->initializers[0];
  ASSERT_EQ(shape.bytes.size(), 16u);
  int64_t values[2];
  std::memcpy(values, shape.bytes.data(), 16);
  EXPECT_EQ(values[0], 3);
  EXPECT_EQ(values[1], -1);
}

TEST(OnnxModelTest, RejectsEmptyInput) {
  EXPECT_THAT(parseOnnxModel("", "empty.onnx"),
              StatusIs(StatusCode::InvalidArgument, "empty file"));
}

TEST(OnnxModelTest, RejectsGarbage) {
  EXPECT_THAT(parseOnnxModel("this is not a protobuf message at all", "garbage.onnx"),
              StatusIs(StatusCode::InvalidArgument, "garbage.onnx"));
}

TEST(OnnxModelTest, RejectsEveryTruncation) {
  std::string bytes = denseReluModel();
  // Cutting the file anywhere must give an error, never a crash or a model.
  for (size_t length = 1; length < bytes.size(); ++length) {
    auto parsed = parseOnnxModel(std::string_view(bytes).substr(0, length), "cut.onnx");
    ASSERT_FALSE(parsed) << "length " << length;
    EXPECT_THAT(parsed.status().message(), ::testing::HasSubstr("cut.onnx"));
  }
}

TEST(OnnxModelTest, NamesTheFieldWithTheWrongWireType) {
  ProtoWriter graph;
  graph.varint(1, 5); // node must be a message
  ProtoWriter m;
  m.varint(1, 8).bytes(7, graph.str());
  EXPECT_THAT(
      parseOnnxModel(m.str(), "bad.onnx"),
      StatusIs(StatusCode::InvalidArgument, "bad.onnx: graph: field 1 has wire type 0"));
}

TEST(OnnxModelTest, RejectsAModelWithoutGraph) {
  ProtoWriter m;
  m.varint(1, 8).bytes(2, "producer");
  EXPECT_THAT(parseOnnxModel(m.str(), "nograph.onnx"),
              StatusIs(StatusCode::InvalidArgument, "no graph"));
}

TEST(OnnxModelTest, RejectsInitializerWhoseBytesDoNotMatchItsShape) {
  GraphSpec spec;
  spec.initializers = {floatTensor("W", {4, 4}, std::vector<float>(3, 1.0f))};
  spec.inputs = {valueInfo("x", {4})};
  spec.outputs = {valueInfo("x", {4})};
  EXPECT_THAT(
      parseOnnxModel(model(spec), "short.onnx"),
      StatusIs(StatusCode::InvalidArgument,
               "graph.initializer[0] 'W': holds 12 bytes but shape and float32 need 64"));
}

TEST(OnnxModelTest, ReportsExternalDataAsUnsupported) {
  ProtoWriter tensor;
  tensor.varint(1, 4).varint(2, 1).bytes(8, "W").varint(14, 1);
  tensor.bytes(13, ProtoWriter().bytes(1, "location").bytes(2, "w.bin").str());
  GraphSpec spec;
  spec.initializers = {tensor.str()};
  EXPECT_THAT(parseOnnxModel(model(spec), "ext.onnx"),
              StatusIs(StatusCode::Unimplemented, "external data"));
}

} // namespace
} // namespace flowc::compiler
