#include "flowc/compiler/OnnxModel.h"

#include "flowc/support/Format.h"
#include "flowc/support/Half.h"

#include "WireReader.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>

namespace flowc::compiler {

using onnx::WireField;
using onnx::WireReader;
using onnx::WireType;

size_t dtypeSize(DType type) {
  switch (type) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::I64:
  case DType::F64:
    return 8;
  case DType::F16:
  case DType::BF16:
  case DType::U16:
  case DType::I16:
    return 2;
  case DType::U32:
    return 4;
  case DType::U64:
    return 8;
  case DType::U8:
  case DType::I8:
  case DType::Bool:
    return 1;
  case DType::Undefined:
    return 0;
  }
  return 0;
}

std::optional<std::vector<float>> floatValues(DType dtype, std::string_view bytes) {
  size_t size = dtypeSize(dtype);
  if (size == 0 || bytes.size() % size != 0)
    return std::nullopt;
  std::vector<float> values(bytes.size() / size);
  auto each = [&](auto read) {
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = read(bytes.data() + i * size);
  };
  auto bits16 = [](const char *at) {
    uint16_t bits;
    std::memcpy(&bits, at, 2);
    return bits;
  };
  switch (dtype) {
  case DType::F32:
    std::memcpy(values.data(), bytes.data(), bytes.size());
    break;
  case DType::F16:
    each([&](const char *at) { return halfToFloat(bits16(at)); });
    break;
  case DType::BF16:
    each([&](const char *at) { return bfloat16ToFloat(bits16(at)); });
    break;
  case DType::I8:
    each([](const char *at) { return static_cast<float>(static_cast<int8_t>(*at)); });
    break;
  case DType::U8:
    each([](const char *at) { return static_cast<float>(static_cast<uint8_t>(*at)); });
    break;
  case DType::I32:
    each([](const char *at) {
      int32_t value;
      std::memcpy(&value, at, 4);
      return static_cast<float>(value);
    });
    break;
  default:
    return std::nullopt;
  }
  return values;
}

std::string dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "float32";
  case DType::I32:
    return "int32";
  case DType::I64:
    return "int64";
  case DType::F64:
    return "float64";
  case DType::F16:
    return "float16";
  case DType::BF16:
    return "bfloat16";
  case DType::U8:
    return "uint8";
  case DType::I8:
    return "int8";
  case DType::Bool:
    return "bool";
  case DType::U16:
    return "uint16";
  case DType::I16:
    return "int16";
  case DType::U32:
    return "uint32";
  case DType::U64:
    return "uint64";
  case DType::Undefined:
    break;
  }
  // ONNX's other types, which flowc stores nowhere: named in refusals.
  switch (static_cast<int32_t>(type)) {
  case 8:
    return "string";
  case 14:
    return "complex64";
  case 15:
    return "complex128";
  case 17:
    return "float8e4m3fn";
  case 18:
    return "float8e4m3fnuz";
  case 19:
    return "float8e5m2";
  case 20:
    return "float8e5m2fnuz";
  case 21:
    return "uint4";
  case 22:
    return "int4";
  case 23:
    return "float4e2m1";
  case 24:
    return "float8e8m0";
  default:
    return "dtype(" + std::to_string(static_cast<int32_t>(type)) + ")";
  }
}

std::optional<int64_t> checkedElementCount(const std::vector<int64_t> &shape) {
  int64_t nonZero = 1;
  bool empty = false;
  for (int64_t dim : shape) {
    if (dim < 0)
      return std::nullopt;
    if (dim == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonZero, dim, &nonZero))
      return std::nullopt;
  }
  return empty ? 0 : nonZero;
}

int64_t TensorInfo::elementCount() const {
  return checkedElementCount(shape).value_or(-1);
}

std::string Node::describe() const {
  return "node '" +
         (name.empty() ? (outputs.empty() ? std::string("?") : outputs[0]) : name) +
         "' (" + (domain.empty() ? "" : domain + ".") + opType + ")";
}

