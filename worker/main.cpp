// flowc-worker: runs work for flowcd in a process of its own, so that a
// crash, a runaway allocation or a hang in the compiler costs that work
// alone. Two modes:
//  - a job: flowcd starts it with no arguments, writes a WorkerTask to its
//    stdin and reads WorkerReply frames from fd 3 (see WorkerProtocol.h);
//    a compile's plan and codegen tasks go back to flowcd to run on its
//    executors, and their results come in on stdin.
//  - a task: `flowc-worker task --input DIR --output DIR` runs one compile
//    task (Tasks.h), as a REAPI engine runs it.
//  - a pooled task process: `flowc-worker serve` runs the task directories
//    the daemon's local pool sends it (WorkerTask.task_directory on stdin,
//    a task_done or error reply on fd 3 each, after the progress frames of
//    a plan task's passes), one after another, so a task costs no process
//    start.
#include "flowc/cache/Cache.h"
#include "flowc/runtime/BuildInfo.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/PhysicalMemory.h"
#include "flowc/worker/CompileExecutor.h"
#include "flowc/worker/RequestValidation.h"
#include "flowc/worker/WorkerProtocol.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <optional>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace {

using namespace flowc;

constexpr int kExitUsage = 2;
/// A task for another build: this worker must not answer it.
constexpr int kExitWrongBuild = 3;
/// The exit status after a SIGBUS was reported as DataLoss.
constexpr int kExitDataLoss = 75;

/// Appends a protobuf varint to `out` (no allocation).
size_t putVarint(uint64_t value, char *out) {
  size_t n = 0;
  do {
    char byte = static_cast<char>(value & 0x7f);
    value >>= 7;
    out[n++] = static_cast<char>(byte | (value ? 0x80 : 0));
  } while (value);
  return n;
}

