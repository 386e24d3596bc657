#include "Trace.h"

#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

namespace flowc::daemon {

namespace {

namespace fs = std::filesystem;

constexpr int kPid = 1;
/// Fixed lanes; executor processes get lanes from kFirstExecutorTid on.
constexpr int kPhaseTid = 1;
constexpr int kJobPassTid = 2;
constexpr int kNotRunTid = 3;
constexpr int kFirstExecutorTid = 10;

/// Microseconds; a time that is not a number (a task process's bad
/// report) is 0, and none exceeds a year.
int64_t micros(double seconds) {
  if (!std::isfinite(seconds))
    return 0;
  return std::llround(std::clamp(seconds, -3.2e7, 3.2e7) * 1e6);
}

/// Stages that are not phases of their own: events inside one.
bool isPhase(const std::string &stage) {
  return stage != "pass" && stage != "kernel" && stage != "ir";
}

/// An X event from `start` to `end` (seconds); one event's end and the
/// next one's start are the same microsecond.
nlohmann::json complete(const std::string &name, const std::string &category,
                        double start, double end, int tid) {
  int64_t from = micros(std::max(0.0, start));
  return {{"name", name},
          {"cat", category},
          {"ph", "X"},
          {"ts", from},
          {"dur", std::max<int64_t>(0, micros(end) - from)},
          {"pid", kPid},
          {"tid", tid}};
}

nlohmann::json threadName(int tid, const std::string &name) {
  return {{"name", "thread_name"},
          {"ph", "M"},
          {"pid", kPid},
          {"tid", tid},
          {"args", {{"name", name}}}};
}

/// One lane per executor process ("local pid 12"), numbered as first seen.
class Lanes {
public:
  int of(const std::string &executor) {
    auto [it, added] = tids_.try_emplace(executor, kFirstExecutorTid + tids_.size());
    return it->second;
  }
  const std::map<std::string, int> &all() const { return tids_; }

private:
  std::map<std::string, int> tids_;
};

} // namespace

std::string chromeTrace(const TraceInput &input) {
  nlohmann::json events = nlohmann::json::array();
  Lanes lanes;

  // Phases: each lasts until the next one begins, the last until the end.
  struct Phase {
    std::string stage, detail;
    double start;
  };
  std::vector<Phase> phases;
  for (const flowc::v1::Progress &event : input.events) {
    if (!isPhase(event.stage()))
      continue;
    if (!phases.empty() && phases.back().stage == event.stage())
      continue; // A phase that reports twice is still one phase.
    phases.push_back({event.stage(), event.detail(), event.elapsed_seconds()});
  }
  for (size_t i = 0; i < phases.size(); ++i) {
    double end = i + 1 < phases.size() ? phases[i + 1].start
                                       : std::max(input.seconds, phases[i].start);
    nlohmann::json event =
        complete(phases[i].stage, "phase", phases[i].start, end, kPhaseTid);
    event["args"] = {{"detail", phases[i].detail}};
    events.push_back(std::move(event));
  }

  // Passes end when their event arrives; one a task process ran is on its
  // executor's lane.
  for (const flowc::v1::Progress &event : input.events) {
    if (event.stage() != "pass")
      continue;
    int tid = event.executor().empty() ? kJobPassTid : lanes.of(event.executor());
    std::string name = event.pass().empty() ? event.detail() : event.pass();
    events.push_back(complete(name, "pass", event.elapsed_seconds() - event.seconds(),
                              event.elapsed_seconds(), tid));
  }

  // Tasks: from the start of their last attempt, on their executor's lane;
  // one that never ran is a mark at the time it was queued.
  for (size_t i = 0; i < input.tasks.size(); ++i) {
    const flowc::v1::TaskInfo &task = input.tasks[i];
    bool ran = i < input.taskStarts.size() && input.taskStarts[i] >= 0 &&
               !task.executor().empty();
    nlohmann::json event =
        ran ? complete(task.name(), task.kind(), input.taskStarts[i],
                       input.taskStarts[i] + task.seconds(), lanes.of(task.executor()))
            : complete(task.name(), task.kind(), task.queued_at_seconds(),
                       task.queued_at_seconds(), kNotRunTid);
    event["args"] = {{"kind", task.kind()},
                     {"state", task.state()},
                     {"executor", task.executor()},
                     {"queued_at_seconds", task.queued_at_seconds()},
                     {"attempts", task.attempts()},
                     {"input_bytes", task.input_bytes()},
                     {"output_bytes", task.output_bytes()}};
    if (!task.error().empty())
      event["args"]["error"] = task.error();
    events.push_back(std::move(event));
  }

  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", kPid},
                    {"tid", 0},
                    {"args", {{"name", "flowc " + input.jobId + " " + input.model}}}});
  events.push_back(threadName(kPhaseTid, "phases"));
  events.push_back(threadName(kJobPassTid, "passes (job worker)"));
  events.push_back(threadName(kNotRunTid, "tasks not run"));
  for (const auto &[executor, tid] : lanes.all())
    events.push_back(threadName(tid, executor));
  nlohmann::json trace = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"job_id", input.jobId}, {"model", input.model}, {"seconds", input.seconds}}}};
  // Replacement of invalid UTF-8 (a model path is bytes): never throws.
  return trace.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool isJobId(std::string_view id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
  });
}

Status writeTraceFile(const std::string &dir, const std::string &jobId,
                      const std::string &json, size_t keep) {
  if (!isJobId(jobId))
    return invalidArgument("'" + jobId + "' is not a job id");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return internalError("cannot create the trace directory '" + dir +
                         "': " + ec.message());
  FLOWC_RETURN_IF_ERROR(writeFileAtomically(dir + "/" + jobId + ".json", json));
  // Bounded: the newest `keep` traces stay.
  std::vector<std::pair<fs::file_time_type, fs::path>> traces;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".json" || !entry.is_regular_file(ec))
      continue;
    traces.emplace_back(entry.last_write_time(ec), entry.path());
  }
  if (traces.size() <= keep)
    return Status::ok();
  std::sort(traces.begin(), traces.end());
  for (size_t i = 0; i + keep < traces.size(); ++i)
    fs::remove(traces[i].second, ec);
  return Status::ok();
}

uint64_t lastTracedJobNumber(const std::string &dir) {
  uint64_t last = 0;
  std::error_code ec;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (!name.starts_with("job-") || !name.ends_with(".json"))
      continue;
    std::string digits = name.substr(4, name.size() - 9);
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    last = std::max<uint64_t>(last, std::stoull(digits));
  }
  return last;
}

Expected<std::string> readTraceFile(const std::string &dir, const std::string &jobId) {
  auto missing = [&] {
    return notFound("no trace of job '" + jobId +
                    "': it is not among the daemon's running and recent jobs, nor in " +
                    dir);
  };
  if (!isJobId(jobId))
    return missing();
  std::error_code ec;
  if (!fs::is_regular_file(dir + "/" + jobId + ".json", ec))
    return missing();
  return readFileToString(dir + "/" + jobId + ".json");
}

} // namespace flowc::daemon
