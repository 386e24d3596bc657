#include "RemoteSubmit.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/SafeOpen.h"
#include "flowc/support/Sha256.h"

#include <algorithm>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace flowc::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = 1 << 20;
/// Nesting of graphs in attributes (If/Loop bodies) the scanner follows.
constexpr int kMaxDepth = 64;
/// Attempts of one blob's upload (each resumes where the last stopped).
constexpr int kUploadAttempts = 5;
/// Files the hash memo remembers (the least recently used go first).
constexpr size_t kMemoEntries = 4096;

// ---------------------------------------------------------------------------
// A scanner of the protobuf wire format, enough to find the external-data
// locations of an ONNX model's tensors without the compiler (this binary
// links none). Bounds-checked: a malformed model is an error, never a read
// past its end.

struct WireField {
  uint32_t number = 0;
  uint32_t type = 0;
  std::string_view bytes; // length-delimited payloads only
};

class WireScanner {
public:
  WireScanner(std::string_view data, size_t base) : data_(data), base_(base) {}

  /// The next field, nullopt at the end; InvalidArgument naming the byte
  /// offset in the file where the bytes are not protobuf.
  Expected<std::optional<WireField>> next() {
    if (pos_ >= data_.size())
      return std::optional<WireField>();
    size_t at = base_ + pos_;
    FLOWC_ASSIGN_OR_RETURN(uint64_t tag, varint());
    WireField field;
    field.number = static_cast<uint32_t>(tag >> 3);
    field.type = static_cast<uint32_t>(tag & 7);
    if (field.number == 0 || tag >> 32)
      return malformed(at, "field number out of range");
    switch (field.type) {
    case 0:
      FLOWC_RETURN_IF_ERROR(varint().status());
      break;
    case 1:
    case 5: {
      size_t width = field.type == 1 ? 8 : 4;
      if (data_.size() - pos_ < width)
        return malformed(at, "truncated fixed-width field");
      pos_ += width;
      break;
    }
    case 2: {
      FLOWC_ASSIGN_OR_RETURN(uint64_t length, varint());
      if (length > data_.size() - pos_)
        return malformed(at, "a length past the end of its message");
      field.bytes = data_.substr(pos_, length);
      pos_ += length;
      break;
    }
    default:
      return malformed(at, "wire type " + std::to_string(field.type));
    }
    return std::optional<WireField>(field);
  }

  size_t offsetOf(std::string_view inner) const {
    return base_ + static_cast<size_t>(inner.data() - data_.data());
  }

private:
  Expected<uint64_t> varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size())
        return malformed(base_ + pos_, "truncated varint");
      uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return value;
    }
    return malformed(base_ + pos_, "varint longer than 10 bytes");
  }
  static Status malformed(size_t offset, const std::string &why) {
    return invalidArgument("not a valid ONNX protobuf at byte " + std::to_string(offset) +
                           ": " + why);
  }

  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
};

/// A tensor's external data: where it lies, and which tensor said so.
struct Location {
  std::string location;
  std::string tensor;
};

class LocationScanner {
public:
  explicit LocationScanner(std::string_view file) : file_(file) {}

  Status model() {
    // ModelProto: graph = 7, functions = 25.
    return fields(file_, 0, [&](const WireField &f, size_t at) -> Status {
      if (f.number == 7)
        return graph(f.bytes, at, 0);
      if (f.number == 25)
        return function(f.bytes, at, 0);
      return Status::ok();
    });
  }
  std::vector<Location> locations;

private:
  using Visit = std::function<Status(const WireField &, size_t)>;

