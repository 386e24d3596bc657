// flowc watch MODEL.onnx [MORE...] [-o OUT] [--run --input NAME=FILE.npy ...]:
// compiles each model at start and again after every save (docs/watch.md).
//
// The main thread owns the watches and the models' state: it polls the
// inotify descriptor, a self-pipe the signal handler writes and an eventfd
// the compile threads write when they end. Each compile runs on a thread of
// its own (the client's submit is a blocking stream), so that a newer save
// can cancel it from the main thread.
#include "Commands.h"
#include "PlaceArtifact.h"
#include "RemoteSubmit.h"
#include "RuntimeModule.h"
#include "Submit.h"

#include "flowc/support/SafeOpen.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace flowc::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// The quiet period after a model's last file event before it compiles: an
/// editor's save (temp file + rename, or truncate + write) is over well
/// within it, and it adds little to the save-to-artifact time.
constexpr int kDefaultDebounceMs = 150;
/// How often a directory watch that was lost (directory removed, or not
/// there yet) is tried again.
constexpr auto kRewatchInterval = std::chrono::seconds(1);
/// Reconnect backoff while the daemon is unavailable: the first wait and
/// the ceiling it doubles up to.
constexpr auto kFirstBackoff = std::chrono::milliseconds(200);
constexpr auto kMaxBackoff = std::chrono::seconds(5);
/// How long an exit waits for cancelled compiles to return.
constexpr auto kExitGrace = std::chrono::seconds(3);
/// What the watches report: every step of a save, of a rename over the
/// file, of a delete; IN_ATTRIB for `touch`.
constexpr uint32_t kWatchMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF |
                                IN_MOVE_SELF | IN_ONLYDIR;

struct WatchOptions {
  std::vector<std::string> models;
  std::string output;
  CompileFlags compile;
  bool json = false;
  bool run = false;
  std::vector<std::string> inputs;
  size_t printCount = 8;
  int threads = 0;
  int debounceMs = kDefaultDebounceMs;
};

/// `message` on one line: what a consumer reading lines needs.
std::string fixed3(double value) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << value;
  return out.str();
}

/// Whole lines to the user, from any thread: text, or with --json one JSON
/// object per line on stdout (docs/watch.md).
class Reporter {
public:
  explicit Reporter(bool json) : json_(json) {}

  /// `event` on stdout with --json; else `text` on stdout, or on stderr
  /// where `toStderr` (errors and notices, as every flowc command does).
  void say(const nlohmann::json &event, const std::string &text, bool toStderr = false) {
    std::lock_guard lock(mu_);
    if (json_) {
      // Messages may quote bytes of a hostile model: never throw on them.
      std::cout << event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << std::endl;
      return;
    }
    (toStderr ? std::cerr : std::cout) << text << std::endl;
  }

private:
  std::mutex mu_;
  const bool json_;
};

/// The daemon connection the compile threads share. A connection whose
/// call failed with Unavailable is replaced by a new one (a fresh channel
/// sees a restarted daemon at once, where the old one would wait out gRPC's
/// reconnect backoff); connecting starts flowcd as `flowc submit` does,
/// unless FLOWC_AUTOSTART=0. Thread-safe.
class Connection {
public:
  Connection(GlobalOptions global, std::shared_ptr<Reporter> reporter)
      : global_(std::move(global)), reporter_(std::move(reporter)) {}

  /// The current client, connecting when there is none. Unavailable when no
  /// daemon answers; InvalidArgument / FailedPrecondition for a bad
  /// --daemon, TLS file or socket owner.
  Expected<std::shared_ptr<DaemonClient>> get() {
    std::lock_guard lock(mu_);
    if (client_)
      return client_;
    auto client = DaemonClient::connect(global_, /*autostart=*/true);
    if (!client)
      return client.status();
    client_ = std::shared_ptr<DaemonClient>(client.takeValue());
    return client_;
  }

  /// Drops `failed` (null: a connect that failed) if it still is the
  /// current client, and says once per outage that the daemon is away.
  void lost(const std::shared_ptr<DaemonClient> &failed, const Status &why) {
    std::lock_guard lock(mu_);
    if (failed && failed == client_)
      client_.reset();
    if (down_)
      return;
    down_ = true;
    std::string message = oneLine(why.message());
    reporter_->say({{"event", "daemon_unavailable"}, {"message", message}},
                   "flowc: watch: daemon unavailable (" + message +
                       "); reconnecting and compiling again when it answers",
                   /*toStderr=*/true);
  }

