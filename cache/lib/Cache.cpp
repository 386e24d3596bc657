#include "flowc/cache/Cache.h"

#include "Index.h"

#include "flowc/support/AtomicFile.h"

#include <cerrno>
#include <cstring>
#include <chrono>
#include <cmath>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <functional>
#include <thread>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <unordered_map>

namespace flowc::cache {

namespace fs = std::filesystem;

Expected<std::optional<ActionRecord>> Cache::actionEntry(ActionKind kind,
                                                         const Digest &key) {
  FLOWC_ASSIGN_OR_RETURN(auto entry, index_->getAction(kind, key));
  if (!entry || !contains(entry->first))
    return std::optional<ActionRecord>();
  for (const Digest &dep : entry->second)
    if (!contains(dep))
      return std::optional<ActionRecord>();
  return std::optional<ActionRecord>(
      ActionRecord{kind, key, entry->first, entry->second});
}

Status Cache::recordActions(const std::vector<ActionRecord> &records) {
  FLOWC_RETURN_IF_ERROR(checkWritable("record results"));
  for (const ActionRecord &record : records) {
    if (!contains(record.result))
      return failedPrecondition("action result " + record.result.toString() +
                                " is not in the cache");
    for (const Digest &dep : record.deps)
      if (!contains(dep))
        return failedPrecondition("action dependency " + dep.toString() +
                                  " is not in the cache");
  }
  return index_->putActions(records);
}

namespace {

constexpr size_t kChunkBytes = 4 << 20;
/// Files changed more recently than this are not memoized: a writer racing
/// with us could still change them within the same timestamp granule.
constexpr int64_t kRacyWindowNs = 2'000'000'000;
/// Eviction brings the store down to this fraction of the cap, so that it
/// does not run again on the next put.
constexpr double kEvictionTarget = 0.9;

int64_t nowNs() {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
}

/// Modes of the cache's directories and of its files other than blobs:
/// other users must not read private models' weights, nor learn their names.
constexpr mode_t kDirectoryMode = 0700;
constexpr mode_t kFileMode = 0600;

/// Gives an existing `path` owned by this user exactly `mode` if it has
/// more; logged, as it means an older flowc or another tool made it.
void restrictMode(const std::string &path, mode_t mode) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || st.st_uid != geteuid() || S_ISLNK(st.st_mode))
    return;
  if ((st.st_mode & 07777) == mode)
    return;
  if (::chmod(path.c_str(), mode) != 0) {
    spdlog::warn("cache cannot restrict mode path={} mode={:o}: {}", path,
                 st.st_mode & 07777, std::strerror(errno));
    return;
  }
  spdlog::info("cache restricted mode path={} from={:o} to={:o}", path,
               st.st_mode & 07777, mode);
}

/// Creates `path` (and missing parents) as a directory of mode 0700 whatever
/// the umask (mkdir's mode is masked by it, so the mode is set again); 0 or
/// the errno of the failure.
int createPrivateDirectory(const std::string &path) {
  if (::mkdir(path.c_str(), kDirectoryMode) == 0)
    return ::chmod(path.c_str(), kDirectoryMode) == 0 ? 0 : errno;
  int err = errno;
  if (err == EEXIST)
    return 0;
  std::string parent = fs::path(path).parent_path().string();
  if (err != ENOENT || parent.empty() || parent == path)
    return err;
  // Parents outside the cache (~/.cache) keep the usual mode.
  std::error_code ec;
  fs::create_directories(parent, ec);
  return ec ? ec.value() : createPrivateDirectory(path);
}

Status makeDirectory(const std::string &path) {
  int err = createPrivateDirectory(path);
  return err ? errnoStatus(err, "cannot create directory '" + path + "'") : Status::ok();
}

bool isNotWritable(int err) { return err == EROFS || err == EACCES || err == EPERM; }

Status notWritable(const std::string &dir, int err) {
  return unavailable("cache directory '" + dir + "' is not writable (" +
                     std::strerror(err) +
                     "); start flowcd with --read-only to serve what it has cached");
}

/// Whether files can be created in `dir`: a temp file made and removed. A
/// full disk is not refused here (an empty file may still fit, and cache
/// hits need no space); a read-only mount or missing permission is.
Status probeWritable(const std::string &dir) {
  std::string probe = dir + "/probe." + std::to_string(getpid()) + ".XXXXXX";
  int fd = mkostemp(probe.data(), O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    return Status::ok();
  }
  int err = errno;
  if (err == ENOSPC || err == EDQUOT)
    return Status::ok();
  if (isNotWritable(err))
    return notWritable(dir, err);
  return errnoStatus(err, "cannot create a file in cache directory '" + dir + "'");
}

/// Creates the index file 0600 before SQLite does (it would use 0644 less
/// the umask, and give the -wal and -shm files the same mode), and restricts
/// existing ones.
Status prepareIndexFiles(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, kFileMode);
  if (fd < 0)
    return errnoStatus(errno, "cannot open cache index '" + path + "'");
  struct stat st;
  bool ours = fstat(fd, &st) == 0 && st.st_uid == geteuid();
  if (ours && (st.st_mode & 07777) != kFileMode) {
    if (fchmod(fd, kFileMode) == 0)
      spdlog::info("cache restricted mode path={} from={:o} to={:o}", path,
                   st.st_mode & 07777, kFileMode);
  }
  ::close(fd);
  for (const char *suffix : {"-wal", "-shm"})
    restrictMode(path + suffix, kFileMode);
  return Status::ok();
}

/// Temp entries are named `<what>.<pid>.<random>`; those of dead processes
/// are garbage, those of live ones (another process sharing the cache) are
/// not.
bool ownerIsGone(const fs::path &entry) {
  std::string name = entry.filename().string();
  size_t first = name.find('.');
  size_t second = name.find('.', first + 1);
  if (first == std::string::npos || second == std::string::npos)
    return true;
  pid_t pid =
      static_cast<pid_t>(std::atoi(name.substr(first + 1, second - first - 1).c_str()));
  if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH))
    return true;
  // A zombie (a worker killed with its daemon, not yet reaped: some
  // container inits never reap) writes nothing any more.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() &&
         (text[close + 2] == 'Z' || text[close + 2] == 'X');
}

/// Mode of blob files: read-only, for the cache's owner only.
constexpr mode_t kBlobMode = 0400;

