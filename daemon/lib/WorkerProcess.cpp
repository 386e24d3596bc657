#include "WorkerProcess.h"

#include "flowc/support/SafeOpen.h"
#include "flowc/support/Subprocess.h"
#include "flowc/worker/WorkerProtocol.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <poll.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace flowc::daemon {

namespace {

/// How often a waiting task looks at its cancel flag.
constexpr int kPollMs = 100;
/// The worker's last log bytes kept for a crash report.
constexpr size_t kLogTailBytes = 2048;

struct Pipe {
  UniqueFd read, write;
};

Expected<Pipe> makePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return errnoStatus(errno, "cannot create a pipe for the worker");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

/// Starts the worker in a process group of its own (so that a kill takes
/// whatever it started too), with default signal handling and no blocked
/// signals (the daemon blocks its shutdown signals and ignores SIGPIPE).
Expected<pid_t> spawnWorker(const std::string &executable, int taskFd, int replyFd,
                            int logFd, const std::vector<std::string> &args = {},
                            const std::string &workingDir = "") {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (taskFd >= 0)
    posix_spawn_file_actions_adddup2(&actions, taskFd, STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, logFd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, logFd, STDERR_FILENO);
  if (replyFd >= 0)
    posix_spawn_file_actions_adddup2(&actions, replyFd, worker::kWorkerReplyFd);
  if (!workingDir.empty())
    posix_spawn_file_actions_addchdir_np(&actions, workingDir.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGUSR1, SIGBUS, SIGSEGV})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> words = {"flowc-worker"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &word : words)
    argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, executable.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return unavailable("cannot start the worker '" + executable +
                       "': " + std::strerror(rc));
  return pid;
}

/// Appends what `fd` has now to `out`; false at end of file.
bool drain(int fd, std::string &out) {
  char buffer[65536];
  while (true) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got > 0) {
      out.append(buffer, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR)
      continue;
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

/// Logs the worker's complete lines and keeps the tail for a crash report.
void relayLog(pid_t pid, std::string &pending, std::string &tail) {
  size_t newline;
  while ((newline = pending.find('\n')) != std::string::npos) {
    std::string line = pending.substr(0, newline);
    pending.erase(0, newline + 1);
    if (line.empty())
      continue;
    spdlog::info("worker pid={} {}", pid, line);
    tail = line;
  }
  if (pending.size() > kLogTailBytes)
    pending.erase(0, pending.size() - kLogTailBytes);
}

bool isFinal(const flowc::v1::WorkerReply &reply) {
  return reply.has_result() || reply.has_inspect() || reply.has_error();
}

/// The write end of a job worker's stdin, shared with the threads that
/// answer its tasks: closed once the worker is gone.
struct TaskChannel {
  std::mutex mutex;
  UniqueFd fd;

  void answer(const flowc::v1::TaskResult &result) {
    std::lock_guard lock(mutex);
    if (fd.get() < 0)
      return;
    // A worker that died meanwhile makes this fail (EPIPE): nobody waits.
    if (Status sent = worker::writeFrame(fd.get(), result); !sent)
      fd = UniqueFd();
  }
  void close() {
    std::lock_guard lock(mutex);
    fd = UniqueFd();
  }
};

} // namespace

Status deathStatus(const std::string &what, pid_t pid, int status,
                   const std::string &lastLine) {
  std::string process = what + ": the worker process (pid " + std::to_string(pid) + ")";
  std::string said = lastLine.empty() ? "" : " (its last log line: " + lastLine + ")";
  if (!WIFSIGNALED(status))
    return internalError(process + " exited with status " +
                         std::to_string(WEXITSTATUS(status)) + " before answering" +
                         said);
  int sig = WTERMSIG(status);
  if (sig == SIGKILL)
    return resourceExhausted(process +
                             " was killed (SIGKILL: most likely out of memory)" + said);
  return internalError(process + " died of " + signalName(sig) + said);
}

std::string signalName(int sig) {
  return "SIG" + std::string(sigabbrev_np(sig)) + " (" + strsignal(sig) + ")";
}

