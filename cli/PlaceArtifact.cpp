#include "PlaceArtifact.h"

#include "flowc/support/AtomicFile.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <iostream>
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

/// Writes the cache file `source` into the device or pipe `target`.
Status writeInto(const std::string &source, uint64_t size, const std::string &target,
                 bool fifo) {
  int in = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return errnoStatus(errno, "cannot read the cached artifact '" + source + "'");
  Expected<int> out = openWritten(target, fifo);
  if (!out) {
    ::close(in);
    return out.status();
  }
  Status status = Status::ok();
  char buffer[1 << 16];
  for (uint64_t done = 0; done < size && status;) {
    ssize_t got = ::read(in, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      status = errnoStatus(got < 0 ? errno : EIO, "cannot read the cached artifact");
      break;
    }
    status = writeAll(*out, std::string_view(buffer, static_cast<size_t>(got)), target);
    done += static_cast<uint64_t>(got);
  }
  ::close(in);
  ::close(*out);
  return status;
}

} // namespace

void reportToStderrIfStandardOutput(const std::string &output) {
  struct stat target, standardOutput;
  if (output.empty() || ::stat(output.c_str(), &target) != 0 ||
      ::fstat(STDOUT_FILENO, &standardOutput) != 0 || S_ISREG(target.st_mode))
    return;
  if (target.st_dev == standardOutput.st_dev && target.st_ino == standardOutput.st_ino)
    std::cout.rdbuf(std::cerr.rdbuf());
}

Expected<int> openWritten(const std::string &target, bool fifo) {
  int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
  if (fd < 0)
    return errnoStatus(errno, fifo && errno == ENXIO
                                  ? "cannot write '" + target + "': no process reads it"
                                  : "cannot write '" + target + "'");
  if (fifo && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    int error = errno;
    ::close(fd);
    return errnoStatus(error, "cannot write '" + target + "'");
  }
  return fd;
}

Expected<std::optional<bool>> existingStream(const std::string &target) {
  struct stat existing;
  if (::stat(target.c_str(), &existing) != 0 || S_ISREG(existing.st_mode))
    return std::optional<bool>();
  if (S_ISCHR(existing.st_mode) || S_ISFIFO(existing.st_mode))
    return std::optional<bool>(S_ISFIFO(existing.st_mode));
  return invalidArgument("-o '" + target + "' is " + fileKindName(existing.st_mode) +
                         "; name the artifact file (or a character device or pipe to "
                         "write it into)");
}

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
  case Placement::Written:
    return "written";
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
  // A device or a pipe (-o /dev/null, -o /dev/stdout) gets the bytes: a
  // rename would replace it by the file.
  FLOWC_ASSIGN_OR_RETURN(std::optional<bool> stream, existingStream(target));
  if (stream) {
    FLOWC_RETURN_IF_ERROR(writeInto(source, size, target, *stream));
    return Placement::Written;
  }

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
  FLOWC_ASSIGN_OR_RETURN(std::optional<bool> stream, existingStream(output));
  if (stream)
    return Status::ok();
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
