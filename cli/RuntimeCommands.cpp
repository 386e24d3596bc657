// libflowc-cli-runtime.so: flowc's commands that need the runtime (see
// RuntimeModule.h). Its calls into flowc itself (reportError, printJson,
// GlobalOptions) resolve against the executable, which exports them.
#include "RuntimeModule.h"
#include "RunProfile.h"

#include "flowc/cache/Cache.h"
#include "flowc/cache/Digest.h"
#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/BuildInfo.h"
#include "flowc/runtime/Session.h"
#include "flowc/runtime/Tuning.h"
#include "flowc/support/Environment.h"
#include "flowc/support/Concurrently.h"
#include "flowc/support/Format.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/Target.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <mutex>
#include <spdlog/spdlog.h>
#include <sstream>
#include <unistd.h>

namespace flowc::cli {

/// `flowc tuning` (TuningCommands.cpp).
int runTuning(const TuningCommandOptions &options, GlobalOptions &global);

namespace {

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

/// The session's profile after three warm-up runs and after `iterations`
/// more: their difference is the profile of those runs.
Expected<std::pair<runtime::RunProfile, runtime::RunProfile>>
profileRuns(runtime::Session &session,
            const std::map<std::string, runtime::Tensor> &inputs, unsigned iterations) {
  for (int i = 0; i < 3; ++i)
    FLOWC_RETURN_IF_ERROR(session.run(inputs).status());
  runtime::RunProfile before = session.profile();
  for (unsigned i = 0; i < iterations; ++i)
    FLOWC_RETURN_IF_ERROR(session.run(inputs).status());
  return std::make_pair(std::move(before), session.profile());
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
    if (name.empty())
      return invalidArgument("--input '" + spec + "' has an empty NAME");
    // Silently keeping one of two files would run on data the user did
    // not mean.
    if (inputs.count(name))
      return invalidArgument("--input '" + spec + "': input '" + name +
                             "' is given twice");
    FLOWC_ASSIGN_OR_RETURN(runtime::Tensor tensor, runtime::readNpy(path));
    inputs[name] = std::move(tensor);
  }
  return inputs;
}

/// The first `count` values of `tensor`, and "... (N values)" if there are more.
std::string leadingValues(const runtime::Tensor &tensor, size_t count) {
  std::ostringstream line;
  size_t total = static_cast<size_t>(tensor.elementCount());
  size_t shown = std::min(count, total);
  for (size_t k = 0; k < shown; ++k)
    line << std::setprecision(6) << tensor.element(k) << (k + 1 < shown ? " " : "");
  if (shown < total)
    line << " ... (" << total << " values)";
  return line.str();
}

/// Maps a thin artifact's weights from the first cache that holds them: the
/// user's (global options), then the one that linked the artifact.
runtime::ExternalWeightSource casWeights(GlobalOptions &global) {
  return [&global](const std::string &digest,
                   const nlohmann::json &metadata) -> Expected<MappedFile> {
    // The artifact is untrusted input: only a well-formed digest names a
    // file, and only inside a cache.
    auto parsed = cache::Digest::parse(digest);
    if (!parsed)
      return dataLoss("'" + digest + "' is not a weight digest");
    global.resolve();
    std::vector<std::string> cacheDirs = {global.cacheDir};
    if (auto recorded = metadata.find("weights_cache");
        recorded != metadata.end() && recorded->is_string() &&
        recorded->get<std::string>() != global.cacheDir)
      cacheDirs.push_back(recorded->get<std::string>());
    std::string looked;
    for (const std::string &dir : cacheDirs) {
      std::string file = cache::blobPathUnder(dir, *parsed);
      if (::access(file.c_str(), R_OK) == 0)
        return MappedFile::open(file);
      looked += (looked.empty() ? "" : ", ") + dir;
    }
    return notFound("weight " + digest + " is not in the cache (looked in " + looked +
                    "; evicted? submit the model again, or without --thin)");
  };
}

/// The cache's tuning records of GPU library kernels on the session's GPU
/// (docs/cuda.md): a CUDA session asks them for each convolution's and
/// product's candidate, and `flowc run` records what its trial runs timed.
/// Opened on the first question, so CPU code never touches the cache; a
/// cache that cannot be opened or written costs a warning, never the run.
class GpuRecords {
public:
  GpuRecords(std::string cacheDir, int ordinal)
      : cacheDir_(std::move(cacheDir)), ordinal_(ordinal) {}