  /// A call succeeded: the next outage is reported again.
  void up() {
    std::lock_guard lock(mu_);
    down_ = false;
  }

private:
  const GlobalOptions global_;
  const std::shared_ptr<Reporter> reporter_;
  std::mutex mu_;
  std::shared_ptr<DaemonClient> client_;
  bool down_ = false;
};

/// What one compile came to.
struct Outcome {
  bool cancelled = false;
  Status error;
  flowc::v1::CompileResult result;
  std::string transfer;
  /// From the submit to the artifact in place.
  double seconds = 0;
  /// The model's external-data files, read again after a success (an edit
  /// can add one); absent when the model could not be scanned.
  std::optional<std::vector<std::string>> dataFiles;
  std::optional<nlohmann::json> run;
  Status runError;
};

/// What a compile needs, copied for its thread.
struct CompileSpec {
  GlobalOptions global;
  SubmitSpec submit;
  std::string output;
  std::optional<RunOptions> run;
};

/// One compile on its own thread; the main thread cancels it and reads
/// `outcome` once `done` is set.
class Job {
public:
  /// Cancels the submit in flight (or the next one, or a backoff wait).
  void cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    if (context_)
      context_->TryCancel();
    wake_.notify_all();
  }
  bool cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }
  /// Registers the submit in flight; false if the job is cancelled already.
  bool attach(grpc::ClientContext *context) {
    std::lock_guard lock(mu_);
    context_ = cancelled_ ? nullptr : context;
    return !cancelled_;
  }
  void detach() {
    std::lock_guard lock(mu_);
    context_ = nullptr;
  }
  /// Waits `delay`; true if cancelled meanwhile.
  bool sleepUnlessCancelled(Clock::duration delay) {
    std::unique_lock lock(mu_);
    return wake_.wait_for(lock, delay, [&] { return cancelled_; });
  }

  std::atomic<bool> done{false};
  Outcome outcome;

private:
  std::mutex mu_;
  std::condition_variable wake_;
  bool cancelled_ = false;
  grpc::ClientContext *context_ = nullptr;
};

/// Submits until the daemon answers (reconnecting with backoff while it is
/// unavailable), places the artifact, then re-reads the external-data list
/// and runs the artifact if asked.
Outcome compile(Job &job, const CompileSpec &spec, Connection &connection) {
  Outcome outcome;
  auto backoff = std::chrono::duration_cast<Clock::duration>(kFirstBackoff);
  while (true) {
    if (job.cancelled()) {
      outcome.cancelled = true;
      return outcome;
    }
    auto client = connection.get();
    Status failed = client.status();
    if (client) {
      auto start = Clock::now();
      grpc::ClientContext context;
      if (!job.attach(&context)) {
        outcome.cancelled = true;
        return outcome;
      }
      auto reply = submitModel(**client, spec.global, spec.submit, context, nullptr);
      job.detach();
      if (job.cancelled()) {
        outcome.cancelled = true;
        return outcome;
      }
      if (reply && reply->result) {
        auto transfer = fetchArtifact(**client, *reply->result, spec.output);
        if (transfer) {
          connection.up();
          outcome.result = *reply->result;
          outcome.transfer = *transfer;
          outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
          break;
        }
        failed = transfer.status();
      } else {
        failed = reply ? internalError("the daemon sent no result for '" +
                                       spec.submit.model + "'")
                       : reply.status();
      }
    }
    if (failed.code() != StatusCode::Unavailable) {
      // The daemon answered (a bad model is its answer): it is up.
      if (client)
        connection.up();
      outcome.error = failed;
      return outcome;
    }
    connection.lost(client ? *client : nullptr, failed);
    if (job.sleepUnlessCancelled(backoff)) {
      outcome.cancelled = true;
      return outcome;
    }
    backoff =
        std::min(backoff * 2, std::chrono::duration_cast<Clock::duration>(kMaxBackoff));
  }
  if (auto files = externalDataFiles(spec.submit.model))
    outcome.dataFiles = files.takeValue();
  if (!spec.run || job.cancelled())
    return outcome;
  auto module = runtimeModule();
  if (!module) {
    outcome.runError = module.status();
    return outcome;
  }
  GlobalOptions global = spec.global;
  auto run = (*module)->runSummary(*spec.run, global);
  if (run)
    outcome.run = run.takeValue();
  else
    outcome.runError = run.status();
  return outcome;
}

