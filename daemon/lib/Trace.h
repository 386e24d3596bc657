// A job's trace in Chrome trace-event format (docs/jobs.md), opened in
// Perfetto or chrome://tracing: its phases, compiler passes and tasks on a
// time line, one lane per executor process.
#pragma once

#include "flowc/support/Status.h"
#include "flowc/v1/flowc.pb.h"

#include <string>
#include <string_view>
#include <vector>

namespace flowc::daemon {

/// What a job's trace is made of, in seconds since the job began.
struct TraceInput {
  std::string jobId;
  std::string model;
  /// Its progress events in arrival order (elapsed_seconds set).
  std::vector<flowc::v1::Progress> events;
  /// Its tasks, and when each one's last attempt started.
  std::vector<flowc::v1::TaskInfo> tasks;
  std::vector<double> taskStarts;
  /// The job's wall time so far (or in all, once it ended).
  double seconds = 0;
};

/// The trace as JSON: {"traceEvents": [...], "displayTimeUnit": "ms"}.
/// Each phase (a stage other than "pass", "kernel" and "ir") is a complete
/// ("X") event until the next phase or the job's end; each pass an X event
/// of its `seconds` ending when it arrived; each task an X event on the
/// lane of the executor that ran it; "M" events name the process and lanes.
std::string chromeTrace(const TraceInput &input);

/// Whether `id` can name a job ("job-17"): letters, digits, '-' and '_',
/// so that it is safe as a file name.
bool isJobId(std::string_view id);

/// Writes `json` to DIR/ID.json (temp file + rename), then removes the
/// oldest traces beyond `keep`. Errors name the file.
Status writeTraceFile(const std::string &dir, const std::string &jobId,
                      const std::string &json, size_t keep);

/// The highest N of the traces DIR/job-N.json (0 when none): a restarted
/// daemon counts its job ids on from there, so that an id names one job
/// and its trace is never overwritten by another's.
uint64_t lastTracedJobNumber(const std::string &dir);

/// DIR/ID.json; NotFound naming the job when there is none.
Expected<std::string> readTraceFile(const std::string &dir, const std::string &jobId);

} // namespace flowc::daemon