namespace {

/// Parses one message kind; `where` says what is being parsed for errors
/// ("graph.node[3]"). Holds the file view for payload offsets.
class Parser {
public:
  Parser(std::string_view file, std::string name, std::string baseDir, OnnxModel &model)
      : file_(file), name_(std::move(name)), baseDir_(std::move(baseDir)), model_(model) {
  }

  Status parseModel(OnnxModel &model);

private:
  Status error(const std::string &where, const std::string &message) const {
    return invalidArgument(name_ + ": " + where + ": " + message);
  }
  size_t offsetOf(std::string_view bytes) const {
    return static_cast<size_t>(bytes.data() - file_.data());
  }
  Status expectType(const WireField &field, WireType type,
                    const std::string &where) const {
    if (field.type == type)
      return Status::ok();
    return error(where, "field " + std::to_string(field.number) + " has wire type " +
                            std::to_string(static_cast<int>(field.type)) + ", expected " +
                            std::to_string(static_cast<int>(type)) + " (byte " +
                            std::to_string(field.offset) + ")");
  }
  Expected<WireField> next(WireReader &reader, const std::string &where) const {
    auto field = reader.next();
    if (!field)
      return error(where, field.status().message());
    return field;
  }

  Status parseGraph(std::string_view bytes, OnnxModel &model);
  /// A GraphProto's name, nodes, initializers, inputs and outputs.
  Status parseGraphBody(std::string_view bytes, const std::string &where,
                        std::string &name, std::vector<Node> &nodes,
                        std::vector<TensorData> &initializers,
                        std::vector<TensorInfo> &inputs,
                        std::vector<TensorInfo> &outputs);
  Status parseNode(std::string_view bytes, const std::string &where, Node &node);
  Status parseAttribute(std::string_view bytes, const std::string &where,
                        std::string &name, Attribute &attr);
  Status parseTensor(std::string_view bytes, const std::string &where,
                     TensorData &tensor);
  Status parseValueInfo(std::string_view bytes, const std::string &where,
                        TensorInfo &info);
  Status parseTensorType(std::string_view bytes, const std::string &where,
                         TensorInfo &info);
  Status parseShape(std::string_view bytes, const std::string &where, TensorInfo &info);

  Status resolveExternal(const std::string &label, const std::string &location,
                         std::optional<uint64_t> offset, std::optional<uint64_t> length,
                         TensorData &tensor);
  Expected<std::shared_ptr<MappedFile>> mapExternal(const std::string &label,
                                                    const std::string &location);

