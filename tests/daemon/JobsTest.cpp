// The pure parts of the daemon's jobs: traces, the keys that decide single
// flight and supersede, the task process's frames, stopping a dispatch.
#include "Jobs.h"
#include "Trace.h"
#include "WorkerProcess.h"

#include "flowc/worker/Tasks.h"
#include "flowc/worker/WorkerProtocol.h"

#include "../common/TestUtil.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

namespace flowc::daemon {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;

flowc::v1::Progress stage(const std::string &name, double at) {
  flowc::v1::Progress event;
  event.set_stage(name);
  event.set_detail(name + " detail");
  event.set_elapsed_seconds(at);
  return event;
}

flowc::v1::Progress pass(const std::string &name, double at, double seconds,
                         const std::string &executor) {
  flowc::v1::Progress event = stage("pass", at);
  event.set_pass(name);
  event.set_seconds(seconds);
  event.set_executor(executor);
  return event;
}

flowc::v1::TaskInfo task(const std::string &kind, const std::string &name,
                         const std::string &executor, double seconds) {
  flowc::v1::TaskInfo info;
  info.set_kind(kind);
  info.set_name(name);
  info.set_executor(executor);
  info.set_state(executor.empty() ? "cancelled" : "done");
  info.set_seconds(seconds);
  info.set_queued_at_seconds(0.5);
  return info;
}

/// The events of `trace` named `name` with phase `ph`.
std::vector<nlohmann::json> eventsNamed(const nlohmann::json &trace,
                                        const std::string &name,
                                        const std::string &ph = "X") {
  std::vector<nlohmann::json> found;
  for (const nlohmann::json &event : trace["traceEvents"])
    if (event["name"] == name && event["ph"] == ph)
      found.push_back(event);
  return found;
}

TraceInput sampleJob() {
  TraceInput input;
  input.jobId = "job-7";
  input.model = "/models/cnn.onnx";
  input.events = {stage("ingest", 0.1),  stage("cache", 0.3),
                  stage("plan", 0.4),    pass("canonicalize", 0.9, 0.2, "local pid 11"),
                  stage("kernel", 1.5),  stage("codegen", 1.0),
                  stage("codegen", 1.2), stage("link", 3.0)};
  input.tasks = {task("plan", "graph", "local pid 11", 0.5),
                 task("codegen", "conv_0", "local pid 11", 1.0),
                 task("codegen", "conv_1", "local pid 12", 1.5),
                 task("codegen", "relu_2", "", 0)};
  input.taskStarts = {0.4, 1.0, 1.0, -1};
  input.seconds = 4.0;
  return input;
}

TEST(TraceTest, PhasesLastUntilTheNextAndAreInOrder) {
  nlohmann::json trace = nlohmann::json::parse(chromeTrace(sampleJob()));
  std::vector<std::string> phases;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const nlohmann::json &event : trace["traceEvents"])
    if (event["cat"] == "phase") {
      phases.push_back(event["name"]);
      spans.emplace_back(event["ts"], event["dur"]);
    }
  // A stage reported twice in a row is one phase; "pass" and "kernel" are
  // events inside phases.
  EXPECT_EQ(phases,
            (std::vector<std::string>{"ingest", "cache", "plan", "codegen", "link"}));
  ASSERT_EQ(spans.size(), 5u);
  EXPECT_EQ(spans[0], std::make_pair(int64_t{100000}, int64_t{200000}));
  // Each ends where the next begins; the last at the job's end.
  for (size_t i = 0; i + 1 < spans.size(); ++i)
    EXPECT_EQ(spans[i].first + spans[i].second, spans[i + 1].first);
  EXPECT_EQ(spans.back().first + spans.back().second, 4000000);
}

TEST(TraceTest, PassesEndWhenTheyArriveOnTheirExecutorsLane) {
  nlohmann::json trace = nlohmann::json::parse(chromeTrace(sampleJob()));
  auto passes = eventsNamed(trace, "canonicalize");
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_EQ(passes[0]["ts"], 700000);
  EXPECT_EQ(passes[0]["dur"], 200000);
  // The same lane as the plan task that ran on that process.
  auto plan = eventsNamed(trace, "graph");
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(passes[0]["tid"], plan[0]["tid"]);
}

