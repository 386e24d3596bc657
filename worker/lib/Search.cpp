#include "flowc/worker/Search.h"

#include "ActionKeys.h"

#include "flowc/runtime/Tuning.h"
#include "flowc/support/Concurrently.h"
#include "flowc/support/Environment.h"
#include "flowc/support/MachineLock.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/Sha256.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fcntl.h>
#include <sched.h>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

namespace flowc::worker {

namespace {

using nlohmann::json;

constexpr const char *kMeasureFormat = "flowc.measure.v1";
/// A GPU measure task's trial runs: the libraries' candidates timed, twice
/// what a session times by default.
constexpr int kGpuMeasureTrials = 16;
/// How long a GPU measure task waits for a remote worker offering its GPU
/// under `--search-budget exhaustive` (a budget in seconds is its own wait).
constexpr double kExhaustiveGpuWaitSeconds = 600;

/// The kernels of one signature: one search for all of them.
struct Tunable {
  std::string signature;
  /// The machine its records describe: this CPU (deviceDescriptor), or for
  /// a CUDA library kernel the GPU (gpuTuningDeviceFor).
  std::string device;
  std::string versions;
  bool library = false;
  /// A CUDA library kernel: its candidates are the libraries' own, listed
  /// and timed on the GPU (sessions' trial runs, or a measure task on a
  /// machine with that GPU), so `candidates` stays empty here.
  bool gpu = false;
  /// A library kernel's kind and params.
  int64_t kind = 0;
  std::vector<int64_t> params;
  /// A loop kernel's plan index (the first of its signature).
  size_t kernel = 0;
  std::vector<std::string> candidates;
  /// Library sites, or loop kernels' plan indices, of this signature.
  std::vector<int64_t> sites;
  std::vector<size_t> kernels;
  std::optional<cache::TuningRecord> record;
};

std::string libraryVersions() {
  return runtime::libraryVersions() + "; kernel abi " +
         std::to_string(runtime::kKernelAbiVersion);
}

std::string loopVersions() {
  return std::string("llvm ") + FLOWC_LLVM_VERSION + "; flowc " + FLOWC_VERSION;
}

std::string librarySignature(const compiler::LibrarySite &site) {
  return runtime::librarySignature(static_cast<runtime::KernelKind>(site.kind),
                                   site.params);
}

std::string loopSignature(const compiler::PlannedKernel &kernel) {
  return "loop:" + sha256Hex(sha256Of(kernel.key));
}

/// The CUDA library kernels of the plan, one entry per signature, with the
/// records of `device`; none when this machine lacks cuDNN and cuBLASLt
/// (the records' versions are theirs).
std::vector<Tunable> gpuTunablesOf(const compiler::CompilePlan &plan,
                                   const std::string &device) {
  Expected<std::string> versions = runtime::gpuTuningVersions();
  if (!versions) {
    spdlog::info("GPU tuning records unused: {}", versions.status().message());
    return {};
  }
  std::vector<Tunable> tunables;
  std::map<std::string, size_t> bySignature;
  for (const compiler::LibrarySite &site : plan.weights.librarySites) {
    auto kind = static_cast<runtime::KernelKind>(site.kind);
    if (kind != runtime::KernelKind::Conv2d && kind != runtime::KernelKind::MatMul)
      continue;
    auto [found, added] = bySignature.emplace(librarySignature(site), tunables.size());
    if (!added) {
      tunables[found->second].sites.push_back(site.site);
      continue;
    }
    Tunable &tunable = tunables.emplace_back();
    tunable.signature = found->first;
    tunable.device = device;
    tunable.versions = *versions;
    tunable.library = tunable.gpu = true;
    tunable.kind = site.kind;
    tunable.params = site.params;
    tunable.sites.push_back(site.site);
  }
  return tunables;
}

/// Every tunable kernel of the plan, one entry per signature.
Expected<std::vector<Tunable>> tunablesOf(cache::Cache &cache,
                                          const compiler::CompilePlan &plan,
                                          const compiler::CompileOptions &options,
                                          const std::vector<std::string> &remoteGpus) {
  if (isCudaTarget(options.target)) {
    FLOWC_ASSIGN_OR_RETURN(std::optional<std::string> device,
                           gpuTuningDeviceFor(cache, options.target, remoteGpus));
    return device ? gpuTunablesOf(plan, *device) : std::vector<Tunable>();
  }
  std::vector<Tunable> tunables;
  std::map<std::string, size_t> bySignature;
  auto entry = [&](std::string signature, std::string versions) -> Tunable * {
    auto [found, added] = bySignature.emplace(signature, tunables.size());
    if (!added)
      return &tunables[found->second];
    Tunable &tunable = tunables.emplace_back();
    tunable.signature = std::move(signature);
    tunable.device = deviceDescriptor();
    tunable.versions = std::move(versions);
    return nullptr;
  };
  for (const compiler::LibrarySite &site : plan.weights.librarySites) {
    auto kind = static_cast<runtime::KernelKind>(site.kind);
    if (!runtime::isTunable(kind))
      continue;
    if (Tunable *same = entry(librarySignature(site), libraryVersions())) {
      same->sites.push_back(site.site);
      continue;
    }
    Tunable &tunable = tunables.back();
    FLOWC_ASSIGN_OR_RETURN(tunable.candidates,
                           runtime::libraryCandidates(kind, site.params));
    tunable.library = true;
    tunable.kind = site.kind;
    tunable.params = site.params;
    tunable.sites.push_back(site.site);
  }
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    std::vector<std::string> candidates =
        compiler::loopKernelCandidates(plan.kernels[i], options);
    if (candidates.size() < 2)
      continue;
    if (Tunable *same = entry(loopSignature(plan.kernels[i]), loopVersions())) {
      same->kernels.push_back(i);
      continue;
    }
    Tunable &tunable = tunables.back();
    tunable.candidates = std::move(candidates);
    tunable.kernel = i;
    tunable.kernels.push_back(i);
  }
  // A kind with one way to run it has nothing to choose.
  std::erase_if(tunables, [](const Tunable &t) { return t.candidates.size() < 2; });
  return tunables;
}

/// Whether `device` (a GPU tuning device) is one of this machine's GPUs.
bool isLocalGpu(const std::string &device) {
  return runtime::localGpuOrdinal(device).has_value();
}

bool isCandidate(const Tunable &tunable, const std::string &candidate) {
  if (tunable.gpu)
    return runtime::isGpuCandidateOf(static_cast<runtime::KernelKind>(tunable.kind),
                                     candidate);
  return std::find(tunable.candidates.begin(), tunable.candidates.end(), candidate) !=
         tunable.candidates.end();
}

/// Where a signature's records live in the remote tier: an entry of their
/// own, keyed by what they describe (no build: a record outlives one).
cache::Digest remoteKey(const Tunable &tunable) {
  return ActionKey("flowc.tuning.v1", "")
      .add(tunable.signature)
      .add(tunable.device)
      .add(tunable.versions)
      .digest();
}

/// The remote tier's records of `tunable`, merged into `cache` (a record
/// replaces one of the same candidate only if measured later); the digest
/// of the tier's document, if it has one. An error when the tier has a
/// document that could not be read or merged: publishing this cache's
/// records then would replace others' records with them.
Expected<std::optional<cache::Digest>>
importRemote(cache::Cache &cache, RemoteTier &remote, const Tunable &tunable) {
  std::optional<cache::Digest> found =
      remote.fetch(cache::ActionKind::DerivedWeight, remoteKey(tunable));
  if (!found)
    return std::optional<cache::Digest>();
  auto blob = cache.get(*found);
  auto imported = blob ? cache.importTuning(blob->bytes())
                       : Expected<cache::TuningImport>(blob.status());
  if (!imported)
    return Status(imported.status().code(),
                  "the remote tier's tuning records of " + tunable.signature +
                      " were not imported: " + imported.status().message());
  return found;
}

/// This cache's records of `tunable` as the remote tier keeps them: an
/// export of them alone (the same bytes on every machine holding them).
Expected<json> recordsDocument(cache::Cache &cache, const Tunable &tunable) {
  FLOWC_ASSIGN_OR_RETURN(std::string exported,
                         cache.exportTuning(tunable.device, tunable.signature));
  json document = json::parse(exported, nullptr, /*allow_exceptions=*/false);
  if (!document.is_object() || !document.contains("records"))
    return dataLoss("the tuning export of " + tunable.signature + " is not a document");
  json mine = json::array();
  for (const json &record : document["records"])
    if (record.value("versions", "") == tunable.versions)
      mine.push_back(record);
  document["records"] = std::move(mine);
  return document;
}

/// Whether a record of `document` was measured on this machine: a session
/// here, which the farm has not seen unless it was published.
bool measuredHere(const json &document) {
  std::optional<std::string> host = hostName();
  if (!host)
    return false;
  return std::any_of(
      document["records"].begin(), document["records"].end(),
      [&](const json &record) { return record.value("host", "") == *host; });
}

/// Publishes this cache's records of `tunable`, unless the tier's document
/// (`theirs`) already holds exactly them.
void publishRemote(cache::Cache &cache, RemoteTier &remote, const Tunable &tunable,
                   const json &document,
                   std::optional<cache::Digest> theirs = std::nullopt) {
  std::string bytes = document.dump();
  if (theirs && *theirs == cache::digestOf(bytes))
    return;
  auto blob = cache.put(bytes);
  if (!blob ||
      !cache.recordAction(cache::ActionKind::DerivedWeight, remoteKey(tunable), *blob))
    return;
  remote.publish(cache::ActionKind::DerivedWeight, remoteKey(tunable),
                 TierEntry::of(*blob));
}

/// Shares `tunable`'s records with the remote tier both ways: the tier's
/// are merged in, and what this cache holds beyond them goes back. Only
/// for GPU kernels with records measured here: sessions' trial runs become
/// records without a search that would publish them.
void syncRemote(cache::Cache &cache, RemoteTier &remote, const Tunable &tunable) {
  auto mine = recordsDocument(cache, tunable);
  if (!mine || !measuredHere(*mine))
    return;
  auto theirs = importRemote(cache, remote, tunable);
  if (!theirs) {
    spdlog::warn("{}; this cache's records of it are not published",
                 theirs.status().message());
    return;
  }
  if (*theirs)
    mine = recordsDocument(cache, tunable);
  if (mine)
    publishRemote(cache, remote, tunable, *mine, *theirs);
}

/// The tunables the remote tier has a part in: each without a record here
/// (the tier's are imported), and each GPU one with records (shared both
/// ways: syncRemote).
std::vector<Tunable *> sharedWithRemote(std::vector<Tunable> &tunables) {
  std::vector<Tunable *> shared;
  for (Tunable &tunable : tunables)
    if (!tunable.record || tunable.gpu)
      shared.push_back(&tunable);
  return shared;
}

/// The remote tier's part for each of `shared`, several at a time: each
/// has keys of its own (one tunable per signature), and the tier and the
/// cache take calls from any thread.
void shareWithRemote(cache::Cache &cache, RemoteTier &remote,
                     const std::vector<Tunable *> &shared) {
  forEachConcurrently(shared.size(), kRemoteLookupsInFlight, [&](size_t i) {
    const Tunable &tunable = *shared[i];
    if (tunable.record)
      syncRemote(cache, remote, tunable);
    else if (auto imported = importRemote(cache, remote, tunable); !imported)
      spdlog::warn("{}", imported.status().message());
  });
}

/// The best record of `tunable` on this device, if it names one of today's
/// candidates (a record from another library build may not).
Expected<std::optional<cache::TuningRecord>> recordOf(cache::Cache &cache,
                                                      const Tunable &tunable) {
  FLOWC_ASSIGN_OR_RETURN(
      auto best, cache.bestTuning(tunable.signature, tunable.device, tunable.versions));
  if (best && !isCandidate(tunable, best->candidate)) {
    spdlog::warn("tuning record for {} names '{}', which is not a candidate here; "
                 "using the default",
                 tunable.signature, best->candidate);
    return std::optional<cache::TuningRecord>();
  }
  return best;
}

/// A measure task's budget: the compile's seconds shared by candidates
/// (measurements take turns on the machine, so they add up).
MeasureOptions measureOptions(const SearchBudget &budget, size_t candidates,
                              size_t totalCandidates) {
  MeasureOptions options;
  if (budget.mode == SearchBudget::Mode::Seconds) {
    options.budgetSeconds =
        std::max(1e-3, budget.seconds * static_cast<double>(candidates) /
                           static_cast<double>(std::max<size_t>(1, totalCandidates)));
    options.maxRounds = 100;
  }
  return options;
}

json measureJson(const Tunable &tunable, const MeasureOptions &options) {
  if (tunable.gpu)
    return {{"device", tunable.device},
            {"gpu", true},
            {"signature", tunable.signature},
            {"trials", kGpuMeasureTrials},
            {"versions", tunable.versions},
            {"library", {{"kind", tunable.kind}, {"params", tunable.params}}}};
  json measure = {{"device", deviceDescriptor()},
                  {"signature", tunable.signature},
                  {"candidates", tunable.candidates},
                  {"budget_seconds", options.budgetSeconds},
                  {"max_rounds", options.maxRounds}};
  if (tunable.library)
    measure["library"] = {{"kind", tunable.kind}, {"params", tunable.params}};
  return measure;
}

/// The records a measure task's output describes, one per candidate timed;
/// sets `budgetEnded` when the budget ended the measurement.
Expected<std::vector<cache::TuningRecord>>
recordsFrom(const Tunable &tunable, std::string_view output, bool &budgetEnded) {
  json parsed = json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || parsed.value("format", "") != kMeasureFormat)
    return dataLoss("a measure task's output is not a measurement (" +
                    std::string(kMeasureFormat) + ")");
  std::vector<cache::TuningRecord> records;
  try {
    if (parsed.at("device").get<std::string>() != tunable.device)
      return dataLoss("a measure task's output describes another device");
    if (parsed.at("budget_ended").get<bool>())
      budgetEnded = true;
    for (const json &timing : parsed.at("timings")) {
      cache::TuningRecord record;
      record.signature = tunable.signature;
      record.device = tunable.device;
      record.versions = tunable.versions;
      record.candidate = timing.at("candidate").get<std::string>();
      record.timeNs = timing.at("median_ns").get<int64_t>();
      record.spreadNs =
          (timing.at("high_ns").get<int64_t>() - timing.at("low_ns").get<int64_t>()) / 2;
      record.samples = timing.at("samples").get<int64_t>();
      record.separated = parsed.at("separated").get<bool>();
      record.noise = parsed.at("noise").get<double>();
      record.measuredMs = parsed.at("measured_ms").get<int64_t>();
      record.host = parsed.at("host").get<std::string>();
      // Left out: a candidate that was not timed (it disagreed with the
      // default's result, or the budget ended first).
      if (record.samples > 0 && record.timeNs > 0 &&
          isCandidate(tunable, record.candidate))
        records.push_back(std::move(record));
    }
  } catch (const json::exception &e) {
    return dataLoss(std::string("a measure task's output is damaged: ") + e.what());
  }
  return records;
}

