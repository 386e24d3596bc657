#include "UploadService.h"

#include "flowc/rpc/GrpcStatus.h"

#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <vector>

namespace flowc::daemon {

namespace {

namespace fs = std::filesystem;

constexpr const char *kPartialSuffix = ".part";
/// Bytes read at a time when a resumed upload re-hashes what it kept.
constexpr size_t kReadBytes = 1 << 20;

Expected<cache::Digest> parseDigest(const std::string &text, const std::string &what) {
  auto digest = cache::Digest::parse(text);
  if (!digest)
    return invalidArgument(what + " '" + text.substr(0, 200) +
                           "': " + digest.status().message());
  return digest;
}

/// Writes all of `bytes` at `offset`; ENOSPC and EDQUOT become
/// ResourceExhausted.
Status writeAt(int fd, std::string_view bytes, uint64_t offset, const std::string &path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                         static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errnoStatus(errno, "cannot write '" + path + "'");
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

/// ResourceExhausted unless `bytes` (and a MiB to spare) fit on the
/// filesystem of `dir`.
Status reserveSpace(const std::string &dir, uint64_t bytes) {
  struct statvfs fs;
  if (::statvfs(dir.c_str(), &fs) != 0)
    return Status::ok(); // unknown: the writes themselves report
  uint64_t available = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (available >= (1 << 20) && bytes <= available - (1 << 20))
    return Status::ok();
  return resourceExhausted("no space left on device (disk full): an upload needs " +
                           std::to_string(bytes) + " more bytes in '" + dir +
                           "' but only " + std::to_string(available) + " are free");
}

/// A manifest path: relative, made of plain names (no empty, `.` or `..`
/// component), so that it lands beneath the materialized directory
/// whatever the kernel's path resolution does.
Status checkManifestPath(const std::string &path, const std::string &where,
                         size_t maxBytes) {
  auto bad = [&](const std::string &why) {
    return invalidArgument(where + " '" + path.substr(0, 200) + "' " + why);
  };
  if (path.empty())
    return invalidArgument(where + " is empty");
  if (path.size() > maxBytes)
    return bad("is longer than " + std::to_string(maxBytes) + " bytes");
  if (path.find('\0') != std::string::npos)
    return bad("contains a NUL byte");
  if (path.front() == '/')
    return bad("is absolute; paths are relative to the model's directory");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos)
      end = path.size();
    std::string_view part(path.data() + start, end - start);
    if (part.empty())
      return bad("has an empty component");
    if (part == "..")
      return bad("escapes the model's directory (a '..' component)");
    if (part == ".")
      return bad("has a '.' component");
    if (part.size() > 255)
      return bad("has a component longer than 255 bytes");
    start = end + 1;
  }
  return Status::ok();
}

/// Creates the directories of `relative`'s parent beneath `root`, 0700.
Status makeParents(const std::string &root, const std::string &relative) {
  size_t slash = 0;
  while ((slash = relative.find('/', slash)) != std::string::npos) {
    std::string dir = root + "/" + relative.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return errnoStatus(errno, "cannot create '" + dir + "'");
    ++slash;
  }
  return Status::ok();
}

/// Writes a blob's bytes to a new file `path` (inline blobs, or a file blob
/// that cannot be linked), a window at a time so that a mapped blob's pages
/// are released as they are written.
Status writeNewFile(const std::string &path, std::string_view bytes) {
  UniqueFd fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
  if (!fd)
    return errnoStatus(errno, "cannot create '" + path + "'");
  uint64_t offset = 0;
  return visitInWindows(bytes, kDefaultWindowBytes, [&](std::string_view window) {
    Status status = writeAt(fd.get(), window, offset, path);
    offset += window.size();
    return status;
  });
}

} // namespace

/// One upload's hold on its partial file: no other stream writes it, and
/// the sweep leaves it alone.
struct UploadService::Claim {
  UploadService &service;
  std::string name;
  ~Claim() {
    std::lock_guard lock(service.mutex_);
    service.active_.erase(name);
  }
};

MaterializedModel::~MaterializedModel() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (ec)
    spdlog::warn("cannot remove the materialized model '{}': {}", dir_, ec.message());
}

