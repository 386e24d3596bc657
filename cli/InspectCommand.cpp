// flowc inspect MODEL.onnx|REPRO_DIR|ARTIFACT.fca [--json]
#include "Commands.h"
#include "RuntimeModule.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace flowc::cli {

namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  std::vector<std::string> inputShapes;
};

nlohmann::json
tensorsJson(const google::protobuf::RepeatedPtrField<flowc::v1::TensorInfo> &tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto &t : tensors)
    out.push_back({{"name", t.name()},
                   {"dtype", t.dtype()},
                   {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
  return out;
}

nlohmann::json opProfileJson(const flowc::v1::OpProfile &row) {
  return {{"op", row.op_type()},         {"count", row.count()},
          {"folded", row.folded()},      {"parameters", row.parameters()},
          {"flops", row.flops()},        {"activation_bytes", row.activation_bytes()},
          {"estimated", row.estimated()}};
}

nlohmann::json profileJson(const flowc::v1::InspectResponse &response) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto &row : response.profile())
    ops.push_back(opProfileJson(row));
  return {{"ops", ops}, {"total", opProfileJson(response.profile_total())}};
}

/// Models are described by the daemon, which holds the compiler; the CLI
/// stays free of MLIR and starts in milliseconds.
Expected<nlohmann::json> describeModel(const std::string &path,
                                       const std::vector<std::string> &inputShapes,
                                       GlobalOptions &global) {
  FLOWC_ASSIGN_OR_RETURN(std::string model, absoluteModelOrReproducer(path));
  global.resolve();
  FLOWC_ASSIGN_OR_RETURN(auto client, DaemonClient::connect(global, /*autostart=*/true));
  grpc::ClientContext context;
  flowc::v1::InspectRequest request;
  request.set_model_path(model);
  FLOWC_RETURN_IF_ERROR(addInputShapes(inputShapes, request));
  flowc::v1::InspectResponse response;
  FLOWC_RETURN_IF_ERROR(fromGrpc(client->compiler().Inspect(&context, request, &response),
                                 "inspect " + path));
  nlohmann::json json = {{"kind", "model"},
                         {"path", path},
                         {"model_digest", response.model_digest()},
                         {"ir_digest", response.ir_digest()},
                         {"opset", response.opset()},
                         {"producer", response.producer()},
                         {"inputs", tensorsJson(response.inputs())},
                         {"outputs", tensorsJson(response.outputs())},
                         {"parameters", response.parameters()},
                         {"parameter_bytes", response.parameter_bytes()},
                         {"weights", response.weights()}};
  json["op_counts"] = nlohmann::json::object();
  for (const auto &[op, count] : response.op_counts())
    json["op_counts"][op] = count;
  json["profile"] = profileJson(response);
  return json;
}

Expected<nlohmann::json> describeArtifactThroughModule(const std::string &path,
                                                       GlobalOptions &global) {
  FLOWC_ASSIGN_OR_RETURN(const RuntimeModule *module, runtimeModule());
  return module->describeArtifact(path, global);
}

bool isArtifact(const std::string &path) {
  auto file = MappedFile::open(path);
  return file && file->size() >= 8 &&
         std::memcmp(file->data(), runtime::kArtifactMagic, 8) == 0;
}

void printTensors(const char *title, const nlohmann::json &tensors) {
  std::cout << title << ":\n";
  for (const auto &t : tensors)
    std::cout << "  " << t["name"].get<std::string>() << " "
              << t["dtype"].get<std::string>() << " " << t["shape"].dump() << "\n";
}

/// Columns padded to their widest cell; the first left-aligned, the rest
/// right-aligned (numbers).
void printTable(const std::vector<std::vector<std::string>> &rows) {
  std::vector<size_t> widths;
  for (const auto &row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      widths.resize(std::max(widths.size(), row.size()));
      widths[i] = std::max(widths[i], row[i].size());
    }
  for (const auto &row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string pad(widths[i] - row[i].size(), ' ');
      line += "  " + (i == 0 ? row[i] + pad : pad + row[i]);
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    std::cout << line << "\n";
  }
}

