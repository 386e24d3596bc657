// flowc submit MODEL|REPRO_DIR [-o OUT.fca] [--target cpu|cuda[:sm_NN]] [-O N] [--json]
#include "Commands.h"
#include "PlaceArtifact.h"
#include "Progress.h"
#include "Submit.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/SearchBudget.h"

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stop_token>
#include <sys/ioctl.h>
#include <thread>
#include <unistd.h>

namespace flowc::cli {

namespace {

namespace fs = std::filesystem;

struct SubmitOptions {
  std::string model;
  std::string output;
  CompileFlags compile;
  std::string printIrAfter;
  bool json = false;
  bool batch = false;
  /// --progress: "" (none asked for), "text" or "json".
  std::string progress;
  bool explain = false;
  /// Upload the model's blobs instead of naming its path (RemoteSubmit.h).
  bool upload = false;
  /// Return once the job is accepted; it runs on without this client.
  bool detach = false;
  double timeoutSeconds = 0;
  /// Set on the command line; otherwise a reproducer's recorded value wins.
  bool targetGiven = false;
  bool optLevelGiven = false;
  bool precisionGiven = false;
};

/// A reproducer compiles with the options it was made with unless the
/// command line says otherwise. A manifest that cannot be read here is left
/// for the daemon to report, with the file and field at fault.
void applyRecordedOptions(const std::string &dir, SubmitOptions &options) {
  auto text = readFileToString((fs::path(dir) / "repro.json").string());
  if (!text)
    return;
  auto manifest = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || !manifest.contains("compile_options"))
    return;
  const nlohmann::json &recorded = manifest["compile_options"];
  if (!recorded.is_object())
    return;
  if (auto target = recorded.find("target");
      !options.targetGiven && target != recorded.end() && target->is_string())
    options.compile.target = target->get<std::string>();
  if (auto level = recorded.find("opt_level");
      !options.optLevelGiven && level != recorded.end() && level->is_number_integer())
    options.compile.optLevel = level->get<int>();
  if (auto precision = recorded.find("precision");
      !options.precisionGiven && precision != recorded.end() && precision->is_string())
    options.compile.precision = precision->get<std::string>();
}

/// stderr's width when it is a terminal; 80 when it does not say.
unsigned terminalColumns() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0)
    return size.ws_col;
  return 80;
}

nlohmann::json searchJson(const flowc::v1::SearchSummary &search) {
  return {{"tunable_kernels", search.tunable_kernels()},
          {"tuned_kernels", search.tuned_kernels()},
          {"measured_kernels", search.measured_kernels()},
          {"candidates_measured", search.candidates_measured()},
          {"seconds", search.seconds()},
          {"budget_ended", search.budget_ended()}};
}

/// The object `--json` prints and NDJSON's "result" event carries.
nlohmann::json resultJson(const SubmitOptions &options, const std::string &output,
                          const flowc::v1::CompileResult &result,
                          const std::optional<UploadReport> &uploaded,
                          const std::string &transfer, double seconds) {
  nlohmann::json json = {{"artifact", output},
                         {"artifact_digest", result.artifact_digest()},
                         {"model_digest", result.model_digest()},
                         {"cache", result.cache_hit() ? "hit" : "miss"},
                         {"code_cache", result.code_cache_hit() ? "hit" : "miss"},
                         {"seconds", seconds},
                         {"daemon_seconds", result.seconds()},
                         {"artifact_transfer", transfer},
                         {"kernels_compiled", result.kernels_compiled()},
                         {"kernels_reused", result.kernels_reused()},
                         {"search", searchJson(result.search())},
                         {"thin", options.compile.thin},
                         {"job_id", result.job_id()},
                         {"answered_by", result.answered_by()}};
  if (options.explain)
    json["explain"] = result.explain();
  if (uploaded) {
    json["uploaded_blobs"] = uploaded->uploadedBlobs;
    json["uploaded_bytes"] = uploaded->uploadedBytes;
    json["model_blobs"] = uploaded->modelBlobs;
    json["model_bytes"] = uploaded->modelBytes;
    json["hashed_bytes"] = uploaded->hashedBytes;
    json["hash_seconds"] = uploaded->hashSeconds;
    json["upload_seconds"] = uploaded->uploadSeconds;
  }
  json["op_counts"] = nlohmann::json::object();
  for (const auto &[op, count] : result.op_counts())
    json["op_counts"][op] = count;
  return json;
}

