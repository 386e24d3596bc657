#include "flowc/support/SafeOpen.h"

#include <cerrno>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace flowc {

namespace {

constexpr int kOpenFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
/// openat2 answers EAGAIN when a rename or mount raced the lookup; a few
/// retries, then the error.
constexpr int kAgainRetries = 8;

Status symlinkRefused(const std::string &relative) {
  return invalidArgument(
      "'" + relative + "' is a symlink or passes through one; symlinks are not followed");
}

Status escapeRefused(const std::string &relative) {
  return invalidArgument("'" + relative + "' escapes the directory it must lie beneath");
}

Status openError(int err, const std::string &relative) {
  if (err == ELOOP)
    return symlinkRefused(relative);
  if (err == EXDEV)
    return escapeRefused(relative);
  return errnoStatus(err, "cannot open '" + relative + "'");
}

} // namespace

UniqueFd &UniqueFd::operator=(UniqueFd &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0)
    ::close(fd_);
}

FileStat FileStat::from(const struct stat &st) {
  FileStat id;
  id.device = st.st_dev;
  id.inode = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtimeNs = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  id.ctimeNs = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec;
  return id;
}

Expected<FileStat> fileStatOf(int fd, const std::string &displayPath) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return errnoStatus(errno, "cannot stat '" + displayPath + "'");
  return FileStat::from(st);
}

Expected<UniqueFd> openBeneathByWalk(int dirFd, const std::string &relative) {
  if (relative.empty() || relative.front() == '/')
    return escapeRefused(relative);
  std::vector<std::string> parts;
  for (size_t begin = 0; begin <= relative.size();) {
    size_t end = relative.find('/', begin);
    if (end == std::string::npos)
      end = relative.size();
    std::string part = relative.substr(begin, end - begin);
    begin = end + 1;
    if (part.empty() || part == ".")
      continue;
    if (part == "..")
      return escapeRefused(relative);
    parts.push_back(std::move(part));
  }
  if (parts.empty())
    return invalidArgument("'" + relative + "' names no file");
  // Each directory is opened from the one before with O_NOFOLLOW: a symlink
  // anywhere on the way is ELOOP, and no path is resolved twice.
  UniqueFd current;
  int at = dirFd;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    int fd =
        ::openat(at, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      // O_DIRECTORY makes a symlink ENOTDIR rather than ELOOP.
      struct stat st;
      if (err == ENOTDIR &&
          fstatat(at, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode))
        err = ELOOP;
      return openError(err, relative);
    }
    current = UniqueFd(fd);
    at = current.get();
  }
  int fd = ::openat(at, parts.back().c_str(), kOpenFlags | O_NOFOLLOW);
  if (fd < 0)
    return openError(errno, relative);
  return UniqueFd(fd);
}

Expected<UniqueFd> openBeneath(int dirFd, const std::string &relative) {
  struct open_how how = {};
  how.flags = kOpenFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    long fd = syscall(SYS_openat2, dirFd, relative.c_str(), &how, sizeof(how));
    if (fd >= 0)
      return UniqueFd(static_cast<int>(fd));
    int err = errno;
    if (err == ENOSYS)
      return openBeneathByWalk(dirFd, relative);
    if (err == EAGAIN && attempt < kAgainRetries)
      continue;
    return openError(err, relative);
  }
}

} // namespace flowc