runtime::TunedKernelSpec specOf(const cache::TuningRecord &record) {
  runtime::TunedKernelSpec spec;
  spec.signature = record.signature;
  spec.candidate = record.candidate;
  spec.timeNs = record.timeNs;
  spec.spreadNs = record.spreadNs;
  spec.host = record.host;
  spec.measuredMs = record.measuredMs;
  return spec;
}

SearchChoices choicesOf(const std::vector<Tunable> &tunables,
                        const compiler::CompilePlan &plan) {
  SearchChoices choices;
  choices.loopCandidates.assign(plan.kernels.size(), "");
  choices.summary.tunableKernels = static_cast<unsigned>(tunables.size());
  for (const Tunable &tunable : tunables) {
    if (!tunable.record)
      continue;
    ++choices.summary.tunedKernels;
    runtime::TunedKernelSpec spec = specOf(*tunable.record);
    // (GPU kernels list no candidates here: their libraries do, on the GPU.)
    bool isDefault = !tunable.candidates.empty() &&
                     tunable.record->candidate == tunable.candidates.front();
    for (int64_t site : tunable.sites) {
      spec.site = site;
      choices.tuned.push_back(spec);
    }
    spec.site = -1;
    for (size_t kernel : tunable.kernels) {
      // The default lowers as no candidate does: its object is shared with
      // compiles that had no record.
      choices.loopCandidates[kernel] = isDefault ? "" : tunable.record->candidate;
      spec.kernel = plan.kernels[kernel].symbol;
      choices.tuned.push_back(spec);
    }
  }
  std::sort(choices.tuned.begin(), choices.tuned.end(),
            [](const runtime::TunedKernelSpec &a, const runtime::TunedKernelSpec &b) {
              return std::tie(a.site, a.kernel) < std::tie(b.site, b.kernel);
            });
  return choices;
}

