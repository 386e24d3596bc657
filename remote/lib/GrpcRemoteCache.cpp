// The remote cache over REAPI v2: Capabilities, ActionCache
// (Get/UpdateActionResult), CAS (FindMissingBlobs, BatchUpdate/ReadBlobs
// for small blobs) and ByteStream (Write/Read in 1 MiB chunks for blobs
// over the batch limit, so memory does not grow with blob size).
#include "ProtoDigest.h"
#include "RemoteCacheBackends.h"
#include "RemoteSupport.h"

#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "google/bytestream/bytestream.grpc.pb.h"
#include "google/rpc/status.pb.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

namespace flowc::remote {

namespace {

namespace bytestream = google::bytestream;

// gRPC servers take 4 MiB messages unless configured otherwise, so no
// batch goes over that even where the server announces more.
constexpr int64_t kDefaultBatchBytes = 4 << 20;
// Room for the request's own fields (instance name, digest, framing).
constexpr int64_t kBatchOverheadBytes = 4096;
constexpr size_t kChunkBytes = 1 << 20;
// Digests per FindMissingBlobs request: about 0.8 MB of request.
constexpr size_t kFindMissingChunk = 10000;
// A response is at most one batch or one ByteStream chunk plus framing.
constexpr int kMaxMessageBytes = 64 << 20;
// Enough in flight for a LAN's bandwidth-delay product (10 Gbit/s at 6 ms).
constexpr int kReceiveWindowBytes = 8 << 20;
// Every call here is idempotent (CAS writes are keyed by content, an
// action-cache write by its key): transient failures are retried.
constexpr int kAttempts = 3;
// A blob transfer's deadline: the request timeout plus 1 s per 16 MiB.
constexpr uint64_t kSlowestBytesPerSecond = 16 << 20;

// What the cache's callers act on: a server that is down, restarting or
// slow is Unavailable (they go on locally); credentials are told apart.
StatusCode cacheCode(grpc::StatusCode code) {
  switch (code) {
  case grpc::StatusCode::UNAUTHENTICATED:
    return StatusCode::Unauthenticated;
  case grpc::StatusCode::PERMISSION_DENIED:
    return StatusCode::PermissionDenied;
  case grpc::StatusCode::DEADLINE_EXCEEDED:
  case grpc::StatusCode::CANCELLED:
    return StatusCode::Unavailable;
  default:
    return fromRpcCode(code);
  }
}

class GrpcRemoteCache final : public RemoteCacheBase {
public:
  GrpcRemoteCache(RemoteCacheOptions options, CacheUrl url,
                  std::shared_ptr<grpc::Channel> channel)
      : RemoteCacheBase(std::move(options)), url_(std::move(url)),
        channel_(std::move(channel)), actionCache_(reapi::ActionCache::NewStub(channel_)),
        cas_(reapi::ContentAddressableStorage::NewStub(channel_)),
        capabilitiesStub_(reapi::Capabilities::NewStub(channel_)),
        byteStream_(bytestream::ByteStream::NewStub(channel_)) {
    for (const auto &[name, value] : options_.headers) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      metadata_.emplace_back(std::move(lower), value);
    }
  }

  Expected<RemoteCapabilities> capabilities() override;
  Expected<std::optional<RemoteEntry>> getEntry(const cache::Digest &key) override;
  Status putEntry(const cache::Digest &key, const RemoteEntry &entry) override;
  Expected<std::vector<cache::Digest>>
  findMissing(const std::vector<cache::Digest> &digests) override;
  Status uploadBytes(const cache::Digest &digest, std::string_view bytes) override;
  Status uploadFile(const cache::Digest &digest, const std::string &path) override;
  Status downloadToFile(const cache::Digest &digest, int fd) override;
  Expected<std::string> downloadBytes(const cache::Digest &digest) override;

private:
  using Sink = std::function<Status(std::string_view)>;