  std::string_view file_;
  std::string name_;
  std::string baseDir_;
  /// The model's directory, opened once: external data is opened beneath it.
  UniqueFd baseDirFd_;
  OnnxModel &model_;
  /// Graph attributes being parsed, one inside the other.
  int graphDepth_ = 0;
};

Status Parser::parseModel(OnnxModel &model) {
  WireReader reader(file_, 0);
  bool sawGraph = false, sawOpset = false, sawDefaultOpset = false;
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, "ModelProto"));
    switch (field.number) {
    case 1:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Varint, "ModelProto.ir_version"));
      model.irVersion = static_cast<int64_t>(field.varint);
      break;
    case 2:
      FLOWC_RETURN_IF_ERROR(
          expectType(field, WireType::Bytes, "ModelProto.producer_name"));
      model.producer = std::string(field.bytes);
      break;
    case 7:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, "ModelProto.graph"));
      FLOWC_RETURN_IF_ERROR(parseGraph(field.bytes, model));
      sawGraph = true;
      break;
    case 8: {
      FLOWC_RETURN_IF_ERROR(
          expectType(field, WireType::Bytes, "ModelProto.opset_import"));
      WireReader opset(field.bytes, offsetOf(field.bytes));
      std::string domain;
      int64_t version = 0;
      while (!opset.atEnd()) {
        FLOWC_ASSIGN_OR_RETURN(WireField f, next(opset, "ModelProto.opset_import"));
        if (f.number == 1 && f.type == WireType::Bytes)
          domain = std::string(f.bytes);
        if (f.number == 2 && f.type == WireType::Varint)
          version = static_cast<int64_t>(f.varint);
      }
      sawOpset = true;
      if (!domain.empty() && domain != "ai.onnx")
        break;
      if (sawDefaultOpset)
        return error("ModelProto.opset_import",
                     "the default domain is imported twice (opsets " +
                         std::to_string(model.opsetVersion) + " and " +
                         std::to_string(version) + ")");
      sawDefaultOpset = true;
      model.opsetVersion = version;
      break;
    }
    default:
      break;
    }
  }
  if (!sawGraph)
    return error("ModelProto", "no graph (is this an ONNX model?)");
  if (model.irVersion <= 0)
    return error("ModelProto", "missing ir_version (is this an ONNX model?)");
  if (model.irVersion < kMinIrVersion || model.irVersion > kMaxIrVersion)
    return unimplemented(
        name_ + ": ModelProto: ir_version " + std::to_string(model.irVersion) +
        " is not supported (flowc reads IR versions " + std::to_string(kMinIrVersion) +
        " to " + std::to_string(kMaxIrVersion) + ")");
  // A model of only ai.onnx.ml or training ops imports no default opset;
  // the importer then refuses its nodes by domain.
  if (model.opsetVersion <= 0 && !sawOpset)
    return error("ModelProto", "no opset_import");
  if (sawDefaultOpset &&
      (model.opsetVersion < kMinOpset || model.opsetVersion > kMaxOpset))
    return unimplemented(
        name_ + ": ModelProto: opset " + std::to_string(model.opsetVersion) +
        " of the default domain is not supported (flowc reads opsets " +
        std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
  return Status::ok();
}

Status Parser::parseGraph(std::string_view bytes, OnnxModel &model) {
  std::vector<TensorInfo> declaredInputs;
  FLOWC_RETURN_IF_ERROR(parseGraphBody(bytes, "graph", model.graphName, model.nodes,
                                       model.initializers, declaredInputs,
                                       model.outputs));
  // Before IR version 4 initializers were also listed as inputs.
  std::set<std::string> initializerNames;
  for (const TensorData &t : model.initializers)
    initializerNames.insert(t.info.name);
  for (TensorInfo &info : declaredInputs)
    if (!initializerNames.count(info.name))
      model.inputs.push_back(std::move(info));
  return Status::ok();
}

Status Parser::parseGraphBody(std::string_view bytes, const std::string &where,
                              std::string &name, std::vector<Node> &nodes,
                              std::vector<TensorData> &initializers,
                              std::vector<TensorInfo> &inputs,
                              std::vector<TensorInfo> &outputs) {
  WireReader reader(bytes, offsetOf(bytes));
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, where));
    if (field.number == 2 && field.type == WireType::Bytes) {
      name = std::string(field.bytes);
      continue;
    }
    if (field.number != 1 && field.number != 5 && field.number != 11 &&
        field.number != 12)
      continue;
    FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where));
    if (field.number == 1) {
      Node node;
      std::string at = where + ".node[" + std::to_string(nodes.size()) + "]";
      FLOWC_RETURN_IF_ERROR(parseNode(field.bytes, at, node));
      nodes.push_back(std::move(node));
    } else if (field.number == 5) {
      TensorData tensor;
      std::string at =
          where + ".initializer[" + std::to_string(initializers.size()) + "]";
      FLOWC_RETURN_IF_ERROR(parseTensor(field.bytes, at, tensor));
      initializers.push_back(std::move(tensor));
      // Its header faulted in page-cache folios that hold weight bytes:
      // release them now so parsing stays flat in memory (see loadOnnxModel).
      MappedFile::releasePages(field.bytes);
    } else {
      TensorInfo info;
      bool isInput = field.number == 11;
      auto &list = isInput ? inputs : outputs;
      std::string at =
          where + (isInput ? ".input[" : ".output[") + std::to_string(list.size()) + "]";
      FLOWC_RETURN_IF_ERROR(parseValueInfo(field.bytes, at, info));
      list.push_back(std::move(info));
    }
  }
  return Status::ok();
}

