// flowc jobs [--json]; flowc workers [--json]; flowc explain JOB [--json];
// flowc cancel JOB [--json]; flowc trace JOB [-o FILE]
#include "Commands.h"
#include "flowc/rpc/Json.h"

#include "flowc/support/MappedFile.h"

#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

namespace flowc::cli {

namespace {

nlohmann::json jobJson(const flowc::v1::JobInfo &job) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const flowc::v1::TaskInfo &task : job.tasks())
    tasks.push_back(rpc::taskJson(task));
  return {
      {"id", job.id()},
      {"model", job.model()},
      {"state", job.state()},
      {"priority", job.priority() == flowc::v1::PRIORITY_BATCH ? "batch" : "interactive"},
      {"client", job.client()},
      {"seconds", job.seconds()},
      {"error", job.error()},
      {"explain", job.explain()},
      {"superseded_by", job.superseded_by()},
      {"tasks", tasks}};
}

/// "3 local, 9 remote bot-2": where a job's tasks ran.
std::string placesText(const flowc::v1::JobInfo &job) {
  std::map<std::string, int> counts;
  for (const flowc::v1::TaskInfo &task : job.tasks()) {
    std::string where = task.executor().substr(0, task.executor().find(" pid "));
    ++counts[where.empty() ? task.state() : where];
  }
  std::string text;
  for (const auto &[where, count] : counts)
    text += (text.empty() ? "" : ", ") + std::to_string(count) + " " + where;
  return text.empty() ? "no tasks" : text;
}

/// One call of an Admin method on the running daemon (none is started for
/// it); the daemon's status, with `what` for context, on failure.
template <typename Request, typename Response>
Expected<Response>
callAdmin(GlobalOptions &global,
          grpc::Status (flowc::v1::Admin::Stub::*method)(grpc::ClientContext *,
                                                         const Request &, Response *),
          const Request &request, const std::string &what) {
  global.resolve();
  FLOWC_ASSIGN_OR_RETURN(auto client, DaemonClient::connect(global, /*autostart=*/false));
  grpc::ClientContext context;
  Response response;
  FLOWC_RETURN_IF_ERROR(
      fromGrpc((client->admin().*method)(&context, request, &response), what));
  return response;
}

/// The daemon's running and recent jobs.
Expected<flowc::v1::JobsResponse> fetchJobs(GlobalOptions &global) {
  return callAdmin(global, &flowc::v1::Admin::Stub::Jobs, flowc::v1::JobsRequest(),
                   "jobs");
}

int runJobs(GlobalOptions &global, bool json) {
  auto jobs = fetchJobs(global);
  if (!jobs)
    return reportError(jobs.status());
  const flowc::v1::JobsResponse &response = *jobs;
  if (json) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const flowc::v1::JobInfo &job : response.jobs())
      jobs.push_back(jobJson(job));
    printJson({{"jobs", jobs}});
    return 0;
  }
  if (response.jobs().empty())
    std::cout << "no jobs yet\n";
  for (const flowc::v1::JobInfo &job : response.jobs()) {
    std::cout << job.id() << "  " << job.state() << "  " << std::fixed
              << std::setprecision(2) << job.seconds() << " s  " << job.model() << "\n"
              << "  " << job.tasks_size() << " tasks: " << placesText(job) << "\n";
    if (!job.error().empty())
      std::cout << "  error: " << job.error() << "\n";
  }
  std::cout << std::flush;
  return 0;
}

int runExplain(GlobalOptions &global, const std::string &jobId, bool json) {
  auto jobs = fetchJobs(global);
  if (!jobs)
    return reportError(jobs.status());
  for (const flowc::v1::JobInfo &job : jobs->jobs()) {
    if (job.id() != jobId)
      continue;
    if (job.explain().empty())
      return reportError(
          notFound("job " + jobId + " has no explanation: it " +
                   (job.state() == "running"
                        ? "has not looked up its entry yet"
                        : "ended before it looked up its entry (" + job.state() + ")")));
    if (json)
      printJson({{"id", job.id()}, {"model", job.model()}, {"explain", job.explain()}});
    else
      std::cout << job.id() << "  " << job.model() << "\n" << job.explain() << std::endl;
    return 0;
  }
  return reportError(notFound(
      "no job " + jobId + " among the daemon's running and recent jobs (flowc jobs)"));
}

