#include "flowc/cache/Cache.h"

#include "Index.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc::cache {

namespace fs = std::filesystem;

namespace {

/// A temp file in `tmp/` that is removed unless commit() renamed it into place.
class TempFile {
public:
  explicit TempFile(const std::string &tmpDir) : path_(tmpDir + "/blob.XXXXXX") {
    fd_ = mkstemp(path_.data());
  }
  ~TempFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!committed_)
      ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  const std::string &path() const { return path_; }

  Status writeAll(std::string_view bytes) {
    size_t written = 0;
    while (written < bytes.size()) {
      ssize_t n = ::write(fd_, bytes.data() + written, bytes.size() - written);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return errnoStatus(errno, "cannot write '" + path_ + "'");
      written += static_cast<size_t>(n);
    }
    return Status::ok();
  }

  /// fsyncs, closes and renames the file to `target`.
  Status commit(const std::string &target) {
    if (fsync(fd_) != 0)
      return errnoStatus(errno, "cannot fsync '" + path_ + "'");
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0)
      return errnoStatus(errno, "cannot close '" + path_ + "'");
    if (::rename(path_.c_str(), target.c_str()) != 0)
      return errnoStatus(errno, "cannot rename '" + path_ + "' to '" + target + "'");
    committed_ = true;
    return Status::ok();
  }

private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

Status makeDirectory(const std::string &path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec)
    return errnoStatus(ec.value(), "cannot create directory '" + path + "'");
  return Status::ok();
}

} // namespace

Cache::Cache(std::string root, std::unique_ptr<Index> index)
    : root_(std::move(root)), index_(std::move(index)) {}

Cache::~Cache() = default;

Expected<std::unique_ptr<Cache>> Cache::open(const std::string &dir) {
  if (dir.empty())
    return invalidArgument("cache directory is empty");
  for (const char *sub : {"", "/cas", "/tmp"})
    FLOWC_RETURN_IF_ERROR(makeDirectory(dir + sub));
  // A writer that crashed left its temp file behind; nothing refers to it.
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(dir + "/tmp", ec))
    fs::remove(entry.path(), ec);
  FLOWC_ASSIGN_OR_RETURN(auto index, Index::open(dir + "/index.sqlite"));
  return std::unique_ptr<Cache>(new Cache(dir, std::move(index)));
}

std::string Cache::blobPath(const Digest &digest) const {
  std::string hex = digest.hex();
  return root_ + "/cas/" + hex.substr(0, 2) + "/" + hex.substr(2);
}

bool Cache::contains(const Digest &digest) const {
  struct stat st;
  return ::stat(blobPath(digest).c_str(), &st) == 0 &&
         static_cast<uint64_t>(st.st_size) == digest.size;
}

Status Cache::storeFile(const Digest &digest, std::string_view bytes) {
  if (contains(digest))
    return index_->addBlob(digest);
  std::string target = blobPath(digest);
  FLOWC_RETURN_IF_ERROR(makeDirectory(fs::path(target).parent_path().string()));
  TempFile temp(root_ + "/tmp");
  if (temp.fd() < 0)
    return errnoStatus(errno, "cannot create temp file in '" + root_ + "/tmp'");
  FLOWC_RETURN_IF_ERROR(temp.writeAll(bytes).withContext("store " + digest.toString()));
  FLOWC_RETURN_IF_ERROR(temp.commit(target).withContext("store " + digest.toString()));
  // The file is in place before its row: a crash in between leaves an
  // unindexed blob (harmless), never a row without its blob.
  return index_->addBlob(digest);
}

Expected<Digest> Cache::put(std::string_view bytes) {
  Digest digest = digestOf(bytes);
  FLOWC_RETURN_IF_ERROR(storeFile(digest, bytes));
  return digest;
}

Expected<Digest> Cache::adoptFile(const std::string &path) {
  struct Remover {
    const std::string &path;
    ~Remover() { ::unlink(path.c_str()); }
  } remover{path};
  Digest digest;
  {
    FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
    digest = digestOf(file.view());
  }
  if (contains(digest)) {
    FLOWC_RETURN_IF_ERROR(index_->addBlob(digest));
    return digest;
  }
  std::string target = blobPath(digest);
  FLOWC_RETURN_IF_ERROR(makeDirectory(fs::path(target).parent_path().string()));
  if (::rename(path.c_str(), target.c_str()) != 0)
    return errnoStatus(errno, "cannot move '" + path + "' into the cache");
  FLOWC_RETURN_IF_ERROR(index_->addBlob(digest));
  return digest;
}

Status Cache::putVerified(const Digest &expected, std::string_view bytes) {
  Digest actual = digestOf(bytes);
  if (!(actual == expected))
    return dataLoss("blob claimed to be " + expected.toString() + " hashes to " +
                    actual.toString());
  return storeFile(expected, bytes);
}

Expected<MappedFile> Cache::map(const Digest &digest) const {
  auto file = MappedFile::open(blobPath(digest));
  if (!file)
    return notFound("blob " + digest.toString() + " is not in the cache");
  if (file->size() != digest.size)
    return dataLoss("blob " + digest.toString() + " has size " +
                    std::to_string(file->size()));
  return file;
}

Expected<std::optional<Digest>> Cache::lookupAction(ActionKind kind, const Digest &key) {
  FLOWC_ASSIGN_OR_RETURN(std::optional<Digest> result, index_->getAction(kind, key));
  if (!result || !contains(*result))
    return std::optional<Digest>();
  (void)index_->touchBlob(*result);
  return result;
}

Status Cache::recordAction(ActionKind kind, const Digest &key, const Digest &result) {
  if (!contains(result))
    return failedPrecondition("action result " + result.toString() +
                              " is not in the cache");
  return index_->putAction(kind, key, result);
}

Expected<CacheStats> Cache::stats() { return index_->stats(); }

} // namespace flowc::cache