/// Restores the calling thread's CPU affinity on scope exit: a worker
/// process runs other tasks after a measurement, whose threads (spawned
/// from this one) must not all inherit its one pinned core.
class AffinityRestorer {
public:
  AffinityRestorer() { saved_ = ::sched_getaffinity(0, sizeof mask_, &mask_) == 0; }
  AffinityRestorer(const AffinityRestorer &) = delete;
  AffinityRestorer &operator=(const AffinityRestorer &) = delete;
  ~AffinityRestorer() {
    if (saved_)
      ::sched_setaffinity(0, sizeof mask_, &mask_);
  }

private:
  cpu_set_t mask_{};
  bool saved_ = false;
};

/// A hook for the tests of measure tasks whose worker dies: the first task
/// that finds no file at this path creates it and crashes.
void crashOnceForTests() {
  const char *marker = std::getenv("FLOWC_WORKER_TEST_CRASH_MEASURE");
  if (!marker || !*marker)
    return;
  int fd = ::open(marker, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0)
    return;
  ::close(fd);
  std::raise(SIGSEGV);
}

/// A measure task's output: `measured` on `device`, as recordsFrom reads
/// it.
Status writeMeasurement(const std::string &device, const Measurement &measured,
                        const std::string &path) {
  json timings = json::array();
  for (const CandidateTiming &timing : measured.timings)
    timings.push_back({{"candidate", timing.candidate},
                       {"median_ns", timing.medianNs},
                       {"low_ns", timing.lowNs},
                       {"high_ns", timing.highNs},
                       {"samples", timing.samples}});
  json output = {
      {"format", kMeasureFormat},
      {"device", device},
      {"host", hostName().value_or("unknown")},
      {"measured_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()},
      {"timings", timings},
      {"best", measured.timings.empty() ? "" : measured.timings[measured.best].candidate},
      {"separated", measured.separated},
      {"budget_ended", measured.budgetEnded},
      {"noise", measured.noise()},
      {"rounds", measured.rounds},
      {"seconds", measured.seconds}};
  return writeFileAtomically(path, output.dump(1));
}

/// A GPU measure task (measure["gpu"]): the kernel's trial runs on this
/// machine's GPU and libraries, which must be the records' device and
/// versions: the compiling machine files the timings under them.
Status runGpuMeasureTask(const json &measure, const std::string &path) {
  std::string device;
  std::string versions;
  runtime::KernelKind kind{};
  std::vector<int64_t> params;
  int trials = 0;
  try {
    device = measure.at("device").get<std::string>();
    versions = measure.at("versions").get<std::string>();
    kind =
        static_cast<runtime::KernelKind>(measure.at("library").at("kind").get<int64_t>());
    params = measure.at("library").at("params").get<std::vector<int64_t>>();
    trials = measure.at("trials").get<int>();
  } catch (const json::exception &e) {
    return invalidArgument(std::string("a GPU measure task: ") + e.what());
  }
  if (trials < 2 || trials > 64)
    return invalidArgument("a GPU measure task times 2 to 64 candidates, not " +
                           std::to_string(trials));
  Expected<std::string> libraries = runtime::gpuTuningVersions();
  if (!libraries || *libraries != versions)
    return failedPrecondition(
        "a measure task for the libraries '" + versions + "' reached a machine with " +
        (libraries ? "'" + *libraries + "'"
                   : "none (" + libraries.status().message() + ")") +
        ": a measurement is only taken with the libraries it describes");
  // The first of this machine's devices that is the task's GPU.
  std::optional<int> ordinal = runtime::localGpuOrdinal(device);
  if (!ordinal) {
    Expected<std::vector<std::string>> local = runtime::localGpuTuningDevices();
    std::string gpus;
    for (const std::string &gpu : local ? *local : std::vector<std::string>())
      gpus += (gpus.empty() ? "'" : ", '") + gpu + "'";
    return failedPrecondition(
        "a measure task for the GPU '" + device + "' reached a machine with " +
        (local ? "the GPUs " + gpus : "no GPU (" + local.status().message() + ")") +
        ": a measurement is only taken on the device it describes");
  }
  // Nothing else times on the machine meanwhile (sessions do not ask).
  ExclusiveMachineLock lock(machineLockPath());
  auto start = std::chrono::steady_clock::now();
  FLOWC_ASSIGN_OR_RETURN(
      runtime::GpuKernelChoice choice,
      runtime::measureGpuLibraryKernel(kind, params, trials, *ordinal));
  Measurement measured;
  measured.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measured.rounds = runtime::kGpuTrialRuns;
  for (const auto &[candidate, ms] : choice.timings) {
    if (candidate.empty() || !std::isfinite(ms) || ms <= 0)
      continue;
    int64_t ns = std::max<int64_t>(1, std::llround(ms * 1e6));
    if (measured.timings.empty() || ns < measured.timings[measured.best].medianNs)
      measured.best = measured.timings.size();
    measured.timings.push_back({candidate, ns, ns, ns, runtime::kGpuTrialRuns});
  }
  return writeMeasurement(device, measured, path);
}

} // namespace

