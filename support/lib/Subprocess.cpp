#include "flowc/support/Subprocess.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace flowc {

namespace {

std::vector<char *> cArgv(const std::vector<std::string> &argv) {
  std::vector<char *> out;
  for (const std::string &arg : argv)
    out.push_back(const_cast<char *>(arg.c_str()));
  out.push_back(nullptr);
  return out;
}

} // namespace

Status runProgram(const std::vector<std::string> &argv) {
  char errPath[] = "/tmp/flowc-stderr.XXXXXX";
  int errFd = mkstemp(errPath);
  if (errFd < 0)
    return errnoStatus(errno, "cannot create a temp file for " + argv[0]);
  unlink(errPath);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, errFd, STDERR_FILENO);
  pid_t pid = 0;
  auto args = cArgv(argv);
  int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    close(errFd);
    return unavailable("cannot run '" + argv[0] + "': " + std::strerror(rc));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string errors;
  char buffer[2048];
  off_t size = lseek(errFd, 0, SEEK_END);
  ssize_t n = pread(errFd, buffer, sizeof buffer, std::max<off_t>(0, size - 2048));
  if (n > 0)
    errors.assign(buffer, static_cast<size_t>(n));
  close(errFd);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return Status::ok();
  return internalError("'" + argv[0] + "' failed (status " + std::to_string(status) +
                       "): " + errors);
}

namespace {

/// An anonymous in-memory file (closed with the object).
struct MemoryFile {
  int fd = -1;
  explicit MemoryFile(const char *name) : fd(::memfd_create(name, MFD_CLOEXEC)) {}
  ~MemoryFile() {
    if (fd >= 0)
      ::close(fd);
  }
  MemoryFile(const MemoryFile &) = delete;
  MemoryFile &operator=(const MemoryFile &) = delete;

  /// The last `limit` bytes (all when 0).
  std::string read(size_t limit = 0) const {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
      return {};
    size_t size = static_cast<size_t>(st.st_size);
    size_t from = limit && size > limit ? size - limit : 0;
    std::string bytes(size - from, '\0');
    ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(from));
    bytes.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return bytes;
  }
  size_t size() const {
    struct stat st {};
    return ::fstat(fd, &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
  }
};

bool writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return ::lseek(fd, 0, SEEK_SET) == 0;
}

} // namespace

Expected<std::string> filterThroughProgram(const std::vector<std::string> &argv,
                                           std::string_view input, double timeoutSeconds,
                                           size_t maxOutput) {
  // Files, not pipes: no deadlock between feeding and draining, and the
  // output's size is known without reading it.
  MemoryFile in("flowc-stdin"), out("flowc-stdout"), err("flowc-stderr");
  if (in.fd < 0 || out.fd < 0 || err.fd < 0)
    return errnoStatus(errno, "cannot create the buffers to run " + argv[0]);
  if (!writeAll(in.fd, input))
    return errnoStatus(errno, "cannot buffer the input of " + argv[0]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.fd, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.fd, STDERR_FILENO);
  pid_t pid = 0;
  auto args = cArgv(argv);
  int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return unavailable("cannot run '" + argv[0] + "': " + std::strerror(rc));
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
  int status = 0;
  bool killed = false;
  for (;;) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR))
      break;
    if (!killed &&
        (std::chrono::steady_clock::now() > deadline || out.size() > maxOutput)) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(killed ? 1 : 5));
  }
  if (out.size() > maxOutput)
    return Status(StatusCode::ResourceExhausted, "'" + argv[0] + "' wrote more than " +
                                                     std::to_string(maxOutput) +
                                                     " bytes");
  if (killed)
    return Status(StatusCode::Unavailable, "'" + argv[0] + "' took more than " +
                                               std::to_string(timeoutSeconds) +
                                               " s and was stopped");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return internalError("'" + argv[0] + "' failed (status " + std::to_string(status) +
                         "): " + err.read(2048));
  return out.read();
}

Status spawnDetached(const std::vector<std::string> &argv, const std::string &logPath) {
  int logFd = open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (logFd < 0)
    return errnoStatus(errno, "cannot open log '" + logPath + "'");
  int nullFd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, nullFd, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, logFd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, logFd, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t pid = 0;
  auto args = cArgv(argv);
  int rc = posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(logFd);
  close(nullFd);
  if (rc != 0)
    return unavailable("cannot start '" + argv[0] + "': " + std::strerror(rc));
  return Status::ok();
}

std::string executableDirectory() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

} // namespace flowc
