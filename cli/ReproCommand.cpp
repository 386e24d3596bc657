// flowc repro MODEL -o DIR [--target cpu] [-O N] [--json]
//
// Writes a weight-free reproducer: the daemon imports the model and streams
// graph.mlirbc and repro.json; weights are regenerated from seeds wherever
// the reproducer is loaded (`flowc submit DIR`, `flowc inspect DIR`).
#include "Commands.h"

#include "flowc/support/MappedFile.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

namespace flowc::cli {

namespace {

namespace fs = std::filesystem;

struct ReproOptions {
  std::string model;
  std::string dir;
  std::string target = "cpu";
  int optLevel = 2;
  std::string precision = "fp32";
  bool json = false;
  std::vector<std::string> inputShapes;
};

struct ReceivedFile {
  std::string name;
  std::string bytes;
};

/// A name the daemon may ask us to write: one component, inside DIR.
bool isPlainFileName(const std::string &name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos;
}

/// The reproducer's files in the order the daemon sends them.
Expected<std::vector<ReceivedFile>> receiveFiles(DaemonClient &client,
                                                 const flowc::v1::ReproRequest &request,
                                                 const std::string &what) {
  grpc::ClientContext context;
  auto reader = client.compiler().Repro(&context, request);
  std::vector<ReceivedFile> files;
  flowc::v1::ReproChunk chunk;
  Status status;
  while (reader->Read(&chunk)) {
    if (!status.isOk())
      continue; // drain, then report the first problem
    if (chunk.offset() == 0) {
      if (!isPlainFileName(chunk.file()))
        status =
            dataLoss("the daemon sent a reproducer file named '" + chunk.file() + "'");
      files.push_back({chunk.file(), std::string()});
      files.back().bytes.reserve(chunk.total_size());
    }
    if (files.empty() || files.back().name != chunk.file() ||
        files.back().bytes.size() != chunk.offset())
      status = dataLoss("the daemon sent '" + chunk.file() + "' out of order");
    else
      files.back().bytes += chunk.data();
  }
  FLOWC_RETURN_IF_ERROR(fromGrpc(reader->Finish(), what));
  FLOWC_RETURN_IF_ERROR(status);
  if (files.empty())
    return internalError("the daemon sent no reproducer files for " + what);
  return files;
}

/// What repro.json says about the weights, for the summary line.
struct ManifestSummary {
  size_t weights = 0;
  uint64_t parameterBytes = 0;
  std::string modelDigest;
};

ManifestSummary summarize(const std::string &manifest) {
  ManifestSummary summary;
  auto json = nlohmann::json::parse(manifest, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object())
    return summary;
  if (json.contains("weights") && json["weights"].is_array())
    summary.weights = json["weights"].size();
  auto source = json.find("source");
  if (source == json.end() || !source->is_object())
    return summary;
  if (auto bytes = source->find("parameter_bytes");
      bytes != source->end() && bytes->is_number_unsigned())
    summary.parameterBytes = bytes->get<uint64_t>();
  if (auto digest = source->find("model_digest");
      digest != source->end() && digest->is_string())
    summary.modelDigest = digest->get<std::string>();
  return summary;
}

int runRepro(const ReproOptions &options, GlobalOptions &global) {
  global.resolve();
  auto model = absoluteModelOrReproducer(options.model);
  if (!model)
    return reportError(model.status());
  auto client = DaemonClient::connect(global, /*autostart=*/true);
  if (!client)
    return reportError(client.status());
  flowc::v1::ReproRequest request;
  request.set_model_path(*model);
  if (Status set = setCompileOptions(options.target, options.optLevel, options.precision,
                                     *request.mutable_options());
      !set)
    return reportError(set);
  if (Status shapes = addInputShapes(options.inputShapes, request); !shapes)
    return reportError(shapes);
  auto files = receiveFiles(**client, request, "repro " + options.model);
  if (!files)
    return reportError(files.status());

  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec)
    return reportError(
        errnoStatus(ec.value(), "cannot create directory '" + options.dir + "'"));
  // In the order received (the manifest last), each atomically: an
  // interrupted write leaves no manifest that names a graph it lacks.
  nlohmann::json sizes = nlohmann::json::object();
  uint64_t total = 0;
  for (const ReceivedFile &file : *files) {
    std::string path = (fs::path(options.dir) / file.name).string();
    if (Status written = writeFileAtomically(path, file.bytes); !written)
      return reportError(written);
    sizes[file.name] = file.bytes.size();
    total += file.bytes.size();
  }

  ManifestSummary summary = summarize(files->back().bytes);
  if (options.json) {
    printJson({{"dir", options.dir},
               {"files", sizes},
               {"bytes", total},
               {"weights", summary.weights},
               {"parameter_bytes", summary.parameterBytes},
               {"model_digest", summary.modelDigest}});
    return 0;
  }
  std::cout << "flowc: reproducer of " << options.model << " -> " << options.dir << " ("
            << humanBytes(total) << "; " << summary.weights << " weights, "
            << humanBytes(summary.parameterBytes) << ", generated on load)" << std::endl;
  return 0;
}

/// "1.23", "12.3", "123": three significant digits.
std::string threeDigits(double value) {
  char text[32];
  int decimals = value < 10 ? 2 : value < 100 ? 1 : 0;
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string humanUnits(uint64_t value, const char *unit) {
  static constexpr const char *kPrefixes[] = {"", "k", "M", "G", "T", "P"};
  double scaled = static_cast<double>(value);
  size_t prefix = 0;
  while (scaled >= 1000 && prefix + 1 < std::size(kPrefixes)) {
    scaled /= 1000;
    ++prefix;
  }
  if (prefix == 0)
    return std::to_string(value) + " " + unit;
  return threeDigits(scaled) + " " + kPrefixes[prefix] + unit;
}

} // namespace

Expected<std::string> absoluteModelOrReproducer(const std::string &path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return absoluteModelPath(path);
  fs::path absolute = fs::absolute(path, ec).lexically_normal();
  if (ec)
    return notFound("cannot resolve reproducer directory '" + path + "'");
  // "dir/" normalizes to "dir/"; the daemon and messages want "dir".
  if (absolute.filename().empty())
    absolute = absolute.parent_path();
  return absolute.string();
}

std::string humanBytes(uint64_t bytes) { return humanUnits(bytes, "B"); }

std::string humanFlops(uint64_t flops) { return humanUnits(flops, "FLOPs"); }

CommandRunner addReproCommand(CLI::App &app, GlobalOptions &global) {
  auto options = std::make_shared<ReproOptions>();
  CLI::App *cmd = app.add_subcommand(
      "repro", "Write a weight-free reproducer (graph IR + repro.json) of a model");
  cmd->add_option("model", options->model, "ONNX model file (or a reproducer directory)")
      ->required();
  cmd->add_option("-o,--output", options->dir, "Reproducer directory")->required();
  cmd->add_option("--input-shape", options->inputShapes,
                  "NAME=DIMS: a static shape for an input with symbolic dimensions");
  cmd->add_option("--target", options->target, "Compile target recorded in repro.json")
      ->check(targetValidator());
  cmd->add_option("-O,--opt-level", options->optLevel,
                  "Optimization level recorded in repro.json, 0..3")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--precision", options->precision, "Precision recorded in repro.json")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_flag("--json", options->json, "Print one JSON object");
  return [options, &global] { return runRepro(*options, global); };
}

} // namespace flowc::cli