/// A temp file in `tmp/` that is removed unless commit() renamed it into place.
class TempFile {
public:
  TempFile(const std::string &tmpDir, pid_t owner)
      : path_(tmpDir + "/blob." + std::to_string(owner) + ".XXXXXX") {
    fd_ = mkostemp(path_.data(), O_CLOEXEC);
    if (fd_ < 0)
      error_ = errno;
  }
  ~TempFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!committed_)
      ::unlink(path_.c_str());
  }

  Status status() const {
    return fd_ >= 0 || committed_
               ? Status::ok()
               : errnoStatus(error_, "cannot create a temp file in the cache");
  }

  Status write(std::string_view bytes) {
    FLOWC_RETURN_IF_ERROR(writeAll(fd_, bytes, path_));
    // Start writeback now, so that the final fsync finds little left to do
    // and the disk works while the next chunk is hashed.
    sync_file_range(fd_, static_cast<off_t>(written_), static_cast<off_t>(bytes.size()),
                    SYNC_FILE_RANGE_WRITE);
    written_ += bytes.size();
    return Status::ok();
  }

  /// fsyncs, closes and renames the file to `target`.
  Status commit(const std::string &target) {
    if (fsync(fd_) != 0)
      return errnoStatus(errno, "cannot fsync '" + path_ + "'");
    return rename(target);
  }

  /// Closes the descriptor (batches keep thousands of files, not fds).
  Status close() {
    if (fd_ < 0)
      return Status::ok();
    int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? Status::ok() : errnoStatus(errno, "cannot close '" + path_ + "'");
  }

  /// Closes and renames the file to `target`; the caller has made its bytes
  /// durable (a batch sync).
  Status rename(const std::string &target) {
    // Blobs never change: read-only, also through hard links handed out
    // for artifacts (the owner's only; other users never read a blob).
    if (fd_ >= 0 && fchmod(fd_, kBlobMode) != 0)
      return errnoStatus(errno, "cannot make '" + path_ + "' read-only");
    FLOWC_RETURN_IF_ERROR(close());
    if (::rename(path_.c_str(), target.c_str()) != 0)
      return errnoStatus(errno, "cannot rename '" + path_ + "' to '" + target + "'");
    committed_ = true;
    return Status::ok();
  }

private:
  std::string path_;
  int fd_ = -1;
  int error_ = 0;
  uint64_t written_ = 0;
  bool committed_ = false;
};

/// Yields successive chunks of a source; an empty view at the end.
using ChunkSource = std::function<Expected<std::string_view>()>;

ChunkSource chunksOf(std::string_view bytes) {
  return [bytes, offset = size_t{0}]() mutable -> Expected<std::string_view> {
    std::string_view chunk = bytes.substr(offset, kChunkBytes);
    offset += chunk.size();
    return chunk;
  };
}

} // namespace

// Pins --------------------------------------------------------------------

/// In-process pins: blobs that running jobs use or that handles map.
class PinTable {
public:
  void pin(const Digest &digest) {
    std::lock_guard lock(mutex_);
    ++counts_[digest.toString()];
  }
  void unpin(const Digest &digest) {
    std::lock_guard lock(mutex_);
    auto it = counts_.find(digest.toString());
    if (it != counts_.end() && --it->second == 0)
      counts_.erase(it);
  }
  bool isPinned(const Digest &digest) {
    std::lock_guard lock(mutex_);
    return counts_.count(digest.toString()) != 0;
  }

private:
  std::mutex mutex_;
  std::unordered_map<std::string, int> counts_;
};

BlobHandle::BlobHandle(Digest digest, std::shared_ptr<PinTable> pins)
    : digest_(digest), pins_(std::move(pins)) {
  pins_->pin(digest_);
}

BlobHandle::BlobHandle(BlobHandle &&other) noexcept
    : digest_(other.digest_), pins_(std::move(other.pins_)),
      file_(std::move(other.file_)), owned_(std::move(other.owned_)),
      bytes_(other.bytes_) {}

BlobHandle &BlobHandle::operator=(BlobHandle &&other) noexcept {
  if (this == &other)
    return *this;
  if (pins_)
    pins_->unpin(digest_);
  digest_ = other.digest_;
  pins_ = std::move(other.pins_);
  file_ = std::move(other.file_);
  owned_ = std::move(other.owned_);
  bytes_ = other.bytes_;
  return *this;
}

BlobHandle::~BlobHandle() {
  if (pins_)
    pins_->unpin(digest_);
}

PinGuard &PinGuard::operator=(PinGuard &&other) noexcept {
  if (this == &other)
    return *this;
  for (const Digest &digest : digests_)
    pins_->unpin(digest);
  pins_ = std::move(other.pins_);
  digests_ = std::move(other.digests_);
  return *this;
}

PinGuard::~PinGuard() {
  if (!pins_)
    return;
  for (const Digest &digest : digests_)
    pins_->unpin(digest);
}

void PinGuard::add(const Digest &digest) {
  pins_->pin(digest);
  digests_.push_back(digest);
}

// Options and identities ----------------------------------------------------

Status CacheOptions::validate() const {
  if (maxBytes < (1 << 20))
    return invalidArgument("cache size cap of " + std::to_string(maxBytes) +
                           " bytes is below the 1 MiB minimum");
  if (inlineThreshold > (16 << 20))
    return invalidArgument("inline threshold of " + std::to_string(inlineThreshold) +
                           " bytes is above the 16 MiB maximum");
  return Status::ok();
}

Expected<FileIdentity> FileIdentity::of(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errnoStatus(errno, "cannot stat '" + path + "'");
  return from(path, FileStat::from(st));
}

FileIdentity FileIdentity::from(const std::string &path, const FileStat &stat) {
  return FileIdentity{path,      stat.device,  stat.inode,
                      stat.size, stat.mtimeNs, stat.ctimeNs};
}

// Cache ---------------------------------------------------------------------

Cache::Cache(std::string root, CacheOptions options, std::unique_ptr<Index> index)
    : root_(std::move(root)), options_(options), index_(std::move(index)),
      pins_(std::make_shared<PinTable>()) {}

Cache::~Cache() = default;

