#include "flowc/support/Subprocess.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <spawn.h>
#include <sys/wait.h>
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
