#include "flowc/compiler/OnnxModel.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

#include <cstring>
#include <filesystem>
#include <optional>

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

TEST(OnnxModelTest, DecodesDoubleAndUint64Data) {
  ProtoWriter doubles;
  double values[2] = {1.5, -2.25};
  doubles.varint(1, 2).varint(2, 11).bytes(8, "d").bytes(
      10, std::string(reinterpret_cast<const char *>(values), 16));
  ProtoWriter unsigneds;
  unsigneds.varint(1, 1).varint(2, 13).bytes(8, "u").varint(11, 7);
  GraphSpec spec;
  spec.initializers = {doubles.str(), unsigneds.str()};
  spec.inputs = {valueInfo("x", {2})};
  spec.outputs = {valueInfo("x", {2})};
  std::string bytes = model(spec);
  auto parsed = parseOnnxModel(bytes, "typed.onnx");
  ASSERT_TRUE(parsed) << parsed.status().toString();
  ASSERT_EQ(parsed->initializers[0].bytes.size(), 16u);
  EXPECT_EQ(std::memcmp(parsed->initializers[0].bytes.data(), values, 16), 0);
  ASSERT_EQ(parsed->initializers[1].bytes.size(), 8u);
  EXPECT_EQ(parsed->initializers[1].bytes[0], 7);
}

TEST(OnnxModelTest, UnstoredDataTypeIsUnsupportedNotMalformed) {
  ProtoWriter strings; // data_type 8 is STRING
  strings.varint(1, 1).varint(2, 8).bytes(8, "s").bytes(6, "hello");
  GraphSpec spec;
  spec.initializers = {strings.str()};
  spec.inputs = {valueInfo("x", {2})};
  spec.outputs = {valueInfo("x", {2})};
  EXPECT_THAT(
      parseOnnxModel(model(spec), "strings.onnx"),
      StatusIs(StatusCode::Unimplemented,
               "strings.onnx: graph.initializer[0] 's': unsupported tensor data type"));
}

TEST(OnnxModelTest, NamesEveryOnnxDataTypeInMessages) {
  EXPECT_EQ(dtypeName(DType::F16), "float16");
  EXPECT_EQ(dtypeName(DType::BF16), "bfloat16");
  EXPECT_EQ(dtypeName(static_cast<DType>(8)), "string");
  EXPECT_EQ(dtypeName(static_cast<DType>(17)), "float8e4m3fn");
  EXPECT_EQ(dtypeName(static_cast<DType>(23)), "float4e2m1");
  EXPECT_EQ(dtypeName(static_cast<DType>(99)), "dtype(99)");
}