grpc::Status MaterializedModel::scrub(const grpc::Status &status) const {
  std::string message = status.error_message();
  std::string prefix = dir_ + "/";
  for (size_t at; (at = message.find(prefix)) != std::string::npos;)
    message.erase(at, prefix.size());
  for (size_t at; (at = message.find(dir_)) != std::string::npos;)
    message.replace(at, dir_.size(), "the model's directory");
  return grpc::Status(status.error_code(), message, status.error_details());
}

UploadService::UploadService(cache::Cache &cache, UploadLimits limits)
    : cache_(cache), limits_(limits), uploadsDir_(cache.root() + "/uploads") {
  if (cache_.readOnly())
    return;
  if (::mkdir(uploadsDir_.c_str(), 0700) != 0 && errno != EEXIST)
    spdlog::warn("cannot create '{}': {}", uploadsDir_, std::strerror(errno));
  if (Status swept = sweepPartials("", 0); !swept)
    spdlog::warn("upload sweep: {}", swept.message());
}

uint64_t UploadService::maxPartialBytes() const {
  return limits_.maxPartialBytes ? limits_.maxPartialBytes : cache_.options().maxBytes;
}

std::string UploadService::partialPath(const cache::Digest &digest) const {
  return uploadsDir_ + "/" + digest.hex() + "." + std::to_string(digest.size) +
         kPartialSuffix;
}

Status UploadService::sweepPartials(const std::string &keep, uint64_t needed) {
  struct Partial {
    int64_t mtime;
    uint64_t size;
    std::string path;
  };
  std::vector<Partial> idle;
  uint64_t total = 0;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  int64_t oldest = std::chrono::duration_cast<std::chrono::seconds>(now).count() -
                   limits_.partialMaxAge.count();
  std::lock_guard lock(mutex_);
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(uploadsDir_, ec)) {
    std::string name = entry.path().filename().string();
    if (name == keep)
      continue;
    struct stat st;
    if (::lstat(entry.path().c_str(), &st) != 0)
      continue;
    if (active_.count(name)) {
      total += static_cast<uint64_t>(st.st_size);
      continue;
    }
    bool named = name.size() > 65 && name[64] == '.' && name.ends_with(kPartialSuffix);
    if (!S_ISREG(st.st_mode) || !named || st.st_mtime < oldest) {
      spdlog::info("upload sweep removes {}", entry.path().string());
      fs::remove_all(entry.path(), ec);
      continue;
    }
    total += static_cast<uint64_t>(st.st_size);
    idle.push_back({st.st_mtime, static_cast<uint64_t>(st.st_size), entry.path()});
  }
  std::sort(idle.begin(), idle.end(),
            [](const Partial &a, const Partial &b) { return a.mtime < b.mtime; });
  uint64_t bound = maxPartialBytes();
  // (Compared without `total + needed`, which a hostile size overflows.)
  if (needed > bound)
    return resourceExhausted("a blob of " + std::to_string(needed) +
                             " bytes is over the daemon's bound on unfinished uploads (" +
                             std::to_string(bound) + " bytes)");
  auto fits = [&] { return total <= bound - needed; };
  for (const Partial &partial : idle) {
    if (fits())
      break;
    spdlog::info("upload sweep removes {} ({} bytes) to make room", partial.path,
                 partial.size);
    if (::unlink(partial.path.c_str()) == 0)
      total -= partial.size;
  }
  if (!fits())
    return resourceExhausted("an upload of " + std::to_string(needed) +
                             " bytes does not fit the daemon's bound on unfinished "
                             "uploads (" +
                             std::to_string(bound) + " bytes, " + std::to_string(total) +
                             " in use by uploads in progress)");
  return Status::ok();
}