  void prepare(grpc::ClientContext &context, uint64_t bytes) {
    context.set_deadline(deadlineFor(options_.timeout, bytes, kSlowestBytesPerSecond));
    for (const auto &[name, value] : metadata_)
      context.AddMetadata(name, value);
    ++requests_;
  }

  Status rpcError(const std::string &what, const grpc::Status &status) const {
    return Status(cacheCode(status.error_code()), what + " on " + describe() + ": " +
                                                      grpcCodeName(status.error_code()) +
                                                      ": " + status.error_message());
  }

  /// A batch of one blob gets one answer; a server that says otherwise is
  /// broken, and another try may find a healthy one.
  Status oneAnswer(const std::string &what, int answers) const {
    if (answers == 1)
      return Status::ok();
    return unavailable(what + " on " + describe() + ": " + std::to_string(answers) +
                       " answers for one blob");
  }

  Status blobError(const std::string &what, const google::rpc::Status &status) const {
    return rpcError(what, grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                                       status.message()));
  }

  /// Runs `call` with a fresh context until it succeeds, fails for good,
  /// or kAttempts transient failures have passed.
  template <typename Call> grpc::Status unary(const char *what, Call &&call) {
    grpc::Status status;
    for (int attempt = 1; attempt <= kAttempts; ++attempt) {
      if (attempt > 1)
        std::this_thread::sleep_for(backoff(attempt - 1));
      grpc::ClientContext context;
      prepare(context, 0);
      status = call(context);
      if (status.ok() || !isTransient(status))
        return status;
      spdlog::debug("remote cache {} on {}: {} (attempt {} of {})", what, describe(),
                    status.error_message(), attempt, kAttempts);
    }
    return status;
  }

  std::string resourcePrefix() const {
    return options_.instance.empty() ? "" : options_.instance + "/";
  }

  /// Whether a blob of `size` bytes fits one batch request; asks the
  /// server's Capabilities once.
  Expected<bool> fitsBatch(uint64_t size);
  Status batchUpload(const cache::Digest &digest, std::string_view bytes);
  Expected<std::string> batchRead(const cache::Digest &digest);
  Status streamUpload(const cache::Digest &digest, const BlobSource &source);
  Status streamRead(const cache::Digest &digest, const Sink &sink);
  Status upload(const cache::Digest &digest, const BlobSource &source);
  Status download(const cache::Digest &digest, const Sink &sink);

  const CacheUrl url_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<reapi::ActionCache::Stub> actionCache_;
  std::unique_ptr<reapi::ContentAddressableStorage::Stub> cas_;
  std::unique_ptr<reapi::Capabilities::Stub> capabilitiesStub_;
  std::unique_ptr<bytestream::ByteStream::Stub> byteStream_;

  std::mutex mutex_;
  std::optional<RemoteCapabilities> capabilities_; // guarded by mutex_
  int64_t batchBytes_ = kDefaultBatchBytes;        // guarded by mutex_
};

