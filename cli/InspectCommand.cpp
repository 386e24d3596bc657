// flowc inspect MODEL.onnx|ARTIFACT.fca [--json]
#include "Commands.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/support/MappedFile.h"

#include <cstring>
#include <iostream>

namespace flowc::cli {

namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
};

nlohmann::json specJson(const runtime::TensorSpec &spec) {
  return {{"name", spec.name}, {"dtype", spec.dtype}, {"shape", spec.shape}};
}

nlohmann::json
tensorsJson(const google::protobuf::RepeatedPtrField<flowc::v1::TensorInfo> &tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto &t : tensors)
    out.push_back({{"name", t.name()},
                   {"dtype", t.dtype()},
                   {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())}});
  return out;
}

/// Models are described by the daemon, which holds the compiler; the CLI
/// stays free of MLIR and starts in milliseconds.
Expected<nlohmann::json> describeModel(const std::string &path, GlobalOptions &global) {
  FLOWC_ASSIGN_OR_RETURN(std::string model, absoluteModelPath(path));
  global.resolve();
  FLOWC_ASSIGN_OR_RETURN(auto client, DaemonClient::connect(global, /*autostart=*/true));
  grpc::ClientContext context;
  flowc::v1::InspectRequest request;
  request.set_model_path(model);
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
  return json;
}

Expected<nlohmann::json> describeArtifact(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(auto artifact, runtime::Artifact::open(path));
  const nlohmann::json &meta = artifact->metadata();
  const runtime::Plan &plan = artifact->plan();
  nlohmann::json json = {
      {"kind", "artifact"}, {"path", path}, {"bytes", artifact->fileSize()}};
  for (const char *key :
       {"model_digest", "ir_digest", "code_digest", "compiler", "target", "options",
        "op_counts", "parameters", "parameter_bytes", "opset"})
    if (meta.contains(key))
      json[key] = meta[key];
  json["inputs"] = nlohmann::json::array();
  json["outputs"] = nlohmann::json::array();
  for (const auto &spec : plan.inputs)
    json["inputs"].push_back(specJson(spec));
  for (const auto &spec : plan.outputs)
    json["outputs"].push_back(specJson(spec));
  json["weights"] = plan.weights.size();
  json["code_bytes"] = artifact->section(runtime::SectionKind::Code).size();
  json["ir_bytes"] = artifact->section(runtime::SectionKind::GraphIr).size();
  return json;
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

void printHuman(const nlohmann::json &json) {
  std::cout << json["kind"].get<std::string>() << " " << json["path"].get<std::string>()
            << "\n";
  printTensors("inputs", json["inputs"]);
  printTensors("outputs", json["outputs"]);
  std::cout << "ops:\n";
  for (const auto &[op, count] : json["op_counts"].items())
    std::cout << "  " << op << " " << count.dump() << "\n";
  std::cout << "parameters: " << json.value("parameters", 0) << " ("
            << json.value("parameter_bytes", 0) << " bytes in " << json["weights"].dump()
            << " weights)\n";
  for (const char *key :
       {"model_digest", "ir_digest", "code_digest", "compiler", "options"})
    if (json.contains(key))
      std::cout << key << ": " << json[key].get<std::string>() << "\n";
  std::cout.flush();
}

int runInspect(const InspectOptions &options, GlobalOptions &global) {
  auto json = isArtifact(options.path) ? describeArtifact(options.path)
                                       : describeModel(options.path, global);
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
  cmd->add_option("path", options->path, "MODEL.onnx or ARTIFACT.fca")->required();
  cmd->add_flag("--json", options->json, "Print one JSON object");
  return [options, &global] { return runInspect(*options, global); };
}

} // namespace flowc::cli