  /// Calls `visit` on each length-delimited field of the message `bytes`
  /// (at file offset `base`) with the field's payload offset.
  Status fields(std::string_view bytes, size_t base, const Visit &visit) {
    WireScanner scanner(bytes, base);
    while (true) {
      FLOWC_ASSIGN_OR_RETURN(auto field, scanner.next());
      if (!field)
        return Status::ok();
      if (field->type == 2)
        FLOWC_RETURN_IF_ERROR(visit(*field, scanner.offsetOf(field->bytes)));
    }
  }
  Status deeper(int depth, size_t at) {
    if (depth >= kMaxDepth)
      return invalidArgument("graphs nested more than " + std::to_string(kMaxDepth) +
                             " deep at byte " + std::to_string(at));
    return Status::ok();
  }
  Status graph(std::string_view bytes, size_t base, int depth) {
    FLOWC_RETURN_IF_ERROR(deeper(depth, base));
    // GraphProto: node = 1, initializer = 5, sparse_initializer = 15.
    return fields(bytes, base, [&](const WireField &f, size_t at) -> Status {
      if (f.number == 1)
        return node(f.bytes, at, depth);
      if (f.number == 5)
        return tensor(f.bytes, at);
      if (f.number == 15)
        return sparse(f.bytes, at);
      return Status::ok();
    });
  }
  Status function(std::string_view bytes, size_t base, int depth) {
    // FunctionProto: node = 7.
    return fields(bytes, base, [&](const WireField &f, size_t at) -> Status {
      return f.number == 7 ? node(f.bytes, at, depth) : Status::ok();
    });
  }
  Status node(std::string_view bytes, size_t base, int depth) {
    // NodeProto: attribute = 5.
    return fields(bytes, base, [&](const WireField &f, size_t at) -> Status {
      return f.number == 5 ? attribute(f.bytes, at, depth) : Status::ok();
    });
  }
  Status attribute(std::string_view bytes, size_t base, int depth) {
    // AttributeProto: t = 5, g = 6, tensors = 10, graphs = 11,
    // sparse_tensor = 22, sparse_tensors = 23.
    return fields(bytes, base, [&](const WireField &f, size_t at) -> Status {
      switch (f.number) {
      case 5:
      case 10:
        return tensor(f.bytes, at);
      case 6:
      case 11:
        return graph(f.bytes, at, depth + 1);
      case 22:
      case 23:
        return sparse(f.bytes, at);
      default:
        return Status::ok();
      }
    });
  }
  Status sparse(std::string_view bytes, size_t base) {
    // SparseTensorProto: values = 1, indices = 2.
    return fields(bytes, base, [&](const WireField &f, size_t at) -> Status {
      return f.number == 1 || f.number == 2 ? tensor(f.bytes, at) : Status::ok();
    });
  }
  Status tensor(std::string_view bytes, size_t base) {
    // TensorProto: name = 8, external_data = 13 (StringStringEntryProto:
    // key = 1, value = 2).
    std::string name;
    std::vector<std::string> found;
    FLOWC_RETURN_IF_ERROR(
        fields(bytes, base, [&](const WireField &f, size_t at) -> Status {
          if (f.number == 8)
            name = std::string(f.bytes.substr(0, 200));
          if (f.number != 13)
            return Status::ok();
          std::string key, value;
          FLOWC_RETURN_IF_ERROR(fields(f.bytes, at, [&](const WireField &e, size_t) {
            if (e.number == 1)
              key = std::string(e.bytes);
            else if (e.number == 2)
              value = std::string(e.bytes);
            return Status::ok();
          }));
          if (key == "location")
            found.push_back(value);
          return Status::ok();
        }));
    for (std::string &location : found)
      locations.push_back({std::move(location), name});
    return Status::ok();
  }

  std::string_view file_;
};

/// The ingest's rules for a location (compiler/lib/onnx/OnnxModel.cpp),
/// applied before anything is sent: relative, not leaving the model's
/// directory. Returns it normalized, as the daemon's manifest wants it.
Expected<std::string> checkLocation(const std::string &model, const Location &where) {
  auto bad = [&](const std::string &why) {
    return invalidArgument(model + ": tensor '" + where.tensor +
                           "': external data location '" + where.location.substr(0, 200) +
                           "' " + why);
  };
  if (where.location.empty())
    return bad("is empty");
  if (where.location.find('\0') != std::string::npos)
    return bad("contains a NUL byte");
  fs::path relative(where.location);
  if (relative.is_absolute())
    return bad("is absolute; it must be relative to the model's directory");
  fs::path normal = relative.lexically_normal();
  for (const fs::path &part : normal)
    if (part == "..")
      return bad("escapes the model's directory");
  std::string text = normal.string();
  if (text.empty() || text == "." || text.back() == '/')
    return bad("names a directory, not a file");
  return text;
}