Expected<RemoteCapabilities> GrpcRemoteCache::capabilities() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capabilities_)
      return *capabilities_;
  }
  reapi::GetCapabilitiesRequest request;
  request.set_instance_name(options_.instance);
  reapi::ServerCapabilities answer;
  grpc::Status status = unary("GetCapabilities", [&](grpc::ClientContext &context) {
    return capabilitiesStub_->GetCapabilities(&context, request, &answer);
  });
  if (!status.ok())
    return rpcError("GetCapabilities", status);
  const reapi::CacheCapabilities &cacheCaps = answer.cache_capabilities();
  const auto &functions = cacheCaps.digest_functions();
  // A server that lists no digest function predates the field: REAPI v2.0
  // servers take SHA256.
  if (!functions.empty() && std::find(functions.begin(), functions.end(),
                                      reapi::DigestFunction::SHA256) == functions.end())
    return failedPrecondition("remote cache " + describe() +
                              ": its CAS does not take SHA256 digests");
  RemoteCapabilities capabilities;
  capabilities.maxBlobBytes =
      static_cast<uint64_t>(std::max<int64_t>(cacheCaps.max_cas_blob_size_bytes(), 0));
  // Absent: the server did not say, and writes are tried.
  capabilities.actionCacheWritable =
      !cacheCaps.has_action_cache_update_capabilities() ||
      cacheCaps.action_cache_update_capabilities().update_enabled();
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t announced = cacheCaps.max_batch_total_size_bytes();
  batchBytes_ =
      announced > 0 ? std::min(announced, kDefaultBatchBytes) : kDefaultBatchBytes;
  capabilities_ = capabilities;
  spdlog::debug("remote cache {}: SHA256, batches up to {} bytes, blobs up to {} bytes{}",
                describe(), batchBytes_, capabilities.maxBlobBytes,
                capabilities.actionCacheWritable ? "" : ", action cache read-only");
  return capabilities;
}

Expected<bool> GrpcRemoteCache::fitsBatch(uint64_t size) {
  FLOWC_RETURN_IF_ERROR(capabilities().status());
  std::lock_guard<std::mutex> lock(mutex_);
  return size + kBatchOverheadBytes <= static_cast<uint64_t>(batchBytes_);
}

Expected<std::optional<RemoteEntry>> GrpcRemoteCache::getEntry(const cache::Digest &key) {
  reapi::GetActionResultRequest request;
  request.set_instance_name(options_.instance);
  *request.mutable_action_digest() = toProto(key);
  request.set_digest_function(reapi::DigestFunction::SHA256);
  reapi::ActionResult result;
  grpc::Status status = unary("GetActionResult", [&](grpc::ClientContext &context) {
    return actionCache_->GetActionResult(&context, request, &result);
  });
  if (status.error_code() == grpc::StatusCode::NOT_FOUND)
    return std::optional<RemoteEntry>();
  if (!status.ok())
    return rpcError("GetActionResult " + key.toString(), status);
  FLOWC_ASSIGN_OR_RETURN(RemoteEntry entry, fromActionResult(result, key, describe()));
  return std::optional<RemoteEntry>(std::move(entry));
}

Status GrpcRemoteCache::putEntry(const cache::Digest &key, const RemoteEntry &entry) {
  reapi::UpdateActionResultRequest request;
  request.set_instance_name(options_.instance);
  *request.mutable_action_digest() = toProto(key);
  FLOWC_ASSIGN_OR_RETURN(*request.mutable_action_result(), toActionResult(entry, key));
  request.set_digest_function(reapi::DigestFunction::SHA256);
  reapi::ActionResult stored;
  grpc::Status status = unary("UpdateActionResult", [&](grpc::ClientContext &context) {
    return actionCache_->UpdateActionResult(&context, request, &stored);
  });
  if (!status.ok())
    return rpcError("UpdateActionResult " + key.toString(), status);
  return Status::ok();
}

Expected<std::vector<cache::Digest>>
GrpcRemoteCache::findMissing(const std::vector<cache::Digest> &digests) {
  std::vector<cache::Digest> missing;
  for (size_t start = 0; start < digests.size(); start += kFindMissingChunk) {
    size_t end = std::min(digests.size(), start + kFindMissingChunk);
    reapi::FindMissingBlobsRequest request;
    request.set_instance_name(options_.instance);
    request.set_digest_function(reapi::DigestFunction::SHA256);
    for (size_t i = start; i < end; ++i)
      *request.add_blob_digests() = toProto(digests[i]);
    reapi::FindMissingBlobsResponse response;
    grpc::Status status = unary("FindMissingBlobs", [&](grpc::ClientContext &context) {
      return cas_->FindMissingBlobs(&context, request, &response);
    });
    if (!status.ok())
      return rpcError("FindMissingBlobs", status);
    std::vector<std::string> answered;
    for (const reapi::Digest &proto : response.missing_blob_digests()) {
      FLOWC_ASSIGN_OR_RETURN(cache::Digest digest,
                             fromProto(proto, "FindMissingBlobs on " + describe()));
      answered.push_back(digest.toString());
    }
    std::sort(answered.begin(), answered.end());
    // In input order, whatever order the server answered in.
    for (size_t i = start; i < end; ++i)
      if (std::binary_search(answered.begin(), answered.end(), digests[i].toString()))
        missing.push_back(digests[i]);
  }
  return missing;
}

