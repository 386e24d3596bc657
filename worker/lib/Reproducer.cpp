#include "flowc/worker/Reproducer.h"

#include "flowc/compiler/GraphIr.h"
#include "flowc/compiler/OpRegistry.h"
#include "flowc/support/Format.h"
#include "flowc/support/Half.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/PhysicalMemory.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

namespace flowc::worker {

namespace {

namespace fs = std::filesystem;
using compiler::DType;
using compiler::TensorInfo;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr DType kStorableTypes[] = {
    DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16,
    DType::I8,  DType::U64, DType::U32, DType::U16,  DType::U8,  DType::Bool};

std::optional<DType> dtypeFromName(const std::string &name) {
  for (DType type : kStorableTypes)
    if (compiler::dtypeName(type) == name)
      return type;
  return std::nullopt;
}

bool isFloatingPoint(DType type) {
  return type == DType::F32 || type == DType::F64 || type == DType::F16 ||
         type == DType::BF16;
}

/// The values a reproducer may give an integer dtype: all it holds, up to
/// the integers a JSON number (a double) holds exactly.
std::pair<double, double> integerRange(DType type) {
  constexpr double kExact = 9007199254740992.0; // 2^53
  switch (type) {
  case DType::Bool:
    return {0, 1};
  case DType::U8:
    return {0, 255};
  case DType::I8:
    return {-128, 127};
  case DType::U16:
    return {0, 65535};
  case DType::I16:
    return {-32768, 32767};
  case DType::U32:
    return {0, 4294967295.0};
  case DType::I32:
    return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  case DType::U64:
    return {0, kExact};
  default:
    return {-kExact, kExact};
  }
}

// Writing ------------------------------------------------------------------

ordered_json tensorJson(const TensorInfo &info) {
  return {{"name", info.name},
          {"dtype", compiler::dtypeName(info.dtype)},
          {"shape", info.shape}};
}

/// FNV-1a of the key: a weight keeps its seed when others are added or
/// reordered.
uint64_t seedOf(const std::string &key) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : key)
    hash = (hash ^ c) * 0x100000001b3ull;
  // 53 bits: exact in any JSON reader, including ones that use doubles.
  return hash & ((uint64_t{1} << 53) - 1);
}

/// Tensors some node reads where a negative or zero value makes the result
/// NaN or infinite (the op table's positive inputs: a variance under a
/// square root, a divisor, the base of a power). Random signs there would
/// bury the bug being reproduced in NaNs.
std::set<std::string>
positiveOnlyTensors(const std::vector<compiler::NodeRecord> &nodes) {
  std::set<std::string> names;
  for (const compiler::NodeRecord &node : nodes)
    if (const compiler::OpInfo *op = compiler::findOp(node.opType))
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (op->mustBePositive(i))
          names.insert(node.inputs[i].name);
  return names;
}

ordered_json initJson(const compiler::WeightRef &weight, bool positiveOnly) {
  // Integer and boolean weights are indices, masks or shapes far more often
  // than values: zero is valid for all of them.
  if (!isFloatingPoint(weight.info.dtype))
    return {{"kind", "splat"}, {"value", 0}};
  return {{"kind", "uniform"},
          {"seed", seedOf(weight.key)},
          {"low", positiveOnly ? 0.5 : -0.1},
          {"high", positiveOnly ? 1.5 : 0.1}};
}

/// What `flowc inspect` needs to profile the graph again: shapes, first-use
/// parameters, folding, and the one attribute shapes do not imply.
ordered_json nodeJson(const compiler::NodeRecord &record, const compiler::Node *source) {
  ordered_json node = {{"name", record.name}, {"op", record.opType}};
  node["inputs"] = ordered_json::array();
  node["outputs"] = ordered_json::array();
  for (const TensorInfo &input : record.inputs)
    node["inputs"].push_back(tensorJson(input));
  for (const TensorInfo &output : record.outputs)
    node["outputs"].push_back(tensorJson(output));
  node["parameters"] = record.parameterCount;
  node["folded"] = record.folded;
  if (source)
    if (auto it = source->attributes.find("kernel_shape"); it != source->attributes.end())
      node["kernel_shape"] = it->second.ints;
  return node;
}