TEST(TraceTest, EveryTaskAppearsOneLanePerExecutorProcess) {
  nlohmann::json trace = nlohmann::json::parse(chromeTrace(sampleJob()));
  auto conv0 = eventsNamed(trace, "conv_0");
  auto conv1 = eventsNamed(trace, "conv_1");
  auto relu = eventsNamed(trace, "relu_2");
  ASSERT_EQ(conv0.size(), 1u);
  ASSERT_EQ(conv1.size(), 1u);
  ASSERT_EQ(relu.size(), 1u);
  // Parallel kernels on two processes are two lanes.
  EXPECT_NE(conv0[0]["tid"], conv1[0]["tid"]);
  EXPECT_EQ(conv1[0]["ts"], 1000000);
  EXPECT_EQ(conv1[0]["dur"], 1500000);
  EXPECT_EQ(conv1[0]["args"]["executor"], "local pid 12");
  // A task that never ran is a mark when it was queued, with its state.
  EXPECT_EQ(relu[0]["dur"], 0);
  EXPECT_EQ(relu[0]["ts"], 500000);
  EXPECT_EQ(relu[0]["args"]["state"], "cancelled");
  // Every X event has the fields a viewer needs.
  for (const nlohmann::json &event : trace["traceEvents"]) {
    for (const char *field : {"name", "ph", "pid", "tid"})
      EXPECT_TRUE(event.contains(field)) << event.dump() << " lacks " << field;
    if (event["ph"] == "X") {
      EXPECT_TRUE(event.contains("ts") && event.contains("dur")) << event.dump();
      EXPECT_GE(event["dur"].get<int64_t>(), 0);
    }
  }
}

TEST(TraceTest, MetadataNamesTheProcessAndEveryLane) {
  nlohmann::json trace = nlohmann::json::parse(chromeTrace(sampleJob()));
  auto process = eventsNamed(trace, "process_name", "M");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_EQ(process[0]["args"]["name"], "flowc job-7 /models/cnn.onnx");
  std::set<std::string> lanes;
  for (const nlohmann::json &event : eventsNamed(trace, "thread_name", "M"))
    lanes.insert(event["args"]["name"].get<std::string>());
  EXPECT_TRUE(lanes.count("local pid 11"));
  EXPECT_TRUE(lanes.count("local pid 12"));
  EXPECT_TRUE(lanes.count("phases"));
}

TEST(TraceTest, ModelPathThatIsNotUtf8StillMakesJson) {
  TraceInput input = sampleJob();
  input.model = "/models/\xff\xfe.onnx";
  EXPECT_NO_THROW(nlohmann::json::parse(chromeTrace(input)));
}

TEST(TraceFileTest, ARestartedDaemonCountsJobIdsOnFromItsTraces) {
  TempDir dir;
  std::string traces = dir.file("traces");
  EXPECT_EQ(lastTracedJobNumber(traces), 0u); // No directory yet.
  for (const char *id : {"job-3", "job-41", "job-7"})
    ASSERT_TRUE(writeTraceFile(traces, id, "{}", 10).isOk());
  // Not job ids of this daemon's form: ignored.
  ASSERT_TRUE(writeTraceFile(traces, "job-", "{}", 10).isOk());
  ASSERT_TRUE(writeTraceFile(traces, "job-9x", "{}", 10).isOk());
  ASSERT_TRUE(writeTraceFile(traces, "other-99", "{}", 10).isOk());
  EXPECT_EQ(lastTracedJobNumber(traces), 41u);
}

TEST(TraceFileTest, KeepsTheNewestAndRefusesPathsAsIds) {
  TempDir dir;
  std::string traces = dir.file("traces");
  // Write five; keep three.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(writeTraceFile(traces, "job-" + std::to_string(i), "{}", 3).isOk());
    // Distinct modification times, oldest first.
    std::filesystem::last_write_time(traces + "/job-" + std::to_string(i) + ".json",
                                     std::filesystem::file_time_type::clock::now() -
                                         std::chrono::hours(10 - i));
  }
  ASSERT_TRUE(writeTraceFile(traces, "job-5", "{\"x\":1}", 3).isOk());
  size_t files = 0;
  for ([[maybe_unused]] const auto &entry : std::filesystem::directory_iterator(traces))
    ++files;
  EXPECT_EQ(files, 3u);
  EXPECT_THAT(readTraceFile(traces, "job-0"), StatusIs(StatusCode::NotFound, "job-0"));
  auto newest = readTraceFile(traces, "job-5");
  ASSERT_TRUE(newest) << newest.status().toString();
  EXPECT_EQ(*newest, "{\"x\":1}");
  // An id is never a path.
  EXPECT_THAT(writeTraceFile(traces, "../escape", "{}", 3),
              StatusIs(StatusCode::InvalidArgument, "not a job id"));
  EXPECT_THAT(readTraceFile(traces, "../traces/job-5"),
              StatusIs(StatusCode::NotFound, "no trace of job"));
  EXPECT_FALSE(isJobId(""));
  EXPECT_FALSE(isJobId("job 1"));
  EXPECT_TRUE(isJobId("job-17"));
}