  std::optional<std::string> candidate(const std::string &signature) {
    if (!open())
      return std::nullopt;
    auto best = cache_->bestTuning(signature, device_, versions_);
    if (!best) {
      spdlog::warn("tuning records of {} unread: {}", signature, best.status().message());
      return std::nullopt;
    }
    return *best ? std::optional<std::string>((*best)->candidate) : std::nullopt;
  }

  /// Records every candidate the first calls timed (trial runs, or the
  /// only candidate), in one transaction; how many were kept.
  unsigned record(const std::vector<runtime::GpuKernelChoice> &choices) {
    if (!open())
      return 0;
    int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    std::string host = hostName().value_or("unknown");
    std::vector<cache::TuningRecord> records;
    for (const runtime::GpuKernelChoice &choice : choices)
      for (const auto &[candidate, ms] : choice.timings) {
        if (candidate.empty() || !std::isfinite(ms) || ms <= 0)
          continue;
        cache::TuningRecord &record = records.emplace_back();
        record.signature = choice.signature;
        record.device = device_;
        record.versions = versions_;
        record.candidate = candidate;
        record.timeNs = std::max<int64_t>(1, std::llround(ms * 1e6));
        record.samples = runtime::kGpuTrialRuns;
        // Measured now: an import keeps a record only over an older one.
        record.measuredMs = now;
        record.host = host;
      }
    if (records.empty())
      return 0;
    auto imported = cache_->importTuning(records);
    if (!imported) {
      spdlog::warn("the GPU kernels' timings were not recorded: {}",
                   imported.status().message());
      return 0;
    }
    return static_cast<unsigned>(imported->imported);
  }

private:
  bool open() {
    if (tried_)
      return cache_ != nullptr;
    tried_ = true;
    auto device = runtime::localGpuTuningDevice(ordinal_);
    auto versions = runtime::gpuTuningVersions();
    auto cache = cache::Cache::open(cacheDir_, {});
    Status why = !device     ? device.status()
                 : !versions ? versions.status()
                             : cache.status();
    if (!why) {
      spdlog::warn("GPU tuning records unused: {}", why.message());
      return false;
    }
    device_ = *device;
    versions_ = *versions;
    cache_ = std::move(*cache);
    return true;
  }