Status GrpcRemoteCache::batchUpload(const cache::Digest &digest, std::string_view bytes) {
  reapi::BatchUpdateBlobsRequest request;
  request.set_instance_name(options_.instance);
  request.set_digest_function(reapi::DigestFunction::SHA256);
  reapi::BatchUpdateBlobsRequest::Request *blob = request.add_requests();
  *blob->mutable_digest() = toProto(digest);
  blob->set_data(bytes.data(), bytes.size());
  reapi::BatchUpdateBlobsResponse response;
  grpc::Status status = unary("BatchUpdateBlobs", [&](grpc::ClientContext &context) {
    return cas_->BatchUpdateBlobs(&context, request, &response);
  });
  const std::string what = "BatchUpdateBlobs " + digest.toString();
  if (!status.ok())
    return rpcError(what, status);
  FLOWC_RETURN_IF_ERROR(oneAnswer(what, response.responses_size()));
  if (response.responses(0).status().code() != 0)
    return blobError(what, response.responses(0).status());
  return Status::ok();
}

Status GrpcRemoteCache::streamUpload(const cache::Digest &digest,
                                     const BlobSource &source) {
  const std::string what = "ByteStream.Write " + digest.toString();
  const std::string resource = resourcePrefix() + "uploads/" + randomUuid() + "/blobs/" +
                               digest.hex() + "/" + std::to_string(digest.size);
  std::string chunk;
  grpc::Status status;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (attempt > 1)
      std::this_thread::sleep_for(backoff(attempt - 1));
    grpc::ClientContext context;
    prepare(context, digest.size);
    bytestream::WriteResponse response;
    std::unique_ptr<grpc::ClientWriter<bytestream::WriteRequest>> writer =
        byteStream_->Write(&context, &response);
    // Hashed as it is sent: a file that does not hold the digest's bytes
    // (changed since it was hashed) is never committed under that name.
    cache::Hasher hasher;
    bool streamOpen = true;
    for (uint64_t offset = 0; streamOpen && offset < digest.size;) {
      size_t length =
          static_cast<size_t>(std::min<uint64_t>(kChunkBytes, digest.size - offset));
      chunk.resize(length);
      if (Status read = source.read(offset, chunk.data(), length); !read) {
        context.TryCancel();
        (void)writer->Finish();
        return read;
      }
      hasher.update(chunk);
      const bool last = offset + length == digest.size;
      if (last) {
        if (Status match = checkUploadDigest(digest, hasher.finish(), source.describe());
            !match) {
          context.TryCancel();
          (void)writer->Finish();
          return match;
        }
      }
      bytestream::WriteRequest request;
      if (offset == 0)
        request.set_resource_name(resource);
      request.set_write_offset(static_cast<int64_t>(offset));
      request.set_finish_write(last);
      request.set_data(std::move(chunk));
      // False: the server ended the call (an error, or it has the blob).
      streamOpen = writer->Write(request);
      chunk = std::move(*request.mutable_data());
      offset += length;
    }
    if (streamOpen)
      writer->WritesDone();
    status = writer->Finish();
    if (status.ok() || status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      if (status.ok() && response.committed_size() != static_cast<int64_t>(digest.size))
        return unavailable(what + " on " + describe() + ": the server committed " +
                           std::to_string(response.committed_size()) + " of " +
                           std::to_string(digest.size) + " bytes");
      ++blobsStreamed_;
      return Status::ok();
    }
    if (!isTransient(status))
      break;
    spdlog::debug("remote cache {} on {}: {} (attempt {} of {})", what, describe(),
                  status.error_message(), attempt, kAttempts);
  }
  return rpcError(what, status);
}