Status Parser::parseNode(std::string_view bytes, const std::string &where, Node &node) {
  WireReader reader(bytes, offsetOf(bytes));
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, where));
    if (field.number == 6)
      continue; // doc_string
    if (field.number > 7)
      continue;
    FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where));
    switch (field.number) {
    case 1:
      node.inputs.emplace_back(field.bytes);
      break;
    case 2:
      node.outputs.emplace_back(field.bytes);
      break;
    case 3:
      node.name = std::string(field.bytes);
      break;
    case 4:
      node.opType = std::string(field.bytes);
      break;
    case 5: {
      std::string name;
      Attribute attr;
      FLOWC_RETURN_IF_ERROR(
          parseAttribute(field.bytes, where + ".attribute", name, attr));
      if (!node.attributes.emplace(name, std::move(attr)).second)
        return error(where, "attribute '" + name + "' is given twice");
      break;
    }
    case 7:
      node.domain = std::string(field.bytes);
      break;
    default:
      break;
    }
  }
  if (node.opType.empty())
    return error(where, "node has no op_type");
  return Status::ok();
}

Status Parser::parseAttribute(std::string_view bytes, const std::string &where,
                              std::string &name, Attribute &attr) {
  WireReader reader(bytes, offsetOf(bytes));
  int64_t declaredType = 0;
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, where));
    switch (field.number) {
    case 1:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".name"));
      name = std::string(field.bytes);
      break;
    case 2: {
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Fixed32, where + ".f"));
      uint32_t bits = static_cast<uint32_t>(field.varint);
      std::memcpy(&attr.f, &bits, 4);
      break;
    }
    case 3:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Varint, where + ".i"));
      attr.i = static_cast<int64_t>(field.varint);
      break;
    case 4:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".s"));
      attr.s = std::string(field.bytes);
      break;
    case 5:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".t"));
      attr.tensor = std::make_shared<TensorData>();
      FLOWC_RETURN_IF_ERROR(parseTensor(field.bytes, where + ".t", *attr.tensor));
      break;
    case 6: {
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".g"));
      if (graphDepth_ >= kMaxGraphDepth)
        return error(where + ".g", "graphs nested more than " +
                                       std::to_string(kMaxGraphDepth) + " deep");
      auto graph = std::make_shared<Graph>();
      std::vector<TensorInfo> inputs;
      ++graphDepth_;
      Status parsed = parseGraphBody(field.bytes, where + ".g", graph->name, graph->nodes,
                                     graph->initializers, inputs, graph->outputs);
      --graphDepth_;
      FLOWC_RETURN_IF_ERROR(parsed);
      attr.graph = std::move(graph);
      break;
    }
    case 7:
      if (field.type == WireType::Fixed32) {
        uint32_t bits = static_cast<uint32_t>(field.varint);
        float value;
        std::memcpy(&value, &bits, 4);
        attr.floats.push_back(value);
        break;
      }
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".floats"));
      if (field.bytes.size() % 4 != 0)
        return error(where,
                     "packed floats of " + std::to_string(field.bytes.size()) + " bytes");
      for (size_t i = 0; i < field.bytes.size(); i += 4) {
        float value;
        std::memcpy(&value, field.bytes.data() + i, 4);
        attr.floats.push_back(value);
      }
      break;
    case 8:
      if (field.type == WireType::Varint) {
        attr.ints.push_back(static_cast<int64_t>(field.varint));
        break;
      }
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".ints"));
      if (Status s = onnx::decodePackedVarints(field.bytes, attr.ints); !s)
        return error(where + ".ints", s.message());
      break;
    case 9:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".strings"));
      attr.strings.emplace_back(field.bytes);
      break;
    case 20:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Varint, where + ".type"));
      declaredType = static_cast<int64_t>(field.varint);
      break;
    default:
      break;
    }
  }
  static const Attribute::Kind kinds[] = {
      Attribute::Kind::Other,  Attribute::Kind::Float,  Attribute::Kind::Int,
      Attribute::Kind::String, Attribute::Kind::Tensor, Attribute::Kind::Graph,
      Attribute::Kind::Floats, Attribute::Kind::Ints,   Attribute::Kind::Strings};
  attr.kind = declaredType >= 0 && declaredType <= 8 ? kinds[declaredType]
                                                     : Attribute::Kind::Other;
  if (name.empty())
    return error(where, "attribute without a name");
  return Status::ok();
}