/// One top-level field per line and one array entry per line: readable and
/// diffable, without nlohmann's one-number-per-line shapes.
std::string layout(const ordered_json &manifest) {
  std::string text = "{\n";
  for (auto it = manifest.begin(); it != manifest.end(); ++it) {
    const ordered_json &value = it.value();
    text += it == manifest.begin() ? " " : ",\n ";
    text += json(it.key()).dump() + ": ";
    if (!value.is_array() || value.empty()) {
      text += value.dump();
      continue;
    }
    text += "[\n";
    for (size_t i = 0; i < value.size(); ++i)
      text += "  " + value[i].dump() + (i + 1 < value.size() ? ",\n" : "\n");
    text += " ]";
  }
  return text + "\n}\n";
}

// Reading ------------------------------------------------------------------

/// The manifest's content once validated.
struct ReproManifest {
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  std::vector<TensorInfo> weights;
  std::vector<WeightInit> inits;
  compiler::CompileOptions options;
  std::map<std::string, int> opCounts;
  std::vector<compiler::NodeRecord> nodes;
  std::vector<compiler::Node> sourceNodes;
  int64_t opset = 0;
  std::string producer;
};

/// Reads typed fields out of repro.json; every error names the file and the
/// field path ("weights[3].shape").
class ManifestReader {
public:
  explicit ManifestReader(std::string file) : file_(std::move(file)) {}

  Status error(const std::string &field, const std::string &what) const {
    return invalidArgument(file_ + ": field '" + field + "' " + what);
  }

  Expected<const json *> member(const json &object, const std::string &path,
                                const std::string &key, bool required = true) const {
    auto it = object.find(key);
    if (it == object.end()) {
      if (required)
        return error(path + key, "is missing");
      return static_cast<const json *>(nullptr);
    }
    return &*it;
  }

  Expected<std::string> string(const json &object, const std::string &path,
                               const std::string &key) const {
    FLOWC_ASSIGN_OR_RETURN(const json *value, member(object, path, key));
    if (!value->is_string())
      return error(path + key, "must be a string");
    return value->get<std::string>();
  }

  Expected<double> number(const json &value, const std::string &field) const {
    if (!value.is_number() || !std::isfinite(value.get<double>()))
      return error(field, "must be a finite number");
    return value.get<double>();
  }

  Expected<TensorInfo> tensor(const json &value, const std::string &field,
                              const std::string &nameKey, bool lenient = false) const {
    if (!value.is_object())
      return error(field, "must be an object with " + nameKey + ", dtype and shape");
    TensorInfo info;
    FLOWC_ASSIGN_OR_RETURN(info.name, string(value, field + ".", nameKey));
    FLOWC_ASSIGN_OR_RETURN(std::string dtype, string(value, field + ".", "dtype"));
    std::optional<DType> type = dtypeFromName(dtype);
    if (!type && !lenient)
      return error(field + ".dtype", "is '" + dtype + "', not a dtype flowc can store");
    info.dtype = type.value_or(DType::Undefined);
    FLOWC_ASSIGN_OR_RETURN(const json *shape, member(value, field + ".", "shape"));
    if (!shape->is_array())
      return error(field + ".shape", "must be an array of dimensions");
    for (const json &dim : *shape) {
      if (!dim.is_number_integer() || (!lenient && dim.get<int64_t>() < 0))
        return error(field + ".shape",
                     "must hold non-negative integers, got " + shape->dump());
      info.shape.push_back(dim.get<int64_t>());
    }
    return info;
  }