Status GrpcRemoteCache::upload(const cache::Digest &digest, const BlobSource &source) {
  if (isEmptyBlob(digest))
    return Status::ok();
  FLOWC_ASSIGN_OR_RETURN(bool small, fitsBatch(digest.size));
  if (small) {
    std::string bytes(digest.size, '\0');
    FLOWC_RETURN_IF_ERROR(source.read(0, bytes.data(), bytes.size()));
    FLOWC_RETURN_IF_ERROR(
        checkUploadDigest(digest, cache::digestOf(bytes), source.describe()));
    FLOWC_RETURN_IF_ERROR(batchUpload(digest, bytes));
  } else {
    FLOWC_RETURN_IF_ERROR(streamUpload(digest, source));
  }
  ++blobsUploaded_;
  bytesUploaded_ += digest.size;
  return Status::ok();
}

Status GrpcRemoteCache::uploadBytes(const cache::Digest &digest, std::string_view bytes) {
  if (bytes.size() != digest.size)
    return invalidArgument("upload of " + digest.toString() + ": " +
                           std::to_string(bytes.size()) + " bytes given");
  return upload(digest, BlobSource::fromBytes(bytes));
}

Status GrpcRemoteCache::uploadFile(const cache::Digest &digest, const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(BlobSource source, BlobSource::fromFile(path, digest));
  return upload(digest, source);
}

Expected<std::string> GrpcRemoteCache::batchRead(const cache::Digest &digest) {
  reapi::BatchReadBlobsRequest request;
  request.set_instance_name(options_.instance);
  request.set_digest_function(reapi::DigestFunction::SHA256);
  *request.add_digests() = toProto(digest);
  reapi::BatchReadBlobsResponse response;
  grpc::Status status = unary("BatchReadBlobs", [&](grpc::ClientContext &context) {
    return cas_->BatchReadBlobs(&context, request, &response);
  });
  const std::string what = "BatchReadBlobs " + digest.toString();
  if (!status.ok())
    return rpcError(what, status);
  FLOWC_RETURN_IF_ERROR(oneAnswer(what, response.responses_size()));
  reapi::BatchReadBlobsResponse::Response &blob = *response.mutable_responses(0);
  if (blob.status().code() == static_cast<int>(grpc::StatusCode::NOT_FOUND))
    return notFound("blob " + digest.toString() + " is not in " + describe());
  if (blob.status().code() != 0)
    return blobError(what, blob.status());
  return std::move(*blob.mutable_data());
}