int runCancel(GlobalOptions &global, const std::string &jobId, bool json) {
  flowc::v1::CancelRequest request;
  request.set_job_id(jobId);
  auto response =
      callAdmin(global, &flowc::v1::Admin::Stub::Cancel, request, "cancel " + jobId);
  if (!response)
    return reportError(response.status());
  if (json)
    printJson({{"job_id", jobId}, {"state", response->state()}});
  else if (response->state() == "cancelled")
    std::cout << "flowc: job " << jobId << " cancelled" << std::endl;
  else
    std::cout << "flowc: job " << jobId << " had ended: " << response->state()
              << std::endl;
  return 0;
}

int runTrace(GlobalOptions &global, const std::string &jobId, const std::string &output) {
  flowc::v1::TraceRequest request;
  request.set_job_id(jobId);
  auto response =
      callAdmin(global, &flowc::v1::Admin::Stub::Trace, request, "trace " + jobId);
  if (!response)
    return reportError(response.status());
  if (output.empty() || output == "-") {
    std::cout << response->trace_json() << std::endl;
    return 0;
  }
  if (Status written = writeFileAtomically(output, response->trace_json()); !written)
    return reportError(written);
  std::cerr << "flowc: trace of job " << jobId << " written to " << output
            << " (open it in https://ui.perfetto.dev or chrome://tracing)" << std::endl;
  return 0;
}

int runWorkers(GlobalOptions &global, bool json) {
  auto workers = callAdmin(global, &flowc::v1::Admin::Stub::Workers,
                           flowc::v1::WorkersRequest(), "workers");
  if (!workers)
    return reportError(workers.status());
  const flowc::v1::WorkersResponse &r = *workers;
  if (json) {
    nlohmann::json local = nlohmann::json::array();
    for (const flowc::v1::LocalWorker &worker : r.local())
      local.push_back({{"pid", worker.pid()},
                       {"task", worker.task()},
                       {"seconds", worker.seconds()}});
    nlohmann::json out = {
        {"slots", r.slots()},
        {"busy", r.busy()},
        {"local", local},
        {"tasks_run", r.tasks_run()},
        {"tasks_retried", r.tasks_retried()},
        {"tasks_failed", r.tasks_failed()},
        {"device", r.local_device()},
        {"gpus", std::vector<std::string>(r.local_gpus().begin(), r.local_gpus().end())},
        {"gpus_absent", r.local_gpus_absent()},
        {"remote_gpus",
         std::vector<std::string>(r.remote_gpus().begin(), r.remote_gpus().end())},
        {"remote", nullptr}};
    nlohmann::json remoteWorkers = nlohmann::json::array();
    for (const flowc::v1::RemoteWorker &worker : r.remote_workers())
      remoteWorkers.push_back({{"name", worker.name()},
                               {"tasks_done", worker.tasks_done()},
                               {"tasks_failed", worker.tasks_failed()}});
    if (!r.remote_url().empty())
      out["remote"] = {{"url", r.remote_url()},
                       {"instance", r.remote_instance()},
                       {"state", r.remote_state()},
                       {"executed", r.remote_executed()},
                       {"cache_hits", r.remote_cache_hits()},
                       {"bytes_uploaded", r.remote_bytes_uploaded()},
                       {"bytes_downloaded", r.remote_bytes_downloaded()},
                       {"fallbacks", r.remote_fallbacks()},
                       {"fallback", r.remote_fallback()},
                       {"platform", std::vector<std::string>(r.remote_platform().begin(),
                                                             r.remote_platform().end())},
                       {"workers", remoteWorkers}};
    printJson(out);
    return 0;
  }
  std::cout << "local: " << r.busy() << " of " << r.slots() << " slots busy; "
            << r.tasks_run() << " tasks run, " << r.tasks_retried() << " retried, "
            << r.tasks_failed() << " failed; " << r.local_device() << "\n";
  for (const std::string &gpu : r.local_gpus())
    std::cout << "  GPU " << gpu << "\n";
  if (r.local_gpus().empty())
    std::cout << "  no GPU: " << r.local_gpus_absent() << "\n";
  for (const flowc::v1::LocalWorker &worker : r.local())
    std::cout << "  pid " << worker.pid() << "  " << worker.task() << "  " << std::fixed
              << std::setprecision(1) << worker.seconds() << " s\n";
  if (r.remote_url().empty())
    std::cout << "remote: none (flowcd --remote-executor)\n";
  else
    std::cout << "remote: " << r.remote_url()
              << (r.remote_instance().empty() ? "" : " instance " + r.remote_instance())
              << ", " << r.remote_state() << "; " << r.remote_executed() << " executed, "
              << r.remote_cache_hits() << " action-cache hits, "
              << humanBytes(r.remote_bytes_uploaded()) << " up, "
              << humanBytes(r.remote_bytes_downloaded()) << " down, "
              << r.remote_fallbacks() << " run locally (fallback " << r.remote_fallback()
              << ")\n";
  // The farm's GPUs: measured on by the engine's workers offering them, or
  // (with a remote cache alone) only keyed by, their records shared.
  for (const std::string &gpu : r.remote_gpus())
    std::cout << "  GPU " << gpu
              << (r.remote_url().empty()
                      ? " (its records from the remote cache; no engine to measure on)"
                      : " (workers offering gpu=" + gpu + ")")
              << "\n";
  for (const flowc::v1::RemoteWorker &worker : r.remote_workers())
    std::cout << "  " << worker.name() << "  " << worker.tasks_done() << " done, "
              << worker.tasks_failed() << " failed\n";
  std::cout << std::flush;
  return 0;
}

} // namespace