/// The external-data locations of the model open on `fd`, normalized, each
/// once, without the model's own file name.
Expected<std::vector<std::string>> scanExternalData(int fd,
                                                    const std::string &modelPath) {
  FLOWC_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::fromFd(fd, modelPath));
  LocationScanner scanner(mapped.view());
  if (Status scanned = scanner.model(); !scanned)
    return invalidArgument(modelPath + ": " + scanned.message());
  std::vector<std::string> relatives;
  std::set<std::string> seen{fs::path(modelPath).filename().string()};
  for (const Location &location : scanner.locations) {
    FLOWC_ASSIGN_OR_RETURN(std::string relative, checkLocation(modelPath, location));
    if (seen.insert(relative).second)
      relatives.push_back(relative);
  }
  return relatives;
}

// ---------------------------------------------------------------------------
// The client's stat memo: a file whose identity (device, inode, size,
// mtime, ctime) is unchanged since it was hashed has the same digest, so an
// unchanged 10 GB model is not read again.

class HashMemo {
public:
  explicit HashMemo(std::string path) : path_(std::move(path)) {
    auto text = readFileToString(path_);
    if (!text)
      return;
    auto json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object() || json.value("version", 0) != 1 || !json.contains("entries") ||
        !json["entries"].is_object())
      return; // unreadable: the memo only saves work
    for (const auto &[file, entry] : json["entries"].items()) {
      if (!entry.is_object())
        continue;
      Entry e;
      e.stat.device = entry.value("dev", uint64_t{0});
      e.stat.inode = entry.value("ino", uint64_t{0});
      e.stat.size = entry.value("size", uint64_t{0});
      e.stat.mtimeNs = entry.value("mtime_ns", int64_t{0});
      e.stat.ctimeNs = entry.value("ctime_ns", int64_t{0});
      e.digest = entry.value("digest", std::string());
      e.used = entry.value("used", int64_t{0});
      if (wellFormed(e))
        entries_[file] = std::move(e);
    }
  }

  std::optional<std::string> lookup(const std::string &file, const FileStat &stat) {
    auto it = entries_.find(file);
    if (it == entries_.end() || !(it->second.stat == stat))
      return std::nullopt;
    it->second.used = now();
    changed_ = true;
    return it->second.digest;
  }

  /// Remembers `digest` for `stat` unless the file was changed within the
  /// last two seconds (a writer still at work could change it again within
  /// the same mtime granule).
  void record(const std::string &file, const FileStat &stat, const std::string &digest) {
    int64_t nowNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    if (std::max(stat.mtimeNs, stat.ctimeNs) > nowNs - 2'000'000'000)
      return;
    entries_[file] = Entry{stat, digest, now()};
    changed_ = true;
  }

  /// Writes the memo back (temp file + rename); a failure only costs a
  /// re-hash next time, so it is not an error.
  void save() {
    if (!changed_)
      return;
    std::vector<std::pair<int64_t, std::string>> byUse;
    for (const auto &[file, entry] : entries_)
      byUse.emplace_back(entry.used, file);
    std::sort(byUse.rbegin(), byUse.rend());
    nlohmann::json entries = nlohmann::json::object();
    for (size_t i = 0; i < byUse.size() && i < kMemoEntries; ++i) {
      const Entry &e = entries_[byUse[i].second];
      entries[byUse[i].second] = {{"dev", e.stat.device},
                                  {"ino", e.stat.inode},
                                  {"size", e.stat.size},
                                  {"mtime_ns", e.stat.mtimeNs},
                                  {"ctime_ns", e.stat.ctimeNs},
                                  {"digest", e.digest},
                                  {"used", e.used}};
    }
    std::error_code ec;
    fs::create_directories(fs::path(path_).parent_path(), ec);
    nlohmann::json json = {{"version", 1}, {"entries", std::move(entries)}};
    (void)writeFileAtomically(path_, json.dump());
  }

private:
  struct Entry {
    FileStat stat;
    std::string digest;
    int64_t used = 0;
  };
  static bool wellFormed(const Entry &e) {
    // "sha256:<64 hex>/<size>", the size the file's.
    std::string tail = "/" + std::to_string(e.stat.size);
    return e.digest.size() == 7 + 64 + tail.size() && e.digest.starts_with("sha256:") &&
           e.digest.ends_with(tail) &&
           parseSha256Hex(std::string_view(e.digest).substr(7, 64)).has_value();
  }
  static int64_t now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  std::string path_;
  std::map<std::string, Entry> entries_;
  bool changed_ = false;
};

/// One file of the model: where it is here, its manifest path and digest.
struct ModelPart {
  std::string path;     ///< On this machine, for messages and the memo.
  std::string relative; ///< In the manifest.
  UniqueFd fd;
  FileStat stat;
  std::string digest;
};

