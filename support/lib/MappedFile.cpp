#include "flowc/support/MappedFile.h"

#include "flowc/support/AtomicFile.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc {

namespace {

uintptr_t pageSize() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

/// The live mappings that MappedFile made, so that a bare view can be
/// checked before its pages are dropped (dropping pages of heap memory would
/// zero it). It mirrors process-wide state that the kernel holds anyway.
/// Advice runs under the shared lock and unmapping takes the exclusive one,
/// so a mapping is never unmapped, and its addresses reused, under advice.
class MappingTable {
public:
  void add(const uint8_t *data, size_t size, const std::string &path) {
    std::unique_lock lock(mutex_);
    auto begin = reinterpret_cast<uintptr_t>(data);
    ranges_[begin] = begin + size;
    names_.add(begin, begin + size, path);
  }

  void remove(const uint8_t *data) {
    std::unique_lock lock(mutex_);
    ranges_.erase(reinterpret_cast<uintptr_t>(data));
    names_.remove(reinterpret_cast<uintptr_t>(data));
  }

  size_t nameOf(uintptr_t address, char *out, size_t capacity) const {
    return names_.find(address, out, capacity);
  }

  /// Calls `advise(begin, end)` with the page-aligned range that covers
  /// `bytes` (clipped to its mapping) if `bytes` lies inside one mapping.
  template <typename Advise> bool withPagesOf(std::string_view bytes, Advise advise) {
    if (bytes.empty())
      return false;
    auto begin = reinterpret_cast<uintptr_t>(bytes.data());
    uintptr_t end = begin + bytes.size();
    std::shared_lock lock(mutex_);
    auto it = ranges_.upper_bound(begin);
    if (it == ranges_.begin())
      return false;
    --it;
    if (end > it->second)
      return false;
    uintptr_t page = pageSize();
    uintptr_t first = begin & ~(page - 1);
    // The kernel maps the last partial page whole, so rounding up stays
    // inside the mapping.
    uintptr_t last = (end + page - 1) & ~(page - 1);
    advise(first, last);
    return true;
  }

private:
  /// The files behind the mappings, readable from a signal handler (a
  /// SIGBUS names the file that shrank under its mapping): fixed slots
  /// read without locks or allocation. Writers hold the table's lock; a
  /// mapping beyond the slots goes unnamed.
  class FaultNames {
  public:
    void add(uintptr_t begin, uintptr_t end, const std::string &path) {
      for (Slot &slot : slots_) {
        if (slot.begin.load(std::memory_order_relaxed) != 0)
          continue;
        size_t length = std::min(path.size(), sizeof(slot.path) - 1);
        std::copy_n(path.data(), length, slot.path);
        slot.path[length] = '\0';
        slot.end.store(end, std::memory_order_relaxed);
        slot.begin.store(begin, std::memory_order_release);
        return;
      }
    }
    void remove(uintptr_t begin) {
      for (Slot &slot : slots_)
        if (slot.begin.load(std::memory_order_relaxed) == begin)
          slot.begin.store(0, std::memory_order_release);
    }
    size_t find(uintptr_t address, char *out, size_t capacity) const {
      for (const Slot &slot : slots_) {
        uintptr_t begin = slot.begin.load(std::memory_order_acquire);
        if (begin == 0 || address < begin ||
            address >= slot.end.load(std::memory_order_relaxed))
          continue;
        size_t length = 0;
        while (length + 1 < capacity && slot.path[length] != '\0') {
          out[length] = slot.path[length];
          ++length;
        }
        if (capacity > 0)
          out[length] = '\0';
        return length;
      }
      return 0;
    }

  private:
    struct Slot {
      std::atomic<uintptr_t> begin{0};
      std::atomic<uintptr_t> end{0};
      char path[256] = {};
    };
    Slot slots_[1024];
  };

  std::shared_mutex mutex_;
  std::map<uintptr_t, uintptr_t> ranges_; ///< begin -> end
  FaultNames names_;
};

MappingTable &mappingTable() {
  // Never destroyed: MappedFiles with static storage may outlive it otherwise.
  static MappingTable *table = new MappingTable;
  return *table;
}

void advise(uintptr_t first, uintptr_t last, int advice) {
  // Advice only: a failure costs memory or speed, never correctness.
  (void)madvise(reinterpret_cast<void *>(first), last - first, advice);
}

} // namespace

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
  if (data_ && size_) {
    mappingTable().remove(data_);
    munmap(const_cast<uint8_t *>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
}

Expected<MappedFile> MappedFile::open(const std::string &path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer forever; it is refused below like any file that is not regular
  // (the flag changes nothing for regular files).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return errnoStatus(errno, "cannot open '" + path + "'");
  auto file = fromFd(fd, path);
  ::close(fd);
  return file;
}

Expected<MappedFile> MappedFile::fromFd(int fd, const std::string &displayPath) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return errnoStatus(errno, "cannot stat '" + displayPath + "'");
  if (!S_ISREG(st.st_mode))
    return invalidArgument("'" + displayPath + "' is not a regular file");
  MappedFile file;
  file.path_ = displayPath;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void *addr = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      file.size_ = 0;
      return errnoStatus(errno, "cannot mmap '" + displayPath + "'");
    }
    file.data_ = static_cast<const uint8_t *>(addr);
    mappingTable().add(file.data_, file.size_, displayPath);
  }
  return file;
}

size_t MappedFile::nameOfAddress(const void *address, char *out, size_t capacity) {
  return mappingTable().nameOf(reinterpret_cast<uintptr_t>(address), out, capacity);
}

bool MappedFile::isMapped(std::string_view bytes) {
  return mappingTable().withPagesOf(bytes, [](uintptr_t, uintptr_t) {});
}

bool MappedFile::releasePages(std::string_view bytes) {
  return mappingTable().withPagesOf(
      bytes, [](uintptr_t first, uintptr_t last) { advise(first, last, MADV_DONTNEED); });
}

bool MappedFile::readAhead(std::string_view bytes) {
  return mappingTable().withPagesOf(
      bytes, [](uintptr_t first, uintptr_t last) { advise(first, last, MADV_WILLNEED); });
}

Status visitInWindows(std::string_view bytes, size_t windowBytes,
                      const std::function<Status(std::string_view)> &visit) {
  assert(windowBytes >= pageSize() && "a window must span at least a page");
  bool mapped = MappedFile::isMapped(bytes);
  const char *at = bytes.data();
  const char *end = bytes.data() + bytes.size();
  auto windowAt = [&](const char *start) {
    // Windows end on page boundaries, so consecutive ones share no page.
    uintptr_t stop =
        (reinterpret_cast<uintptr_t>(start) + windowBytes) & ~(pageSize() - 1);
    const char *windowEnd = std::min(end, reinterpret_cast<const char *>(stop));
    return std::string_view(start, static_cast<size_t>(windowEnd - start));
  };
  if (mapped)
    MappedFile::readAhead(windowAt(at));
  while (at < end) {
    std::string_view window = windowAt(at);
    const char *next = window.data() + window.size();
    if (mapped && next < end)
      MappedFile::readAhead(windowAt(next));
    Status status = visit(window);
    if (mapped)
      MappedFile::releasePages(window);
    FLOWC_RETURN_IF_ERROR(status);
    at = next;
  }
  return Status::ok();
}

Expected<std::string> readFileToString(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  return std::string(file.view());
}

Status writeFileAtomically(const std::string &path, std::string_view bytes) {
  FLOWC_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  FLOWC_RETURN_IF_ERROR(file.write(bytes));
  return file.commit();
}

} // namespace flowc
