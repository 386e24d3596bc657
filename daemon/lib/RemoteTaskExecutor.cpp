#include "RemoteTaskExecutor.h"

#include "flowc/remote/RemoteExecution.h"
#include "flowc/runtime/Tuning.h"
#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <map>
#include <optional>
#include <spdlog/spdlog.h>
#include <sys/utsname.h>

namespace flowc::daemon {

namespace {

constexpr const char *kWorkerInRoot = "bin/flowc-worker";

std::string secondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

/// What a task past its deadline was waiting for, when it asked for more
/// than the base platform: " (its deadline; it needs a worker offering
/// gpu=NVIDIA H200 sm_90)".
std::string neededText(const worker::Task &task) {
  std::string needed;
  for (const auto &[name, value] : task.platform)
    needed += (needed.empty() ? "" : ", ") + name + "=" + value;
  return needed.empty() ? std::string()
                        : " (its deadline; it needs a worker offering " + needed + ")";
}

/// REAPI's platform lexicon names for this machine: the flowc-worker binary
/// in the input root runs only on the same OS and instruction set.
std::vector<std::pair<std::string, std::string>> basePlatform() {
  utsname name{};
  uname(&name);
  std::string machine = name.machine;
  std::string isa = machine == "x86_64" ? "x86-64" : machine;
  return {{"OSFamily", "linux"}, {"ISA", isa}};
}

class RemoteTaskExecutor final : public TaskExecutor {
public:
  RemoteTaskExecutor(cache::Cache &cache, std::unique_ptr<remote::RemoteExecutor> remote,
                     MappedFile worker, cache::Digest workerDigest,
                     const RemoteOptions &options, std::unique_ptr<LocalExecutor> local)
      : cache_(cache), remote_(std::move(remote)), worker_(std::move(worker)),
        workerDigest_(workerDigest), options_(options), local_(std::move(local)) {
    platform_ = basePlatform();
    platform_.insert(platform_.end(), options.platform.begin(), options.platform.end());
  }

  Expected<worker::TaskOutcome> run(const TaskRun &run) override {
    // A GPU task for this machine's own GPU runs here: the local pool
    // shares it, and the engine may have no worker offering it.
    if (needsLocalGpu(run.task))
      return local_->run(run);
    auto outcome = runRemotely(run);
    if (outcome || !options_.fallbackLocal ||
        outcome.status().code() != StatusCode::Unavailable)
      return outcome;
    // The local pool runs what needs no GPU, or this machine's own (above).
    if (std::optional<std::string> gpu = neededGpu(run.task))
      return Status(
          StatusCode::Unavailable,
          outcome.status().message() +
              "; not run locally (--remote-fallback=local): it needs the GPU '" + *gpu +
              "', which this machine lacks");
    ++fallbacks_;
    spdlog::warn("{}; running it locally (--remote-fallback=local)",
                 outcome.status().message());
    return local_->run(run);
  }

  /// The engine schedules; each action in flight holds an Execute stream.
  unsigned concurrency() const override { return options_.jobs; }

  void describe(flowc::v1::WorkersResponse &out) const override {
    local_->describe(out);
    remote::Counters counters = remote_->counters();
    out.set_remote_url(options_.url);
    out.set_remote_instance(options_.instance);
    {
      std::lock_guard lock(mutex_);
      out.set_remote_state(state_);
    }
    out.set_remote_executed(counters.executed);
    out.set_remote_cache_hits(counters.cacheHits);
    out.set_remote_bytes_uploaded(counters.bytesUploaded);
    out.set_remote_bytes_downloaded(counters.bytesDownloaded);
    out.set_remote_fallbacks(fallbacks_);
    out.set_remote_fallback(options_.fallbackLocal ? "local" : "none");
    for (const auto &[name, value] : platform_)
      out.add_remote_platform(name + "=" + value);
    std::lock_guard lock(mutex_);
    for (const auto &[name, counts] : workers_) {
      flowc::v1::RemoteWorker *worker = out.add_remote_workers();
      worker->set_name(name);
      worker->set_tasks_done(counts.first);
      worker->set_tasks_failed(counts.second);
    }
  }

private:
  /// The GPU the task must run on (its gpu platform property), if any.
  static std::optional<std::string> neededGpu(const worker::Task &task) {
    for (const auto &[name, value] : task.platform)
      if (name == worker::kGpuPlatformProperty)
        return value;
    return std::nullopt;
  }

  static bool needsLocalGpu(const worker::Task &task) {
    std::optional<std::string> gpu = neededGpu(task);
    if (!gpu)
      return false;
    Expected<std::string> device = runtime::parseGpuName(*gpu);
    return device && runtime::localGpuOrdinal(*device).has_value();
  }

  void setState(std::string state) {
    std::lock_guard lock(mutex_);
    state_ = std::move(state);
  }