  Expected<std::vector<TensorInfo>> tensors(const json &root, const std::string &key,
                                            const std::string &nameKey) const {
    FLOWC_ASSIGN_OR_RETURN(const json *list, member(root, "", key));
    if (!list->is_array())
      return error(key, "must be an array");
    std::vector<TensorInfo> out;
    for (size_t i = 0; i < list->size(); ++i) {
      FLOWC_ASSIGN_OR_RETURN(
          TensorInfo info,
          tensor((*list)[i], key + "[" + std::to_string(i) + "]", nameKey));
      out.push_back(std::move(info));
    }
    return out;
  }

  Expected<WeightInit> init(const json &weight, const std::string &field,
                            DType dtype) const;
  Expected<compiler::CompileOptions> options(const json &root) const;
  Status nodes(const json &root, ReproManifest &manifest) const;
  Status node(const json &entry, const std::string &field, ReproManifest &manifest) const;
  Status opCounts(const json &root, ReproManifest &manifest) const;
  Expected<ReproManifest> read(const json &root) const;

private:
  std::string file_;
};

Expected<WeightInit> ManifestReader::init(const json &weight, const std::string &field,
                                          DType dtype) const {
  FLOWC_ASSIGN_OR_RETURN(const json *spec, member(weight, field + ".", "init"));
  std::string path = field + ".init";
  if (!spec->is_object())
    return error(path, "must be an object");
  FLOWC_ASSIGN_OR_RETURN(std::string kind, string(*spec, path + ".", "kind"));
  WeightInit init;
  // Not a structured binding: clang before 16 (the fuzz build) cannot
  // capture one in a lambda.
  auto range = integerRange(dtype);
  auto checkValue = [&](double value, const std::string &name) -> Status {
    if (isFloatingPoint(dtype))
      return Status::ok();
    if (value != std::floor(value) || value < range.first || value > range.second)
      return error(path + "." + name,
                   "must be an integer a " + compiler::dtypeName(dtype) + " can hold");
    return Status::ok();
  };
  if (kind == "splat") {
    init.kind = WeightInit::Kind::Splat;
    FLOWC_ASSIGN_OR_RETURN(const json *value, member(*spec, path + ".", "value"));
    FLOWC_ASSIGN_OR_RETURN(init.value, number(*value, path + ".value"));
    FLOWC_RETURN_IF_ERROR(checkValue(init.value, "value"));
    return init;
  }
  if (kind != "uniform")
    return error(path + ".kind", "is '" + kind + "'; expected 'uniform' or 'splat'");
  FLOWC_ASSIGN_OR_RETURN(const json *seed, member(*spec, path + ".", "seed"));
  if (!seed->is_number_unsigned())
    return error(path + ".seed", "must be a non-negative integer");
  init.seed = seed->get<uint64_t>();
  FLOWC_ASSIGN_OR_RETURN(const json *low, member(*spec, path + ".", "low"));
  FLOWC_ASSIGN_OR_RETURN(init.low, number(*low, path + ".low"));
  FLOWC_ASSIGN_OR_RETURN(const json *high, member(*spec, path + ".", "high"));
  FLOWC_ASSIGN_OR_RETURN(init.high, number(*high, path + ".high"));
  FLOWC_RETURN_IF_ERROR(checkValue(init.low, "low"));
  FLOWC_RETURN_IF_ERROR(checkValue(init.high, "high"));
  bool floating = isFloatingPoint(dtype);
  if (floating ? !(init.low < init.high) : init.low > init.high)
    return error(path, std::string("needs low ") + (floating ? "<" : "<=") +
                           " high, has low " + low->dump() + " and high " + high->dump());
  return init;
}