Expected<std::unique_ptr<Cache>> Cache::open(const std::string &dir,
                                             const CacheOptions &options) {
  if (dir.empty())
    return invalidArgument("cache directory is empty");
  FLOWC_RETURN_IF_ERROR(options.validate());
  std::string indexPath = dir + "/index.sqlite";
  if (options.access == CacheAccess::ReadOnly) {
    // Nothing is created, swept or fixed: the directory is served as it is.
    struct stat st;
    if (::stat(indexPath.c_str(), &st) != 0)
      return failedPrecondition("read-only cache directory '" + dir + "' has no index (" +
                                std::strerror(errno) + "); nothing to serve");
    FLOWC_ASSIGN_OR_RETURN(auto index, Index::open(indexPath, options.access));
    return std::unique_ptr<Cache>(new Cache(dir, options, std::move(index)));
  }
  for (const char *sub : {"", "/cas", "/tmp"}) {
    if (int err = createPrivateDirectory(dir + sub); err)
      return isNotWritable(err)
                 ? notWritable(dir, err)
                 : errnoStatus(err, "cannot create directory '" + dir + sub + "'");
    if (*sub == '\0')
      FLOWC_RETURN_IF_ERROR(probeWritable(dir));
    restrictMode(dir + sub, kDirectoryMode);
  }
  // Blob directories made by an older flowc (0755 less the umask).
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(dir + "/cas", ec))
    if (entry.is_directory(ec))
      restrictMode(entry.path().string(), kDirectoryMode);
  restrictMode(dir + "/quarantine", kDirectoryMode);
  for (const auto &entry : fs::directory_iterator(dir + "/tmp", ec))
    if (ownerIsGone(entry.path()))
      fs::remove_all(entry.path(), ec);
  FLOWC_RETURN_IF_ERROR(prepareIndexFiles(indexPath));
  FLOWC_ASSIGN_OR_RETURN(auto index, Index::open(indexPath, options.access));
  // SQLite made any missing -wal and -shm files with the index's mode.
  for (const char *suffix : {"-wal", "-shm"})
    restrictMode(indexPath + suffix, kFileMode);
  return std::unique_ptr<Cache>(new Cache(dir, options, std::move(index)));
}

Status Cache::checkWritable(const char *what) const {
  if (!readOnly())
    return Status::ok();
  return unavailable("cache '" + root_ + "' is read-only: cannot " + what);
}

void Cache::bestEffort(const Status &status, const char *what) {
  if (status.isOk())
    return;
  // Said once at warn: on a full disk every hit would say it again.
  if (!warnedBestEffort_.exchange(true))
    spdlog::warn("cache {} not recorded (best-effort; hits still work): {}", what,
                 status.message());
  else
    spdlog::debug("cache {} not recorded: {}", what, status.message());
}

std::string Cache::blobPath(const Digest &digest) const {
  return blobPathUnder(root_, digest);
}

Status Cache::reserve(uint64_t bytes) {
  struct statvfs fs;
  if (statvfs(root_.c_str(), &fs) != 0)
    return Status::ok(); // unknown: let the write itself report
  uint64_t available = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (available < bytes + (1 << 20))
    return resourceExhausted("no space left on device (disk full): storing " +
                             std::to_string(bytes) + " bytes in cache '" + root_ +
                             "' but only " + std::to_string(available) +
                             " bytes are free");
  return Status::ok();
}

void Cache::recordDuplicate(const Digest &digest, Touch touch) {
  if (readOnly())
    return;
  bestEffort(index_->bump("dedup_bytes", static_cast<int64_t>(digest.size)),
             "dedup counter");
  if (touch == Touch::Yes)
    bestEffort(index_->touchBlob(digest), "access time");
}

Status Cache::storeInline(const Digest &digest, std::string_view bytes) {
  FLOWC_ASSIGN_OR_RETURN(auto row, index_->findBlob(digest, false));
  if (row) {
    recordDuplicate(digest, Touch::Yes);
    return Status::ok();
  }
  return index_->addBlob(digest, true, bytes);
}

/// Copies `source` to a temp file while hashing it (one pass), then moves
/// it into place unless an identical blob is already there (`duplicate`).
static Status writeLargeBlob(Cache &cache, Index &index, ChunkSource source,
                             const Digest *expected, Digest &stored, bool &duplicate) {
  TempFile temp(cache.tmpDir(), cache.tempOwner());
  FLOWC_RETURN_IF_ERROR(temp.status());
  Hasher hasher;
  // Hashing chunk i overlaps writing chunk i - 1, so the copy runs at the
  // speed of the slower of the two rather than their sum. A source may reuse
  // a buffer two chunks later: the write of the previous chunk is awaited
  // before the next one is requested.
  std::future<Status> pendingWrite;
  std::string_view pendingChunk;
  auto awaitWrite = [&]() -> Status {
    if (!pendingWrite.valid())
      return Status::ok();
    Status status = pendingWrite.get();
    // A chunk of a mapped file is not needed again once written: drop its
    // pages so that memory does not grow with the blob (a no-op for others).
    MappedFile::releasePages(pendingChunk);
    return status;
  };
  while (true) {
    auto chunk = source();
    if (!chunk || chunk->empty()) {
      FLOWC_RETURN_IF_ERROR(awaitWrite());
      if (!chunk)
        return chunk.status();
      break;
    }
    hasher.update(*chunk);
    FLOWC_RETURN_IF_ERROR(awaitWrite());
    pendingChunk = *chunk;
    pendingWrite = std::async(std::launch::async,
                              [&temp, view = *chunk] { return temp.write(view); });
  }
  stored = hasher.finish();
  if (expected && !(stored == *expected))
    return dataLoss("blob claimed to be " + expected->toString() + " hashes to " +
                    stored.toString());
  std::string target = cache.blobPath(stored);
  struct stat st;
  if (::stat(target.c_str(), &st) == 0 &&
      static_cast<uint64_t>(st.st_size) == stored.size) {
    duplicate = true;
    return index.addBlob(stored, false, {});
  }
  FLOWC_RETURN_IF_ERROR(makeDirectory(fs::path(target).parent_path().string()));
  FLOWC_RETURN_IF_ERROR(temp.commit(target).withContext("store " + stored.toString()));
  // The file is in place before its row: a crash in between leaves an
  // orphan file that reconcile() indexes, never a row without its blob.
  return index.addBlob(stored, false, {});
}

Status Cache::storeLarge(const Digest *expected, std::string_view bytes, Digest &stored) {
  if (expected && contains(*expected)) {
    stored = *expected;
    recordDuplicate(*expected, Touch::Yes);
    return Status::ok();
  }
  FLOWC_RETURN_IF_ERROR(reserve(bytes.size()));
  bool duplicate = false;
  FLOWC_RETURN_IF_ERROR(
      writeLargeBlob(*this, *index_, chunksOf(bytes), expected, stored, duplicate));
  if (duplicate)
    recordDuplicate(stored, Touch::No);
  return Status::ok();
}

