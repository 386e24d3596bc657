#include "PlaceArtifact.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <linux/fs.h>
#include <random>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc::cli {

namespace {

/// A unique name beside `target`, so the final rename stays on its filesystem.
std::string tempPathBeside(const std::string &target) {
  std::random_device random;
  return target + ".flowc-" + std::to_string(getpid()) + "-" + std::to_string(random());
}

/// Copies `in` to `out` inside the kernel; read/write where that cannot.
Status copyBytes(int in, int out, uint64_t size, const std::string &target) {
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = copy_file_range(in, nullptr, out, nullptr, size - done, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 &&
        (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
      char buffer[1 << 16];
      ssize_t got = pread(in, buffer, sizeof buffer, static_cast<off_t>(done));
      if (got <= 0)
        return errnoStatus(got < 0 ? errno : EIO, "cannot read the cached artifact");
      if (pwrite(out, buffer, static_cast<size_t>(got), static_cast<off_t>(done)) != got)
        return errnoStatus(errno, "cannot write '" + target + "'");
      done += static_cast<uint64_t>(got);
      continue;
    }
    if (n <= 0)
      return errnoStatus(n < 0 ? errno : EIO, "cannot write '" + target + "'");
    done += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

/// A reflink or a copy of `source` at `temp`; Cloned or Copied.
Expected<Placement> cloneOrCopy(const std::string &source, uint64_t size,
                                const std::string &temp, const std::string &target) {
  int in = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return errnoStatus(errno, "cannot read the cached artifact '" + source + "'");
  int out = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    int error = errno;
    ::close(in);
    return errnoStatus(error, "cannot write '" + target + "'");
  }
  Placement placement = Placement::Cloned;
  Status status = Status::ok();
  if (ioctl(out, FICLONE, in) != 0) {
    placement = Placement::Copied;
    status = copyBytes(in, out, size, target);
    if (status && fsync(out) != 0)
      status = errnoStatus(errno, "cannot fsync '" + target + "'");
  }
  ::close(in);
  if (::close(out) != 0 && status)
    status = errnoStatus(errno, "cannot write '" + target + "'");
  if (!status) {
    ::unlink(temp.c_str());
    return status;
  }
  return placement;
}

} // namespace

const char *placementName(Placement placement) {
  switch (placement) {
  case Placement::Unchanged:
    return "unchanged";
  case Placement::Linked:
    return "linked";
  case Placement::Cloned:
    return "cloned";
  case Placement::Copied:
    return "copied";
  }
  return "?";
}

Expected<Placement> placeLocalArtifact(const std::string &source, uint64_t size,
                                       const std::string &target) {
  struct stat cached;
  if (::stat(source.c_str(), &cached) != 0 || !S_ISREG(cached.st_mode) ||
      static_cast<uint64_t>(cached.st_size) != size)
    return failedPrecondition("the cached artifact '" + source +
                              "' is not readable here");
  struct stat existing;
  if (::stat(target.c_str(), &existing) == 0 && existing.st_dev == cached.st_dev &&
      existing.st_ino == cached.st_ino)
    return Placement::Unchanged;

  std::string temp = tempPathBeside(target);
  Placement placement = Placement::Linked;
  if (::link(source.c_str(), temp.c_str()) != 0) {
    // EXDEV: another filesystem; EPERM/EACCES: protected hard links or an
    // fs without them; EMLINK: too many links already.
    if (errno != EXDEV && errno != EPERM && errno != EACCES && errno != EMLINK &&
        errno != EOPNOTSUPP)
      return errnoStatus(errno, "cannot write '" + target + "'");
    FLOWC_ASSIGN_OR_RETURN(placement, cloneOrCopy(source, size, temp, target));
  }
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    int error = errno;
    ::unlink(temp.c_str());
    return errnoStatus(error, "cannot write '" + target + "'");
  }
  return placement;
}

Status checkOutputPath(const std::string &output) {
  namespace fs = std::filesystem;
  fs::path parent = fs::absolute(output).parent_path();
  std::error_code ec;
  if (fs::is_directory(output, ec))
    return invalidArgument("-o '" + output + "' is a directory; name the artifact file");
  if (!fs::is_directory(parent, ec))
    return invalidArgument(
        "cannot write -o '" + output + "': '" + parent.string() +
        (fs::exists(parent, ec) ? "' is not a directory" : "' does not exist"));
  if (::access(parent.c_str(), W_OK) != 0)
    return errnoStatus(errno,
                       "cannot write -o '" + output + "' in '" + parent.string() + "'");
  return Status::ok();
}

} // namespace flowc::cli