/// What a file was when its model's compile started; an IN_ATTRIB event
/// counts as a save only if it changed (a chmod, or another process's hard
/// link to the file, is not an edit; `touch` is).
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtimeNs = 0;
  bool operator==(const FileIdentity &) const = default;
};

std::optional<FileIdentity> identityOf(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return std::nullopt;
  return FileIdentity{st.st_dev, st.st_ino, st.st_size,
                      st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec};
}

/// Why a compile started.
enum class Trigger { Start, Save, Retry };

const char *triggerName(Trigger trigger) {
  switch (trigger) {
  case Trigger::Start:
    return "start";
  case Trigger::Save:
    return "save";
  case Trigger::Retry:
    return "retry";
  }
  return "save";
}

/// A watched model, owned by the main thread.
struct Model {
  std::string path;    ///< Absolute, normalized.
  std::string display; ///< As given on the command line, for messages.
  std::string output;
  /// The model and its external-data files: the paths whose events count.
  std::set<std::string> files;
  std::map<std::string, FileIdentity> identities;
  /// When it compiles next (the end of the quiet period); none: no change.
  std::optional<Clock::time_point> due;
  Trigger trigger = Trigger::Start;
  /// The last event of the save that `due` is for.
  std::optional<Clock::time_point> savedAt;
  /// The DataLoss retry ("changed while it was read") was used.
  bool retried = false;
  /// Said that the model is missing; said again only after it came back.
  bool waiting = false;

  std::shared_ptr<Job> job;
  std::thread thread;
  bool cancelling = false;
  Trigger jobTrigger = Trigger::Start;
  std::optional<Clock::time_point> jobSavedAt;
};

/// inotify watches on directories (editors replace a file by rename, which
/// a watch on the file itself would not survive). Main thread only.
class DirectoryWatches {
public:
  Status open() {
    fd_ = UniqueFd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!fd_)
      return errnoStatus(errno, "cannot start inotify (watch)");
    return Status::ok();
  }
  int fd() const { return fd_.get(); }

  /// Watches `dir` unless it is watched; a directory that cannot be watched
  /// now is tried again by retryLost(). An error only for a limit reached
  /// (ENOSPC: fs.inotify.max_user_watches) or no permission.
  Status add(const std::string &dir) {
    if (wds_.count(dir))
      return Status::ok();
    int wd = ::inotify_add_watch(fd_.get(), dir.c_str(), kWatchMask);
    if (wd < 0) {
      if (errno == ENOSPC || errno == EACCES)
        return errnoStatus(errno, "cannot watch directory '" + dir + "'");
      lost_.insert(dir);
      return Status::ok();
    }
    lost_.erase(dir);
    wds_[dir] = wd;
    dirs_[wd] = dir;
    return Status::ok();
  }

  bool anyLost() const { return !lost_.empty(); }

  /// Watches the lost directories again; returns those watched anew (what
  /// changed in them meanwhile was not seen).
  std::vector<std::string> retryLost() {
    std::vector<std::string> back;
    std::set<std::string> lost = lost_;
    for (const std::string &dir : lost)
      if (add(dir).isOk() && wds_.count(dir))
        back.push_back(dir);
    return back;
  }

  /// Reads every pending event: `onFile(path, mask)` for an event on a
  /// directory entry, `onDirectory(dir)` for a directory that went away
  /// (its watch is then retried), `onOverflow()` when the kernel dropped
  /// events.
  void drain(const std::function<void(const std::string &, uint32_t)> &onFile,
             const std::function<void(const std::string &)> &onDirectory,
             const std::function<void()> &onOverflow) {
    alignas(inotify_event) char buffer[64 * 1024];
    while (true) {
      ssize_t n = ::read(fd_.get(), buffer, sizeof buffer);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return;
      for (ssize_t at = 0; at < n;) {
        const auto *event = reinterpret_cast<const inotify_event *>(buffer + at);
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        if (event->mask & IN_Q_OVERFLOW) {
          onOverflow();
          continue;
        }
        auto dir = dirs_.find(event->wd);
        if (dir == dirs_.end())
          continue;
        if (event->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
          // Moved or removed: the watch no longer follows that path.
          std::string path = dir->second;
          if (!(event->mask & IN_IGNORED))
            (void)::inotify_rm_watch(fd_.get(), event->wd);
          wds_.erase(path);
          dirs_.erase(dir);
          lost_.insert(path);
          onDirectory(path);
          continue;
        }
        if (event->len == 0)
          continue;
        onFile(dir->second + "/" + std::string(event->name), event->mask);
      }
    }
  }