TEST(OnnxModelTest, RejectsAModelWithoutAnyOpsetImport) {
  ProtoWriter graph;
  graph.bytes(2, "g");
  ProtoWriter m;
  m.varint(1, 8).bytes(7, graph.str());
  EXPECT_THAT(
      parseOnnxModel(m.str(), "noopset.onnx"),
      StatusIs(StatusCode::InvalidArgument, "noopset.onnx: ModelProto: no opset_import"));
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

/// A float tensor whose data lives in an external file.
std::string externalTensor(const std::string &name, std::vector<int64_t> dims,
                           const std::string &location, std::optional<uint64_t> offset,
                           std::optional<uint64_t> length) {
  ProtoWriter tensor;
  for (int64_t d : dims)
    tensor.varint(1, static_cast<uint64_t>(d));
  tensor.varint(2, 1).bytes(8, name);
  auto entry = [&](const std::string &key, const std::string &value) {
    tensor.bytes(13, ProtoWriter().bytes(1, key).bytes(2, value).str());
  };
  entry("location", location);
  if (offset)
    entry("offset", std::to_string(*offset));
  if (length)
    entry("length", std::to_string(*length));
  tensor.varint(14, 1);
  return tensor.str();
}

/// A model with one external initializer, written to `dir`/model.onnx.
std::string writeExternalModel(const TempDir &dir, const std::string &tensor) {
  GraphSpec spec;
  spec.initializers = {tensor};
  spec.inputs = {valueInfo("x", {4})};
  spec.outputs = {valueInfo("x", {4})};
  writeFile(dir.file("model.onnx"), model(spec));
  return dir.file("model.onnx");
}

TEST(ExternalDataTest, MapsTensorsSharingOneFile) {
  TempDir dir;
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  writeFile(dir.file("weights.bin"),
            std::string(reinterpret_cast<const char *>(values.data()), 24));
  GraphSpec spec;
  spec.initializers = {externalTensor("W", {4}, "weights.bin", 8, 16),
                       externalTensor("b", {2}, "weights.bin", std::nullopt, 8)};
  spec.inputs = {valueInfo("x", {4})};
  spec.outputs = {valueInfo("x", {4})};
  writeFile(dir.file("model.onnx"), model(spec));
  auto parsed = loadOnnxModel(dir.file("model.onnx"));
  ASSERT_TRUE(parsed) << parsed.status().toString();
  ASSERT_EQ(parsed->initializers.size(), 2u);
  float w[4], b[2];
  std::memcpy(w, parsed->initializers[0].bytes.data(), 16);
  std::memcpy(b, parsed->initializers[1].bytes.data(), 8);
  EXPECT_EQ(w[0], 3);
  EXPECT_EQ(w[3], 6);
  EXPECT_EQ(b[1], 2);
  // One mapping, shared by both tensors.
  EXPECT_EQ(parsed->externalFiles.size(), 1u);
}

TEST(ExternalDataTest, RefusesLocationsThatEscapeTheModelDirectory) {
  TempDir dir;
  EXPECT_THAT(
      loadOnnxModel(writeExternalModel(
          dir, externalTensor("W", {4}, "../w.bin", std::nullopt, std::nullopt))),
      StatusIs(StatusCode::InvalidArgument,
               "'W': external data location '../w.bin' escapes the model's directory"));
  EXPECT_THAT(
      loadOnnxModel(writeExternalModel(
          dir, externalTensor("W", {4}, "/etc/passwd", std::nullopt, std::nullopt))),
      StatusIs(StatusCode::InvalidArgument, "is absolute"));
  // A symlink inside the directory that leads outside it.
  TempDir outside;
  writeFile(outside.file("w.bin"), std::string(16, '\0'));
  std::filesystem::create_symlink(outside.file("w.bin"), dir.file("link.bin"));
  EXPECT_THAT(loadOnnxModel(writeExternalModel(
                  dir, externalTensor("W", {4}, "link.bin", std::nullopt, std::nullopt))),
              StatusIs(StatusCode::InvalidArgument, "outside the model's directory"));
}

TEST(ExternalDataTest, MissingFileNamesTheTensor) {
  TempDir dir;
  EXPECT_THAT(
      loadOnnxModel(writeExternalModel(
          dir, externalTensor("W", {4}, "absent.bin", std::nullopt, std::nullopt))),
      StatusIs(StatusCode::NotFound, "'W': external data file 'absent.bin' not found"));
}

TEST(ExternalDataTest, ShortFileIsOutOfRange) {
  TempDir dir;
  writeFile(dir.file("w.bin"), std::string(12, '\0'));
  EXPECT_THAT(
      loadOnnxModel(writeExternalModel(dir, externalTensor("W", {4}, "w.bin", 0, 16))),
      StatusIs(StatusCode::InvalidArgument,
               "'W': external data out of range: offset 0 + length 16 exceeds 'w.bin'"));
  EXPECT_THAT(
      loadOnnxModel(writeExternalModel(dir, externalTensor("W", {4}, "w.bin", 64, 16))),
      StatusIs(StatusCode::InvalidArgument, "offset 64 is past the end"));
  // Without a length the rest of the file must match the shape exactly.
  EXPECT_THAT(loadOnnxModel(writeExternalModel(
                  dir, externalTensor("W", {4}, "w.bin", std::nullopt, std::nullopt))),
              StatusIs(StatusCode::InvalidArgument,
                       "holds 12 bytes but shape and float32 need 16"));
}

TEST(ExternalDataTest, NeedsADirectoryWhenParsedFromMemory) {
  TempDir dir;
  std::string bytes = *readFileToString(writeExternalModel(
      dir, externalTensor("W", {4}, "w.bin", std::nullopt, std::nullopt)));
  EXPECT_THAT(parseOnnxModel(bytes, "mem.onnx"),
              StatusIs(StatusCode::FailedPrecondition, "needs the model's directory"));
}

} // namespace
} // namespace flowc::compiler