Expected<std::string> workerExecutable() {
  std::string path = executableDirectory() + "/flowc-worker";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !(st.st_mode & S_IXUSR))
    return notFound("the worker binary '" + path +
                    "' is missing (it is built and installed next to flowcd)");
  return path;
}

Status runWorkerTask(const std::string &executable, const flowc::v1::WorkerTask &task,
                     const std::string &what,
                     const std::function<void(flowc::v1::WorkerReply &&)> &onReply,
                     const std::function<bool()> &cancelled, const TaskHandler &onTask) {
  FLOWC_ASSIGN_OR_RETURN(Pipe taskPipe, makePipe());
  FLOWC_ASSIGN_OR_RETURN(Pipe replyPipe, makePipe());
  FLOWC_ASSIGN_OR_RETURN(Pipe logPipe, makePipe());
  FLOWC_ASSIGN_OR_RETURN(pid_t pid,
                         spawnWorker(executable, taskPipe.read.get(),
                                     replyPipe.write.get(), logPipe.write.get()));
  taskPipe.read = UniqueFd();
  replyPipe.write = UniqueFd();
  logPipe.write = UniqueFd();
  // A worker that dies before reading its task makes this write fail
  // (EPIPE: the daemon ignores SIGPIPE); its exit status then says why.
  Status sent = worker::writeFrame(taskPipe.write.get(), task);
  // A job's worker reads its tasks' results on stdin: it stays open.
  auto channel = std::make_shared<TaskChannel>();
  if (onTask && sent.isOk())
    channel->fd = std::move(taskPipe.write);
  taskPipe.write = UniqueFd();
  fcntl(replyPipe.read.get(), F_SETFL, O_NONBLOCK);
  fcntl(logPipe.read.get(), F_SETFL, O_NONBLOCK);

  std::string replies, log, lastLine;
  std::optional<Status> reported;
  bool replyOpen = true, logOpen = true, killed = false;
  while (replyOpen || logOpen) {
    pollfd fds[2] = {{replyOpen ? replyPipe.read.get() : -1, POLLIN, 0},
                     {logOpen ? logPipe.read.get() : -1, POLLIN, 0}};
    int ready = ::poll(fds, 2, kPollMs);
    if (ready < 0 && errno != EINTR)
      break;
    if (!killed && cancelled()) {
      ::kill(-pid, SIGKILL);
      killed = true;
    }
    if (replyOpen && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      replyOpen = drain(replyPipe.read.get(), replies);
      auto frames = worker::takeFrames(replies);
      if (!frames) {
        // A worker that writes garbage is as good as dead.
        ::kill(-pid, SIGKILL);
        killed = true;
        reported = internalError(
            what + ": the worker's reply is damaged: " + frames.status().message());
        replyOpen = false;
      } else {
        for (flowc::v1::WorkerReply &reply : *frames) {
          if (reply.has_task_request()) {
            if (onTask)
              onTask(std::move(*reply.mutable_task_request()),
                     [channel](const flowc::v1::TaskResult &result) {
                       channel->answer(result);
                     });
            continue;
          }
          if (reply.has_error() && !reported)
            reported = worker::statusOf(reply.error());
          else if (isFinal(reply) && !reported)
            reported = Status::ok();
          onReply(std::move(reply));
        }
      }
    }
    if (logOpen && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      logOpen = drain(logPipe.read.get(), log);
      relayLog(pid, log, lastLine);
    }
  }
  channel->close();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed && !reported)
    return Status(StatusCode::Cancelled, what + ": cancelled");
  if (reported)
    return *reported;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && task.has_repro())
    return Status::ok(); // A reproducer ends with its last chunk.
  if (!sent.isOk() && WIFEXITED(status))
    return internalError(what +
                         ": cannot hand the task to the worker: " + sent.message());
  Status death = deathStatus(what, pid, status, lastLine);
  if (!WIFSIGNALED(status))
    return death;
  // A job's worker is the job alone.
  return Status(death.code(),
                death.message() + "; the daemon and other jobs are unaffected" +
                    (WTERMSIG(status) == SIGKILL
                         ? ""
                         : " (a flowc bug: please report it with the model, or what "
                           "`flowc repro` makes of it)"));
}

