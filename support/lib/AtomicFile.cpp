#include "flowc/support/AtomicFile.h"

#include "flowc/support/MappedFile.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc {

namespace {

/// Distinguishes the temp files of one process's threads.
std::atomic<uint64_t> nextTemp{0};

/// write(2) copying from a mapping whose file shrank fails with EFAULT
/// (where reading the page would raise SIGBUS): name the file that shrank.
Status sourceFault(std::string_view bytes, const std::string &path) {
  char source[256];
  if (MappedFile::nameOfAddress(bytes.data(), source, sizeof source) == 0)
    return errnoStatus(EFAULT, "cannot write '" + path + "'");
  return dataLoss(std::string(source) +
                  ": the file shrank while it was being read (truncated or rewritten in "
                  "place); nothing of it was kept");
}

} // namespace

Status writeAll(int fd, std::string_view bytes, const std::string &path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EFAULT)
      return sourceFault(bytes, path);
    if (n < 0)
      return errnoStatus(errno, "cannot write '" + path + "'");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::ok();
}

const char *fileKindName(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  return "a file";
}

Expected<AtomicFile> AtomicFile::create(const std::string &path, mode_t mode) {
  // The rename would replace a device or a pipe by a file (as root, even
  // /dev/null): only files are replaced.
  struct stat existing;
  if (::stat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode))
    return failedPrecondition("'" + path + "' is " + fileKindName(existing.st_mode) +
                              ", not a file: it is not replaced");
  std::string prefix = path + ".tmp." + std::to_string(::getpid()) + ".";
  // A name left by a killed process with a reused pid is skipped, not
  // truncated: O_EXCL never writes into someone else's file.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string tempPath = prefix + std::to_string(nextTemp.fetch_add(1));
    int fd = ::open(tempPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0)
      return AtomicFile(path, std::move(tempPath), fd);
    if (errno != EEXIST)
      return errnoStatus(errno, "cannot create '" + tempPath + "'");
  }
  return internalError("cannot create a temp file '" + prefix + "N': 100 names taken");
}

AtomicFile::AtomicFile(AtomicFile &&other) noexcept
    : path_(std::move(other.path_)), tempPath_(std::move(other.tempPath_)),
      fd_(other.fd_), committed_(other.committed_) {
  other.fd_ = -1;
  other.committed_ = true; // The moved-from object owns no file.
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!committed_)
    ::unlink(tempPath_.c_str());
}

Status AtomicFile::write(std::string_view bytes) {
  return writeAll(fd_, bytes, tempPath_);
}

Status AtomicFile::commit() {
  if (::fsync(fd_) != 0)
    return errnoStatus(errno, "cannot fsync '" + tempPath_ + "'");
  int closed = ::close(fd_);
  fd_ = -1;
  // A delayed write error (NFS, a full thin volume) surfaces at close.
  if (closed != 0)
    return errnoStatus(errno, "cannot close '" + tempPath_ + "'");
  if (::rename(tempPath_.c_str(), path_.c_str()) != 0)
    return errnoStatus(errno, "cannot rename '" + tempPath_ + "' to '" + path_ + "'");
  committed_ = true;
  return Status::ok();
}

} // namespace flowc