/// Re-encodes values of a typed TensorProto field as dense little-endian
/// bytes of `dtype`.
template <typename Source>
std::shared_ptr<std::string> encodeAs(DType dtype, const std::vector<Source> &values) {
  auto out = std::make_shared<std::string>(values.size() * dtypeSize(dtype), '\0');
  char *dst = out->data();
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
    case DType::I64:
    case DType::U64: {
      int64_t v = static_cast<int64_t>(values[i]);
      std::memcpy(dst + 8 * i, &v, 8);
      break;
    }
    case DType::U32: {
      uint32_t v = static_cast<uint32_t>(values[i]);
      std::memcpy(dst + 4 * i, &v, 4);
      break;
    }
    case DType::I32: {
      int32_t v = static_cast<int32_t>(values[i]);
      std::memcpy(dst + 4 * i, &v, 4);
      break;
    }
    case DType::F16:
    case DType::BF16:
    case DType::U16:
    case DType::I16: {
      uint16_t v = static_cast<uint16_t>(values[i]);
      std::memcpy(dst + 2 * i, &v, 2);
      break;
    }
    default: {
      uint8_t v = static_cast<uint8_t>(values[i]);
      dst[i] = static_cast<char>(v);
      break;
    }
    }
  }
  return out;
}

Status Parser::parseTensor(std::string_view bytes, const std::string &where,
                           TensorData &tensor) {
  WireReader reader(bytes, offsetOf(bytes));
  std::vector<uint64_t> varintValues;
  std::string looseFloats;
  bool hasRaw = false, hasVarints = false, hasFloats = false, external = false;
  std::string location;
  std::optional<uint64_t> externalOffset, externalLength;
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, where));
    switch (field.number) {
    case 1:
      if (field.type == WireType::Varint) {
        tensor.info.shape.push_back(static_cast<int64_t>(field.varint));
      } else {
        FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".dims"));
        if (Status s = onnx::decodePackedVarints(field.bytes, tensor.info.shape); !s)
          return error(where + ".dims", s.message());
      }
      break;
    case 2:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Varint, where + ".data_type"));
      tensor.info.dtype = static_cast<DType>(field.varint);
      break;
    case 10: // double_data: fixed64, like float_data's fixed32
      hasFloats = true;
      if (field.type == WireType::Fixed64) {
        uint64_t bits = field.varint;
        looseFloats.append(reinterpret_cast<const char *>(&bits), 8);
      } else {
        FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".double_data"));
        tensor.bytes = field.bytes;
      }
      break;
    case 4:
      hasFloats = true;
      if (field.type == WireType::Fixed32) {
        uint32_t bits = static_cast<uint32_t>(field.varint);
        looseFloats.append(reinterpret_cast<const char *>(&bits), 4);
      } else {
        FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".float_data"));
        tensor.bytes = field.bytes; // packed floats are already dense LE bytes
      }
      break;
    case 5:
    case 7:
    case 11: // uint64_data
      hasVarints = true;
      if (field.type == WireType::Varint) {
        varintValues.push_back(field.varint);
      } else {
        FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".int_data"));
        if (Status s = onnx::decodePackedVarints(field.bytes, varintValues); !s)
          return error(where + ".int_data", s.message());
      }
      break;
    case 8:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".name"));
      tensor.info.name = std::string(field.bytes);
      break;
    case 9:
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".raw_data"));
      tensor.bytes = field.bytes;
      hasRaw = true;
      break;
    case 13: {
      // StringStringEntryProto {key = 1, value = 2}.
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".external_data"));
      WireReader entry(field.bytes, offsetOf(field.bytes));
      std::string key, value;
      while (!entry.atEnd()) {
        FLOWC_ASSIGN_OR_RETURN(WireField f, next(entry, where + ".external_data"));
        if (f.type == WireType::Bytes && f.number == 1)
          key = std::string(f.bytes);
        else if (f.type == WireType::Bytes && f.number == 2)
          value = std::string(f.bytes);
      }
      external = true;
      if (key == "location") {
        location = value;
      } else if (key == "offset" || key == "length") {
        uint64_t number = 0;
        auto [end, ec] =
            std::from_chars(value.data(), value.data() + value.size(), number);
        if (ec != std::errc() || end != value.data() + value.size())
          return error(where + " '" + tensor.info.name + "'",
                       "external data " + key + " '" + value + "' is not a number");
        (key == "offset" ? externalOffset : externalLength) = number;
      }
      break;
    }
    case 14:
      external = external || field.varint == 1;
      break;
    default:
      break;
    }
  }
  std::string label = where + " '" + tensor.info.name + "'";
  if (external)
    FLOWC_RETURN_IF_ERROR(
        resolveExternal(label, location, externalOffset, externalLength, tensor));
  size_t elementSize = dtypeSize(tensor.info.dtype);
  if (elementSize == 0) // valid ONNX, but not a type flowc stores
    return unimplemented(name_ + ": " + label + ": unsupported tensor data type " +
                         dtypeName(tensor.info.dtype));
  // Multiplied out with checks: dims are any varints, and a product that
  // wrapped could match a short payload.
  for (int64_t dim : tensor.info.shape)
    if (dim < 0)
      return error(label, "negative dimension " + std::to_string(dim));
  std::optional<int64_t> elements = checkedElementCount(tensor.info.shape);
  uint64_t expected = 0;
  if (!elements ||
      __builtin_mul_overflow(static_cast<uint64_t>(*elements), elementSize, &expected))
    return error(label, "shape " + shapeString(tensor.info.shape) +
                            " has more elements than int64 can count");
  if (!hasRaw && hasFloats && !looseFloats.empty()) {
    tensor.owned = std::make_shared<std::string>(std::move(looseFloats));
    tensor.bytes = *tensor.owned;
  } else if (!hasRaw && hasVarints) {
    tensor.owned = encodeAs(tensor.info.dtype, varintValues);
    tensor.bytes = *tensor.owned;
  }
  if (tensor.bytes.size() != expected)
    return error(label, "holds " + std::to_string(tensor.bytes.size()) +
                            " bytes but shape and " + dtypeName(tensor.info.dtype) +
                            " need " + std::to_string(expected));
  return Status::ok();
}