Expected<Digest> Cache::put(std::string_view bytes) {
  FLOWC_RETURN_IF_ERROR(checkWritable("store a blob"));
  if (bytes.size() < options_.inlineThreshold) {
    Digest digest = digestOf(bytes);
    FLOWC_RETURN_IF_ERROR(storeInline(digest, bytes));
    return digest;
  }
  Digest stored;
  FLOWC_RETURN_IF_ERROR(storeLarge(nullptr, bytes, stored));
  return stored;
}

Expected<std::vector<Digest>> Cache::putMany(const std::vector<std::string_view> &blobs) {
  FLOWC_RETURN_IF_ERROR(checkWritable("store blobs"));
  std::vector<Digest> digests = digestMany(blobs);
  // What is new, once each, split by where it will live.
  std::vector<size_t> large;
  std::vector<Digest> rows;
  std::vector<bool> rowInline;
  std::vector<std::string_view> rowData;
  std::unordered_map<std::string, bool> seen;
  uint64_t dedup = 0, largeBytes = 0;
  for (size_t i = 0; i < blobs.size(); ++i) {
    if (!seen.emplace(digests[i].toString(), true).second || contains(digests[i])) {
      dedup += blobs[i].size();
      continue;
    }
    if (blobs[i].size() < options_.inlineThreshold) {
      rows.push_back(digests[i]);
      rowInline.push_back(true);
      rowData.push_back(blobs[i]);
      continue;
    }
    large.push_back(i);
    largeBytes += blobs[i].size();
  }
  FLOWC_RETURN_IF_ERROR(reserve(largeBytes));

  // Write every large blob to its own temp file, two writers at a time.
  std::vector<std::unique_ptr<TempFile>> temps(large.size());
  std::vector<Status> errors(large.size());
  std::atomic<size_t> next{0};
  auto writer = [&] {
    for (size_t k = next++; k < large.size(); k = next++) {
      temps[k] = std::make_unique<TempFile>(tmpDir(), tempOwner());
      errors[k] = temps[k]->status();
      // Window by window, so that a blob mapped from a model file is never
      // resident whole: each window's pages are released once written.
      if (errors[k].isOk())
        errors[k] =
            visitInWindows(blobs[large[k]], kChunkBytes, [&](std::string_view window) {
              return temps[k]->write(window);
            });
      if (errors[k].isOk())
        errors[k] = temps[k]->close();
    }
  };
  std::thread helper(writer);
  writer();
  helper.join();
  for (const Status &error : errors)
    FLOWC_RETURN_IF_ERROR(error);
  // One sync makes them all durable, instead of one fsync per file.
  if (!large.empty()) {
    int dirFd = ::open(tmpDir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dirFd >= 0 ? syncfs(dirFd) : -1;
    int err = errno;
    if (dirFd >= 0)
      ::close(dirFd);
    if (rc != 0)
      return errnoStatus(err, "cannot sync '" + tmpDir() + "'");
  }
  for (size_t k = 0; k < large.size(); ++k) {
    const Digest &digest = digests[large[k]];
    std::string target = blobPath(digest);
    FLOWC_RETURN_IF_ERROR(makeDirectory(fs::path(target).parent_path().string()));
    FLOWC_RETURN_IF_ERROR(
        temps[k]->rename(target).withContext("store " + digest.toString()));
    rows.push_back(digest);
    rowInline.push_back(false);
    rowData.push_back({});
  }
  FLOWC_RETURN_IF_ERROR(index_->addBlobs(rows, rowInline, rowData));
  if (dedup)
    bestEffort(index_->bump("dedup_bytes", static_cast<int64_t>(dedup)), "dedup counter");
  return digests;
}

Status Cache::putVerified(const Digest &expected, std::string_view bytes) {
  FLOWC_RETURN_IF_ERROR(checkWritable("store a blob"));
  if (bytes.size() != expected.size)
    return dataLoss("blob claimed to be " + expected.toString() + " has " +
                    std::to_string(bytes.size()) + " bytes");
  if (bytes.size() < options_.inlineThreshold) {
    Digest actual = digestOf(bytes);
    if (!(actual == expected))
      return dataLoss("blob claimed to be " + expected.toString() + " hashes to " +
                      actual.toString());
    return storeInline(expected, bytes);
  }
  Digest stored;
  return storeLarge(&expected, bytes, stored);
}

Expected<Digest> Cache::putFile(const std::string &path) {
  FLOWC_RETURN_IF_ERROR(checkWritable("store a file"));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errnoStatus(errno, "cannot open '" + path + "'");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0)
    return errnoStatus(errno, "cannot stat '" + path + "'");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  // Two buffers: the writer may still be copying the previous chunk.
  std::string buffers[2];
  buffers[0].resize(size < options_.inlineThreshold ? size : kChunkBytes);
  buffers[1].resize(buffers[0].size());
  size_t turn = 0;
  auto source = [&]() -> Expected<std::string_view> {
    std::string &buffer = buffers[turn++ % 2];
    while (true) {
      ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return errnoStatus(errno, "cannot read '" + path + "'");
      return std::string_view(buffer.data(), static_cast<size_t>(n));
    }
  };
  if (size < options_.inlineThreshold) {
    FLOWC_ASSIGN_OR_RETURN(std::string_view all, source());
    if (all.size() != size)
      return dataLoss("'" + path + "' changed while it was read");
    return put(all);
  }
  FLOWC_RETURN_IF_ERROR(reserve(size));
  Digest stored;
  bool duplicate = false;
  FLOWC_RETURN_IF_ERROR(
      writeLargeBlob(*this, *index_, source, nullptr, stored, duplicate));
  if (duplicate)
    recordDuplicate(stored, Touch::No);
  return stored;
}

Expected<Digest> Cache::adoptFile(const std::string &path) {
  struct Remover {
    const std::string &path;
    ~Remover() { ::unlink(path.c_str()); }
  } remover{path};
  FLOWC_RETURN_IF_ERROR(checkWritable("store a file"));
  FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  Digest digest = digestOf(file.view());
  if (contains(digest)) {
    recordDuplicate(digest, Touch::Yes);
    return digest;
  }
  std::string target = blobPath(digest);
  FLOWC_RETURN_IF_ERROR(makeDirectory(fs::path(target).parent_path().string()));
  if (::chmod(path.c_str(), kBlobMode) != 0)
    return errnoStatus(errno, "cannot make '" + path + "' read-only");
  if (::rename(path.c_str(), target.c_str()) != 0)
    return errnoStatus(errno, "cannot move '" + path + "' into the cache");
  FLOWC_RETURN_IF_ERROR(index_->addBlob(digest, false, {}));
  return digest;
}