flowc::v1::SubmitRequest submit(const std::string &client, int optLevel) {
  flowc::v1::SubmitRequest request;
  request.set_model_path("/models/cnn.onnx");
  request.set_client(client);
  request.mutable_options()->set_opt_level(optLevel);
  request.mutable_options()->set_target(flowc::v1::TARGET_CPU);
  return request;
}

TEST(SupersedeKeyTest, SameClientPathAndOptionsWhateverTheFile) {
  flowc::v1::SubmitRequest older = submit("ann@host", 2);
  flowc::v1::SubmitRequest newer = older;
  // What concerns one client alone does not matter.
  newer.set_priority(flowc::v1::PRIORITY_BATCH);
  newer.set_detach(true);
  newer.set_timeout_seconds(30);
  newer.set_want_local_path(true);
  EXPECT_EQ(supersedeKey(older), supersedeKey(newer));
  EXPECT_FALSE(supersedeKey(older).empty());
  // A saved file is another flight, but the same supersede key.
  cache::FileIdentity before{"/models/cnn.onnx", 1, 2, 100, 5, 5};
  cache::FileIdentity after{"/models/cnn.onnx", 1, 2, 100, 6, 6};
  EXPECT_NE(flightKey(older, before), flightKey(newer, after));
  EXPECT_EQ(flightKey(older, before), flightKey(newer, before));
}

TEST(SupersedeKeyTest, AnotherClientPathOrOptionSupersedesNothing) {
  flowc::v1::SubmitRequest base = submit("ann@host", 2);
  EXPECT_NE(supersedeKey(base), supersedeKey(submit("bob@host", 2)));
  EXPECT_NE(supersedeKey(base), supersedeKey(submit("ann@host", 3)));
  flowc::v1::SubmitRequest otherPath = base;
  otherPath.set_model_path("/models/other.onnx");
  EXPECT_NE(supersedeKey(base), supersedeKey(otherPath));
  // Without a client, or without a path (an upload), nothing is superseded.
  EXPECT_EQ(supersedeKey(submit("", 2)), "");
  flowc::v1::SubmitRequest upload = base;
  upload.clear_model_path();
  EXPECT_EQ(supersedeKey(upload), "");
}

TEST(ServeAnswerTest, ProgressBeforeTheAnswerIsRelayedInOrder) {
  std::vector<flowc::v1::WorkerReply> frames(4);
  *frames[0].mutable_progress() = pass("canonicalize", 0, 0.1, "");
  *frames[1].mutable_progress() = pass("cse", 0, 0.2, "");
  frames[2].mutable_task_done();
  // Whatever follows the answer is not this task's.
  *frames[3].mutable_progress() = pass("late", 0, 0.3, "");
  std::vector<std::string> relayed;
  auto answer = takeServeAnswer(
      frames, [&](flowc::v1::Progress &&event) { relayed.push_back(event.pass()); });
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->status.isOk());
  EXPECT_FALSE(answer->retire);
  EXPECT_EQ(relayed, (std::vector<std::string>{"canonicalize", "cse"}));
}