std::vector<std::string> profileRow(const nlohmann::json &row, uint64_t totalFlops) {
  uint64_t count = row["count"], folded = row["folded"], flops = row["flops"];
  std::string share = "-";
  if (totalFlops > 0) {
    char text[16];
    std::snprintf(text, sizeof text, "%.1f%%", 100.0 * flops / totalFlops);
    share = text;
  }
  return {row["op"].get<std::string>(),
          std::to_string(count) +
              (folded ? " (" + std::to_string(folded) + " folded)" : ""),
          std::to_string(row["parameters"].get<uint64_t>()),
          (row["estimated"].get<bool>() ? "~" : "") + humanFlops(flops),
          share,
          humanBytes(row["activation_bytes"])};
}

/// The static profile, by FLOPs, with totals.
void printProfile(const nlohmann::json &profile) {
  uint64_t totalFlops = profile["total"]["flops"];
  std::vector<std::vector<std::string>> rows = {
      {"op", "nodes", "parameters", "FLOPs", "share", "activations"}};
  bool estimated = false;
  for (const auto &row : profile["ops"]) {
    rows.push_back(profileRow(row, totalFlops));
    estimated = estimated || row["estimated"].get<bool>();
  }
  rows.push_back(profileRow(profile["total"], totalFlops));
  std::cout << "profile (static; a multiply-add is 2 FLOPs):\n";
  printTable(rows);
  if (estimated)
    std::cout << "  ~ estimated: no cost formula for the op, FLOPs = output elements\n";
}

void printHuman(const nlohmann::json &json) {
  std::cout << json["kind"].get<std::string>() << " " << json["path"].get<std::string>()
            << "\n";
  printTensors("inputs", json["inputs"]);
  printTensors("outputs", json["outputs"]);
  if (json.contains("profile")) {
    printProfile(json["profile"]);
  } else {
    std::cout << "ops:\n";
    for (const auto &[op, count] : json["op_counts"].items())
      std::cout << "  " << op << " " << count.dump() << "\n";
  }
  std::cout << "parameters: " << json.value("parameters", 0) << " ("
            << json.value("parameter_bytes", 0) << " bytes in " << json["weights"].dump()
            << " weights)\n";
  if (json.value("derived_weights", 0) > 0)
    std::cout << "derived weights: " << json["derived_weights"].dump() << " ("
              << humanBytes(json["derived_weight_bytes"])
              << ", computed from the model's weights at link time)\n";
  if (json.value("packed_weights", 0) > 0)
    std::cout << "packed kernel weights: " << json["packed_weights"].dump() << " ("
              << humanBytes(json["packed_weight_bytes"])
              << ", in the library kernels' layouts, read in place)\n";
  if (json.value("thin", false))
    std::cout << "thin: " << humanBytes(json["external_weight_bytes"])
              << " of weights referred to by digest, mapped from the flowc cache\n";
  if (json.contains("arena_bytes"))
    std::cout << "activation arena: " << humanBytes(json["arena_bytes"])
              << " (peak activation memory of the static plan), library kernels: "
              << json["library_kernels"].dump() << "\n";
  if (json.contains("code_error"))
    std::cout << "code: not loadable here: " << json["code_error"].get<std::string>()
              << "\n";
  for (const char *key :
       {"model_digest", "ir_digest", "code_digest", "compiler", "options"})
    if (json.contains(key))
      std::cout << key << ": " << json[key].get<std::string>() << "\n";
  std::cout.flush();
}

int runInspect(const InspectOptions &options, GlobalOptions &global) {
  auto json = isArtifact(options.path)
                  ? describeArtifactThroughModule(options.path, global)
                  : describeModel(options.path, options.inputShapes, global);
  if (!json)
    return reportError(json.status());
  if (options.json)
    printJson(*json);
  else
    printHuman(*json);
  return 0;
}

} // namespace

CommandRunner addInspectCommand(CLI::App &app, GlobalOptions &global) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App *cmd = app.add_subcommand("inspect", "Describe a model or an artifact");
  cmd->add_option("path", options->path,
                  "MODEL.onnx, a reproducer directory or ARTIFACT.fca")
      ->required();
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->add_option("--input-shape", options->inputShapes,
                  "NAME=DIMS: a static shape for an input with symbolic dimensions");
  return [options, &global] { return runInspect(*options, global); };
}

} // namespace flowc::cli