bool Cache::contains(const Digest &digest) {
  auto row = index_->findBlob(digest, false);
  if (!row || !row->has_value())
    return false;
  if ((*row)->isInline)
    return true;
  struct stat st;
  return ::stat(blobPath(digest).c_str(), &st) == 0 &&
         static_cast<uint64_t>(st.st_size) == digest.size;
}

Expected<BlobHandle> Cache::get(const Digest &digest) {
  FLOWC_ASSIGN_OR_RETURN(auto row, index_->findBlob(digest, true));
  if (!row)
    return notFound("blob " + digest.toString() + " is not in the cache");
  BlobHandle handle(digest, pins_);
  if (row->isInline) {
    handle.owned_ = std::make_shared<const std::string>(std::move(row->data));
    handle.bytes_ = *handle.owned_;
  } else {
    auto file = MappedFile::open(blobPath(digest));
    if (!file)
      return notFound("blob " + digest.toString() +
                      " is indexed but its file is missing");
    if (file->size() != digest.size)
      return dataLoss("blob " + digest.toString() + " has size " +
                      std::to_string(file->size()));
    handle.file_ = file.takeValue();
    handle.bytes_ = handle.file_.view();
  }
  if (handle.bytes_.size() != digest.size)
    return dataLoss("blob " + digest.toString() + " has size " +
                    std::to_string(handle.bytes_.size()));
  if (!readOnly())
    bestEffort(index_->touchBlob(digest), "access time");
  return handle;
}

namespace {

enum class BlobHealth { Healthy, Corrupt, Unreadable, Missing };

struct BlobCheck {
  BlobHealth health = BlobHealth::Healthy;
  std::string why;
};

/// Hashes the regular file `path` with read(2) (no mapping: a read error
/// is an error, not a SIGBUS), expecting `size` bytes.
BlobCheck hashFile(const std::string &path, uint64_t size, Digest &actual) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return errno == ENOENT
               ? BlobCheck{BlobHealth::Missing, "file missing"}
               : BlobCheck{BlobHealth::Unreadable,
                           "cannot open '" + path + "': " + std::strerror(errno)};
  UniqueFd closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0)
    return {BlobHealth::Unreadable,
            "cannot stat '" + path + "': " + std::strerror(errno)};
  if (!S_ISREG(st.st_mode))
    return {BlobHealth::Corrupt, "'" + path + "' is not a regular file"};
  if (static_cast<uint64_t>(st.st_size) != size)
    return {BlobHealth::Corrupt, "file has " + std::to_string(st.st_size) + " bytes"};
  std::string buffer(std::min<uint64_t>(size, kChunkBytes), '\0');
  Hasher hasher;
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return {BlobHealth::Unreadable,
              "cannot read '" + path + "': " + std::strerror(errno)};
    if (n == 0)
      return {BlobHealth::Corrupt, "file shrank to " + std::to_string(done) + " bytes"};
    hasher.update(buffer.data(), static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
  }
  // Verifying reads every blob once; keep them out of the page cache.
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  actual = hasher.finish();
  return {};
}

/// Whether a blob's bytes are what its digest says, read without touching
/// its access time (verify works on a full disk and changes no LRU order).
BlobCheck checkBlob(Cache &cache, Index &index, const Digest &digest) {
  auto row = index.findBlob(digest, true);
  if (!row)
    return {BlobHealth::Unreadable, row.status().message()};
  if (!*row)
    return {BlobHealth::Missing, "not in the index"};
  Digest actual;
  if ((*row)->isInline) {
    if ((*row)->data.size() != digest.size)
      return {BlobHealth::Corrupt,
              "inline data has " + std::to_string((*row)->data.size()) + " bytes"};
    actual = digestOf((*row)->data);
  } else if (BlobCheck read = hashFile(cache.blobPath(digest), digest.size, actual);
             read.health != BlobHealth::Healthy) {
    return read;
  }
  if (actual == digest)
    return {};
  return {BlobHealth::Corrupt, "content hashes to " + actual.toString()};
}

} // namespace

Status Cache::checkUnmodified(const Digest &digest) {
  FLOWC_ASSIGN_OR_RETURN(auto row, index_->findBlob(digest, false));
  if (!row)
    return notFound("blob " + digest.toString() + " is not in the cache");
  if (row->isInline)
    return Status::ok();
  struct stat st;
  if (::stat(blobPath(digest).c_str(), &st) != 0)
    return notFound("blob " + digest.toString() + " has no file");
  int64_t modifiedMs = int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000;
  // Written before it was indexed; a later write is someone else's.
  if (modifiedMs <= row->createdMs + 2000)
    return Status::ok();
  BlobCheck check = checkBlob(*this, *index_, digest);
  if (check.health == BlobHealth::Healthy)
    return Status::ok();
  const std::string &why = check.why;
  // Not quarantined unless its bytes are known to be wrong.
  if (check.health == BlobHealth::Unreadable)
    return dataLoss("cached " + digest.toString() + " cannot be read (" + why + ")");
  if (readOnly())
    return dataLoss("cached " + digest.toString() +
                    " was modified after it was stored (" + why +
                    "); not served (read-only cache: not quarantined)");
  FLOWC_RETURN_IF_ERROR(quarantine(digest, "modified after it was stored: " + why));
  return dataLoss("cached " + digest.toString() + " was modified after it was stored (" +
                  why + "); quarantined");
}

Expected<std::optional<Digest>> Cache::lookupAction(ActionKind kind, const Digest &key,
                                                    CountLookup count) {
  std::string counter = actionKindName(kind);
  FLOWC_ASSIGN_OR_RETURN(auto entry, index_->getAction(kind, key));
  bool usable = entry && contains(entry->first);
  for (size_t i = 0; usable && i < entry->second.size(); ++i)
    usable = contains(entry->second[i]);
  if (count == CountLookup::Yes && !readOnly())
    bestEffort(index_->bump(counter + (usable ? "_hits" : "_misses"), 1), "hit counter");
  if (!usable)
    return std::optional<Digest>();
  if (!readOnly())
    bestEffort(index_->touchBlob(entry->first), "access time");
  return std::optional<Digest>(entry->first);
}

Status Cache::recordAction(ActionKind kind, const Digest &key, const Digest &result,
                           const std::vector<Digest> &deps) {
  FLOWC_RETURN_IF_ERROR(checkWritable("record a result"));
  if (!contains(result))
    return failedPrecondition("action result " + result.toString() +
                              " is not in the cache");
  for (const Digest &dep : deps)
    if (!contains(dep))
      return failedPrecondition("action dependency " + dep.toString() +
                                " is not in the cache");
  return index_->putAction(kind, key, result, deps);
}