Expected<std::shared_ptr<MappedFile>> Parser::mapExternal(const std::string &label,
                                                          const std::string &location) {
  namespace fs = std::filesystem;
  if (baseDir_.empty())
    return failedPrecondition(
        name_ + ": " + label + ": external data '" + location +
        "' needs the model's directory; load the model from a file");
  fs::path relative(location);
  if (location.empty())
    return error(label, "external data without a location");
  if (relative.is_absolute())
    return error(label,
                 "external data location '" + location +
                     "' is absolute; it must be relative to the model's directory");
  for (const fs::path &part : relative.lexically_normal())
    if (part == "..")
      return error(label, "external data location '" + location +
                              "' escapes the model's directory");
  fs::path path = (fs::path(baseDir_) / relative).lexically_normal();
  auto it = model_.externalFiles.find(path.string());
  if (it != model_.externalFiles.end())
    return it->second.mapping;
  if (!baseDirFd_) {
    baseDirFd_ = UniqueFd(::open(baseDir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!baseDirFd_) {
      int err = errno;
      return errnoStatus(err, name_ + ": " + label +
                                  ": cannot open the model's directory '" + baseDir_ +
                                  "'");
    }
  }
  // The kernel resolves the location beneath the directory and follows no
  // symlink: a check on a path and an open of it could be raced (a file
  // swapped for a link to /etc/shadow), a check of the descriptor cannot.
  auto fd = openBeneath(baseDirFd_.get(), relative.lexically_normal().string());
  if (!fd && fd.status().code() == StatusCode::NotFound)
    return notFound(name_ + ": " + label + ": external data file '" + location +
                    "' not found in '" + baseDir_ + "'");
  if (!fd && fd.status().code() == StatusCode::InvalidArgument)
    return error(label, "external data location " + fd.status().message() +
                            " (one could lead outside the model's directory)");
  if (!fd)
    return Status(fd.status().code(),
                  name_ + ": " + label + ": external data " + fd.status().message());
  auto identity = fileStatOf(fd->get(), path.string());
  auto mapped = identity ? MappedFile::fromFd(fd->get(), path.string())
                         : Expected<MappedFile>(identity.status());
  if (!mapped)
    return Status(mapped.status().code(),
                  name_ + ": " + label + ": external data " + mapped.status().message());
  if (mapped->size() != identity->size)
    return dataLoss(name_ + ": " + label + ": external data file '" + location +
                    "' changed size while it was opened");
  auto shared = std::make_shared<MappedFile>(mapped.takeValue());
  model_.externalFiles[path.string()] = ExternalFile{shared, *identity};
  return shared;
}

Status Parser::resolveExternal(const std::string &label, const std::string &location,
                               std::optional<uint64_t> offset,
                               std::optional<uint64_t> length, TensorData &tensor) {
  FLOWC_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, mapExternal(label, location));
  uint64_t size = file->size(), begin = offset.value_or(0);
  if (begin > size)
    return error(label, "external data out of range: offset " + std::to_string(begin) +
                            " is past the end of '" + location + "' (" +
                            std::to_string(size) + " bytes)");
  uint64_t count = length.value_or(size - begin);
  if (count > size - begin)
    return error(label, "external data out of range: offset " + std::to_string(begin) +
                            " + length " + std::to_string(count) + " exceeds '" +
                            location + "' (" + std::to_string(size) + " bytes)");
  tensor.bytes =
      std::string_view(reinterpret_cast<const char *>(file->data()) + begin, count);
  return Status::ok();
}