  std::string cacheDir_;
  int ordinal_ = 0;
  bool tried_ = false;
  std::unique_ptr<cache::Cache> cache_;
  std::string device_, versions_;
};

/// How a CUDA session's convolutions and products were chosen: counts by
/// source, and the records kept.
nlohmann::json gpuChoicesJson(const std::vector<runtime::GpuKernelChoice> &choices,
                              unsigned recorded) {
  nlohmann::json json = {{"sites", choices.size()}, {"recorded", recorded}};
  for (auto source :
       {runtime::GpuKernelChoice::Source::Library,
        runtime::GpuKernelChoice::Source::Trials,
        runtime::GpuKernelChoice::Source::Record, runtime::GpuKernelChoice::Source::Plan})
    json[runtime::gpuChoiceSourceName(source)] = std::count_if(
        choices.begin(), choices.end(),
        [&](const runtime::GpuKernelChoice &c) { return c.source == source; });
  json["conv2d"] =
      std::count_if(choices.begin(), choices.end(),
                    [](const runtime::GpuKernelChoice &c) { return c.kind == "conv2d"; });
  json["fused_epilogues"] =
      std::count_if(choices.begin(), choices.end(),
                    [](const runtime::GpuKernelChoice &c) { return c.fusedEpilogue; });
  return json;
}

/// Opens an artifact, checked as `verification` says; a thin one's weights
/// are mapped from a cache (casWeights).
Expected<std::shared_ptr<runtime::Artifact>>
openArtifact(const std::string &path, GlobalOptions &global,
             runtime::Verification verification = runtime::Verification::Digests) {
  return runtime::Artifact::open(path, {verification, casWeights(global)});
}

/// Writes the outputs to --output-dir and lists them: into json["outputs"]
/// with --json, else on stdout.
Status emitOutputs(const RunOptions &options, const runtime::Plan &plan,
                   const std::vector<runtime::Tensor> &outputs, nlohmann::json &json) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const runtime::Tensor &tensor = outputs[i];
    const std::string &name = plan.outputs[i].name;
    std::string path;
    if (!options.outputDir.empty()) {
      path = options.outputDir + "/" + fileNameFor(name) + ".npy";
      FLOWC_RETURN_IF_ERROR(runtime::writeNpy(path, tensor));
    }
    if (options.json) {
      nlohmann::json output = {{"name", name}, {"shape", tensor.shape}};
      if (path.empty()) {
        output["values"] = nlohmann::json::array();
        for (size_t k = 0;
             k < std::min<size_t>(options.printCount, tensor.elementCount()); ++k)
          output["values"].push_back(tensor.element(k));
      } else {
        output["file"] = path;
      }
      json["outputs"].push_back(std::move(output));
      continue;
    }
    std::cout << name << " " << shapeString(tensor.shape)
              << (path.empty() ? "" : " -> " + path) << "\n  "
              << leadingValues(tensor, options.printCount) << std::endl;
  }
  return Status::ok();
}

/// The largest difference between two runs' outputs, element by element
/// (infinity where one is NaN and the other not).
double maxDifference(const std::vector<runtime::Tensor> &a,
                     const std::vector<runtime::Tensor> &b) {
  double largest = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    size_t count =
        static_cast<size_t>(std::min(a[i].elementCount(), b[i].elementCount()));
    for (size_t k = 0; k < count; ++k) {
      double x = a[i].element(k);
      double y = b[i].element(k);
      if (std::isnan(x) || std::isnan(y)) {
        if (std::isnan(x) != std::isnan(y))
          return std::numeric_limits<double>::infinity();
        continue;
      }
      largest = std::max(largest, std::fabs(x - y));
    }
  }
  return largest;
}

/// Calls `work(i)` for each i below `count`, all at once (the replicas'
/// devices run side by side), and returns their statuses in order.
std::vector<Status> onEachDevice(size_t count,
                                 const std::function<Status(size_t)> &work) {
  std::vector<Status> statuses(count, Status::ok());
  forEachConcurrently(count, count, [&](size_t i) { statuses[i] = work(i); });
  return statuses;
}

/// --gpu-devices' ordinals; `all`: every GPU of the artifact's compute
/// capability (its metadata's target), in the driver's order. Where that
/// cannot be told (CPU code, no GPU), device 0: the session then says why
/// in its own words.
Expected<std::vector<int>> replicaDevices(const std::vector<std::string> &given,
                                          const runtime::Artifact &artifact) {
  std::vector<int> devices;
  if (given != std::vector<std::string>{"all"}) {
    for (const std::string &ordinal : given)
      devices.push_back(std::stoi(ordinal)); // checked by the option's validator
    return devices;
  }
  const nlohmann::json &metadata = artifact.metadata();
  auto named = metadata.find("target");
  if (named == metadata.end() || !named->is_string())
    return std::vector<int>{0};
  Expected<Target> target = parseTarget(named->get<std::string>());
  if (!target || !isCudaTarget(*target))
    return std::vector<int>{0};
  int capability = cudaComputeCapability(*target);
  Expected<std::vector<std::string>> local = runtime::localGpuTuningDevices();
  if (!local)
    return std::vector<int>{0};
  for (size_t ordinal = 0; ordinal < local->size(); ++ordinal)
    if (runtime::isGpuTuningDeviceOf((*local)[ordinal], capability))
      devices.push_back(static_cast<int>(ordinal));
  if (devices.empty()) {
    std::string seen;
    for (const std::string &device : *local)
      seen += (seen.empty() ? "" : ", ") + std::string(runtime::gpuNameOf(device));
    return notFound("--gpu-devices all: no GPU of sm_" + std::to_string(capability) +
                    " here (the driver sees " + seen + ")");
  }
  return devices;
}

