// flowc run ARTIFACT --input NAME=FILE.npy ... [--output-dir DIR] [--bench N]
//           [--threads T] [--json]
#include "Commands.h"

#include "flowc/runtime/Session.h"
#include "flowc/support/Format.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace flowc::cli {

namespace {

struct RunOptions {
  std::string artifact;
  std::vector<std::string> inputs;
  std::string outputDir = ".";
  bool json = false;
  size_t printCount = 8;
  /// Timed iterations after warm-up; 0 runs once without timing.
  unsigned bench = 0;
  /// Threads for library kernels; 0: all cores.
  int threads = 0;
};

struct Latency {
  double medianMs = 0;
  double p90Ms = 0;
};

/// Median and p90 of `iterations` runs after three warm-up runs.
Expected<Latency> measure(runtime::Session &session,
                          const std::map<std::string, runtime::Tensor> &inputs,
                          unsigned iterations) {
  for (int i = 0; i < 3; ++i)
    FLOWC_RETURN_IF_ERROR(session.run(inputs).status());
  std::vector<double> samples;
  for (unsigned i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    FLOWC_RETURN_IF_ERROR(session.run(inputs).status());
    samples.push_back(std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count());
  }
  std::sort(samples.begin(), samples.end());
  return Latency{samples[samples.size() / 2], samples[(samples.size() * 9) / 10]};
}

/// Output names such as "/fc/Gemm_output_0" become safe file names.
std::string fileNameFor(const std::string &name) {
  std::string out;
  for (char c : name)
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'
               ? c
               : '_';
  while (!out.empty() && out.front() == '.')
    out.erase(out.begin());
  return out.empty() ? "output" : out;
}

Expected<std::map<std::string, runtime::Tensor>> readInputs(const RunOptions &options,
                                                            const runtime::Plan &plan) {
  std::map<std::string, runtime::Tensor> inputs;
  for (const std::string &spec : options.inputs) {
    size_t eq = spec.find('=');
    std::string name, path;
    if (eq == std::string::npos) {
      // A bare file names the only input.
      if (plan.inputs.size() != 1)
        return invalidArgument("--input '" + spec + "' has no NAME=; the model has " +
                               std::to_string(plan.inputs.size()) + " inputs");
      name = plan.inputs[0].name;
      path = spec;
    } else {
      name = spec.substr(0, eq);
      path = spec.substr(eq + 1);
    }
    FLOWC_ASSIGN_OR_RETURN(runtime::Tensor tensor, runtime::readNpy(path));
    inputs[name] = std::move(tensor);
  }
  return inputs;
}

int runRun(const RunOptions &options) {
  // What a user waits for before the first answer: open, session, run.
  auto start = std::chrono::steady_clock::now();
  auto artifact = runtime::Artifact::open(options.artifact);
  if (!artifact)
    return reportError(artifact.status());
  auto session = runtime::Session::create(*artifact, {options.threads});
  if (!session)
    return reportError(session.status());
  const runtime::Plan &plan = (*session)->plan();
  auto inputs = readInputs(options, plan);
  if (!inputs)
    return reportError(inputs.status());
  auto outputs = (*session)->run(*inputs);
  if (!outputs)
    return reportError(outputs.status().withContext("run '" + options.artifact + "'"));
  double firstRunMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();

  std::error_code ec;
  std::filesystem::create_directories(options.outputDir, ec);
  if (ec)
    return reportError(
        errnoStatus(ec.value(), "cannot create '" + options.outputDir + "'"));
  nlohmann::json json = {
      {"artifact", options.artifact},
      {"outputs", nlohmann::json::array()},
      {"first_run_ms", firstRunMs},
      {"packed_weights_in_place", (*session)->prepackedWeightsInUse()}};
  for (size_t i = 0; i < outputs->size(); ++i) {
    const runtime::Tensor &tensor = (*outputs)[i];
    const std::string &name = plan.outputs[i].name;
    std::string path = options.outputDir + "/" + fileNameFor(name) + ".npy";
    if (Status status = runtime::writeNpy(path, tensor); !status)
      return reportError(status);
    if (options.json) {
      json["outputs"].push_back(
          {{"name", name}, {"shape", tensor.shape}, {"file", path}});
      continue;
    }
    std::ostringstream line;
    line << name << " " << shapeString(tensor.shape) << " -> " << path << "\n  ";
    size_t count = static_cast<size_t>(tensor.elementCount());
    size_t shown = std::min(options.printCount, count);
    for (size_t k = 0; k < shown; ++k)
      line << std::setprecision(6) << tensor.element(k) << (k + 1 < shown ? " " : "");
    if (shown < count)
      line << " ... (" << count << " values)";
    std::cout << line.str() << std::endl;
  }
  if (options.bench) {
    auto latency = measure(**session, *inputs, options.bench);
    if (!latency)
      return reportError(
          latency.status().withContext("bench '" + options.artifact + "'"));
    json["iterations"] = options.bench;
    json["threads"] = options.threads;
    json["median_ms"] = latency->medianMs;
    json["p90_ms"] = latency->p90Ms;
    if (!options.json)
      std::cout << "latency over " << options.bench << " runs: median " << std::fixed
                << std::setprecision(3) << latency->medianMs << " ms, p90 "
                << latency->p90Ms << " ms" << std::endl;
  }
  if (options.json)
    printJson(json);
  return 0;
}

} // namespace

CommandRunner addRunCommand(CLI::App &app, GlobalOptions &) {
  auto options = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand("run", "Run an artifact on the CPU");
  cmd->add_option("artifact", options->artifact, "Artifact (.fca)")->required();
  cmd->add_option("-i,--input", options->inputs,
                  "NAME=FILE.npy (float32, int64, int32 or bool), once per input");
  cmd->add_option("--output-dir", options->outputDir, "Where OUTPUT_NAME.npy files go");
  cmd->add_option("--print", options->printCount, "Values printed per output");
  cmd->add_option("--bench", options->bench,
                  "Time N runs after 3 warm-up runs; print median and p90 latency")
      ->check(CLI::Range(1u, 1000000u));
  cmd->add_option("--threads", options->threads,
                  "Threads for convolutions and matrix products (default: all cores)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--json", options->json, "Print one JSON object");
  return [options] { return runRun(*options); };
}

} // namespace flowc::cli