Expected<compiler::CompileOptions> ManifestReader::options(const json &root) const {
  FLOWC_ASSIGN_OR_RETURN(const json *spec, member(root, "", "compile_options"));
  if (!spec->is_object())
    return error("compile_options", "must be an object");
  compiler::CompileOptions options;
  FLOWC_ASSIGN_OR_RETURN(std::string target, string(*spec, "compile_options.", "target"));
  Expected<Target> parsedTarget = parseTarget(target);
  if (!parsedTarget)
    return error("compile_options.target",
                 "is invalid: " + parsedTarget.status().message());
  options.target = *parsedTarget;
  FLOWC_ASSIGN_OR_RETURN(const json *level,
                         member(*spec, "compile_options.", "opt_level"));
  if (!level->is_number_integer())
    return error("compile_options.opt_level", "must be an integer");
  options.optLevel = level->get<int>();
  // Reproducers made before precision existed are fp32.
  if (spec->contains("precision")) {
    FLOWC_ASSIGN_OR_RETURN(std::string precision,
                           string(*spec, "compile_options.", "precision"));
    Expected<Precision> parsed = parsePrecision(precision);
    if (!parsed)
      return error("compile_options.precision",
                   "is invalid: " + parsed.status().message());
    options.precision = *parsed;
  }
  if (Status valid = options.validate(); !valid)
    return error("compile_options", "is invalid: " + valid.message());
  return options;
}

/// Nodes only feed `inspect`'s profile, so an unknown dtype there is kept
/// as undefined rather than refused.
Status ManifestReader::nodes(const json &root, ReproManifest &manifest) const {
  FLOWC_ASSIGN_OR_RETURN(const json *list, member(root, "", "nodes", /*required=*/false));
  if (!list)
    return Status::ok();
  if (!list->is_array())
    return error("nodes", "must be an array");
  for (size_t i = 0; i < list->size(); ++i)
    FLOWC_RETURN_IF_ERROR(node((*list)[i], "nodes[" + std::to_string(i) + "]", manifest));
  return Status::ok();
}

Status ManifestReader::node(const json &entry, const std::string &field,
                            ReproManifest &manifest) const {
  if (!entry.is_object())
    return error(field, "must be an object");
  compiler::NodeRecord record;
  FLOWC_ASSIGN_OR_RETURN(record.name, string(entry, field + ".", "name"));
  FLOWC_ASSIGN_OR_RETURN(record.opType, string(entry, field + ".", "op"));
  for (const std::string side : {"inputs", "outputs"}) {
    FLOWC_ASSIGN_OR_RETURN(const json *tensors, member(entry, field + ".", side));
    if (!tensors->is_array())
      return error(field + "." + side, "must be an array");
    auto &into = side == "inputs" ? record.inputs : record.outputs;
    for (size_t j = 0; j < tensors->size(); ++j) {
      std::string at = field + "." + side + "[" + std::to_string(j) + "]";
      FLOWC_ASSIGN_OR_RETURN(TensorInfo info,
                             tensor((*tensors)[j], at, "name", /*lenient=*/true));
      into.push_back(std::move(info));
    }
  }
  if (auto it = entry.find("parameters"); it != entry.end()) {
    if (!it->is_number_unsigned())
      return error(field + ".parameters", "must be a non-negative integer");
    record.parameterCount = it->get<uint64_t>();
  }
  if (auto it = entry.find("folded"); it != entry.end()) {
    if (!it->is_boolean())
      return error(field + ".folded", "must be true or false");
    record.folded = it->get<bool>();
  }
  compiler::Node source;
  source.name = record.name;
  source.opType = record.opType;
  if (auto it = entry.find("kernel_shape"); it != entry.end()) {
    if (!it->is_array() || !std::all_of(it->begin(), it->end(), [](const json &d) {
          return d.is_number_integer();
        }))
      return error(field + ".kernel_shape", "must be an array of integers");
    compiler::Attribute attribute;
    attribute.kind = compiler::Attribute::Kind::Ints;
    attribute.ints = it->get<std::vector<int64_t>>();
    source.attributes["kernel_shape"] = attribute;
  }
  manifest.nodes.push_back(std::move(record));
  manifest.sourceNodes.push_back(std::move(source));
  return Status::ok();
}