/// `flowc run --gpu-devices`: the artifact on each device (Session::createReplicas),
/// the inputs run on all of them, the first device's outputs printed and the
/// others' compared with them; --bench runs them all at once.
int runReplicas(const RunOptions &options, GlobalOptions &global,
                std::shared_ptr<runtime::Artifact> artifact,
                std::chrono::steady_clock::time_point start, double openMs) {
  auto devices = replicaDevices(options.gpuDevices, *artifact);
  if (!devices)
    return reportError(devices.status());
  runtime::SessionOptions sessionOptions;
  sessionOptions.threads = options.threads;
  sessionOptions.gpuTrials = options.gpuTrials;
  auto records = std::make_shared<GpuRecords>(global.cacheDir, devices->front());
  // Every replica runs the first one's choices: the trial runs happen once,
  // and each device runs the same kernels (its outputs are compared below).
  auto chosen = std::make_shared<std::map<std::string, std::string>>();
  auto recordsLock = std::make_shared<std::mutex>();
  bool useRecords = !options.noGpuRecords;
  sessionOptions.gpuRecord =
      [=](const std::string &signature) -> std::optional<std::string> {
    if (auto found = chosen->find(signature); found != chosen->end())
      return found->second;
    if (!useRecords)
      return std::nullopt;
    std::lock_guard<std::mutex> hold(*recordsLock);
    return records->candidate(signature);
  };
  auto replicas = runtime::Session::createReplicas(artifact, sessionOptions, *devices);
  if (!replicas)
    return reportError(replicas.status());
  std::vector<std::unique_ptr<runtime::Session>> &sessions = replicas->sessions;
  const runtime::Plan &plan = sessions[0]->plan();
  auto inputs = readInputs(options, plan);
  if (!inputs)
    return reportError(inputs.status());
  std::vector<std::vector<runtime::Tensor>> outputs(sessions.size());
  auto runOn = [&](size_t replica) -> Status {
    auto ran = sessions[replica]->run(*inputs);
    if (!ran)
      return ran.status().withContext("run '" + options.artifact + "' on GPU device " +
                                      std::to_string((*devices)[replica]));
    outputs[replica] = std::move(*ran);
    return Status::ok();
  };
  if (Status status = runOn(0); !status)
    return reportError(status);
  std::vector<runtime::GpuKernelChoice> choices = sessions[0]->gpuKernelChoices();
  for (const runtime::GpuKernelChoice &choice : choices)
    if (!choice.candidate.empty())
      (*chosen)[choice.signature] = choice.candidate;
  for (const Status &status :
       onEachDevice(sessions.size() - 1, [&](size_t i) { return runOn(i + 1); }))
    if (!status)
      return reportError(status);
  double firstRunMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();

  const runtime::ReplicaWeights &weights = replicas->weights;
  nlohmann::json json = {{"artifact", options.artifact},
                         {"outputs", nlohmann::json::array()},
                         {"first_run_ms", firstRunMs},
                         {"open_ms", openMs},
                         {"replicas", nlohmann::json::array()},
                         {"weights",
                          {{"method", weights.method},
                           {"bytes", weights.bytes},
                           {"ms", weights.seconds * 1e3},
                           {"setup_ms", weights.setupSeconds * 1e3}}}};
  unsigned recorded = options.noGpuRecords ? 0 : records->record(choices);
  if (!choices.empty())
    json["gpu_kernels"] = gpuChoicesJson(choices, recorded);
  for (size_t i = 0; i < sessions.size(); ++i)
    json["replicas"].push_back(
        {{"device", (*devices)[i]},
         {"max_abs_difference", maxDifference(outputs[0], outputs[i])}});
  if (Status status = emitOutputs(options, plan, outputs[0], json); !status)
    return reportError(status);
  if (!options.json) {
    std::ostringstream line;
    line << std::fixed << std::setprecision(1) << "replicas on " << sessions.size()
         << " GPUs; weights " << static_cast<double>(weights.bytes) / (1 << 20)
         << " MiB each";
    if (!weights.method.empty())
      line << ", to the others by " << weights.method << " in " << weights.seconds * 1e3
           << " ms (and " << weights.setupSeconds * 1e3 << " ms to set it up)";
    std::cout << line.str() << std::endl;
    for (size_t i = 1; i < sessions.size(); ++i)
      std::cout << "  device " << (*devices)[i] << ": outputs differ from device "
                << (*devices)[0] << "'s by at most "
                << json["replicas"][i]["max_abs_difference"].get<double>() << std::endl;
  }
  if (options.bench) {
    std::vector<Latency> latencies(sessions.size());
    auto benchStart = std::chrono::steady_clock::now();
    for (const Status &status : onEachDevice(sessions.size(), [&](size_t i) -> Status {
           FLOWC_ASSIGN_OR_RETURN(latencies[i],
                                  measure(*sessions[i], *inputs, options.bench));
           return Status::ok();
         }))
      if (!status)
        return reportError(status.withContext("bench '" + options.artifact + "'"));
    double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - benchStart)
            .count();
    // Warm-up runs included: they ran alongside the others' timed ones.
    double runs = static_cast<double>(sessions.size()) * (options.bench + 3);
    json["iterations"] = options.bench;
    json["runs_per_second"] = runs / wall;
    for (size_t i = 0; i < sessions.size(); ++i) {
      json["replicas"][i]["median_ms"] = latencies[i].medianMs;
      json["replicas"][i]["p90_ms"] = latencies[i].p90Ms;
      if (!options.json)
        std::cout << "device " << (*devices)[i] << ": latency over " << options.bench
                  << " runs: median " << std::fixed << std::setprecision(3)
                  << latencies[i].medianMs << " ms, p90 " << latencies[i].p90Ms << " ms"
                  << std::endl;
    }
    if (!options.json)
      std::cout << "all devices together: " << std::fixed << std::setprecision(1)
                << runs / wall << " runs/s" << std::endl;
  }
  if (options.json)
    printJson(json);
  return 0;
}