  Expected<worker::TaskOutcome> runRemotely(const TaskRun &run) {
    const worker::Task &task = run.task;
    std::string what = task.kind + " " + task.name;
    remote::Action action;
    action.arguments = {kWorkerInRoot, "task", "--input", "in", "--output", "out"};
    action.inputs.push_back({kWorkerInRoot, workerDigest_, true, worker_.view()});
    // The handles keep the inputs' bytes mapped for the call.
    std::vector<cache::BlobHandle> blobs;
    for (const worker::TaskInput &input : task.inputs) {
      FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob, cache_.get(input.digest));
      action.inputs.push_back({"in/" + input.path, input.digest, false, blob.bytes()});
      blobs.push_back(std::move(blob));
    }
    for (const std::string &output : task.outputs)
      action.outputFiles.push_back("out/" + output);
    action.platform = platform_;
    action.platform.insert(action.platform.end(), task.platform.begin(),
                           task.platform.end());
    std::sort(action.platform.begin(), action.platform.end());
    if (run.onStart)
      run.onStart("remote " + options_.url);
    // A deadline abandons the action as a cancellation does. It counts from
    // the task's arrival: tasks queued behind --remote-jobs others wait
    // within it.
    auto deadline =
        run.received + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(task.deadlineSeconds));
    auto pastDeadline = [&] {
      return task.deadlineSeconds > 0 && std::chrono::steady_clock::now() >= deadline;
    };
    auto outcome = remote_->execute(
        action, [&] { return (run.cancelled && run.cancelled()) || pastDeadline(); });
    if (!outcome && outcome.status().code() == StatusCode::Cancelled && pastDeadline() &&
        !(run.cancelled && run.cancelled()))
      return Status(StatusCode::ResourceExhausted,
                    what + ": remote executor " + options_.url +
                        " did not finish it in " + secondsText(task.deadlineSeconds) +
                        " s" + neededText(task));
    if (!outcome) {
      setState(outcome.status().message());
      return outcome.status().withContext(what + ": remote executor " + options_.url);
    }
    setState("ok");
    std::string where = outcome->cached
                            ? "remote action cache"
                            : "remote " + (outcome->worker.empty() ? std::string("worker")
                                                                   : outcome->worker);
    if (!outcome->cached) {
      std::lock_guard lock(mutex_);
      auto &[done, failed] =
          workers_[outcome->worker.empty() ? "worker" : outcome->worker];
      ++(outcome->exitCode == 0 ? done : failed);
    }
    if (outcome->exitCode != 0) {
      Status error = worker::taskErrorFrom(outcome->stderrText);
      return Status(error.code(), what + ": " + where + " failed (exit " +
                                      std::to_string(outcome->exitCode) +
                                      "): " + error.message());
    }
    worker::TaskOutcome result{{}, where};
    for (const std::string &path : action.outputFiles) {
      auto found =
          std::find_if(outcome->outputs.begin(), outcome->outputs.end(),
                       [&](const remote::OutputFile &file) { return file.path == path; });
      if (found == outcome->outputs.end())
        return dataLoss(what + ": " + where + " left no '" + path + "'");
      FLOWC_RETURN_IF_ERROR(cache_.putVerified(found->digest, found->bytes));
      result.outputs.push_back(found->digest);
    }
    return result;
  }

  cache::Cache &cache_;
  std::unique_ptr<remote::RemoteExecutor> remote_;
  MappedFile worker_;
  cache::Digest workerDigest_;
  RemoteOptions options_;
  std::unique_ptr<LocalExecutor> local_;
  std::vector<std::pair<std::string, std::string>> platform_;
  mutable std::mutex mutex_;
  std::string state_ = "not used yet";
  /// Per remote worker that ran tasks: (done, failed).
  std::map<std::string, std::pair<uint64_t, uint64_t>> workers_;
  std::atomic<uint64_t> fallbacks_{0};
};

} // namespace

Expected<std::unique_ptr<TaskExecutor>>
makeRemoteTaskExecutor(cache::Cache &cache, const std::string &workerPath,
                       const RemoteOptions &options,
                       std::unique_ptr<LocalExecutor> local) {
  FLOWC_ASSIGN_OR_RETURN(remote::Endpoint endpoint,
                         remote::parseEndpoint(options.url, options.instance));
  FLOWC_ASSIGN_OR_RETURN(auto remote, remote::RemoteExecutor::connect(endpoint));
  // The toolchain is an input of every action by digest: hashed once.
  FLOWC_ASSIGN_OR_RETURN(MappedFile worker, MappedFile::open(workerPath));
  cache::Digest digest = cache::digestOf(worker.view());
  spdlog::info("remote executor url={} instance={} worker={}", options.url,
               options.instance.empty() ? "-" : options.instance, digest.toString());
  return std::unique_ptr<TaskExecutor>(new RemoteTaskExecutor(
      cache, std::move(remote), std::move(worker), digest, options, std::move(local)));
}

} // namespace flowc::daemon