private:
  UniqueFd fd_;
  std::map<std::string, int> wds_;
  std::map<int, std::string> dirs_;
  std::set<std::string> lost_;
};

/// The signal handler's end of the self-pipe (a handler, not a blocked mask
/// and signalfd: a blocked mask would pass on to the flowcd this command
/// may start).
int signalPipeWrite = -1;

extern "C" void onStopSignal(int signal) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signal);
  (void)!::write(signalPipeWrite, &byte, 1);
  errno = saved;
}

Status installStopSignals(UniqueFd &readEnd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    return errnoStatus(errno, "cannot create a pipe (watch)");
  readEnd = UniqueFd(fds[0]);
  signalPipeWrite = fds[1];
  struct sigaction action = {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (::sigaction(SIGINT, &action, nullptr) != 0 ||
      ::sigaction(SIGTERM, &action, nullptr) != 0)
    return errnoStatus(errno, "cannot handle SIGINT/SIGTERM (watch)");
  return Status::ok();
}

/// The artifact path of each model: -o OUT with one model; with several,
/// -o names a directory (made if missing) holding MODEL_STEM.fca each;
/// without -o, MODEL_STEM.fca here, as `flowc submit` does.
Expected<std::vector<std::string>> outputPaths(const WatchOptions &options,
                                               const std::vector<std::string> &models) {
  std::vector<std::string> outputs;
  if (models.size() == 1) {
    outputs.push_back(options.output.empty()
                          ? fs::path(models[0]).stem().string() + ".fca"
                          : options.output);
    FLOWC_RETURN_IF_ERROR(checkOutputPath(outputs[0]));
    return outputs;
  }
  if (!options.output.empty()) {
    std::error_code ec;
    fs::create_directories(options.output, ec);
    if (!fs::is_directory(options.output, ec))
      return invalidArgument("-o '" + options.output +
                             "' must be a directory when watching several models "
                             "(each artifact is DIR/MODEL_STEM.fca)");
  }
  std::map<std::string, std::string> byOutput;
  for (const std::string &model : models) {
    std::string stem = fs::path(model).stem().string() + ".fca";
    std::string output =
        options.output.empty() ? stem : (fs::path(options.output) / stem).string();
    auto [it, added] = byOutput.emplace(output, model);
    if (!added)
      return invalidArgument("'" + it->second + "' and '" + model +
                             "' would both write '" + output +
                             "'; watch them in separate commands with -o each");
    FLOWC_RETURN_IF_ERROR(checkOutputPath(output));
    outputs.push_back(output);
  }
  return outputs;
}

/// Checks that each --input file exists, so that a typo fails at start and
/// not after every compile.
Status checkInputs(const std::vector<std::string> &inputs) {
  for (const std::string &spec : inputs) {
    size_t eq = spec.find('=');
    std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
    if (::access(path.c_str(), R_OK) != 0)
      return errnoStatus(errno, "--input '" + spec + "': cannot read '" + path + "'");
  }
  return Status::ok();
}

/// The text of a run's summary: a latency line, then a line per output.
std::string runText(const std::string &model, const nlohmann::json &run) {
  std::ostringstream text;
  text << "flowc: watch " << model << ": ran in " << fixed3(run["latency_ms"]) << " ms"
       << " (first run " << fixed3(run["first_run_ms"]) << " ms)";
  for (const nlohmann::json &output : run["outputs"]) {
    std::string shape;
    for (const nlohmann::json &dim : output["shape"])
      shape += (shape.empty() ? "" : "x") + std::to_string(dim.get<int64_t>());
    text << "\n  " << output["name"].get<std::string>() << " [" << shape << "] "
         << output["dtype"].get<std::string>();
    auto number = [](const nlohmann::json &value) {
      std::ostringstream out;
      if (value.is_null())
        out << "nan";
      else
        out << std::setprecision(6) << value.get<double>();
      return out.str();
    };
    text << " min " << number(output["min"]) << " max " << number(output["max"])
         << " mean " << number(output["mean"]);
    if (output["nan"].get<uint64_t>() > 0)
      text << " nan " << output["nan"].get<uint64_t>();
    text << ":";
    for (const nlohmann::json &value : output["values"])
      text << " " << number(value);
    if (output["values"].size() < output["elements"].get<uint64_t>())
      text << " ... (" << output["elements"].get<uint64_t>() << " values)";
  }
  return text.str();
}

class Watch {
public:
  Watch(WatchOptions options, GlobalOptions global)
      : options_(std::move(options)), global_(std::move(global)),
        reporter_(std::make_shared<Reporter>(options_.json)),
        connection_(std::make_shared<Connection>(global_, reporter_)),
        debounce_(std::chrono::milliseconds(options_.debounceMs)) {}

  /// Sets everything up; errors are the command's (exit code and message).
  Status start() {
    std::vector<std::string> paths;
    std::set<std::string> seen;
    for (const std::string &given : options_.models) {
      FLOWC_ASSIGN_OR_RETURN(std::string path, absoluteModelPath(given));
      if (!seen.insert(path).second)
        return invalidArgument("'" + given + "' is named twice");
      paths.push_back(path);
    }
    FLOWC_RETURN_IF_ERROR(checkInputs(options_.inputs));
    FLOWC_ASSIGN_OR_RETURN(std::vector<std::string> outputs,
                           outputPaths(options_, paths));
    // A bad --daemon, TLS file or socket owner is the command's error; a
    // daemon that does not answer is waited for like a restarting one.
    if (auto client = connection_->get();
        !client && client.status().code() != StatusCode::Unavailable)
      return client.status();
    FLOWC_RETURN_IF_ERROR(watches_.open());
    FLOWC_RETURN_IF_ERROR(installStopSignals(signals_));
    wakeFd_ = std::make_shared<UniqueFd>(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!*wakeFd_)
      return errnoStatus(errno, "cannot create an eventfd (watch)");
    for (size_t i = 0; i < paths.size(); ++i) {
      Model model;
      model.path = paths[i];
      model.display = options_.models[i];
      model.output = outputs[i];
      model.due = Clock::now();
      std::vector<std::string> data;
      if (auto files = externalDataFiles(model.path))
        data = files.takeValue();
      models_.push_back(std::move(model));
      FLOWC_RETURN_IF_ERROR(setFiles(models_.back(), data));
    }
    announce();
    return Status::ok();
  }

  /// Runs until SIGINT or SIGTERM; the exit status.
  int loop() {
    while (true) {
      startDue();
      pollfd fds[3] = {{watches_.fd(), POLLIN, 0},
                       {signals_.get(), POLLIN, 0},
                       {wakeFd_->get(), POLLIN, 0}};
      int ready = ::poll(fds, 3, timeoutMs());
      if (ready < 0 && errno != EINTR)
        return reportError(errnoStatus(errno, "watch: poll"));
      if (fds[1].revents & POLLIN)
        return stop();
      if (fds[0].revents & POLLIN)
        readEvents();
      if (fds[2].revents & POLLIN) {
        uint64_t count;
        (void)!::read(wakeFd_->get(), &count, sizeof count);
        finishJobs(/*report=*/true);
      }
      if (watches_.anyLost() && Clock::now() >= nextRewatch_) {
        nextRewatch_ = Clock::now() + kRewatchInterval;
        for (const std::string &dir : watches_.retryLost())
          changedDirectory(dir);
      }
    }
  }

private:
  /// Says what is watched, once the watches are set: a save from now on is
  /// seen.
  void announce() {
    nlohmann::json models = nlohmann::json::array();
    std::string text = "flowc: watching";
    for (const Model &model : models_) {
      models.push_back(
          {{"model", model.display},
           {"artifact", model.output},
           {"files", std::vector<std::string>(model.files.begin(), model.files.end())}});
      text += " " + model.display + " -> " + model.output;
      if (model.files.size() > 1)
        text += " (and " + std::to_string(model.files.size() - 1) + " data file" +
                (model.files.size() > 2 ? "s" : "") + ")";
      text += ";";
    }
    reporter_->say({{"event", "watching"}, {"models", std::move(models)}},
                   text + " Ctrl-C stops", /*toStderr=*/true);
  }

  /// Sets the paths whose events count for `model`: the model and `data`
  /// (relative to its directory), watching their directories.
  Status setFiles(Model &model, const std::vector<std::string> &data) {
    fs::path dir = fs::path(model.path).parent_path();
    model.files = {model.path};
    for (const std::string &relative : data)
      model.files.insert((dir / relative).lexically_normal().string());
    for (const std::string &file : model.files)
      FLOWC_RETURN_IF_ERROR(watches_.add(fs::path(file).parent_path().string()));
    return Status::ok();
  }

  void saved(Model &model) {
    model.due = Clock::now() + debounce_;
    model.savedAt = Clock::now();
    model.trigger = Trigger::Save;
    model.retried = false;
  }

  void readEvents() {
    watches_.drain(
        [&](const std::string &path, uint32_t mask) {
          for (Model &model : models_) {
            if (!model.files.count(path))
              continue;
            if (!(mask & ~IN_ATTRIB)) {
              auto known = model.identities.find(path);
              auto now = identityOf(path);
              if (known != model.identities.end() && now && *now == known->second)
                continue;
            }
            saved(model);
          }
        },
        [&](const std::string &dir) { changedDirectory(dir); },
        [&] {
          for (Model &model : models_)
            saved(model);
        });
  }

  /// A directory was replaced, removed or watched again: its files may
  /// have changed unseen.
  void changedDirectory(const std::string &dir) {
    for (Model &model : models_)
      for (const std::string &file : model.files)
        if (fs::path(file).parent_path() == dir) {
          saved(model);
          break;
        }
  }

  /// Milliseconds until the next model is due (rounded up), or until the
  /// next try of a lost watch; -1: nothing to wait for but events.
  int timeoutMs() const {
    std::optional<Clock::time_point> next;
    for (const Model &model : models_)
      if (model.due && !model.cancelling)
        next = next ? std::min(*next, *model.due) : *model.due;
    if (watches_.anyLost())
      next = next ? std::min(*next, nextRewatch_) : nextRewatch_;
    if (!next)
      return -1;
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
  }

  /// Starts the compiles that are due; cancels a running compile a newer
  /// save is due for (its end starts the new one).
  void startDue() {
    auto now = Clock::now();
    for (Model &model : models_) {
      if (!model.due || *model.due > now)
        continue;
      if (model.job) {
        if (!model.cancelling) {
          model.cancelling = true;
          model.job->cancel();
        }
        continue;
      }
      startJob(model);
    }
  }

  void startJob(Model &model) {
    model.due.reset();
    if (!identityOf(model.path)) {
      if (!model.waiting)
        reporter_->say(
            {{"event", "waiting"},
             {"model", model.display},
             {"message", "the model is gone (deleted or renamed away); "
                         "waiting for it to come back"}},
            "flowc: watch " + model.display +
                ": gone (deleted or renamed away); waiting for it to come back",
            /*toStderr=*/true);
      model.waiting = true;
      return;
    }
    model.waiting = false;
    model.identities.clear();
    for (const std::string &file : model.files)
      if (auto identity = identityOf(file))
        model.identities[file] = *identity;
    CompileSpec spec;
    spec.global = global_;
    spec.submit.model = model.path;
    spec.submit.compile = options_.compile;
    spec.output = model.output;
    if (options_.run) {
      RunOptions run;
      run.artifact = model.output;
      run.inputs = options_.inputs;
      run.printCount = options_.printCount;
      run.threads = options_.threads;
      spec.run = std::move(run);
    }
    model.job = std::make_shared<Job>();
    model.cancelling = false;
    model.jobTrigger = model.trigger;
    model.jobSavedAt = model.savedAt;
    // The thread holds what it uses: an exit that does not wait for it
    // frees nothing under it.
    model.thread = std::thread([job = model.job, spec = std::move(spec),
                                connection = connection_, wake = wakeFd_] {
      job->outcome = compile(*job, spec, *connection);
      job->done = true;
      uint64_t one = 1;
      (void)!::write(wake->get(), &one, sizeof one);
    });
  }

  void finishJobs(bool report) {
    for (Model &model : models_) {
      if (!model.job || !model.job->done)
        continue;
      model.thread.join();
      Outcome outcome = std::move(model.job->outcome);
      model.job.reset();
      model.cancelling = false;
      if (report)
        finished(model, outcome);
    }
  }

  void finished(Model &model, const Outcome &outcome) {
    nlohmann::json event = {{"model", model.display},
                            {"trigger", triggerName(model.jobTrigger)}};
    if (outcome.cancelled) {
      event["event"] = "superseded";
      reporter_->say(event, "flowc: watch " + model.display +
                                ": superseded by a newer save; compiling that");
      return;
    }
    if (!outcome.error.isOk()) {
      failed(model, outcome.error, event);
      return;
    }
    model.retried = false;
    if (outcome.dataFiles)
      if (Status watched = setFiles(model, *outcome.dataFiles); !watched.isOk())
        reporter_->say({{"event", "error"},
                        {"model", model.display},
                        {"kind", statusCodeName(watched.code())},
                        {"message", oneLine(watched.message())}},
                       "flowc: watch " + model.display +
                           ": error: " + oneLine(watched.message()),
                       /*toStderr=*/true);
    const flowc::v1::CompileResult &result = outcome.result;
    std::string kind = result.cache_hit()        ? "hit"
                       : result.code_cache_hit() ? "relinked"
                                                 : "compiled";
    std::optional<double> sinceSave;
    if (model.jobSavedAt)
      sinceSave = std::chrono::duration<double>(Clock::now() - *model.jobSavedAt).count();
    event["event"] = "compiled";
    event["result"] = kind;
    event["artifact"] = model.output;
    event["artifact_digest"] = result.artifact_digest();
    event["model_digest"] = result.model_digest();
    event["kernels_compiled"] = result.kernels_compiled();
    event["kernels_reused"] = result.kernels_reused();
    event["seconds"] = outcome.seconds;
    event["daemon_seconds"] = result.seconds();
    event["since_save_seconds"] = sinceSave ? nlohmann::json(*sinceSave) : nullptr;
    event["artifact_transfer"] = outcome.transfer;
    event["job_id"] = result.job_id();
    std::string text =
        "flowc: watch " + model.display + ": " +
        (kind == "relinked" ? "re-linked (weights only)" : kind) + ", kernels " +
        std::to_string(result.kernels_compiled()) + " compiled / " +
        std::to_string(result.kernels_reused()) + " reused, " + fixed3(outcome.seconds) +
        " s" + (sinceSave ? " (" + fixed3(*sinceSave) + " s after the save)" : "") +
        " -> " + model.output;
    reporter_->say(event, text);
    if (outcome.run) {
      nlohmann::json run = *outcome.run;
      run["event"] = "run";
      run["model"] = model.display;
      run["artifact"] = model.output;
      reporter_->say(run, runText(model.display, *outcome.run));
    } else if (options_.run && !outcome.runError.isOk()) {
      std::string message = oneLine(outcome.runError.message());
      reporter_->say({{"event", "run_error"},
                      {"model", model.display},
                      {"artifact", model.output},
                      {"kind", statusCodeName(outcome.runError.code())},
                      {"exit_code", exitCodeFor(outcome.runError.code())},
                      {"message", message}},
                     "flowc: watch " + model.display + ": run failed: " + message,
                     /*toStderr=*/true);
    }
  }

  void failed(Model &model, const Status &error, nlohmann::json &event) {
    // Read while it changed: once more after a quiet period, unprinted;
    // the next save compiles anyway.
    if (error.code() == StatusCode::DataLoss && !model.retried) {
      model.retried = true;
      if (!model.due) {
        model.due = Clock::now() + debounce_;
        model.trigger = Trigger::Retry;
        model.savedAt = model.jobSavedAt;
      }
      return;
    }
    std::error_code ec;
    bool kept = fs::exists(model.output, ec);
    std::string message = oneLine(error.message());
    event["event"] = "error";
    event["kind"] = statusCodeName(error.code());
    event["exit_code"] = exitCodeFor(error.code());
    event["message"] = message;
    event["artifact"] = kept ? nlohmann::json(model.output) : nullptr;
    reporter_->say(event,
                   "flowc: watch " + model.display + ": error: " + message +
                       (kept ? " (kept the last artifact " + model.output + ")" : ""),
                   /*toStderr=*/true);
  }

  /// Cancels the compiles in flight and waits a little for them to end.
  int stop() {
    for (Model &model : models_)
      if (model.job)
        model.job->cancel();
    auto deadline = Clock::now() + kExitGrace;
    while (std::any_of(models_.begin(), models_.end(),
                       [](const Model &model) { return model.job != nullptr; })) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        break;
      pollfd wake = {wakeFd_->get(), POLLIN, 0};
      (void)::poll(&wake, 1, static_cast<int>(left.count()));
      uint64_t count;
      (void)!::read(wakeFd_->get(), &count, sizeof count);
      finishJobs(/*report=*/false);
    }
    // What is still running holds its own state; the process exits under it.
    for (Model &model : models_)
      if (model.thread.joinable())
        model.thread.detach();
    return 0;
  }

  WatchOptions options_;
  GlobalOptions global_;
  std::shared_ptr<Reporter> reporter_;
  std::shared_ptr<Connection> connection_;
  Clock::duration debounce_;
  DirectoryWatches watches_;
  UniqueFd signals_;
  std::shared_ptr<UniqueFd> wakeFd_;
  Clock::time_point nextRewatch_ = Clock::now();
  std::vector<Model> models_;
};