int runRun(const RunOptions &options, GlobalOptions &global) {
  // What a user waits for before the first answer: open, session, run.
  auto start = std::chrono::steady_clock::now();
  // A directory that cannot be made fails before any work.
  if (!options.outputDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.outputDir, ec);
    if (ec)
      return reportError(invalidArgument("cannot create --output-dir '" +
                                         options.outputDir + "': " + ec.message()));
  }
  auto openStart = std::chrono::steady_clock::now();
  auto artifact = openArtifact(options.artifact, global,
                               options.noVerify ? runtime::Verification::BoundsOnly
                                                : runtime::Verification::Digests);
  if (!artifact)
    return reportError(artifact.status());
  // Open alone: what verification costs (bench/verify_bench.py).
  double openMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - openStart)
                      .count();
  if (!options.gpuDevices.empty())
    return runReplicas(options, global, *artifact, start, openMs);
  runtime::SessionOptions sessionOptions;
  sessionOptions.threads = options.threads;
  sessionOptions.profile = options.profile;
  sessionOptions.gpuTrials = options.gpuTrials;
  sessionOptions.gpuDevice = options.gpuDevice;
  auto records = std::make_shared<GpuRecords>(global.cacheDir, options.gpuDevice);
  if (!options.noGpuRecords)
    sessionOptions.gpuRecord = [records](const std::string &signature) {
      return records->candidate(signature);
    };
  auto session = runtime::Session::create(*artifact, sessionOptions);
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

  nlohmann::json json = {
      {"artifact", options.artifact},
      {"outputs", nlohmann::json::array()},
      {"first_run_ms", firstRunMs},
      {"open_ms", openMs},
      {"packed_weights_in_place", (*session)->prepackedWeightsInUse()}};
  if (std::vector<runtime::GpuKernelChoice> choices = (*session)->gpuKernelChoices();
      !choices.empty()) {
    unsigned recorded = options.noGpuRecords ? 0 : records->record(choices);
    json["gpu_kernels"] = gpuChoicesJson(choices, recorded);
    if (!options.json)
      std::cout << "GPU library kernels: " << json["gpu_kernels"]["sites"] << " sites; "
                << json["gpu_kernels"]["trials"] << " by trial runs (" << recorded
                << " timings recorded), " << json["gpu_kernels"]["record"]
                << " from tuning records, " << json["gpu_kernels"]["plan"]
                << " from the plan, " << json["gpu_kernels"]["library"]
                << " the library's first; " << json["gpu_kernels"]["fused_epilogues"]
                << " of " << json["gpu_kernels"]["conv2d"]
                << " convolutions with the epilogue in cuDNN's graph" << std::endl;
  }
  if (Status status = emitOutputs(options, plan, *outputs, json); !status)
    return reportError(status);
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
  if (options.profile) {
    auto profile = profileRuns(**session, *inputs, options.bench ? options.bench : 10);
    if (!profile)
      return reportError(
          profile.status().withContext("profile '" + options.artifact + "'"));
    json["profile"] = profileJson(profile->first, profile->second,
                                  (*artifact)->metadata(), plan, options.threads);
    if (!options.json)
      printProfile(json["profile"], options.profileTop, std::cout);
  }
  if (options.json)
    printJson(json);
  return 0;
}