Expected<std::unique_ptr<ServeProcess>>
ServeProcess::start(const std::string &executable, const std::vector<std::string> &args) {
  FLOWC_ASSIGN_OR_RETURN(Pipe taskPipe, makePipe());
  FLOWC_ASSIGN_OR_RETURN(Pipe replyPipe, makePipe());
  FLOWC_ASSIGN_OR_RETURN(Pipe logPipe, makePipe());
  std::vector<std::string> words = {"serve"};
  words.insert(words.end(), args.begin(), args.end());
  FLOWC_ASSIGN_OR_RETURN(pid_t pid,
                         spawnWorker(executable, taskPipe.read.get(),
                                     replyPipe.write.get(), logPipe.write.get(), words));
  fcntl(replyPipe.read.get(), F_SETFL, O_NONBLOCK);
  fcntl(logPipe.read.get(), F_SETFL, O_NONBLOCK);
  return std::unique_ptr<ServeProcess>(new ServeProcess(pid, std::move(taskPipe.write),
                                                        std::move(replyPipe.read),
                                                        std::move(logPipe.read)));
}

ServeProcess::~ServeProcess() { release(); }

void ServeProcess::release() {
  if (!alive())
    return;
  // It exits at the end of its stdin; one that does not is killed.
  task_ = UniqueFd();
  for (int i = 0; i < 20; ++i) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    ::usleep(50 * 1000);
  }
  ::kill(-pid_, SIGKILL);
  reap();
}

int ServeProcess::reap() {
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return status;
}

std::optional<ServeAnswer>
takeServeAnswer(std::vector<flowc::v1::WorkerReply> &frames,
                const std::function<void(flowc::v1::Progress &&)> &onProgress) {
  for (flowc::v1::WorkerReply &reply : frames) {
    if (reply.has_progress()) {
      if (onProgress)
        onProgress(std::move(*reply.mutable_progress()));
      continue;
    }
    if (reply.has_error())
      return ServeAnswer{worker::statusOf(reply.error()), reply.retire()};
    if (reply.has_task_done())
      return ServeAnswer{Status::ok(), reply.retire()};
  }
  return std::nullopt;
}

ServeProcess::Outcome
ServeProcess::run(const std::string &input, const std::string &output,
                  const std::function<bool()> &cancelled,
                  const std::function<void(flowc::v1::Progress &&)> &onProgress) {
  Outcome outcome;
  ++tasksRun_;
  flowc::v1::WorkerTask task;
  task.mutable_task_directory()->set_input(input);
  task.mutable_task_directory()->set_output(output);
  // A process that died while idle makes this fail (EPIPE); reaped below.
  bool sent = worker::writeFrame(task_.get(), task).isOk();
  bool replyOpen = sent, logOpen = true;
  while (replyOpen) {
    pollfd fds[2] = {{reply_.get(), POLLIN, 0}, {logOpen ? log_.get() : -1, POLLIN, 0}};
    int ready = ::poll(fds, 2, kPollMs);
    if (ready < 0 && errno != EINTR)
      break;
    if (cancelled && cancelled()) {
      ::kill(-pid_, SIGKILL);
      outcome.cancelled = true;
      break;
    }
    if (logOpen && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      logOpen = drain(log_.get(), logTail_);
      if (logTail_.size() > kLogTailBytes)
        logTail_.erase(0, logTail_.size() - kLogTailBytes);
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    replyOpen = drain(reply_.get(), replies_);
    auto frames = worker::takeFrames(replies_);
    if (!frames) {
      ::kill(-pid_, SIGKILL);
      break;
    }
    if (std::optional<ServeAnswer> answer = takeServeAnswer(*frames, onProgress)) {
      outcome.status = std::move(answer->status);
      if (answer->retire) {
        outcome.retired = true;
        release();
      }
      return outcome;
    }
  }
  // It ended (or was killed) without an answer.
  drain(log_.get(), logTail_);
  outcome.died = true;
  outcome.waitStatus = reap();
  std::string_view tail = logTail_;
  while (!tail.empty() && tail.back() == '\n')
    tail.remove_suffix(1);
  outcome.lastLine = std::string(tail.substr(tail.rfind('\n') + 1)); // npos + 1: all
  return outcome;
}

} // namespace flowc::daemon