bool isGpuMeasure(const json &measure) {
  return measure.is_object() && measure.contains("gpu") && measure["gpu"].is_boolean() &&
         measure["gpu"].get<bool>();
}

Expected<std::optional<std::string>>
gpuTuningDeviceFor(cache::Cache &cache, Target target,
                   const std::vector<std::string> &remoteGpus) {
  int64_t capability = cudaComputeCapability(target);
  // This machine's first device of the capability.
  if (Expected<std::vector<std::string>> local = runtime::localGpuTuningDevices())
    for (const std::string &device : *local)
      if (runtime::isGpuTuningDeviceOf(device, capability))
        return std::optional<std::string>(device);
  for (const std::string &remote : remoteGpus)
    if (runtime::isGpuTuningDeviceOf(remote, capability))
      return std::optional<std::string>(remote);
  FLOWC_ASSIGN_OR_RETURN(std::vector<std::string> devices,
                         cache.tuningDevices(runtime::kGpuTuningDevicePrefix));
  std::erase_if(devices, [&](const std::string &device) {
    return !runtime::isGpuTuningDeviceOf(device, capability);
  });
  // Usually one: then no record is read (every hit of a cuda compile asks).
  std::optional<std::string> latest;
  int64_t latestMs = 0;
  for (const std::string &device : devices) {
    int64_t measuredMs = 0;
    if (devices.size() > 1) {
      FLOWC_ASSIGN_OR_RETURN(measuredMs, cache.latestTuning(device));
    }
    if (!latest || measuredMs > latestMs) {
      latest = device;
      latestMs = measuredMs;
    }
  }
  return latest;
}