/// min, max, mean (over the values that are not NaN), the NaN count and the
/// first `count` values of `tensor`.
nlohmann::json outputSummary(const std::string &name, const runtime::Tensor &tensor,
                             size_t count) {
  size_t total = static_cast<size_t>(tensor.elementCount());
  double low = 0, high = 0, sum = 0;
  size_t numbers = 0, nans = 0;
  nlohmann::json values = nlohmann::json::array();
  for (size_t k = 0; k < total; ++k) {
    double value = tensor.element(k);
    if (k < count)
      values.push_back(value); // a NaN becomes null in JSON
    if (std::isnan(value)) {
      ++nans;
      continue;
    }
    low = numbers == 0 ? value : std::min(low, value);
    high = numbers == 0 ? value : std::max(high, value);
    sum += value;
    ++numbers;
  }
  nlohmann::json summary = {{"name", name},          {"shape", tensor.shape},
                            {"dtype", tensor.dtype}, {"elements", total},
                            {"nan", nans},           {"values", std::move(values)}};
  summary["min"] = numbers ? nlohmann::json(low) : nlohmann::json(nullptr);
  summary["max"] = numbers ? nlohmann::json(high) : nlohmann::json(nullptr);
  summary["mean"] = numbers ? nlohmann::json(sum / static_cast<double>(numbers))
                            : nlohmann::json(nullptr);
  return summary;
}