CommandRunner addJobsCommand(CLI::App &app, GlobalOptions &global) {
  auto json = std::make_shared<bool>(false);
  CLI::App *cmd = app.add_subcommand(
      "jobs",
      "List the daemon's running and recent jobs, their tasks and where they ran");
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [json, &global] { return runJobs(global, *json); };
}

CommandRunner addExplainCommand(CLI::App &app, GlobalOptions &global) {
  auto json = std::make_shared<bool>(false);
  auto job = std::make_shared<std::string>();
  CLI::App *cmd = app.add_subcommand(
      "explain", "Say why a past job hit or missed the cache: which entry answered, or "
                 "what differs from the nearest entry for its model");
  cmd->add_option("job", *job, "The job id (flowc jobs, submit --json)")->required();
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [json, job, &global] { return runExplain(global, *job, *json); };
}

CommandRunner addCancelCommand(CLI::App &app, GlobalOptions &global) {
  auto json = std::make_shared<bool>(false);
  auto job = std::make_shared<std::string>();
  CLI::App *cmd = app.add_subcommand(
      "cancel", "Cancel a queued or running job: its worker is stopped, its queued "
                "tasks dropped, and every client following it ends with CANCELLED");
  cmd->add_option("job", *job, "The job id (flowc jobs, submit --json)")->required();
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [json, job, &global] { return runCancel(global, *job, *json); };
}

CommandRunner addTraceCommand(CLI::App &app, GlobalOptions &global) {
  auto job = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  CLI::App *cmd = app.add_subcommand(
      "trace", "Fetch a job's trace in Chrome trace-event format (phases, passes, "
               "each kernel's compile), for Perfetto or chrome://tracing");
  cmd->add_option("job", *job, "The job id (flowc jobs, submit --json)")->required();
  cmd->add_option("-o,--output", *output, "Write the trace here (default: stdout)");
  return [job, output, &global] { return runTrace(global, *job, *output); };
}

CommandRunner addWorkersCommand(CLI::App &app, GlobalOptions &global) {
  auto json = std::make_shared<bool>(false);
  CLI::App *cmd = app.add_subcommand(
      "workers", "Show the local worker processes and the remote executor's state");
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [json, &global] { return runWorkers(global, *json); };
}

} // namespace flowc::cli