namespace {

/// An input's identity now, as the memo compares it: the path's own entry
/// (a symlink put in place of the file is a change, never followed).
Expected<FileIdentity> inputIdentityNow(const std::string &path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0)
    return errnoStatus(errno, "cannot stat '" + path + "'");
  return FileIdentity::from(path, FileStat::from(st));
}

bool isRacy(const FileIdentity &file, int64_t now) {
  return now - file.mtimeNs < kRacyWindowNs || now - file.ctimeNs < kRacyWindowNs;
}

} // namespace

Expected<std::optional<Digest>> Cache::lookupStat(const FileIdentity &file,
                                                  std::string_view purpose) {
  FLOWC_ASSIGN_OR_RETURN(auto memo, index_->getStat(file, purpose));
  if (!memo)
    return std::optional<Digest>();
  // Every file the digest was computed from must be as it was: a rewritten
  // external data file (same size, even its mtime put back) is a miss.
  for (const FileIdentity &input : memo->inputs) {
    auto now = inputIdentityNow(input.path);
    if (!now || !(*now == input))
      return std::optional<Digest>();
  }
  return std::optional<Digest>(memo->digest);
}

Status Cache::recordStat(const FileIdentity &file, std::string_view purpose,
                         const Digest &digest, const std::vector<FileIdentity> &inputs) {
  if (readOnly())
    return Status::ok();
  int64_t now = nowNs();
  if (isRacy(file, now))
    return Status::ok();
  auto after = FileIdentity::of(file.path);
  if (!after || !(*after == file))
    return Status::ok(); // changed while it was read: the digest may be stale
  for (const FileIdentity &input : inputs) {
    if (isRacy(input, now))
      return Status::ok();
    auto inputAfter = inputIdentityNow(input.path);
    if (!inputAfter || !(*inputAfter == input))
      return Status::ok();
  }
  bestEffort(index_->putStat(file, purpose, digest, inputs), "stat memo");
  return Status::ok();
}

Status TuningRecord::validate() const {
  auto bad = [](const char *field, const std::string &why) {
    return invalidArgument(std::string("tuning record: ") + field + " " + why);
  };
  for (auto [field, value] : {std::pair{"signature", &signature},
                              {"device", &device},
                              {"versions", &versions},
                              {"candidate", &candidate}})
    if (value->empty())
      return bad(field, "is empty");
  if (timeNs <= 0)
    return bad("time_ns", "is " + std::to_string(timeNs) + ", not positive");
  if (spreadNs < 0)
    return bad("spread_ns", "is " + std::to_string(spreadNs) + ", negative");
  if (samples <= 0)
    return bad("samples", "is " + std::to_string(samples) + ", not positive");
  if (!std::isfinite(noise) || noise < 0)
    return bad("noise", "is " + std::to_string(noise) + ", not a finite number >= 0");
  if (measuredMs < 0)
    return bad("measured_ms", "is " + std::to_string(measuredMs) + ", negative");
  return Status::ok();
}

Status Cache::recordTuning(const TuningRecord &record) {
  FLOWC_RETURN_IF_ERROR(record.validate());
  FLOWC_RETURN_IF_ERROR(checkWritable("record a tuning result"));
  if (record.measuredMs != 0)
    return index_->putTuning(record);
  TuningRecord stamped = record;
  stamped.measuredMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return index_->putTuning(stamped);
}

Expected<std::optional<TuningRecord>> Cache::bestTuning(std::string_view signature,
                                                        std::string_view device,
                                                        std::string_view versions) {
  return index_->bestTuning(signature, device, versions);
}

Expected<std::vector<TuningRecord>> Cache::listTuning(std::string_view device,
                                                      std::string_view signature) {
  return index_->listTuning(device, signature);
}

Expected<std::vector<std::string>> Cache::tuningDevices(std::string_view prefix) {
  return index_->tuningDevices(prefix);
}

Expected<int64_t> Cache::latestTuning(std::string_view device) {
  return index_->latestTuning(device);
}

Expected<std::string> Cache::tuningState(std::string_view device) {
  return index_->tuningState(device);
}

Expected<uint64_t> Cache::clearTuning(std::string_view device) {
  FLOWC_RETURN_IF_ERROR(checkWritable("clear its tuning records"));
  return index_->clearTuning(device);
}