/// Streams the file open on `fd` through SHA-256 (1 MiB at a time).
Expected<std::string> hashFile(int fd, const std::string &path, uint64_t size) {
  // Read once, front to back: the kernel reads ahead further.
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  Sha256Hasher hasher;
  std::string buffer(kChunkBytes, '\0');
  uint64_t done = 0;
  while (true) {
    ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errnoStatus(errno, "cannot read '" + path + "'");
    if (n == 0)
      break;
    hasher.update(buffer.data(), static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
  }
  if (done != size)
    return dataLoss("'" + path + "' changed size while it was hashed");
  return "sha256:" + sha256Hex(hasher.finish()) + "/" + std::to_string(size);
}

/// The digest of `part`, from the memo or hashed now; DataLoss if the file
/// changed meanwhile.
Status digestPart(ModelPart &part, HashMemo &memo, UploadReport &report) {
  if (auto known = memo.lookup(part.path, part.stat)) {
    part.digest = *known;
    return Status::ok();
  }
  auto start = Clock::now();
  FLOWC_ASSIGN_OR_RETURN(part.digest, hashFile(part.fd.get(), part.path, part.stat.size));
  report.hashSeconds += std::chrono::duration<double>(Clock::now() - start).count();
  report.hashedBytes += part.stat.size;
  FLOWC_ASSIGN_OR_RETURN(FileStat after, fileStatOf(part.fd.get(), part.path));
  if (!(after == part.stat))
    return dataLoss("'" + part.path + "' changed while it was hashed; submit again");
  memo.record(part.path, part.stat, part.digest);
  return Status::ok();
}

Expected<ModelPart> openRegular(UniqueFd fd, const std::string &path,
                                const std::string &relative) {
  FLOWC_ASSIGN_OR_RETURN(FileStat stat, fileStatOf(fd.get(), path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return invalidArgument("'" + path + "' is not a regular file");
  ModelPart part;
  part.path = path;
  part.relative = relative;
  part.fd = std::move(fd);
  part.stat = stat;
  return part;
}

bool retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::ABORTED ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::UNKNOWN;
}

/// One attempt: from the daemon's committed offset to the end. Returns
/// the gRPC status; counts the bytes sent.
grpc::Status uploadOnce(DaemonClient &client, const ModelPart &part, uint64_t &sent,
                        bool &complete) {
  complete = false;
  flowc::v1::QueryUploadRequest query;
  query.set_digest(part.digest);
  flowc::v1::QueryUploadResponse state;
  {
    grpc::ClientContext context;
    grpc::Status status = client.compiler().QueryUpload(&context, query, &state);
    if (!status.ok())
      return status;
  }
  if (state.complete()) {
    complete = true;
    return grpc::Status::OK;
  }
  grpc::ClientContext context;
  flowc::v1::UploadBlobResponse response;
  auto writer = client.compiler().UploadBlob(&context, &response);
  uint64_t offset = state.committed_size();
  if (offset > part.stat.size)
    offset = 0;
  std::string buffer(kChunkBytes, '\0');
  bool open = true;
  do {
    size_t want =
        static_cast<size_t>(std::min<uint64_t>(kChunkBytes, part.stat.size - offset));
    size_t got = 0;
    while (got < want) {
      ssize_t n = ::pread(part.fd.get(), buffer.data() + got, want - got,
                          static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        context.TryCancel();
        return grpc::Status(grpc::StatusCode::DATA_LOSS,
                            "'" + part.path +
                                "' shrank or could not be read while uploaded");
      }
      got += static_cast<size_t>(n);
    }
    flowc::v1::UploadChunk chunk;
    if (offset == state.committed_size())
      chunk.set_digest(part.digest);
    chunk.set_offset(offset);
    chunk.set_data(buffer.data(), got);
    offset += got;
    chunk.set_finish(offset == part.stat.size);
    open = writer->Write(chunk);
    if (open)
      sent += got;
  } while (open && offset < part.stat.size);
  if (open)
    writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (status.ok())
    complete = response.committed_size() == part.stat.size;
  return status;
}

Status uploadPart(DaemonClient &client, const ModelPart &part, UploadReport &report) {
  grpc::Status status;
  for (int attempt = 0; attempt < kUploadAttempts; ++attempt) {
    if (attempt > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(200 << std::min(attempt, 4)));
    bool complete = false;
    status = uploadOnce(client, part, report.uploadedBytes, complete);
    if (status.ok() && complete)
      return Status::ok();
    if (!status.ok() && !retryable(status.error_code()))
      break;
  }
  if (status.ok())
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the daemon did not take the whole blob after " +
                              std::to_string(kUploadAttempts) + " attempts");
  Status failed = fromGrpc(status, "upload");
  return Status(failed.code(), "cannot upload '" + part.path + "': " + failed.message());
}

} // namespace

