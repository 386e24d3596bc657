// Opening files without following an attacker's symlinks: descriptors that
// close themselves, a file's identity as fstat tells it, and a path opened
// strictly beneath a directory (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
// or a component-by-component O_NOFOLLOW walk where the kernel lacks it).
// What was checked is the descriptor that is then read, never a path again.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <string>

struct stat;

namespace flowc {

/// An owned file descriptor, closed on destruction. Move-only.
class UniqueFd {
public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd &&other) noexcept : fd_(other.release()) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept;
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

private:
  int fd_ = -1;
};

/// What identifies a file's content for memoization: an unchanged identity
/// means unchanged bytes (a rewrite changes ctime even when size and mtime
/// are restored).
struct FileStat {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtimeNs = 0;
  int64_t ctimeNs = 0;

  static FileStat from(const struct stat &st);
  bool operator==(const FileStat &other) const = default;
};

/// fstat of an open descriptor; errors name `displayPath`.
Expected<FileStat> fileStatOf(int fd, const std::string &displayPath);

/// Opens `relative` read-only beneath the directory `dirFd`, refusing any
/// symlink on the way (the last component included), any `..` or absolute
/// path that would leave the directory, and magic links; O_NONBLOCK, so a
/// FIFO does not block (callers fstat and refuse what is not a regular file).
/// Uses openat2(2); on kernels without it (ENOSYS), walks the components
/// one by one with O_NOFOLLOW. Errors: InvalidArgument naming `relative` for
/// a symlink or an escape, NotFound when it does not exist, and errno's code
/// otherwise.
Expected<UniqueFd> openBeneath(int dirFd, const std::string &relative);

/// The same walk without openat2 (used by openBeneath on ENOSYS; exposed so
/// that tests cover it on kernels that have openat2).
Expected<UniqueFd> openBeneathByWalk(int dirFd, const std::string &relative);

} // namespace flowc