TEST(ServeAnswerTest, AnErrorIsTheAnswerAndNoAnswerIsNone) {
  std::vector<flowc::v1::WorkerReply> progressOnly(1);
  *progressOnly[0].mutable_progress() = pass("cse", 0, 0.2, "");
  EXPECT_FALSE(takeServeAnswer(progressOnly, nullptr).has_value());
  std::vector<flowc::v1::WorkerReply> failed(1);
  *failed[0].mutable_error() =
      worker::errorReply(invalidArgument("kernel k: bad IR")).error();
  auto answer = takeServeAnswer(failed, nullptr);
  ASSERT_TRUE(answer.has_value());
  EXPECT_THAT(answer->status, StatusIs(StatusCode::InvalidArgument, "kernel k: bad IR"));
  EXPECT_FALSE(answer->retire);
  failed[0].set_retire(true);
  answer = takeServeAnswer(failed, nullptr);
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->retire);
}

TEST(JobRegistryTest, TraceHasTheJobsEventsAndTasksButNoIrText) {
  JobRegistry registry;
  registry.start("job-1", "/m.onnx", flowc::v1::PRIORITY_INTERACTIVE, "ann@host",
                 std::chrono::steady_clock::now());
  registry.addProgress("job-1", stage("ingest", 0.01));
  registry.addProgress("job-1", stage("ir", 0.02));
  size_t index = registry.addTask("job-1", worker::Task{"codegen", "conv_0", {}, {}, ""});
  registry.taskStarted("job-1", index);
  registry.update("job-1", index, [](flowc::v1::TaskInfo &info) {
    info.set_state("done");
    info.set_executor("local pid 5");
  });
  registry.setSupersededBy("job-1", "job-2");
  registry.finish("job-1", "superseded", "job job-1 was superseded by job job-2");
  auto trace = registry.trace("job-1");
  ASSERT_TRUE(trace.has_value());
  nlohmann::json json = nlohmann::json::parse(*trace);
  EXPECT_EQ(eventsNamed(json, "ingest").size(), 1u);
  EXPECT_TRUE(eventsNamed(json, "ir").empty());
  auto conv = eventsNamed(json, "conv_0");
  ASSERT_EQ(conv.size(), 1u);
  EXPECT_EQ(conv[0]["args"]["executor"], "local pid 5");
  auto job = registry.job("job-1");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state(), "superseded");
  EXPECT_EQ(job->superseded_by(), "job-2");
  EXPECT_FALSE(registry.trace("job-9").has_value());
}

TEST(JobControlsTest, StopsAKnownJobOnly) {
  JobControls controls;
  std::string reason;
  controls.add("job-1", [&](const Status &why) {
    reason = why.message();
    return true;
  });
  EXPECT_FALSE(controls.stop("job-2", Status(StatusCode::Cancelled, "x")));
  EXPECT_TRUE(controls.stop("job-1", Status(StatusCode::Cancelled, "by ann")));
  EXPECT_EQ(reason, "by ann");
  controls.remove("job-1");
  EXPECT_FALSE(controls.stop("job-1", Status(StatusCode::Cancelled, "again")));
}

TEST(TaskDispatchTest, AStoppingJobAnswersNewTasksCancelledAtOnce) {
  TempDir dir;
  auto cache = cache::Cache::open(dir.path());
  ASSERT_TRUE(cache) << cache.status().toString();
  // Never asked to run anything: no worker binary is needed.
  LocalExecutor executor(**cache, {dir.file("no-such-worker"), 1, 0});
  JobRegistry registry;
  registry.start("job-1", "/m.onnx", flowc::v1::PRIORITY_INTERACTIVE, "ann@host",
                 std::chrono::steady_clock::now());
  for (JobStop stop : {JobStop::Drain, JobStop::Kill}) {
    TaskDispatch dispatch(
        executor, registry, cache->get(), "job-1", scheduler::Priority::Interactive,
        [stop] { return stop; }, nullptr);
    flowc::v1::TaskRequest request;
    request.set_id(3);
    request.set_kind("codegen");
    request.set_name("conv_0");
    std::optional<flowc::v1::TaskResult> answer;
    dispatch.add(std::move(request),
                 [&](const flowc::v1::TaskResult &result) { answer = result; });
    // Answered before add() returned, not queued.
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->id(), 3u);
    EXPECT_THAT(worker::statusOf(answer->error()),
                StatusIs(StatusCode::Cancelled, "codegen conv_0: job job-1 is stopping"));
  }
}