/// Absent, counted from the nodes (as the importer counts them).
Status ManifestReader::opCounts(const json &root, ReproManifest &manifest) const {
  FLOWC_ASSIGN_OR_RETURN(const json *counts,
                         member(root, "", "op_counts", /*required=*/false));
  if (!counts) {
    for (const compiler::NodeRecord &node : manifest.nodes)
      ++manifest.opCounts[node.opType];
    return Status::ok();
  }
  if (!counts->is_object() ||
      !std::all_of(counts->begin(), counts->end(),
                   [](const json &c) { return c.is_number_integer(); }))
    return error("op_counts", "must map op types to integers");
  manifest.opCounts = counts->get<std::map<std::string, int>>();
  return Status::ok();
}

Expected<ReproManifest> ManifestReader::read(const json &root) const {
  if (!root.is_object())
    return invalidArgument(file_ + ": must hold a JSON object");
  FLOWC_ASSIGN_OR_RETURN(std::string format, string(root, "", "format"));
  if (format != kReproFormat)
    return error("format",
                 "is '" + format + "'; this flowc reads '" + kReproFormat + "'");
  ReproManifest manifest;
  FLOWC_ASSIGN_OR_RETURN(manifest.inputs, tensors(root, "inputs", "name"));
  FLOWC_ASSIGN_OR_RETURN(manifest.outputs, tensors(root, "outputs", "name"));
  FLOWC_ASSIGN_OR_RETURN(manifest.weights, tensors(root, "weights", "key"));
  const json &weights = root.at("weights");
  for (size_t i = 0; i < manifest.weights.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(WeightInit init,
                           this->init(weights[i], "weights[" + std::to_string(i) + "]",
                                      manifest.weights[i].dtype));
    manifest.inits.push_back(init);
  }
  FLOWC_ASSIGN_OR_RETURN(manifest.options, options(root));
  FLOWC_RETURN_IF_ERROR(nodes(root, manifest));
  FLOWC_RETURN_IF_ERROR(opCounts(root, manifest));
  // Facts about the source model: informational, so absent is fine.
  if (auto source = root.find("source"); source != root.end() && source->is_object()) {
    if (auto opset = source->find("opset");
        opset != source->end() && opset->is_number_integer())
      manifest.opset = opset->get<int64_t>();
    if (auto producer = source->find("producer");
        producer != source->end() && producer->is_string())
      manifest.producer = producer->get<std::string>();
  }
  return manifest;
}

/// The manifest's tensors against the IR's: count, then dtype, shape and
/// (for weights) key of each, in argument order.
Status matchTensors(const std::string &manifestFile, const std::string &graphFile,
                    const std::string &field, const std::vector<TensorInfo> &declared,
                    const std::vector<TensorInfo> &actual, bool compareNames) {
  if (declared.size() != actual.size())
    return invalidArgument(manifestFile + ": field '" + field + "' lists " +
                           std::to_string(declared.size()) + " tensors but " + graphFile +
                           " @main has " + std::to_string(actual.size()));
  for (size_t i = 0; i < declared.size(); ++i) {
    const TensorInfo &want = declared[i], &have = actual[i];
    std::string where = manifestFile + ": field '" + field + "[" + std::to_string(i) +
                        "]' ('" + want.name + "'): ";
    if (compareNames && want.name != have.name)
      return invalidArgument(where + "key does not match " + graphFile + " @main's '" +
                             have.name + "' at the same position");
    if (want.dtype != have.dtype)
      return invalidArgument(where + "dtype " + compiler::dtypeName(want.dtype) +
                             " does not match " + graphFile + " (" +
                             compiler::dtypeName(have.dtype) + ")");
    if (want.shape != have.shape)
      return invalidArgument(where + "shape " + shapeString(want.shape) +
                             " does not match " + graphFile + " (" +
                             shapeString(have.shape) + ")");
  }
  return Status::ok();
}

/// Bytes of `info`, or nothing when the product overflows.
std::optional<uint64_t> byteSize(const TensorInfo &info) {
  uint64_t bytes = compiler::dtypeSize(info.dtype);
  for (int64_t dim : info.shape)
    if (dim < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes))
      return std::nullopt;
  return bytes;
}