const std::string &deviceDescriptor() {
  static const std::string descriptor =
      compiler::CodeTarget::host().description() +
      "; cores=" + std::to_string(std::max(1u, std::thread::hardware_concurrency()));
  return descriptor;
}

Expected<SearchChoices>
searchKernels(cache::Cache &cache, RemoteTier *remote, TaskRunner &runner,
              const compiler::CompilePlan &plan, const compiler::CompileOptions &options,
              const SearchBudget &budget, const RemoteGpus &remoteGpus,
              const std::string &buildId,
              const std::function<void(const std::string &)> &warn) {
  FLOWC_ASSIGN_OR_RETURN(std::vector<Tunable> tunables,
                         tunablesOf(cache, plan, options, remoteGpus.devices));
  auto offersRemotely = [&](const std::string &device) {
    return remoteGpus.measure &&
           std::find(remoteGpus.devices.begin(), remoteGpus.devices.end(), device) !=
               remoteGpus.devices.end();
  };
  for (Tunable &tunable : tunables) {
    FLOWC_ASSIGN_OR_RETURN(tunable.record, recordOf(cache, tunable));
  }
  if (remote) {
    std::vector<Tunable *> shared = sharedWithRemote(tunables);
    shareWithRemote(cache, *remote, shared);
    for (Tunable *tunable : shared) {
      FLOWC_ASSIGN_OR_RETURN(tunable->record, recordOf(cache, *tunable));
    }
  }
  std::vector<size_t> pending;
  size_t pendingCandidates = 0;
  for (size_t i = 0; i < tunables.size(); ++i) {
    // A GPU kernel is measured only where the records' GPU is: on this
    // machine's (its local workers share it) or on a remote engine's worker
    // offering it. Elsewhere sessions' trial runs, tuning imports and the
    // remote tier bring its records.
    if (!tunables[i].record && budget.searches() &&
        (!tunables[i].gpu || isLocalGpu(tunables[i].device) ||
         offersRemotely(tunables[i].device))) {
      pending.push_back(i);
      pendingCandidates += tunables[i].candidates.size();
    }
  }
  std::vector<Task> tasks;
  for (size_t i : pending) {
    const Tunable &tunable = tunables[i];
    MeasureOptions measure =
        measureOptions(budget, tunable.candidates.size(), pendingCandidates);
    std::optional<compiler::PlannedKernel> kernel;
    if (!tunable.library)
      kernel = plan.kernels[tunable.kernel];
    FLOWC_ASSIGN_OR_RETURN(
        Task task,
        makeMeasureTask(cache, measureJson(tunable, measure), kernel, options, buildId));
    // A remote GPU may be busy or absent: the budget bounds the wait for it.
    if (tunable.gpu && !isLocalGpu(tunable.device))
      task.deadlineSeconds = budget.mode == SearchBudget::Mode::Seconds
                                 ? std::min(budget.seconds, kMaxTaskDeadlineSeconds)
                                 : kExhaustiveGpuWaitSeconds;
    tasks.push_back(std::move(task));
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<Expected<TaskOutcome>> outcomes = runner.run(tasks);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsigned measured = 0, timed = 0;
  bool budgetEnded = false;
  for (size_t m = 0; m < pending.size(); ++m) {
    Tunable &tunable = tunables[pending[m]];
    auto records = [&]() -> Expected<std::vector<cache::TuningRecord>> {
      if (!outcomes[m])
        return outcomes[m].status();
      FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle output,
                             cache.get(outcomes[m]->outputs[0]));
      return recordsFrom(tunable, output.bytes(), budgetEnded);
    }();
    if (!records) {
      warn("measuring " + tunable.signature +
           " failed, so it runs its default: " + records.status().message());
      continue;
    }
    ++measured;
    for (const cache::TuningRecord &record : *records) {
      ++timed;
      if (Status kept = cache.recordTuning(record); !kept)
        warn("a measurement of " + tunable.signature +
             " was not recorded: " + kept.message());
    }
    FLOWC_ASSIGN_OR_RETURN(tunable.record, recordOf(cache, tunable));
    if (!remote)
      continue;
    if (auto document = recordsDocument(cache, tunable))
      publishRemote(cache, *remote, tunable, *document);
  }
  SearchChoices choices = choicesOf(tunables, plan);
  if (!tunables.empty() && tunables.front().gpu)
    choices.summary.gpuDevice = tunables.front().device;
  choices.summary.measuredKernels = measured;
  choices.summary.candidatesMeasured = timed;
  choices.summary.seconds = tasks.empty() ? 0 : seconds;
  choices.summary.budgetEnded = budgetEnded;
  return choices;
}