Status GrpcRemoteCache::streamRead(const cache::Digest &digest, const Sink &sink) {
  const std::string what = "ByteStream.Read " + digest.toString();
  const std::string resource =
      resourcePrefix() + "blobs/" + digest.hex() + "/" + std::to_string(digest.size);
  cache::Hasher hasher;
  uint64_t received = 0;
  grpc::Status status;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (attempt > 1)
      std::this_thread::sleep_for(backoff(attempt - 1));
    grpc::ClientContext context;
    prepare(context, digest.size - received);
    bytestream::ReadRequest request;
    request.set_resource_name(resource);
    // A retry resumes where the last attempt stopped; the hash goes on.
    request.set_read_offset(static_cast<int64_t>(received));
    std::unique_ptr<grpc::ClientReader<bytestream::ReadResponse>> reader =
        byteStream_->Read(&context, request);
    bytestream::ReadResponse response;
    while (reader->Read(&response)) {
      const std::string &data = response.data();
      if (data.size() > digest.size - received) {
        context.TryCancel();
        (void)reader->Finish();
        return dataLoss("blob " + digest.toString() + " from " + describe() +
                        ": the server sent more than its " + std::to_string(digest.size) +
                        " bytes (not used)");
      }
      hasher.update(data);
      if (Status wrote = sink(data); !wrote) {
        context.TryCancel();
        (void)reader->Finish();
        return wrote;
      }
      received += data.size();
    }
    status = reader->Finish();
    if (status.ok())
      break;
    if (status.error_code() == grpc::StatusCode::NOT_FOUND)
      return notFound("blob " + digest.toString() + " is not in " + describe());
    if (!isTransient(status))
      return rpcError(what, status);
    spdlog::debug("remote cache {} on {}: {} (attempt {} of {})", what, describe(),
                  status.error_message(), attempt, kAttempts);
  }
  if (!status.ok())
    return rpcError(what, status);
  if (received != digest.size)
    return dataLoss("blob " + digest.toString() + " from " + describe() +
                    ": the server sent " + std::to_string(received) + " of its " +
                    std::to_string(digest.size) + " bytes (not used)");
  cache::Digest actual = hasher.finish();
  if (actual != digest)
    return downloadMismatch(digest, actual, describe());
  ++blobsStreamed_;
  return Status::ok();
}

Status GrpcRemoteCache::download(const cache::Digest &digest, const Sink &sink) {
  // Every REAPI server holds the empty blob; no request.
  if (isEmptyBlob(digest)) {
    ++blobsDownloaded_;
    return Status::ok();
  }
  FLOWC_ASSIGN_OR_RETURN(bool small, fitsBatch(digest.size));
  if (small) {
    FLOWC_ASSIGN_OR_RETURN(std::string bytes, batchRead(digest));
    cache::Digest actual = cache::digestOf(bytes);
    if (actual != digest)
      return downloadMismatch(digest, actual, describe());
    FLOWC_RETURN_IF_ERROR(sink(bytes));
  } else {
    FLOWC_RETURN_IF_ERROR(streamRead(digest, sink));
  }
  ++blobsDownloaded_;
  bytesDownloaded_ += digest.size;
  return Status::ok();
}

Status GrpcRemoteCache::downloadToFile(const cache::Digest &digest, int fd) {
  return download(digest, [fd](std::string_view data) { return writeAll(fd, data); });
}

Expected<std::string> GrpcRemoteCache::downloadBytes(const cache::Digest &digest) {
  FLOWC_RETURN_IF_ERROR(checkInMemorySize(digest));
  std::string bytes;
  bytes.reserve(digest.size);
  FLOWC_RETURN_IF_ERROR(download(digest, appendTo(bytes).first));
  return bytes;
}

} // namespace

Expected<std::unique_ptr<RemoteCache>> connectGrpcCache(const RemoteCacheOptions &options,
                                                        const CacheUrl &url) {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (url.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.caFile.empty()) {
      FLOWC_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                             readPem(options.caFile, "remote cache CA file"));
    }
    if (!options.clientCertFile.empty()) {
      FLOWC_ASSIGN_OR_RETURN(
          ssl.pem_cert_chain,
          readPem(options.clientCertFile, "remote cache client certificate"));
      FLOWC_ASSIGN_OR_RETURN(
          ssl.pem_private_key,
          readPem(options.clientKeyFile, "remote cache client key", PemKind::PrivateKey));
    }
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments arguments = channelArguments(kMaxMessageBytes);
  // A fixed receive window: with BDP probing gRPC grows it as far as a fast
  // server pushes, buffering a download's bytes faster than they reach
  // the file, so memory would grow with the blob.
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kReceiveWindowBytes);
  auto channel = grpc::CreateCustomChannel(url.target, credentials, arguments);
  return std::unique_ptr<RemoteCache>(
      std::make_unique<GrpcRemoteCache>(options, url, std::move(channel)));
}

} // namespace flowc::remote