Status Parser::parseValueInfo(std::string_view bytes, const std::string &where,
                              TensorInfo &info) {
  WireReader reader(bytes, offsetOf(bytes));
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, where));
    if (field.number == 1) {
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".name"));
      info.name = std::string(field.bytes);
    } else if (field.number == 2) {
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".type"));
      WireReader type(field.bytes, offsetOf(field.bytes));
      while (!type.atEnd()) {
        FLOWC_ASSIGN_OR_RETURN(WireField t, next(type, where + ".type"));
        if (t.number != 1)
          continue;
        FLOWC_RETURN_IF_ERROR(
            expectType(t, WireType::Bytes, where + ".type.tensor_type"));
        FLOWC_RETURN_IF_ERROR(
            parseTensorType(t.bytes, where + " '" + info.name + "'", info));
      }
    }
  }
  return Status::ok();
}

Status Parser::parseTensorType(std::string_view bytes, const std::string &where,
                               TensorInfo &info) {
  WireReader reader(bytes, offsetOf(bytes));
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, where));
    if (field.number == 1) {
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Varint, where + ".elem_type"));
      info.dtype = static_cast<DType>(field.varint);
    } else if (field.number == 2) {
      FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".shape"));
      FLOWC_RETURN_IF_ERROR(parseShape(field.bytes, where, info));
    }
  }
  return Status::ok();
}