Status runMeasureTask(const json &measure, const compiler::CompileOptions &options,
                      const std::string &inputDir, const std::string &outputDir,
                      const std::string &kernelFile, const std::string &outputFile) {
  if (isGpuMeasure(measure))
    return runGpuMeasureTask(measure, outputDir + "/" + outputFile);
  std::string device;
  std::vector<std::string> candidates;
  MeasureOptions settings;
  try {
    device = measure.at("device").get<std::string>();
    candidates = measure.at("candidates").get<std::vector<std::string>>();
    settings.budgetSeconds = measure.at("budget_seconds").get<double>();
    settings.maxRounds = measure.at("max_rounds").get<int>();
  } catch (const json::exception &e) {
    return invalidArgument(std::string("a measure task: ") + e.what());
  }
  if (device != deviceDescriptor())
    return failedPrecondition(
        "a measure task for the device '" + device + "' reached a machine that is '" +
        deviceDescriptor() +
        "': a measurement is only taken on the machine it describes");
  if (candidates.empty() || settings.maxRounds < 1 || !(settings.budgetSeconds >= 0))
    return invalidArgument("a measure task with no candidates or no rounds");
  crashOnceForTests();
  AffinityRestorer affinity;
  if (Status pinned = runtime::pinMeasurementThreads(); !pinned)
    spdlog::warn("measuring with threads unpinned: {}", pinned.message());
  settings.lockPath = machineLockPath();
  Expected<Measurement> measured = internalError("unreachable");
  if (measure.contains("library")) {
    try {
      auto kind =
          static_cast<runtime::KernelKind>(measure["library"].at("kind").get<int64_t>());
      auto params = measure["library"].at("params").get<std::vector<int64_t>>();
      measured = runtime::measureLibraryKernel(kind, params, candidates, settings);
    } catch (const json::exception &e) {
      return invalidArgument(std::string("a measure task's library kernel: ") + e.what());
    }
  } else {
    compiler::PlannedKernel kernel;
    try {
      kernel.symbol = measure.at("symbol").get<std::string>();
      kernel.key = measure.at("key").get<std::string>();
    } catch (const json::exception &e) {
      return invalidArgument(std::string("a measure task's loop kernel: ") + e.what());
    }
    FLOWC_ASSIGN_OR_RETURN(kernel.text, readFileToString(inputDir + "/" + kernelFile));
    std::string work = outputDir + "/.measure";
    std::error_code ec;
    std::filesystem::create_directories(work, ec);
    if (ec)
      return errnoStatus(ec.value(), "cannot create '" + work + "'");
    measured = compiler::measureLoopKernel(kernel, candidates, options, settings, work);
    std::filesystem::remove_all(work, ec);
  }
  if (!measured)
    return measured.status();
  return writeMeasurement(deviceDescriptor(), *measured, outputDir + "/" + outputFile);
}

} // namespace flowc::worker
