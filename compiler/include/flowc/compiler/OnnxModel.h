// An ONNX model read straight from the wire format over an mmapped file.
// Initializer bytes are views into the mapping: weights are never copied,
// and the 2 GB protobuf message cap does not apply.
#pragma once

#include "flowc/support/MappedFile.h"
#include "flowc/support/SafeOpen.h"
#include "flowc/support/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowc::compiler {

/// ONNX TensorProto.DataType values that flowc knows by name.
enum class DType : int32_t {
  Undefined = 0,
  F32 = 1,
  U8 = 2,
  I8 = 3,
  U16 = 4,
  I16 = 5,
  I32 = 6,
  I64 = 7,
  Bool = 9,
  F16 = 10,
  F64 = 11,
  U32 = 12,
  U64 = 13,
  BF16 = 16,
};

/// Bytes per element, 0 for types flowc cannot store.
size_t dtypeSize(DType type);
/// `bytes` (little-endian elements of `dtype`: float32, float16, bfloat16,
/// int8, uint8 or int32) as float32 values, exact but for int32 beyond
/// 2^24; nothing for other dtypes or a partial element.
std::optional<std::vector<float>> floatValues(DType dtype, std::string_view bytes);
/// "float32", "int64", ..., ONNX's names of the types flowc does not store
/// ("float8e4m3fn", "string"); "dtype(N)" for codes ONNX does not define.
std::string dtypeName(DType type);

/// The ONNX versions the importer reads: the default-domain opsets and IR
/// versions that ONNX 1.19 defines (tests/e2e/onnx_node_suite.py runs its
/// backend tests, opsets 1 to 24). A newer one may change an op's meaning,
/// so it is refused (Unimplemented) rather than guessed at.
inline constexpr int64_t kMinOpset = 1;
inline constexpr int64_t kMaxOpset = 24;
inline constexpr int64_t kMinIrVersion = 3;
inline constexpr int64_t kMaxIrVersion = 12;

/// The element count of a shape whose dimensions are all >= 0, or nullopt
/// when the product of its non-zero dimensions exceeds int64: then no
/// partial product of the shape can overflow either, whatever a zero
/// dimension makes of the whole.
std::optional<int64_t> checkedElementCount(const std::vector<int64_t> &shape);

struct TensorInfo {
  std::string name;
  DType dtype = DType::Undefined;
  /// -1 marks a symbolic or unknown dimension.
  std::vector<int64_t> shape;

  /// -1 when a dimension is symbolic, or when the count overflows int64
  /// (the loader refuses such tensors; see checkedElementCount).
  int64_t elementCount() const;
};

/// A constant tensor: an initializer or a Constant node's value.
struct TensorData {
  TensorInfo info;
  /// Little-endian dense bytes: a view into the model file, or into `owned`
  /// when the proto stored values in a typed, varint-encoded field.
  std::string_view bytes;
  std::shared_ptr<std::string> owned;
};

struct Graph;

struct Attribute {
  enum class Kind { Int, Float, String, Tensor, Graph, Ints, Floats, Strings, Other };
  Kind kind = Kind::Other;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<TensorData> tensor;
  std::shared_ptr<const Graph> graph;
};

struct Node {
  std::string name;
  std::string opType;
  std::string domain;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attributes;

  /// "node 'conv1' (Conv)" for error messages.
  std::string describe() const;
};

/// A graph attribute's body (If's branches): nodes, initializers and
/// outputs. Its nodes read the enclosing graphs' values by name.
struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<TensorData> initializers;
  std::vector<TensorInfo> outputs;
};

/// How deep graph attributes may nest (If in If ...): exporters write one
/// or two levels; the loader refuses more rather than recurse without end.
inline constexpr int kMaxGraphDepth = 8;

/// An external data file as it was opened: the mapping, and the identity
/// of the very descriptor that was mapped (fstat), so that the stat memo
/// tells a rewrite of the file, also one made while it was ingested.
struct ExternalFile {
  std::shared_ptr<MappedFile> mapping;
  FileStat identity;
};

struct OnnxModel {
  std::string path;
  int64_t irVersion = 0;
  /// Version of the default ("" / "ai.onnx") operator set.
  int64_t opsetVersion = 0;
  std::string producer;
  std::string graphName;
  /// Graph inputs that are not initializers, in order.
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  std::vector<TensorData> initializers;
  std::vector<Node> nodes;
  /// Keep initializer views valid: the model file and every external data
  /// file, each mapped once however many tensors share it.
  std::shared_ptr<MappedFile> file;
  /// By path (the model's directory joined with the location).
  std::map<std::string, ExternalFile> externalFiles;
};

/// Static shapes for graph inputs, by name: how a model exported with
/// symbolic dimensions ("batch", "sequence") is compiled for one shape.
using InputShapes = std::map<std::string, std::vector<int64_t>>;

/// Gives `model`'s inputs the shapes in `shapes`. Each named input must exist
/// and the shape must have its rank and agree with every static dimension;
/// InvalidArgument naming the input otherwise.
Status bindInputShapes(OnnxModel &model, const InputShapes &shapes);

/// "name=1x128;other=..." in name order ("" when empty): part of cache keys.
std::string canonicalInputShapes(const InputShapes &shapes);

/// Checks the graph's structure: every value is written once (by one node,
/// or as a graph input or initializer, each name once), every node input is
/// defined before the node, in topological order (a cycle is named as one),
/// and every graph output is defined and listed once. InvalidArgument naming
/// the model, node and value otherwise.
Status validateGraph(const OnnxModel &model);

/// Parses the ONNX file at `path`. Errors (InvalidArgument / NotFound) name
/// the file and the place in the message that is malformed; Unimplemented
/// for an opset or IR version outside [kMinOpset, kMaxOpset] and
/// [kMinIrVersion, kMaxIrVersion]; ResourceExhausted when memory runs out.
/// The graph passes validateGraph. External data is opened beneath the
/// model's directory (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) and
/// mapped, never copied: a location that escapes that directory, or that is
/// or passes through a symlink, is refused, and so is anything but a
/// regular file.
Expected<OnnxModel> loadOnnxModel(const std::string &path);

/// Parses an in-memory ONNX ModelProto; `name` is used in messages. Views in
/// the result point into `bytes`, which must outlive it. External data is
/// resolved in `baseDir`; without one it is a FailedPrecondition. Errors as
/// for loadOnnxModel.
Expected<OnnxModel> parseOnnxModel(std::string_view bytes, const std::string &name,
                                   const std::string &baseDir = "");

} // namespace flowc::compiler