/// Options that do not go together: a usage error, as CLI11's own are.
std::optional<std::string> usageError(const WatchOptions &options) {
  if (options.run && options.models.size() != 1)
    return "--run runs one model's artifact; watch one model with it";
  if (!options.run && !options.inputs.empty())
    return "--input needs --run";
  return std::nullopt;
}

int runWatch(const WatchOptions &options, GlobalOptions &global) {
  if (auto usage = usageError(options)) {
    std::cerr << "flowc: error: " << *usage << " (see flowc watch --help)" << std::endl;
    return kExitUsage;
  }
  global.resolve();
  Watch watch(options, global);
  // With --json, reportError prints the error object every command prints.
  if (Status started = watch.start(); !started.isOk())
    return reportError(started);
  return watch.loop();
}

} // namespace

CommandRunner addWatchCommand(CLI::App &app, GlobalOptions &global) {
  auto options = std::make_shared<WatchOptions>();
  CLI::App *cmd = app.add_subcommand(
      "watch", "Compile models at start and again on every save (compile-on-save)");
  cmd->add_option("models", options->models, "ONNX model files")->required();
  cmd->add_option("-o,--output", options->output,
                  "Artifact path (default: MODEL_STEM.fca); with several models, a "
                  "directory for MODEL_STEM.fca each");
  addCompileFlags(cmd, options->compile);
  addSearchBudgetFlag(cmd, options->compile);
  cmd->add_flag("--json", options->json, "Print one JSON object per line per event");
  cmd->add_flag("--run", options->run,
                "After each compile, run the artifact on --input and print its outputs' "
                "summary and latency (one model)");
  cmd->add_option("-i,--input", options->inputs,
                  "NAME=FILE.npy (float32, float16, int64, int32, int8, uint8 or bool), "
                  "once per input; with "
                  "--run");
  cmd->add_option("--print", options->printCount,
                  "Values printed per output with --run (default 8)");
  cmd->add_option("--threads", options->threads,
                  "Threads for convolutions and matrix products in --run (default: all "
                  "cores)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--debounce", options->debounceMs,
                  "Quiet milliseconds after a save's last file event before it compiles "
                  "(default 150)")
      ->check(CLI::Range(10, 60000));
  return [options, &global] { return runWatch(*options, global); };
}

} // namespace flowc::cli