grpc::Status
UploadService::findMissingBlobs(const flowc::v1::FindMissingBlobsRequest &request,
                                flowc::v1::FindMissingBlobsResponse *response) {
  auto fail = [](const Status &status) {
    spdlog::warn("find-missing-blobs status={}", status.toString());
    return rpc::toGrpcStatus(status);
  };
  if (static_cast<size_t>(request.digests_size()) > limits_.maxDigestsPerRequest)
    return fail(invalidArgument(std::to_string(request.digests_size()) +
                                " digests in one FindMissingBlobs request, more than " +
                                std::to_string(limits_.maxDigestsPerRequest)));
  std::set<std::string> seen;
  for (int i = 0; i < request.digests_size(); ++i) {
    const std::string &text = request.digests(i);
    auto digest = parseDigest(text, "digests[" + std::to_string(i) + "]");
    if (!digest)
      return fail(digest.status());
    if (seen.insert(text).second && !cache_.contains(*digest))
      response->add_missing(text);
  }
  spdlog::info("find-missing-blobs asked={} missing={}", request.digests_size(),
               response->missing_size());
  return grpc::Status::OK;
}

grpc::Status UploadService::queryUpload(const flowc::v1::QueryUploadRequest &request,
                                        flowc::v1::QueryUploadResponse *response) {
  auto digest = parseDigest(request.digest(), "digest");
  if (!digest)
    return rpc::toGrpcStatus(digest.status());
  if (cache_.contains(*digest)) {
    response->set_complete(true);
    response->set_committed_size(digest->size);
    return grpc::Status::OK;
  }
  struct stat st;
  if (::lstat(partialPath(*digest).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) <= digest->size)
    response->set_committed_size(static_cast<uint64_t>(st.st_size));
  return grpc::Status::OK;
}

grpc::Status UploadService::uploadBlob(grpc::ServerContext *context,
                                       grpc::ServerReader<flowc::v1::UploadChunk> *reader,
                                       flowc::v1::UploadBlobResponse *response) {
  flowc::v1::UploadChunk first;
  if (!reader->Read(&first))
    return rpc::toGrpcStatus(invalidArgument("an upload without any chunk"));
  auto digest = parseDigest(first.digest(), "upload digest");
  if (!digest) {
    spdlog::warn("upload status={}", digest.status().toString());
    return rpc::toGrpcStatus(digest.status());
  }
  std::string name = digest->toString();
  auto fail = [&](const Status &status) {
    spdlog::warn("upload blob={} status={}", name, status.toString());
    return rpc::toGrpcStatus(status);
  };
  if (cache_.readOnly())
    return fail(unavailable("the daemon's cache '" + cache_.root() +
                            "' is read-only: it stores no uploads"));
  // Stored already (another client, or a retry after the answer was lost).
  if (cache_.contains(*digest)) {
    response->set_committed_size(digest->size);
    spdlog::info("upload blob={} stored already", name);
    return grpc::Status::OK;
  }
  std::string partial = fs::path(partialPath(*digest)).filename().string();
  {
    std::lock_guard lock(mutex_);
    if (!active_.insert(partial).second)
      return fail(unavailable("blob " + name +
                              " is being uploaded by another stream; retry once it "
                              "ends (QueryUpload says how far it got)"));
  }
  Claim claim{*this, partial};
  uint64_t committed = 0;
  Status status = receive(context, *digest, first, reader, committed);
  // A refused upload that kept nothing leaves no empty partial behind.
  if (!status && committed == 0)
    ::unlink(partialPath(*digest).c_str());
  response->set_committed_size(committed);
  if (!status)
    return fail(status);
  spdlog::info("upload blob={} committed={} {}", name, committed,
               committed == digest->size ? "stored" : "kept for resuming");
  return grpc::Status::OK;
}

