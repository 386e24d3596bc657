// A private directory for one fuzzer process: the targets hand flowc real
// files (the entry points under test read paths, mmap them and resolve
// names next to them), written here on tmpfs when there is one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>

namespace flowc::fuzz {

class ScratchDir {
public:
  ScratchDir() {
    const char *tmp = std::getenv("TMPDIR");
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                       : tmp                                     ? tmp
                                                                 : "/tmp";
    std::string pattern = base + "/flowc-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      std::perror("flowc fuzz: mkdtemp");
      std::abort();
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir &) = delete;
  ScratchDir &operator=(const ScratchDir &) = delete;

  const std::string &path() const { return path_; }

  /// Replaces `name` with `bytes` (a new inode each time, as an export
  /// would make) and returns its path. Aborts on I/O errors: those are the
  /// harness's, not findings in flowc.
  std::string write(const std::string &name, std::string_view bytes) const {
    std::string file = path_ + "/" + name;
    ::unlink(file.c_str());
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::perror(("flowc fuzz: open " + file).c_str());
      std::abort();
    }
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) {
        std::perror(("flowc fuzz: write " + file).c_str());
        std::abort();
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return file;
  }

  void remove(const std::string &name) const { ::unlink((path_ + "/" + name).c_str()); }

private:
  std::string path_;
};

/// The scratch directory of this process, removed at exit.
inline const ScratchDir &scratch() {
  static ScratchDir dir;
  return dir;
}

inline std::string_view asView(const uint8_t *data, size_t size) {
  return {reinterpret_cast<const char *>(data), size};
}

} // namespace flowc::fuzz