Expected<nlohmann::json> runSummary(const RunOptions &options, GlobalOptions &global) {
  auto start = std::chrono::steady_clock::now();
  FLOWC_ASSIGN_OR_RETURN(auto artifact, openArtifact(options.artifact, global));
  runtime::SessionOptions sessionOptions;
  sessionOptions.threads = options.threads;
  FLOWC_ASSIGN_OR_RETURN(auto session,
                         runtime::Session::create(std::move(artifact), sessionOptions));
  FLOWC_ASSIGN_OR_RETURN(auto inputs, readInputs(options, session->plan()));
  auto outputs = session->run(inputs);
  if (!outputs)
    return outputs.status().withContext("run '" + options.artifact + "'");
  double firstRunMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
  // Three runs after the first: the steady latency, cheap enough to follow
  // every save.
  std::vector<double> samples;
  for (int i = 0; i < 3; ++i) {
    auto runStart = std::chrono::steady_clock::now();
    auto again = session->run(inputs);
    if (!again)
      return again.status().withContext("run '" + options.artifact + "'");
    samples.push_back(std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - runStart)
                          .count());
  }
  std::sort(samples.begin(), samples.end());
  nlohmann::json json = {{"outputs", nlohmann::json::array()},
                         {"first_run_ms", firstRunMs},
                         {"latency_ms", samples[samples.size() / 2]}};
  for (size_t i = 0; i < outputs->size(); ++i)
    json["outputs"].push_back(outputSummary(session->plan().outputs[i].name,
                                            (*outputs)[i], options.printCount));
  return json;
}

nlohmann::json specJson(const runtime::TensorSpec &spec) {
  return {{"name", spec.name}, {"dtype", spec.dtype}, {"shape", spec.shape}};
}

Expected<nlohmann::json> describeArtifact(const std::string &path,
                                          GlobalOptions &global) {
  FLOWC_ASSIGN_OR_RETURN(auto artifact, openArtifact(path, global));
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
  // A thin artifact's weights stay in the cache that linked it.
  json["thin"] = artifact->isThin();
  uint64_t external = 0;
  for (const runtime::WeightSpec &weight : plan.weights)
    external += weight.external ? weight.size : 0;
  for (const runtime::PackedWeightSpec &weight : plan.packed)
    external += weight.external ? weight.size : 0;
  json["external_weight_bytes"] = external;
  uint64_t derived = 0, derivedBytes = 0;
  for (const runtime::WeightSpec &weight : plan.weights)
    if (weight.tensor.name.rfind(runtime::kDerivedWeightPrefix, 0) == 0) {
      ++derived;
      derivedBytes += weight.size;
    }
  json["derived_weights"] = derived;
  json["derived_weight_bytes"] = derivedBytes;
  uint64_t packedBytes = 0;
  for (const runtime::PackedWeightSpec &weight : artifact->plan().packed)
    packedBytes += weight.size;
  json["packed_weights"] = artifact->plan().packed.size();
  json["packed_weight_bytes"] = packedBytes;
  json["code_bytes"] = artifact->section(runtime::SectionKind::Code).size();
  json["ir_bytes"] = artifact->section(runtime::SectionKind::GraphIr).size();
  // The memory plan and kernel table live in the code: loading it (no run)
  // reads them. Code built for another host is described without them.
  auto session = runtime::Session::create(std::move(artifact));
  if (!session) {
    json["code_error"] = session.status().message();
    return json;
  }
  json["arena_bytes"] = (*session)->arenaBytes();
  json["library_kernels"] = (*session)->libraryKernelSites();
  return json;
}

std::string versionText(const std::string &program) {
  return runtime::versionText(program);
}

} // namespace

} // namespace flowc::cli

extern "C" __attribute__((visibility("default"))) const flowc::cli::RuntimeModule *
flowcCliRuntimeModule() {
  static const flowc::cli::RuntimeModule module = {
      flowc::cli::runRun, flowc::cli::describeArtifact, flowc::cli::versionText,
      flowc::cli::runSummary, flowc::cli::runTuning};
  return &module;
}