/// Runs two noop tasks on `executor`, each expected to end with `expected`,
/// and says where each ran ("local pid N").
std::vector<std::string> runTwoNoopTasks(cache::Cache &cache, LocalExecutor &executor,
                                         const Status &expected) {
  std::vector<std::string> where;
  for (int i = 0; i < 2; ++i) {
    auto task = worker::makeNoopTask(cache, "noop" + std::to_string(i), "build");
    EXPECT_TRUE(task) << task.status().toString();
    if (!task)
      return where;
    TaskRun run{*task, scheduler::Priority::Interactive, nullptr,
                [&](const std::string &at) { where.push_back(at); }};
    Expected<worker::TaskOutcome> outcome = executor.run(run);
    if (expected.isOk())
      EXPECT_TRUE(outcome) << outcome.status().toString();
    else
      EXPECT_THAT(outcome, StatusIs(expected.code(), expected.message()));
  }
  return where;
}

// A pooled process runs one task after another; one that answers with
// retire (a worker whose GPU faulted: CUDA needs the process restarted)
// gets no other task. The next starts a fresh process, and neither counts
// as a crash or a retry.
TEST(LocalPoolTest, AProcessWhoseGpuFaultedIsReplacedNotReused) {
  TempDir dir;
  auto cache = cache::Cache::open(dir.path());
  ASSERT_TRUE(cache) << cache.status().toString();
  {
    ::unsetenv("FLOWC_STAND_IN_FAULT");
    LocalExecutor executor(**cache, {FLOWC_STAND_IN_WORKER, 1, 0});
    std::vector<std::string> where = runTwoNoopTasks(**cache, executor, Status::ok());
    ASSERT_EQ(where.size(), 2u);
    EXPECT_EQ(where[0], where[1]);
  }
  ::setenv("FLOWC_STAND_IN_FAULT", "1", 1);
  LocalExecutor executor(**cache, {FLOWC_STAND_IN_WORKER, 1, 0});
  std::vector<std::string> where =
      runTwoNoopTasks(**cache, executor,
                      Status(StatusCode::Unavailable,
                             "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS"));
  ::unsetenv("FLOWC_STAND_IN_FAULT");
  ASSERT_EQ(where.size(), 2u);
  EXPECT_NE(where[0], where[1]);
  flowc::v1::WorkersResponse described;
  executor.describe(described);
  EXPECT_EQ(described.tasks_run(), 2u);
  EXPECT_EQ(described.tasks_retried(), 0u);
  EXPECT_EQ(described.tasks_failed(), 0u);
}

TEST(JobRegistryTest, KeepsAThousandFinishedJobsAndTheNewestInDetail) {
  JobRegistry registry;
  size_t total = JobRegistry::kKeptFinished + 20;
  for (size_t i = 0; i < total; ++i) {
    std::string id = "job-" + std::to_string(i + 1);
    registry.start(id, "m.onnx", flowc::v1::PRIORITY_INTERACTIVE, "c",
                   std::chrono::steady_clock::now());
    registry.addTask(id, worker::Task{"codegen", "k", {}, {}});
    registry.setModelDigest(id, "sha256:" + std::string(64, 'a') + "/1");
    registry.finish(id, "done", "");
  }
  uint64_t latest = 0;
  std::vector<JobSummary> kept = registry.changedSince(0, latest);
  ASSERT_EQ(kept.size(), JobRegistry::kKeptFinished);
  EXPECT_EQ(kept.front().id, "job-21");
  EXPECT_EQ(kept.back().id, "job-" + std::to_string(total));
  size_t detailed = 0;
  for (const JobSummary &job : kept) {
    detailed += job.detailed;
    // A dropped job keeps its summary, its task count among it.
    EXPECT_EQ(job.tasks, 1u) << job.id;
    EXPECT_FALSE(job.modelDigest.empty());
  }
  EXPECT_EQ(detailed, JobRegistry::kKeptDetailed);
  EXPECT_TRUE(kept.back().detailed);
  EXPECT_FALSE(kept.front().detailed);
  EXPECT_EQ(registry.job("job-21")->tasks_size(), 0);
  EXPECT_EQ(registry.job("job-" + std::to_string(total))->tasks_size(), 1);
  EXPECT_FALSE(registry.summary("job-20"));
  // Only what changed after a list is sent again.
  registry.setModelDigest("job-" + std::to_string(total), "x");
  uint64_t next = 0;
  std::vector<JobSummary> changed = registry.changedSince(latest, next);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_GT(next, latest);
}

} // namespace
} // namespace flowc::daemon