Expected<json> parseJsonFile(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(std::string text, readFileToString(path));
  try {
    return json::parse(text);
  } catch (const json::exception &e) {
    // Not only parse_error: a number past double's range is out_of_range.
    // e.what() starts with nlohmann's "[json.exception.parse_error.101] ".
    std::string what = e.what();
    if (auto bracket = what.find("] "); bracket != std::string::npos)
      what = what.substr(bracket + 2);
    return invalidArgument(path + ": not valid JSON: " + what);
  }
}

// Generation -----------------------------------------------------------------

/// The i-th output of SplitMix64 seeded with `seed`: counter-based, so any
/// slice of a weight can be generated on its own.
uint64_t splitMix(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Stores `value` (already in range) as one element of `dtype` at `out`.
void store(DType dtype, double value, char *out) {
  auto put = [out](auto v) { std::memcpy(out, &v, sizeof v); };
  switch (dtype) {
  case DType::F32:
    return put(static_cast<float>(value));
  case DType::F64:
    return put(value);
  case DType::F16:
    return put(floatToHalf(static_cast<float>(value)));
  case DType::BF16:
    return put(floatToBfloat16(static_cast<float>(value)));
  case DType::I64:
    return put(static_cast<int64_t>(value));
  case DType::U64:
    return put(static_cast<uint64_t>(value));
  case DType::I32:
    return put(static_cast<int32_t>(value));
  case DType::U32:
    return put(static_cast<uint32_t>(value));
  case DType::I16:
    return put(static_cast<int16_t>(value));
  case DType::U16:
    return put(static_cast<uint16_t>(value));
  case DType::I8:
    return put(static_cast<int8_t>(value));
  case DType::U8:
  case DType::Bool:
    return put(static_cast<uint8_t>(value));
  case DType::Undefined:
    return;
  }
}

/// Elements [begin, end) of a uniform weight.
void fillUniform(const WeightInit &init, DType dtype, char *out, size_t begin,
                 size_t end) {
  size_t size = compiler::dtypeSize(dtype);
  // float32, the common case, without the double round trip.
  if (dtype == DType::F32) {
    float low = static_cast<float>(init.low);
    float span = static_cast<float>(init.high - init.low);
    // Rounding can land on `high` itself; the range is half-open.
    float top = std::nextafter(static_cast<float>(init.high), low);
    for (size_t i = begin; i < end; ++i) {
      float unit = static_cast<float>(splitMix(init.seed, i) >> 40) * 0x1p-24f;
      float value = std::min(low + span * unit, top);
      std::memcpy(out + i * 4, &value, 4);
    }
    return;
  }
  if (isFloatingPoint(dtype)) {
    for (size_t i = begin; i < end; ++i) {
      double unit = static_cast<double>(splitMix(init.seed, i) >> 11) * 0x1p-53;
      store(dtype, init.low + (init.high - init.low) * unit, out + i * size);
    }
    return;
  }
  auto low = static_cast<int64_t>(init.low);
  auto count = static_cast<uint64_t>(static_cast<int64_t>(init.high) - low) + 1;
  for (size_t i = begin; i < end; ++i)
    store(dtype,
          static_cast<double>(low + static_cast<int64_t>(splitMix(init.seed, i) % count)),
          out + i * size);
}

/// Every element is the same bytes: write one, then double the filled prefix.
void fillSplat(const WeightInit &init, DType dtype, char *out, size_t elements) {
  size_t size = compiler::dtypeSize(dtype), total = elements * size;
  if (total == 0)
    return;
  store(dtype, init.value, out);
  for (size_t filled = size; filled < total; filled *= 2)
    std::memcpy(out + filled, out, std::min(filled, total - filled));
}

/// The IR parses and verifies, and @main binds what the manifest lists.
Status checkSignature(const std::string &manifestPath, const std::string &graphPath,
                      const std::string &ir, const ReproManifest &manifest) {
  auto signature = compiler::readGraphSignature(ir);
  if (!signature)
    return signature.status().withContext(graphPath);
  FLOWC_RETURN_IF_ERROR(matchTensors(manifestPath, kReproGraphFile, "inputs",
                                     manifest.inputs, signature->inputs,
                                     /*compareNames=*/false));
  FLOWC_RETURN_IF_ERROR(matchTensors(manifestPath, kReproGraphFile, "weights",
                                     manifest.weights, signature->weights,
                                     /*compareNames=*/true));
  return matchTensors(manifestPath, kReproGraphFile, "outputs", manifest.outputs,
                      signature->outputs, /*compareNames=*/false);
}

/// Bytes of each weight. Shapes already agree with the IR; this refuses
/// what cannot be held in memory rather than let an allocation take the
/// daemon down.
Expected<std::vector<uint64_t>> weightSizes(const std::string &manifestPath,
                                            const ReproManifest &manifest) {
  uint64_t total = 0;
  std::vector<uint64_t> sizes;
  for (const TensorInfo &weight : manifest.weights) {
    std::optional<uint64_t> bytes = byteSize(weight);
    if (!bytes || __builtin_add_overflow(total, *bytes, &total))
      return resourceExhausted(manifestPath + ": weight '" + weight.name + "' of shape " +
                               shapeString(weight.shape) + " is too large");
    sizes.push_back(*bytes);
  }
  if (total > physicalMemory().value_or(std::numeric_limits<uint64_t>::max()))
    return resourceExhausted(manifestPath + ": the weights need " +
                             std::to_string(total) +
                             " bytes, more than this machine's memory");
  return sizes;
}

/// Every weight's values, in storage the returned refs own.
Expected<std::vector<compiler::WeightRef>>
generateWeights(const std::string &manifestPath, const ReproManifest &manifest,
                const std::vector<uint64_t> &sizes) {
  std::vector<compiler::WeightRef> weights;
  for (size_t i = 0; i < manifest.weights.size(); ++i) {
    const TensorInfo &info = manifest.weights[i];
    std::shared_ptr<std::string> storage;
    try {
      storage = std::make_shared<std::string>(sizes[i], '\0');
    } catch (const std::bad_alloc &) {
      return resourceExhausted(manifestPath + ": cannot allocate " +
                               std::to_string(sizes[i]) + " bytes for weight '" +
                               info.name + "'");
    }
    FLOWC_RETURN_IF_ERROR(generateWeight(manifest.inits[i], info.dtype, storage->data(),
                                         static_cast<size_t>(info.elementCount())));
    weights.push_back(compiler::WeightRef{info.name, info, *storage, storage});
  }
  return weights;
}

} // namespace