/// A file shrank under a mapping (truncated or rewritten in place while it
/// was read): report DataLoss naming it, then end. Async-signal-safe: the
/// reply is encoded by hand into stack buffers.
void onBusError(int, siginfo_t *info, void *) {
  char path[256];
  size_t pathLength = MappedFile::nameOfAddress(info->si_addr, path, sizeof path);
  char message[512];
  size_t length = 0;
  auto append = [&](const char *text, size_t size) {
    size = std::min(size, sizeof message - length);
    std::memcpy(message + length, text, size);
    length += size;
  };
  if (pathLength == 0)
    append("a mapped file", 13);
  else
    append(path, pathLength);
  static const char kWhy[] = ": the file shrank while it was being read (truncated or "
                             "rewritten in place); the job is abandoned";
  append(kWhy, sizeof kWhy - 1);
  // WorkerError{code = 1, message = 2} inside WorkerReply{error = 5}.
  char error[600];
  size_t e = 0;
  error[e++] = 0x08;
  e += putVarint(static_cast<uint64_t>(StatusCode::DataLoss), error + e);
  error[e++] = 0x12;
  e += putVarint(length, error + e);
  std::memcpy(error + e, message, length);
  e += length;
  char frame[640];
  size_t f = 4;
  frame[f++] = 0x2a;
  f += putVarint(e, frame + f);
  std::memcpy(frame + f, error, e);
  f += e;
  uint32_t size = static_cast<uint32_t>(f - 4);
  for (int i = 0; i < 4; ++i)
    frame[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  ssize_t ignored = ::write(worker::kWorkerReplyFd, frame, f);
  (void)ignored;
  _exit(kExitDataLoss);
}

void installBusErrorHandler() {
  struct sigaction action = {};
  action.sa_sigaction = onBusError;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

/// Caps this process's heap at three quarters of the machine's memory, so
/// that a runaway allocation fails here (std::bad_alloc, reported as
/// ResourceExhausted) before the kernel's OOM killer picks a victim.
/// Mappings of files are not counted (RLIMIT_DATA covers private writable
/// memory only), so weights of any size still map.
void capHeap(rlim_t explicitCap = 0) {
  // Should the machine still run out of memory, the kernel's OOM killer
  // takes a worker (one task lost) before the daemon (every client's).
  if (FILE *adjust = std::fopen("/proc/self/oom_score_adj", "w")) {
    std::fputs("500", adjust);
    std::fclose(adjust);
  }
  std::optional<uint64_t> memory = physicalMemory();
  if (!memory)
    return;
  rlim_t cap = static_cast<rlim_t>(*memory / 4 * 3);
  if (explicitCap > 0)
    cap = std::min(cap, explicitCap);
  rlimit limit;
  if (getrlimit(RLIMIT_DATA, &limit) != 0 || limit.rlim_cur <= cap)
    return;
  limit.rlim_cur = cap;
  setrlimit(RLIMIT_DATA, &limit);
}

Status send(const flowc::v1::WorkerReply &reply) {
  return worker::writeFrame(worker::kWorkerReplyFd, reply);
}

Status runSubmit(const flowc::v1::WorkerTask &task) {
  FLOWC_ASSIGN_OR_RETURN(worker::CompileRequest request,
                         worker::validateSubmitRequest(task.submit()));
  cache::CacheOptions options;
  if (task.cache_max_bytes())
    options.maxBytes = task.cache_max_bytes();
  if (task.cache_read_only())
    options.access = cache::CacheAccess::ReadOnly;
  // Temp files count as the daemon's: a daemon killed with its workers
  // leaves none that its successor keeps.
  options.tempOwner = getppid();
  FLOWC_ASSIGN_OR_RETURN(auto cache, cache::Cache::open(task.cache_dir(), options));
  // The daemon evicts once no worker runs: pins live in each process, so a
  // worker cannot see what another one is using.
  worker::DaemonTaskRunner tasks;
  worker::CompileExecutor executor(*cache, FLOWC_BUILD_ID,
                                   worker::CompileExecutor::Eviction::Never, &tasks);
  // The remote tier, when the daemon has one that is not backing off; a
  // configuration that cannot be used means a local compile, not a failure.
  std::unique_ptr<worker::RemoteTier> tier;
  // A read-only local cache cannot take what the remote would give.
  if (task.has_remote_cache() && !task.cache_read_only()) {
    auto options = worker::fromProto(task.remote_cache());
    auto opened = options
                      ? worker::RemoteTier::open(*cache, *options)
                      : Expected<std::unique_ptr<worker::RemoteTier>>(options.status());
    if (opened)
      tier = std::move(*opened);
    else
      spdlog::warn("remote cache not used: {}", opened.status().message());
  }
  executor.setRemoteTier(tier.get());
  executor.setRemoteGpus({{task.remote_gpus().begin(), task.remote_gpus().end()},
                          task.remote_gpus_measure()});
  auto progress = [](const worker::ProgressEvent &event) {
    flowc::v1::WorkerReply reply;
    worker::toProto(event, *reply.mutable_progress());
    if (Status sent = send(reply); !sent)
      _exit(1); // The daemon went away: nobody wants the answer.
  };
  FLOWC_ASSIGN_OR_RETURN(worker::CompileResult result,
                         executor.compile(request, progress));
  if (tier)
    result.remote = tier->counters();
  flowc::v1::WorkerReply reply;
  worker::toProto(result, *reply.mutable_result());
  return send(reply);
}

Status runInspect(const flowc::v1::WorkerTask &task) {
  FLOWC_ASSIGN_OR_RETURN(compiler::InputShapes shapes,
                         worker::validateInspectRequest(task.inspect()));
  flowc::v1::WorkerReply reply;
  FLOWC_ASSIGN_OR_RETURN(*reply.mutable_inspect(),
                         worker::inspectModel(task.inspect().model_path(), shapes));
  return send(reply);
}

Status runRepro(const flowc::v1::WorkerTask &task) {
  FLOWC_ASSIGN_OR_RETURN(worker::ReproParameters parameters,
                         worker::validateReproRequest(task.repro()));
  FLOWC_ASSIGN_OR_RETURN(
      auto chunks, worker::reproChunks(task.repro().model_path(), parameters.options,
                                       parameters.inputShapes, FLOWC_BUILD_ID));
  for (flowc::v1::ReproChunk &chunk : chunks) {
    flowc::v1::WorkerReply reply;
    *reply.mutable_repro_chunk() = std::move(chunk);
    FLOWC_RETURN_IF_ERROR(send(reply));
  }
  return Status::ok();
}

Status runTask(const flowc::v1::WorkerTask &task) {
  try {
    switch (task.task_case()) {
    case flowc::v1::WorkerTask::kSubmit:
      return runSubmit(task);
    case flowc::v1::WorkerTask::kInspect:
      return runInspect(task);
    case flowc::v1::WorkerTask::kRepro:
      return runRepro(task);
    default:
      return invalidArgument("a worker task without a task");
    }
  } catch (const std::bad_alloc &) {
    return resourceExhausted("out of memory (the worker's heap is capped at 3/4 of the "
                             "machine's memory)");
  } catch (const std::exception &e) {
    return internalError(std::string("unexpected exception: ") + e.what());
  }
}

constexpr const char *kTaskUsage =
    "usage: flowc-worker task --input DIR --output DIR [--memory-limit BYTES]\n"
    "       flowc-worker serve [--memory-limit BYTES]";

/// One task directory to another; bad_alloc is this task's failure.
Status runTaskGuarded(const std::string &input, const std::string &output,
                      const worker::ProgressFn &progress = {}) {
  try {
    return worker::runTaskDirectory(input, output, FLOWC_BUILD_ID, progress);
  } catch (const std::bad_alloc &) {
    return resourceExhausted("out of memory (the task's heap limit)");
  }
}

/// Parses `[--input DIR] [--output DIR] [--memory-limit BYTES]`; the exit
/// status of a bad command line otherwise.
struct TaskFlags {
  std::string input, output;
  rlim_t memoryLimit = 0;
};

std::optional<int> parseTaskFlags(int argc, char **argv, TaskFlags &flags) {
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "flowc-worker: error: " << flag << " needs a value\n"
                << kTaskUsage << "\n";
      return kExitUsage;
    }
    std::string value = argv[++i];
    if (flag == "--input") {
      flags.input = value;
    } else if (flag == "--output") {
      flags.output = value;
    } else if (flag == "--memory-limit") {
      char *end = nullptr;
      flags.memoryLimit = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || flags.memoryLimit == 0) {
        std::cerr << "flowc-worker: error: --memory-limit: '" << value
                  << "' is not a positive number of bytes\n";
        return kExitUsage;
      }
    } else {
      std::cerr << "flowc-worker: error: unknown option '" << flag << "'\n"
                << kTaskUsage << "\n";
      return kExitUsage;
    }
  }
  return std::nullopt;
}