Status UploadService::receive(grpc::ServerContext *context, const cache::Digest &digest,
                              const flowc::v1::UploadChunk &first,
                              grpc::ServerReader<flowc::v1::UploadChunk> *reader,
                              uint64_t &committed) {
  std::string name = digest.toString();
  std::string path = partialPath(digest);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd)
    return errnoStatus(errno, "cannot open the partial upload '" + path + "'");
  FLOWC_ASSIGN_OR_RETURN(FileStat stat, fileStatOf(fd.get(), path));
  committed = stat.size;
  // Offset 0 starts over; any other offset continues what is kept.
  if (first.offset() == 0 || committed > digest.size) {
    if (committed != 0 && ::ftruncate(fd.get(), 0) != 0)
      return errnoStatus(errno, "cannot truncate '" + path + "'");
    committed = 0;
  }
  if (first.offset() != committed)
    return failedPrecondition("upload of " + name + ": the first chunk is at offset " +
                              std::to_string(first.offset()) + " but " +
                              std::to_string(committed) +
                              " bytes are committed; resume at QueryUpload's "
                              "committed_size");
  FLOWC_RETURN_IF_ERROR(sweepPartials(fs::path(path).filename().string(), digest.size));
  FLOWC_RETURN_IF_ERROR(reserveSpace(uploadsDir_, digest.size - committed));
  cache::Hasher hasher;
  {
    // The kept bytes are hashed again: a daemon that died meanwhile may
    // have lost some, and a mismatch at the end says so.
    std::string buffer(kReadBytes, '\0');
    for (uint64_t done = 0; done < committed;) {
      ssize_t n = ::pread(fd.get(), buffer.data(),
                          std::min<uint64_t>(buffer.size(), committed - done),
                          static_cast<off_t>(done));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return n == 0 ? dataLoss("partial upload '" + path + "' shrank while read")
                      : errnoStatus(errno, "cannot read '" + path + "'");
      hasher.update(buffer.data(), static_cast<size_t>(n));
      done += static_cast<uint64_t>(n);
    }
  }
  flowc::v1::UploadChunk chunk = first;
  bool finished = false;
  while (true) {
    if (!chunk.digest().empty() && chunk.digest() != first.digest())
      return invalidArgument("upload of " + name + ": a chunk names another digest '" +
                             chunk.digest().substr(0, 200) + "'");
    if (chunk.offset() != committed)
      return failedPrecondition("upload of " + name + ": a chunk at offset " +
                                std::to_string(chunk.offset()) + " after " +
                                std::to_string(committed) +
                                " bytes (chunks must be sent in order)");
    const std::string &data = chunk.data();
    if (data.size() > limits_.maxChunkBytes)
      return invalidArgument("upload of " + name + ": a chunk of " +
                             std::to_string(data.size()) + " bytes, more than " +
                             std::to_string(limits_.maxChunkBytes));
    if (data.size() > digest.size - committed)
      return invalidArgument("upload of " + name + ": data past the blob's size (" +
                             std::to_string(committed + data.size()) + " > " +
                             std::to_string(digest.size) + " bytes)");
    if (Status written = writeAt(fd.get(), data, committed, path); !written) {
      // What was committed stays resumable; a torn tail does not.
      if (::ftruncate(fd.get(), static_cast<off_t>(committed)) != 0)
        spdlog::warn("cannot truncate '{}': {}", path, std::strerror(errno));
      return written;
    }
    hasher.update(data);
    committed += data.size();
    if (chunk.finish()) {
      finished = true;
      break;
    }
    if (!reader->Read(&chunk))
      break;
  }
  if (!finished) {
    // The client went away or half-closed early: what it sent is kept.
    if (context->IsCancelled())
      return Status(StatusCode::Cancelled, "upload of " + name + " interrupted at " +
                                               std::to_string(committed) + " bytes");
    return Status::ok();
  }
  auto discard = [&](Status status) {
    ::unlink(path.c_str());
    committed = 0;
    return status;
  };
  if (committed != digest.size)
    return discard(dataLoss("upload of " + name + " finished at " +
                            std::to_string(committed) + " bytes, short of its size"));
  cache::Digest got = hasher.finish();
  if (!(got == digest))
    return discard(dataLoss("upload of " + name + ": the bytes hash to " +
                            got.toString() + "; nothing was stored"));
  if (::fsync(fd.get()) != 0)
    return errnoStatus(errno, "cannot fsync '" + path + "'");
  fd = UniqueFd();
  // Into tmp/ under a name the cache's sweep knows, then adopted (renamed
  // into the CAS, hashed once more): no partial blob is ever visible.
  std::string temp =
      cache_.tmpDir() + "/upload." + std::to_string(cache_.tempOwner()) + ".XXXXXX";
  UniqueFd placeholder(::mkostemp(temp.data(), O_CLOEXEC));
  if (!placeholder)
    return errnoStatus(errno, "cannot create a temp file in '" + cache_.tmpDir() + "'");
  placeholder = UniqueFd();
  if (::rename(path.c_str(), temp.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    return errnoStatus(err, "cannot move '" + path + "' to '" + temp + "'");
  }
  auto adopted = cache_.adoptFile(temp);
  if (!adopted) {
    committed = 0;
    return adopted.status();
  }
  if (!(*adopted == digest))
    return dataLoss("upload of " + name + " changed while it was stored (it hashes to " +
                    adopted->toString() + ")");
  return Status::ok();
}