bool isReproducerPath(const std::string &path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string makeReproManifest(const IngestedModel &ingested,
                              const compiler::CompileOptions &options,
                              const ReproToolchain &toolchain) {
  const compiler::ImportedGraph &graph = ingested.graph;
  const compiler::OnnxModel &model = ingested.model;
  ordered_json manifest = {{"format", kReproFormat}, {"graph", kReproGraphFile}};
  manifest["source"] = {{"model", model.path},
                        {"model_digest", ingested.modelDigest.toString()},
                        {"ir_digest", ingested.irDigest.toString()},
                        {"opset", model.opsetVersion},
                        {"producer", model.producer},
                        {"parameters", graph.parameterCount()},
                        {"parameter_bytes", graph.parameterBytes()}};
  manifest["compile_options"] = {{"target", targetName(options.target)},
                                 {"opt_level", options.optLevel},
                                 {"precision", precisionName(options.precision)}};
  manifest["toolchain"] = {{"flowc", FLOWC_VERSION},
                           {"build_id", toolchain.buildId},
                           {"llvm", FLOWC_LLVM_VERSION},
                           {"host_target", toolchain.hostTarget}};
  manifest["inputs"] = ordered_json::array();
  manifest["outputs"] = ordered_json::array();
  manifest["weights"] = ordered_json::array();
  for (const TensorInfo &input : graph.inputs)
    manifest["inputs"].push_back(tensorJson(input));
  for (const TensorInfo &output : graph.outputs)
    manifest["outputs"].push_back(tensorJson(output));
  std::set<std::string> positiveOnly = positiveOnlyTensors(graph.nodes);
  for (const compiler::WeightRef &weight : graph.weights)
    manifest["weights"].push_back(
        {{"key", weight.key},
         {"dtype", compiler::dtypeName(weight.info.dtype)},
         {"shape", weight.info.shape},
         {"init", initJson(weight, positiveOnly.count(weight.key) > 0)}});
  manifest["op_counts"] = graph.opCounts;
  manifest["nodes"] = ordered_json::array();
  bool paired = model.nodes.size() == graph.nodes.size();
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    manifest["nodes"].push_back(
        nodeJson(graph.nodes[i], paired ? &model.nodes[i] : nullptr));
  return layout(manifest);
}

Status generateWeight(const WeightInit &init, DType dtype, char *out, size_t elements,
                      unsigned threads) {
  if (compiler::dtypeSize(dtype) == 0)
    return invalidArgument("cannot generate values of dtype " +
                           compiler::dtypeName(dtype));
  if (init.kind == WeightInit::Kind::Splat) {
    fillSplat(init, dtype, out, elements);
    return Status::ok();
  }
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  // Below a few MB a thread costs more than it saves.
  constexpr size_t kMinElementsPerThread = size_t{1} << 20;
  threads = static_cast<unsigned>(
      std::clamp<size_t>(elements / kMinElementsPerThread, 1, threads));
  std::vector<std::thread> workers;
  size_t step = (elements + threads - 1) / threads;
  for (unsigned t = 1; t < threads; ++t)
    workers.emplace_back(fillUniform, std::cref(init), dtype, out,
                         std::min(elements, t * step),
                         std::min(elements, (t + 1) * step));
  fillUniform(init, dtype, out, 0, std::min(elements, step));
  for (std::thread &worker : workers)
    worker.join();
  return Status::ok();
}

Expected<LoadedReproducer> loadReproducer(const std::string &dir) {
  std::string manifestPath = (fs::path(dir) / kReproManifestFile).string();
  std::string graphPath = (fs::path(dir) / kReproGraphFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(manifestPath, ec))
    return notFound(dir + ": not a flowc reproducer: no " + kReproManifestFile);
  FLOWC_ASSIGN_OR_RETURN(json root, parseJsonFile(manifestPath));
  FLOWC_ASSIGN_OR_RETURN(ReproManifest manifest, ManifestReader(manifestPath).read(root));
  if (!fs::is_regular_file(graphPath, ec))
    return notFound(graphPath + ": missing (a reproducer's graph IR)");

  LoadedReproducer loaded;
  compiler::ImportedGraph &graph = loaded.graph;
  FLOWC_ASSIGN_OR_RETURN(graph.irBytecode, readFileToString(graphPath));
  FLOWC_RETURN_IF_ERROR(
      checkSignature(manifestPath, graphPath, graph.irBytecode, manifest));
  FLOWC_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes,
                         weightSizes(manifestPath, manifest));
  auto start = std::chrono::steady_clock::now();
  FLOWC_ASSIGN_OR_RETURN(graph.weights, generateWeights(manifestPath, manifest, sizes));
  loaded.generateSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  graph.inputs = std::move(manifest.inputs);
  graph.outputs = std::move(manifest.outputs);
  graph.opCounts = std::move(manifest.opCounts);
  graph.nodes = std::move(manifest.nodes);
  loaded.model.path = dir;
  loaded.model.opsetVersion = manifest.opset;
  loaded.model.producer = manifest.producer;
  loaded.model.nodes = std::move(manifest.sourceNodes);
  loaded.options = manifest.options;
  spdlog::info("reproducer {}: generated {} weights ({} bytes) in {:.3f} s", dir,
               graph.weights.size(), graph.parameterBytes(), loaded.generateSeconds);
  return loaded;
}

} // namespace flowc::worker