Expected<UploadReport> uploadModel(DaemonClient &client, const std::string &modelPath,
                                   const std::string &memoDir,
                                   flowc::v1::SubmitRequest &request) {
  UploadReport report;
  std::error_code ec;
  if (fs::is_directory(modelPath, ec))
    return invalidArgument("'" + modelPath +
                           "' is a reproducer directory; an upload submit sends an ONNX "
                           "model file");
  UniqueFd modelFd(::open(modelPath.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!modelFd)
    return errnoStatus(errno, "cannot open '" + modelPath + "'");
  std::string name = fs::path(modelPath).filename().string();
  FLOWC_ASSIGN_OR_RETURN(ModelPart model,
                         openRegular(std::move(modelFd), modelPath, name));

  // Scanned from the descriptor that is hashed: the file checked is the file sent.
  FLOWC_ASSIGN_OR_RETURN(std::vector<std::string> relatives,
                         scanExternalData(model.fd.get(), modelPath));
  std::vector<ModelPart> parts;
  parts.push_back(std::move(model));
  if (!relatives.empty()) {
    std::string dir = fs::path(modelPath).parent_path().string();
    UniqueFd dirFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dirFd)
      return errnoStatus(errno, "cannot open the model's directory '" + dir + "'");
    for (const std::string &relative : relatives) {
      std::string path = dir + "/" + relative;
      // Beneath the directory, following no symlink: the file checked is
      // the file read (as the daemon's ingest opens it).
      auto fd = openBeneath(dirFd.get(), relative);
      if (!fd && fd.status().code() == StatusCode::NotFound)
        return notFound(modelPath + ": external data file '" + relative +
                        "' not found in '" + dir + "'");
      if (!fd)
        return Status(fd.status().code(),
                      modelPath + ": external data location " + fd.status().message());
      FLOWC_ASSIGN_OR_RETURN(ModelPart part, openRegular(fd.takeValue(), path, relative));
      parts.push_back(std::move(part));
    }
  }

  HashMemo memo(memoDir + "/upload-hashes.json");
  for (ModelPart &part : parts) {
    FLOWC_RETURN_IF_ERROR(digestPart(part, memo, report));
    report.modelBlobs += 1;
    report.modelBytes += part.stat.size;
  }
  memo.save();

  flowc::v1::FindMissingBlobsRequest find;
  std::map<std::string, const ModelPart *> byDigest;
  for (const ModelPart &part : parts)
    if (byDigest.emplace(part.digest, &part).second)
      find.add_digests(part.digest);
  flowc::v1::FindMissingBlobsResponse missing;
  {
    grpc::ClientContext context;
    FLOWC_RETURN_IF_ERROR(
        fromGrpc(client.compiler().FindMissingBlobs(&context, find, &missing),
                 "find missing blobs"));
  }
  auto start = Clock::now();
  for (const std::string &digest : missing.missing()) {
    auto it = byDigest.find(digest);
    if (it == byDigest.end())
      return internalError("the daemon reported a blob this model does not have: " +
                           digest);
    FLOWC_RETURN_IF_ERROR(uploadPart(client, *it->second, report));
    report.uploadedBlobs += 1;
  }
  report.uploadSeconds = std::chrono::duration<double>(Clock::now() - start).count();

  for (const ModelPart &part : parts) {
    flowc::v1::ModelFile *file = request.mutable_model()->add_files();
    file->set_path(part.relative);
    file->set_digest(part.digest);
  }
  return report;
}

Expected<std::vector<std::string>> externalDataFiles(const std::string &modelPath) {
  UniqueFd fd(::open(modelPath.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd)
    return errnoStatus(errno, "cannot open '" + modelPath + "'");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return invalidArgument("'" + modelPath + "' is not a regular file");
  return scanExternalData(fd.get(), modelPath);
}

} // namespace flowc::cli
