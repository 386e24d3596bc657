#include "flowc/support/MappedFile.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc {

MappedFile::MappedFile(MappedFile &&other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this == &other)
    return *this;
  reset();
  data_ = other.data_;
  size_ = other.size_;
  path_ = std::move(other.path_);
  other.data_ = nullptr;
  other.size_ = 0;
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_ && size_)
    munmap(const_cast<uint8_t *>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

Expected<MappedFile> MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errnoStatus(errno, "cannot open '" + path + "'");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errnoStatus(err, "cannot stat '" + path + "'");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument("'" + path + "' is not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void *addr = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      file.size_ = 0;
      return errnoStatus(err, "cannot mmap '" + path + "'");
    }
    file.data_ = static_cast<const uint8_t *>(addr);
  }
  ::close(fd);
  return file;
}

Expected<std::string> readFileToString(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  return std::string(file.view());
}

Status writeFileAtomically(const std::string &path, std::string_view bytes) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return errnoStatus(errno, "cannot create '" + tmp + "'");
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return errnoStatus(err, "cannot write '" + tmp + "'");
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errnoStatus(err, "cannot flush '" + tmp + "'");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errnoStatus(err, "cannot rename '" + tmp + "' to '" + path + "'");
  }
  return Status::ok();
}

} // namespace flowc