Expected<std::unique_ptr<MaterializedModel>>
UploadService::materialize(const flowc::v1::SubmitRequest &request) {
  const auto &files = request.model().files();
  if (!request.model_path().empty())
    return invalidArgument("a submit names both model_path '" +
                           request.model_path().substr(0, 200) +
                           "' and a model manifest; send one");
  if (files.empty())
    return invalidArgument("the model manifest has no files");
  if (static_cast<size_t>(files.size()) > limits_.maxManifestFiles)
    return invalidArgument("the model manifest has " + std::to_string(files.size()) +
                           " files, more than " +
                           std::to_string(limits_.maxManifestFiles));
  std::vector<cache::Digest> digests;
  std::set<std::string> paths;
  for (int i = 0; i < files.size(); ++i) {
    std::string where = "model.files[" + std::to_string(i) + "].path";
    const std::string &path = files[i].path();
    FLOWC_RETURN_IF_ERROR(checkManifestPath(path, where, limits_.maxPathBytes));
    if (i == 0 && path.find('/') != std::string::npos)
      return invalidArgument(where + " '" + path.substr(0, 200) +
                             "' is the model: a file name, without a directory");
    if (!paths.insert(path).second)
      return invalidArgument(where + " '" + path.substr(0, 200) + "' is listed twice");
    FLOWC_ASSIGN_OR_RETURN(
        cache::Digest digest,
        parseDigest(files[i].digest(), "model.files[" + std::to_string(i) + "].digest"));
    digests.push_back(digest);
  }
  // A file that is also another's directory ("a" and "a/b").
  for (const std::string &path : paths)
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1))
      if (paths.count(path.substr(0, slash)))
        return invalidArgument("model manifest path '" + path.substr(0, 200) +
                               "' lies under '" + path.substr(0, slash) +
                               "', which is a file of the manifest");
  for (int i = 0; i < files.size(); ++i)
    if (!cache_.contains(digests[i]))
      return failedPrecondition(
          "model.files[" + std::to_string(i) + "] '" + files[i].path() + "' (" +
          files[i].digest() +
          ") is not in the daemon's cache: upload it first (FindMissingBlobs, "
          "UploadBlob)");

  std::string dir = fs::absolute(cache_.tmpDir()).lexically_normal().string() +
                    "/model." + std::to_string(cache_.tempOwner()) + ".XXXXXX";
  if (!::mkdtemp(dir.data()))
    return errnoStatus(errno, "cannot create a directory in '" + cache_.tmpDir() + "'");
  std::unique_ptr<MaterializedModel> model(new MaterializedModel(dir, cache_.pinGuard()));
  for (int i = 0; i < files.size(); ++i) {
    const std::string &path = files[i].path();
    const cache::Digest &digest = digests[i];
    model->pins_.add(digest);
    FLOWC_RETURN_IF_ERROR(makeParents(dir, path));
    std::string target = dir + "/" + path;
    // A hard link of the blob's file: no copy, whatever its size.
    if (::link(cache_.blobPath(digest).c_str(), target.c_str()) == 0)
      continue;
    if (errno == EEXIST)
      return invalidArgument("model manifest path '" + path + "' is listed twice");
    // An inline blob (or one whose file went since the check above).
    auto blob = cache_.get(digest);
    if (!blob && blob.status().code() == StatusCode::NotFound)
      return failedPrecondition("model.files[" + std::to_string(i) + "] '" + path +
                                "' (" + files[i].digest() +
                                ") is not in the daemon's cache: upload it first");
    if (!blob)
      return blob.status();
    FLOWC_RETURN_IF_ERROR(writeNewFile(target, blob->bytes()));
  }
  model->request_ = request;
  model->request_.clear_model();
  model->request_.set_model_path(dir + "/" + files[0].path());
  spdlog::info("materialized model={} files={} dir={}", files[0].path(), files.size(),
               dir);
  return model;
}

} // namespace flowc::daemon