int runSubmit(SubmitOptions options, GlobalOptions &global) {
  global.resolve();
  reportToStderrIfStandardOutput(options.output);
  ProgressMode mode =
      chooseProgressMode(options.progress, options.json, isatty(STDERR_FILENO));
  // From here every error, too, is one NDJSON event.
  if (mode == ProgressMode::Json)
    setErrorFormat(ErrorFormat::JsonEvent, global.started);
  ProgressRenderer renderer(mode, global.started, std::cout, std::cerr,
                            mode == ProgressMode::Terminal ? terminalColumns() : 80);
  auto model = absoluteModelOrReproducer(options.model);
  if (!model)
    return reportError(model.status());
  if (std::error_code ec; fs::is_directory(*model, ec))
    applyRecordedOptions(*model, options);
  std::string output =
      options.output.empty() ? fs::path(*model).stem().string() + ".fca" : options.output;
  if (Status writable = checkOutputPath(output); !writable)
    return reportError(writable);

  auto client = DaemonClient::connect(global, /*autostart=*/true);
  if (!client)
    return reportError(client.status());
  SubmitSpec spec;
  spec.model = *model;
  spec.compile = options.compile;
  spec.printIrAfter = options.printIrAfter;
  spec.batch = options.batch;
  spec.explain = options.explain;
  spec.upload = options.upload;
  spec.detach = options.detach;
  spec.timeoutSeconds = options.timeoutSeconds;
  grpc::ClientContext context;
  // The terminal line's clock keeps running while a long kernel compiles.
  std::optional<std::jthread> ticker;
  if (mode == ProgressMode::Terminal)
    ticker.emplace([&renderer](std::stop_token stop) {
      std::mutex mutex;
      std::condition_variable_any wake;
      std::unique_lock lock(mutex);
      while (!stop.stop_requested()) {
        wake.wait_for(lock, stop, std::chrono::milliseconds(250), [] { return false; });
        if (!stop.stop_requested())
          renderer.tick();
      }
    });
  auto reply =
      submitModel(**client, global, spec, context,
                  [&](const flowc::v1::SubmitEvent &event) { renderer.event(event); });
  ticker.reset();
  renderer.finish();
  if (!reply) {
    // The daemon's fields for what failed, when the failure is its answer.
    if (std::optional<flowc::v1::ErrorDetail> detail = errorDetailOf(context))
      return reportError(reply.status(), *detail);
    return reportError(reply.status());
  }
  // Detached: the job runs on in the daemon; a hit is answered as usual.
  if (options.detach && !reply->result) {
    if (options.json)
      printJson({{"job_id", reply->jobId}, {"detached", true}});
    else
      std::cout << "flowc: job " << reply->jobId << " accepted (detached)" << std::endl;
    return 0;
  }
  std::optional<flowc::v1::CompileResult> &result = reply->result;
  std::optional<UploadReport> &uploaded = reply->uploaded;
  if (!result)
    return reportError(
        internalError("the daemon sent no result for '" + options.model + "'"));
  auto transfer = fetchArtifact(**client, *result, output);
  if (!transfer)
    return reportError(transfer.status());
  // What the user waited, from the command's start.
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - global.started)
          .count();

  std::string cache = result->cache_hit() ? "hit" : "miss";
  if (mode == ProgressMode::Json) {
    nlohmann::json json =
        resultJson(options, output, *result, uploaded, *transfer, seconds);
    json["event"] = "result";
    json["elapsed"] = seconds;
    printJson(json);
    return 0;
  }
  if (options.json) {
    printJson(resultJson(options, output, *result, uploaded, *transfer, seconds));
    return 0;
  }
  std::ostringstream line;
  if (uploaded)
    line << "flowc: uploaded " << uploaded->uploadedBlobs << " of "
         << uploaded->modelBlobs << " blobs (" << humanBytes(uploaded->uploadedBytes)
         << " of " << humanBytes(uploaded->modelBytes) << ")\n";
  line << "flowc: cache " << cache
       << (result->cache_hit()        ? ""
           : result->code_cache_hit() ? " (code reused, weights re-linked)"
                                      : "")
       << " in " << std::fixed << std::setprecision(3) << seconds << " s (daemon "
       << result->seconds() << " s) -> " << output << " " << result->artifact_digest();
  std::cout << line.str() << std::endl;
  if (options.explain)
    std::cout << result->explain() << std::endl;
  return 0;
}

} // namespace