Status Parser::parseShape(std::string_view bytes, const std::string &where,
                          TensorInfo &info) {
  WireReader reader(bytes, offsetOf(bytes));
  while (!reader.atEnd()) {
    FLOWC_ASSIGN_OR_RETURN(WireField field, next(reader, where));
    if (field.number != 1)
      continue;
    FLOWC_RETURN_IF_ERROR(expectType(field, WireType::Bytes, where + ".shape.dim"));
    WireReader dim(field.bytes, offsetOf(field.bytes));
    int64_t value = -1;
    while (!dim.atEnd()) {
      FLOWC_ASSIGN_OR_RETURN(WireField d, next(dim, where + ".shape.dim"));
      if (d.number == 1 && d.type == WireType::Varint)
        value = static_cast<int64_t>(d.varint);
    }
    info.shape.push_back(value);
  }
  return Status::ok();
}

} // namespace

Expected<OnnxModel> parseOnnxModel(std::string_view bytes, const std::string &name,
                                   const std::string &baseDir) {
  if (bytes.empty())
    return invalidArgument(name + ": empty file (not an ONNX model)");
  OnnxModel model;
  model.path = name;
  // Counts in the file (repeated fields, packed values) size what the
  // parser allocates: running out of memory is this model's error, not the
  // process's end.
  try {
    Parser parser(bytes, name, baseDir, model);
    FLOWC_RETURN_IF_ERROR(parser.parseModel(model));
  } catch (const std::bad_alloc &) {
    return resourceExhausted(name + ": out of memory while parsing the model");
  } catch (const std::length_error &) {
    return resourceExhausted(name + ": out of memory while parsing the model");
  }
  FLOWC_RETURN_IF_ERROR(validateGraph(model));
  return model;
}

Expected<OnnxModel> loadOnnxModel(const std::string &path) {
  auto file = MappedFile::open(path);
  if (!file)
    return file.status();
  auto shared = std::make_shared<MappedFile>(file.takeValue());
  std::string dir = std::filesystem::path(path).parent_path().string();
  FLOWC_ASSIGN_OR_RETURN(OnnxModel model,
                         parseOnnxModel(shared->view(), path, dir.empty() ? "." : dir));
  // Reading each tensor's header faults in the file's large page-cache
  // folios (about 1 MiB each on current kernels), weights and all: drop them
  // from this process. Everything parsed was copied; weight views fault
  // back in when they are hashed or stored, one window at a time.
  MappedFile::releasePages(shared->view());
  model.file = std::move(shared);
  return model;
}

Status bindInputShapes(OnnxModel &model, const InputShapes &shapes) {
  // Not a structured binding: clang before 16 (the fuzz build) cannot
  // capture one in a lambda.
  for (const auto &entry : shapes) {
    const std::string &name = entry.first;
    const std::vector<int64_t> &shape = entry.second;
    auto input = std::find_if(model.inputs.begin(), model.inputs.end(),
                              [&](const TensorInfo &info) { return info.name == name; });
    if (input == model.inputs.end())
      return invalidArgument(model.path + ": --input-shape names '" + name +
                             "', which is not an input of the model");
    if (input->shape.size() != shape.size())
      return invalidArgument(model.path + ": input '" + name + "' has rank " +
                             std::to_string(input->shape.size()) + " " +
                             shapeString(input->shape) + ", --input-shape gives " +
                             shapeString(shape));
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] <= 0)
        return invalidArgument(model.path + ": --input-shape " + shapeString(shape) +
                               " for '" + name + "' has a non-positive dimension");
      if (input->shape[i] >= 0 && input->shape[i] != shape[i])
        return invalidArgument(model.path + ": input '" + name + "' is " +
                               shapeString(input->shape) + "; --input-shape " +
                               shapeString(shape) + " changes its static dimension " +
                               std::to_string(i));
    }
    input->shape = shape;
  }
  return Status::ok();
}

std::string canonicalInputShapes(const InputShapes &shapes) {
  std::string text;
  for (const auto &[name, shape] : shapes) {
    text += (text.empty() ? "" : ";") + name + "=";
    for (size_t i = 0; i < shape.size(); ++i)
      text += (i ? "x" : "") + std::to_string(shape[i]);
  }
  return text;
}

} // namespace flowc::compiler