namespace {

constexpr const char *kTuningFormat = "flowc.tuning.v1";

nlohmann::json tuningJson(const TuningRecord &record) {
  return {{"signature", record.signature},
          {"device", record.device},
          {"versions", record.versions},
          {"candidate", record.candidate},
          {"time_ns", record.timeNs},
          {"spread_ns", record.spreadNs},
          {"samples", record.samples},
          {"separated", record.separated},
          {"noise", record.noise},
          {"measured_ms", record.measuredMs},
          {"host", record.host}};
}

/// One record of an export, validated; InvalidArgument naming the field at
/// fault.
Expected<TuningRecord> tuningFromJson(const nlohmann::json &json) {
  if (!json.is_object())
    return invalidArgument("not an object");
  auto field = [&](const char *name) -> const nlohmann::json * {
    auto found = json.find(name);
    return found == json.end() ? nullptr : &*found;
  };
  auto text = [&](const char *name, std::string &out) -> Status {
    const nlohmann::json *value = field(name);
    if (!value || !value->is_string())
      return invalidArgument(std::string("'") + name + "' is missing or not a string");
    out = value->get<std::string>();
    return Status::ok();
  };
  auto integer = [&](const char *name, int64_t &out) -> Status {
    const nlohmann::json *value = field(name);
    if (!value || !value->is_number_integer() ||
        (value->is_number_unsigned() &&
         value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      return invalidArgument(std::string("'") + name +
                             "' is missing or not a 64-bit integer");
    out = value->get<int64_t>();
    return Status::ok();
  };
  TuningRecord record;
  FLOWC_RETURN_IF_ERROR(text("signature", record.signature));
  FLOWC_RETURN_IF_ERROR(text("device", record.device));
  FLOWC_RETURN_IF_ERROR(text("versions", record.versions));
  FLOWC_RETURN_IF_ERROR(text("candidate", record.candidate));
  FLOWC_RETURN_IF_ERROR(integer("time_ns", record.timeNs));
  FLOWC_RETURN_IF_ERROR(integer("spread_ns", record.spreadNs));
  FLOWC_RETURN_IF_ERROR(integer("samples", record.samples));
  const nlohmann::json *separated = field("separated");
  if (!separated || !separated->is_boolean())
    return invalidArgument("'separated' is missing or not a boolean");
  record.separated = separated->get<bool>();
  const nlohmann::json *noise = field("noise");
  if (!noise || !noise->is_number())
    return invalidArgument("'noise' is missing or not a number");
  record.noise = noise->get<double>();
  FLOWC_RETURN_IF_ERROR(integer("measured_ms", record.measuredMs));
  FLOWC_RETURN_IF_ERROR(text("host", record.host));
  FLOWC_RETURN_IF_ERROR(record.validate());
  return record;
}

} // namespace

Expected<std::string> Cache::exportTuning(std::string_view device,
                                          std::string_view signature) {
  FLOWC_ASSIGN_OR_RETURN(std::vector<TuningRecord> records,
                         index_->listTuning(device, signature));
  nlohmann::json json = {{"format", kTuningFormat}, {"records", nlohmann::json::array()}};
  for (const TuningRecord &record : records)
    json["records"].push_back(tuningJson(record));
  // A row's text that is not UTF-8 (written by something else) must not
  // abort the export; it comes out as U+FFFD, and that record no longer
  // names the same key.
  return json.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Expected<TuningImport> Cache::importTuning(std::string_view document) {
  FLOWC_RETURN_IF_ERROR(checkWritable("import tuning records"));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(document);
  } catch (const nlohmann::json::parse_error &e) {
    return invalidArgument("not a tuning export: not JSON (at byte " +
                           std::to_string(e.byte) + ")");
  }
  auto format = json.is_object() ? json.find("format") : json.end();
  if (!json.is_object() || format == json.end() || !format->is_string())
    return invalidArgument(std::string("not a tuning export: no \"format\": \"") +
                           kTuningFormat + "\"");
  if (format->get<std::string>() != kTuningFormat)
    return invalidArgument("not a tuning export: format is '" +
                           format->get<std::string>() + "', expected '" + kTuningFormat +
                           "'");
  auto records = json.find("records");
  if (records == json.end() || !records->is_array())
    return invalidArgument("not a tuning export: \"records\" is missing or not a list");
  uint64_t ignored = 0;
  std::vector<TuningRecord> parsed;
  for (size_t i = 0; i < records->size(); ++i) {
    auto record = tuningFromJson((*records)[i]);
    if (!record) {
      spdlog::warn("tuning import: record {} is ignored: {}", i,
                   record.status().message());
      ++ignored;
      continue;
    }
    parsed.push_back(std::move(*record));
  }
  FLOWC_ASSIGN_OR_RETURN(TuningImport report, importTuning(parsed));
  report.ignored += ignored;
  return report;
}

Expected<TuningImport> Cache::importTuning(const std::vector<TuningRecord> &records) {
  FLOWC_RETURN_IF_ERROR(checkWritable("import tuning records"));
  TuningImport report;
  std::vector<TuningRecord> valid;
  for (size_t i = 0; i < records.size(); ++i) {
    if (Status checked = records[i].validate(); !checked) {
      spdlog::warn("tuning import: record {} is ignored: {}", i, checked.message());
      ++report.ignored;
      continue;
    }
    valid.push_back(records[i]);
  }
  FLOWC_ASSIGN_OR_RETURN(report.imported, index_->importTuning(valid));
  report.stale = valid.size() - report.imported;
  return report;
}

Status Cache::pin(const Digest &digest) {
  FLOWC_RETURN_IF_ERROR(checkWritable("pin a blob"));
  return index_->setPinned(digest, true);
}

Status Cache::unpin(const Digest &digest) {
  FLOWC_RETURN_IF_ERROR(checkWritable("unpin a blob"));
  return index_->setPinned(digest, false);
}

Expected<GcReport> Cache::collectGarbage(uint64_t targetBytes) {
  FLOWC_RETURN_IF_ERROR(checkWritable("evict blobs"));
  return evictDownTo(targetBytes, CountEvictions::Yes);
}

Expected<GcReport> Cache::evictDownTo(uint64_t targetBytes, CountEvictions count) {
  GcReport report;
  FLOWC_ASSIGN_OR_RETURN(CacheStats stats, index_->stats());
  uint64_t remaining = stats.blobBytes;
  std::unordered_map<std::string, bool> skipped;
  while (remaining > targetBytes) {
    FLOWC_ASSIGN_OR_RETURN(auto candidates,
                           index_->blobsByLastAccess(256 + skipped.size()));
    bool progress = false;
    for (const BlobRow &blob : candidates) {
      if (remaining <= targetBytes)
        break;
      if (skipped.count(blob.digest.toString()))
        continue;
      if (pins_->isPinned(blob.digest)) {
        skipped[blob.digest.toString()] = true;
        continue;
      }
      // Row first, then file: a crash in between leaves an orphan file,
      // never a row without its blob.
      FLOWC_ASSIGN_OR_RETURN(EvictionResult evicted, index_->removeBlob(blob.digest));
      if (!blob.isInline)
        ::unlink(blobPath(blob.digest).c_str());
      remaining -= blob.digest.size;
      report.evictedBlobs++;
      report.evictedBytes += blob.digest.size;
      report.droppedActions += evicted.droppedActions;
      progress = true;
    }
    if (!progress)
      break;
  }
  if (report.evictedBlobs && count == CountEvictions::Yes) {
    FLOWC_RETURN_IF_ERROR(
        index_->bump("evictions", static_cast<int64_t>(report.evictedBlobs)));
    FLOWC_RETURN_IF_ERROR(
        index_->bump("evicted_bytes", static_cast<int64_t>(report.evictedBytes)));
    spdlog::info("cache evicted blobs={} bytes={} actions={} remaining_bytes={}",
                 report.evictedBlobs, report.evictedBytes, report.droppedActions,
                 remaining);
  }
  report.remainingBytes = remaining;
  return report;
}

Expected<GcReport> Cache::enforceLimit() {
  FLOWC_ASSIGN_OR_RETURN(CacheStats stats, index_->stats());
  if (stats.blobBytes <= options_.maxBytes || readOnly())
    return GcReport{0, 0, 0, stats.blobBytes};
  return collectGarbage(static_cast<uint64_t>(options_.maxBytes * kEvictionTarget));
}

Status Cache::quarantine(const Digest &digest, const std::string &why) {
  std::string dir = root_ + "/quarantine";
  FLOWC_RETURN_IF_ERROR(makeDirectory(dir));
  std::string target = dir + "/" + digest.hex() + "." + std::to_string(nowNs());
  spdlog::warn("cache quarantine digest={} reason={} to={}", digest.toString(), why,
               target);
  // Row first: if the index cannot be written (a full disk) the blob stays
  // where it was, indexed; a crash after it leaves an orphan file that
  // reconcile() re-hashes.
  FLOWC_RETURN_IF_ERROR(index_->removeBlob(digest).status());
  if (::rename(blobPath(digest).c_str(), target.c_str()) != 0 && errno != ENOENT)
    return errnoStatus(errno, "cannot quarantine '" + blobPath(digest) + "'");
  return Status::ok();
}

namespace {

/// Every file under cas/ as (digest named by its path and size, path).
std::vector<std::pair<Digest, std::string>> casFiles(const std::string &root) {
  std::vector<std::pair<Digest, std::string>> files;
  std::error_code ec;
  for (const auto &entry : fs::recursive_directory_iterator(root + "/cas", ec)) {
    if (!entry.is_regular_file())
      continue;
    std::string hex =
        entry.path().parent_path().filename().string() + entry.path().filename().string();
    auto digest =
        Digest::parse("sha256:" + hex + "/" + std::to_string(entry.file_size()));
    if (digest)
      files.emplace_back(*digest, entry.path().string());
    else
      files.emplace_back(Digest{}, entry.path().string());
  }
  return files;
}

/// Shared by verify (rehash = true) and reconcile (rehash = false).
Expected<VerifyReport>
scanCache(Cache &cache, Index &index, bool rehash, bool repair,
          const std::function<Status(const Digest &, const std::string &)> &quarantine) {
  VerifyReport report;
  FLOWC_ASSIGN_OR_RETURN(std::vector<BlobRow> rows, index.allBlobs());
  std::unordered_map<std::string, bool> indexed;
  for (const BlobRow &row : rows) {
    std::string name = row.digest.toString();
    indexed[name] = true;
    BlobCheck check;
    if (rehash) {
      ++report.checked;
      check = checkBlob(cache, index, row.digest);
    } else if (!row.isInline) {
      struct stat st;
      if (::lstat(cache.blobPath(row.digest).c_str(), &st) != 0 && errno == ENOENT)
        check = {BlobHealth::Missing, "file missing"};
    }
    switch (check.health) {
    case BlobHealth::Healthy:
      continue;
    case BlobHealth::Unreadable:
      report.unreadable.push_back(name + ": " + check.why);
      continue;
    case BlobHealth::Missing:
      ++report.missingFiles;
      if (repair)
        if (Status removed = index.removeBlob(row.digest).status(); !removed)
          check.why += " (row not removed: " + removed.message() + ")";
      report.corrupt.push_back(name + ": " + check.why);
      continue;
    case BlobHealth::Corrupt:
      break;
    }
    if (repair) {
      // A blob is quarantined only if a second read agrees that its content
      // is wrong: one bad read must not cost a healthy blob.
      BlobCheck again = checkBlob(cache, index, row.digest);
      if (again.health == BlobHealth::Healthy) {
        report.unreadable.push_back(name + ": read as '" + check.why +
                                    "', then matched its digest; not quarantined");
        continue;
      }
      if (again.health != BlobHealth::Corrupt) {
        report.unreadable.push_back(name + ": " + again.why);
        continue;
      }
      if (Status moved = quarantine(row.digest, check.why); !moved)
        check.why += " (not quarantined: " + moved.message() + ")";
      else
        ++report.quarantined;
    }
    report.corrupt.push_back(name + ": " + check.why);
  }
  for (const auto &[digest, path] : casFiles(cache.root())) {
    if (digest.size && indexed.count(digest.toString()))
      continue;
    ++report.orphanFiles;
    if (!repair)
      continue;
    // A complete file whose name matches its content was committed just
    // before a crash: index it. One that cannot be read stays; anything else
    // goes to quarantine.
    Digest actual;
    BlobCheck read = digest.size ? hashFile(path, digest.size, actual)
                                 : BlobCheck{BlobHealth::Corrupt, "not a blob name"};
    if (read.health == BlobHealth::Unreadable) {
      report.unreadable.push_back(path + ": " + read.why);
      continue;
    }
    if (read.health == BlobHealth::Healthy && actual == digest) {
      if (Status added = index.addBlob(digest, false, {}); !added)
        report.unreadable.push_back(path + ": not indexed: " + added.message());
      continue;
    }
    std::string dir = cache.root() + "/quarantine";
    if (Status made = makeDirectory(dir); !made) {
      report.unreadable.push_back(path + ": not quarantined: " + made.message());
      continue;
    }
    std::error_code ec;
    fs::rename(path, dir + "/" + fs::path(path).filename().string() + ".orphan", ec);
    if (!ec)
      ++report.quarantined;
  }
  return report;
}

} // namespace

Expected<VerifyReport> Cache::verify(bool repair) {
  if (repair)
    FLOWC_RETURN_IF_ERROR(checkWritable("repair it"));
  return scanCache(
      *this, *index_, /*rehash=*/true, repair,
      [this](const Digest &d, const std::string &why) { return quarantine(d, why); });
}

Expected<VerifyReport> Cache::reconcile() {
  // A read-only cache is reported on, not changed.
  return scanCache(
      *this, *index_, /*rehash=*/false, /*repair=*/!readOnly(),
      [this](const Digest &d, const std::string &why) { return quarantine(d, why); });
}

Expected<std::vector<BlobInfo>> Cache::list(size_t limit) {
  FLOWC_ASSIGN_OR_RETURN(std::vector<BlobRow> rows, index_->allBlobs());
  std::vector<BlobInfo> blobs;
  for (const BlobRow &row : rows) {
    if (blobs.size() >= limit)
      break;
    blobs.push_back({row.digest, row.isInline, row.createdMs, row.lastAccessMs,
                     row.pinned || pins_->isPinned(row.digest)});
  }
  return blobs;
}

Expected<GcReport> Cache::clear() {
  FLOWC_RETURN_IF_ERROR(checkWritable("clear it"));
  FLOWC_ASSIGN_OR_RETURN(uint64_t droppedActions, index_->clearActions());
  FLOWC_ASSIGN_OR_RETURN(GcReport report, evictDownTo(0, CountEvictions::No));
  report.droppedActions += droppedActions;
  return report;
}

Status Cache::zeroCounters() {
  FLOWC_RETURN_IF_ERROR(checkWritable("zero its counters"));
  return index_->zeroCounters();
}

Expected<CacheStats> Cache::stats() {
  FLOWC_ASSIGN_OR_RETURN(CacheStats stats, index_->stats());
  stats.maxBytes = options_.maxBytes;
  return stats;
}

} // namespace flowc::cache