void addCompileFlags(CLI::App *cmd, CompileFlags &flags) {
  cmd->add_option("--target", flags.target,
                  "Compile target: cpu, or cuda[:sm_NN] for an NVIDIA GPU (docs/cuda.md)")
      ->check(targetValidator());
  cmd->add_option("-O,--opt-level", flags.optLevel, "Code optimization level 0..3")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--precision", flags.precision,
                  "Library-kernel arithmetic: fp32 (default), bf16, or fp16 (cuda "
                  "targets); fp32 accumulation (docs/cuda.md: AMP)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--disable-pass", flags.disabledPasses,
                  "Leave out an optional pass (debugging; repeatable); the daemon "
                  "refuses a name that is not one, listing those that are");
  cmd->add_option("--input-shape", flags.inputShapes,
                  "NAME=DIMS (e.g. input_ids=1x128): a static shape for an input with "
                  "symbolic dimensions; repeatable");
  cmd->add_flag("--thin", flags.thin,
                "Thin artifact: weights referred to by digest and mapped from this "
                "cache when it runs (kilobytes for any model; runs where the cache is)");
}

void addSearchBudgetFlag(CLI::App *cmd, CompileFlags &flags) {
  cmd->add_option("--search-budget", flags.searchBudget,
                  "SECONDS, none (default) or exhaustive: how long search may measure "
                  "kernels that have no tuning record; records are used whatever it says")
      ->check([](const std::string &text) {
        auto budget = SearchBudget::parse(text);
        return budget ? std::string() : budget.status().message();
      });
}

CommandRunner addSubmitCommand(CLI::App &app, GlobalOptions &global) {
  auto options = std::make_shared<SubmitOptions>();
  CLI::App *cmd = app.add_subcommand("submit", "Compile a model through the daemon");
  cmd->add_option("model", options->model, "ONNX model file or reproducer directory")
      ->required();
  cmd->add_option("-o,--output", options->output,
                  "Artifact path (default: MODEL_STEM.fca)");
  addCompileFlags(cmd, options->compile);
  addSearchBudgetFlag(cmd, options->compile);
  cmd->add_option("--print-ir-after", options->printIrAfter,
                  "Print the IR after each pass of this name (or 'all') on stderr; "
                  "compiles even on a cache hit");
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->add_flag("--batch", options->batch, "Batch priority (CI); default is interactive");
  cmd->add_flag("--progress{text}", options->progress,
                "Progress events: --progress as text lines on stderr, --progress=json "
                "as one JSON object per line on stdout (docs/progress.md)")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_flag(
      "--explain", options->explain,
      "Say which cache entry answered, or on a miss what differs from the "
      "nearest entry for a model of the same name (graph node, weights, target, "
      "option, toolchain)");
  cmd->add_flag("--upload", options->upload,
                "Upload the model's files as blobs (only those the daemon lacks) "
                "instead of naming its path: for a daemon that cannot read them");
  cmd->add_flag("--detach", options->detach,
                "Return once the daemon accepted the job (its id is printed); the job "
                "runs on without this client instead of being cancelled when it leaves");
  cmd->add_option("--timeout", options->timeoutSeconds,
                  "Cancel the job after this many seconds of wall time (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  return [cmd, options, &global] {
    options->targetGiven = cmd->count("--target") > 0;
    options->optLevelGiven = cmd->count("--opt-level") > 0;
    options->precisionGiven = cmd->count("--precision") > 0;
    return runSubmit(*options, global);
  };
}

} // namespace flowc::cli