/// `flowc-worker task ...`: one compile task from a directory to a
/// directory. Exit 0: done; 1: the task failed (the error on stderr); 2: a
/// bad command line; 3: the task is for another build.
int runTaskCommand(int argc, char **argv) {
  TaskFlags flags;
  if (auto bad = parseTaskFlags(argc, argv, flags))
    return *bad;
  if (flags.input.empty() || flags.output.empty()) {
    std::cerr << "flowc-worker: error: --input and --output are required\n"
              << kTaskUsage << "\n";
    return kExitUsage;
  }
  capHeap(flags.memoryLimit);
  Status status = runTaskGuarded(flags.input, flags.output);
  if (status.isOk())
    return 0;
  std::cerr << "flowc-worker: error: " << status.toString() << "\n";
  return status.code() == StatusCode::FailedPrecondition ? kExitWrongBuild : 1;
}

/// `flowc-worker serve`: task directories from the daemon's pool until it
/// closes stdin.
int runServeCommand(int argc, char **argv) {
  TaskFlags flags;
  if (auto bad = parseTaskFlags(argc, argv, flags))
    return *bad;
  if (!flags.input.empty() || !flags.output.empty() || isatty(STDIN_FILENO)) {
    std::cerr << "flowc-worker: error: serve runs the tasks flowcd sends it\n"
              << kTaskUsage << "\n";
    return kExitUsage;
  }
  // No PR_SET_PDEATHSIG here: it fires when the *thread* that started this
  // process ends, and any thread of the daemon may start a pool process.
  // A daemon that dies closes this stdin: the loop ends at once, or after
  // the task in hand (whose answer then goes nowhere).
  if (getppid() == 1)
    return 1;
  capHeap(flags.memoryLimit);
  while (true) {
    flowc::v1::WorkerTask task;
    auto read = worker::readFrame(STDIN_FILENO, task);
    if (read && !*read)
      return 0; // The pool let this process go.
    if (!read || !task.has_task_directory()) {
      std::cerr << "flowc-worker: error: not a task directory on stdin"
                << (read ? "" : ": " + read.status().message()) << "\n";
      return kExitUsage;
    }
    // The task's passes go to the daemon as they end, before its
    // task_done; a daemon that stopped reading fails the task's reply too.
    bool replying = true;
    auto progress = [&](const worker::ProgressEvent &event) {
      flowc::v1::WorkerReply frame;
      worker::toProto(event, *frame.mutable_progress());
      replying = replying && send(frame).isOk();
    };
    Status status = runTaskGuarded(task.task_directory().input(),
                                   task.task_directory().output(), progress);
    if (!replying)
      return 1;
    flowc::v1::WorkerReply reply;
    if (status.isOk())
      reply.mutable_task_done();
    else
      reply = worker::errorReply(status);
    // A fault on the device poisons every later GPU task of this process:
    // it answers this one and ends, and the pool starts a fresh one.
    std::optional<Status> fault = runtime::gpuProcessFault();
    reply.set_retire(fault.has_value());
    if (!send(reply))
      return 1;
    if (fault) {
      std::cerr << "flowc-worker: ending: " << fault->message() << "\n";
      return 0;
    }
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::cout << flowc::runtime::versionText("flowc-worker");
    return 0;
  }
  spdlog::set_default_logger(spdlog::stderr_logger_st("flowc-worker"));
  spdlog::set_pattern("%l %v");
  if (argc >= 2 && std::strcmp(argv[1], "task") == 0)
    return runTaskCommand(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0)
    return runServeCommand(argc, argv);
  if (argc != 1 || isatty(STDIN_FILENO)) {
    std::cerr << "flowc-worker: error: runs jobs for flowcd, which starts it, with no "
                 "arguments (see flowcd --help); or one task:\n"
              << kTaskUsage << "\n";
    return kExitUsage;
  }
  // A worker outlives no daemon: its job has nobody to answer, and a
  // restarted daemon must be free to clean up what it leaves.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1)
    return 1;
  installBusErrorHandler();
  capHeap();
  flowc::v1::WorkerTask task;
  auto read = worker::readFrame(STDIN_FILENO, task);
  if (!read || !*read) {
    std::cerr << "flowc-worker: error: no task on stdin"
              << (read ? "" : ": " + read.status().message()) << "\n";
    return kExitUsage;
  }
  Status status = runTask(task);
  if (!status.isOk()) {
    if (Status sent = send(worker::errorReply(status)); !sent)
      return 1;
  }
  return 0;
}
