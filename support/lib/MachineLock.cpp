#include "flowc/support/MachineLock.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/file.h>
#include <unistd.h>

namespace flowc {

namespace {

/// This process's shared hold: one open file description, so that a
/// conversion to exclusive replaces the hold instead of waiting on it.
struct SharedHold {
  std::mutex mutex;
  std::string path;
  int fd = -1;
  int holders = 0;
};

SharedHold &sharedHold() {
  static SharedHold hold;
  return hold;
}

int openLockFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    spdlog::warn("working without the machine lock '{}': {}", path, std::strerror(errno));
  return fd;
}

} // namespace

std::string machineLockPath() {
  return "/tmp/flowc-machine-" + std::to_string(::getuid()) + ".lock";
}

SharedMachineLock::SharedMachineLock(const std::string &path) {
  SharedHold &hold = sharedHold();
  std::lock_guard lock(hold.mutex);
  if (hold.holders++ > 0 || path.empty())
    return;
  hold.path = path;
  hold.fd = openLockFile(path);
  if (hold.fd >= 0 && ::flock(hold.fd, LOCK_SH) != 0) {
    spdlog::warn("working without the machine lock '{}': {}", path, std::strerror(errno));
    ::close(hold.fd);
    hold.fd = -1;
  }
}

SharedMachineLock::~SharedMachineLock() {
  SharedHold &hold = sharedHold();
  std::lock_guard lock(hold.mutex);
  if (--hold.holders > 0)
    return;
  if (hold.fd >= 0)
    ::close(hold.fd);
  hold.fd = -1;
  hold.path.clear();
}

ExclusiveMachineLock::ExclusiveMachineLock(const std::string &path) {
  if (path.empty())
    return;
  SharedHold &hold = sharedHold();
  {
    std::lock_guard lock(hold.mutex);
    // flock converts by dropping the shared lock first: two processes
    // converting at once cannot wait on each other.
    if (hold.fd >= 0 && hold.path == path) {
      converted_ = ::flock(hold.fd, LOCK_EX) == 0;
      if (converted_)
        return;
    }
  }
  ownFd_ = openLockFile(path);
  if (ownFd_ >= 0 && ::flock(ownFd_, LOCK_EX) != 0) {
    spdlog::warn("measuring without the machine lock '{}': {}", path,
                 std::strerror(errno));
    ::close(ownFd_);
    ownFd_ = -1;
  }
}

ExclusiveMachineLock::~ExclusiveMachineLock() {
  if (converted_) {
    SharedHold &hold = sharedHold();
    std::lock_guard lock(hold.mutex);
    if (hold.fd >= 0)
      ::flock(hold.fd, LOCK_SH);
  }
  if (ownFd_ >= 0)
    ::close(ownFd_);
}

} // namespace flowc
