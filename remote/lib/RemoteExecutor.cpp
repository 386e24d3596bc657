#include "flowc/remote/RemoteExecution.h"

#include "CancelWatch.h"
#include "ProtoDigest.h"
#include "RemoteSupport.h"
#include "flowc/remote/ActionEncoding.h"

#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "google/bytestream/bytestream.grpc.pb.h"
#include "google/longrunning/operations.pb.h"
#include "google/rpc/status.pb.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

namespace flowc::remote {

namespace {

using namespace std::chrono_literals;
namespace bytestream = google::bytestream;
namespace longrunning = google::longrunning;

// gRPC servers take 4 MiB messages unless configured otherwise, so no
// batch goes over that even where the engine announces more.
constexpr int64_t kDefaultBatchBytes = 4 << 20;
// Room for the request's own fields (instance name, digests, tags).
constexpr int64_t kBatchOverheadBytes = 4096;
constexpr int64_t kPerBlobOverheadBytes = 128;
constexpr size_t kChunkBytes = 1 << 20;
// Digests per FindMissingBlobs request: about 0.8 MB of request.
constexpr size_t kFindMissingChunk = 10000;
// Blobs larger than this are refused rather than fetched into memory: no
// flowc task writes one, and an engine claiming one is malformed.
constexpr uint64_t kMaxBlobBytes = uint64_t(4) << 30;
// A response is at most one batch of blobs plus its framing.
constexpr int kMaxReceiveBytes = 64 << 20;

// Transient failures (UNAVAILABLE, a call the engine cancelled) are
// retried: every call here is
// idempotent (CAS writes are keyed by content, Execute by the action
// digest). Backoff 100, 200, 400 ms... up to 1.6 s: an unreachable engine
// fails a call within about a second.
constexpr int kUnaryAttempts = 4;
constexpr auto kUnaryDeadline = 60s;
// Transfers get the unary deadline plus this rate's worth of time.
constexpr uint64_t kSlowestBytesPerSecond = 1 << 20;

std::string blobKey(const cache::Digest &digest) { return digest.toString(); }

} // namespace

struct RemoteExecutor::Impl {
  Endpoint endpoint;
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<reapi::Execution::Stub> execution;
  std::unique_ptr<reapi::ActionCache::Stub> actionCache;
  std::unique_ptr<reapi::ContentAddressableStorage::Stub> cas;
  std::unique_ptr<reapi::Capabilities::Stub> capabilities;
  std::unique_ptr<bytestream::ByteStream::Stub> byteStream;

  std::mutex capabilitiesMutex;
  bool capabilitiesChecked = false;        // guarded by capabilitiesMutex
  int64_t batchBytes = kDefaultBatchBytes; // guarded by capabilitiesMutex

  std::atomic<uint64_t> executed{0}, cacheHits{0}, blobsUploaded{0}, bytesUploaded{0},
      blobsDownloaded{0}, bytesDownloaded{0}, streamsResumed{0};

  /// "grpc://host:port" or "grpc://host:port (instance 'x')", for messages.
  std::string where() const {
    if (endpoint.instance.empty())
      return endpoint.url;
    return endpoint.url + " (instance '" + endpoint.instance + "')";
  }

  std::string resourcePrefix() const {
    return endpoint.instance.empty() ? "" : endpoint.instance + "/";
  }

  Status rpcError(const std::string &what, const grpc::Status &status,
                  const CancelWatch &watch) const {
    if (watch.cancelled())
      return Status(StatusCode::Cancelled, what + " on " + where() + ": cancelled");
    // Not cancelled here: the engine cancelled it, going away.
    if (status.error_code() == grpc::StatusCode::CANCELLED)
      return Status(StatusCode::Unavailable,
                    what + " on " + where() +
                        ": CANCELLED by the engine: " + status.error_message());
    return Status(fromRpcCode(status.error_code()),
                  what + " on " + where() + ": " + grpcCodeName(status.error_code()) +
                      ": " + status.error_message());
  }

  Status engineError(const std::string &what, const google::rpc::Status &status) const {
    return Status(fromRpcCode(status.code()), what + " on " + where() + ": " +
                                                  grpcCodeName(status.code()) + ": " +
                                                  status.message());
  }

  int64_t batchLimit() {
    std::lock_guard<std::mutex> lock(capabilitiesMutex);
    return batchBytes;
  }

  /// Runs `call` with a fresh context until it succeeds, fails for good,
  /// or kUnaryAttempts transient failures have passed.
  template <typename Call>
  grpc::Status unary(CancelWatch &watch, const char *what, uint64_t bytes, Call &&call) {
    grpc::Status status;
    for (int attempt = 0; attempt < kUnaryAttempts; ++attempt) {
      if (attempt > 0 && !watch.sleepFor(backoff(attempt)))
        break;
      grpc::ClientContext context;
      context.set_deadline(deadlineFor(kUnaryDeadline, bytes, kSlowestBytesPerSecond));
      CancelWatch::Scope scope(watch, context);
      status = call(context);
      if (status.ok() || !isTransient(status) || watch.cancelled())
        return status;
      spdlog::debug("remote {} on {}: {} (attempt {} of {})", what, where(),
                    status.error_message(), attempt + 1, kUnaryAttempts);
    }
    return status;
  }

  Status checkCapabilities(CancelWatch &watch);
  Status ensureCapabilities(CancelWatch &watch);
  Expected<std::optional<reapi::ActionResult>>
  getActionResult(const cache::Digest &action, CancelWatch &watch);
  Status uploadMissing(const std::vector<BlobRef> &blobs, CancelWatch &watch);
  Status writeBlob(const BlobRef &blob, CancelWatch &watch);
  Expected<reapi::ExecuteResponse> runExecute(const cache::Digest &action, bool skipCache,
                                              CancelWatch &watch);
  Expected<reapi::ExecuteResponse> decodeDone(const longrunning::Operation &operation,
                                              const cache::Digest &action);
  Status download(const std::vector<cache::Digest> &digests,
                  std::map<std::string, std::string> &into, CancelWatch &watch);
  Expected<std::string> readBlob(const cache::Digest &digest, CancelWatch &watch);
  Expected<ActionOutcome> collect(const reapi::ActionResult &result,
                                  const EncodedAction &encoded, CancelWatch &watch);
};

Status RemoteExecutor::Impl::checkCapabilities(CancelWatch &watch) {
  reapi::GetCapabilitiesRequest request;
  request.set_instance_name(endpoint.instance);
  reapi::ServerCapabilities answer;
  grpc::Status status =
      unary(watch, "GetCapabilities", 0, [&](grpc::ClientContext &context) {
        return capabilities->GetCapabilities(&context, request, &answer);
      });
  if (!status.ok())
    return rpcError("GetCapabilities", status, watch);
  auto takesSha256 = [](const auto &functions) {
    return std::any_of(functions.begin(), functions.end(), [](int function) {
      return function == reapi::DigestFunction::SHA256;
    });
  };
  const reapi::CacheCapabilities &cacheCaps = answer.cache_capabilities();
  // An engine that lists no digest function predates the field: REAPI
  // v2.0 engines take SHA256.
  if (cacheCaps.digest_functions_size() > 0 && !takesSha256(cacheCaps.digest_functions()))
    return failedPrecondition("remote executor " + where() +
                              ": its CAS does not take SHA256 digests");
  const reapi::ExecutionCapabilities &execCaps = answer.execution_capabilities();
  if (!execCaps.exec_enabled())
    return failedPrecondition("remote executor " + where() +
                              ": remote execution is not enabled there (a cache only)");
  bool execSha256 = execCaps.digest_function() == reapi::DigestFunction::SHA256 ||
                    takesSha256(execCaps.digest_functions()) ||
                    (execCaps.digest_function() == reapi::DigestFunction::UNKNOWN &&
                     execCaps.digest_functions_size() == 0);
  if (!execSha256)
    return failedPrecondition("remote executor " + where() +
                              ": its execution service does not take SHA256 digests");
  std::lock_guard<std::mutex> lock(capabilitiesMutex);
  int64_t announced = cacheCaps.max_batch_total_size_bytes();
  batchBytes =
      announced > 0 ? std::min(announced, kDefaultBatchBytes) : kDefaultBatchBytes;
  capabilitiesChecked = true;
  spdlog::debug("remote executor {}: SHA256, execution enabled, batches up to {} bytes",
                where(), batchBytes);
  return Status::ok();
}

Status RemoteExecutor::Impl::ensureCapabilities(CancelWatch &watch) {
  {
    std::lock_guard<std::mutex> lock(capabilitiesMutex);
    if (capabilitiesChecked)
      return Status::ok();
  }
  return checkCapabilities(watch);
}

Expected<std::optional<reapi::ActionResult>>
RemoteExecutor::Impl::getActionResult(const cache::Digest &action, CancelWatch &watch) {
  reapi::GetActionResultRequest request;
  request.set_instance_name(endpoint.instance);
  *request.mutable_action_digest() = toProto(action);
  request.set_inline_stdout(true);
  request.set_inline_stderr(true);
  request.set_digest_function(reapi::DigestFunction::SHA256);
  reapi::ActionResult result;
  grpc::Status status =
      unary(watch, "GetActionResult", 0, [&](grpc::ClientContext &context) {
        return actionCache->GetActionResult(&context, request, &result);
      });
  if (status.error_code() == grpc::StatusCode::NOT_FOUND)
    return std::optional<reapi::ActionResult>();
  if (!status.ok())
    return rpcError("GetActionResult " + action.toString(), status, watch);
  return std::optional<reapi::ActionResult>(std::move(result));
}

Status RemoteExecutor::Impl::uploadMissing(const std::vector<BlobRef> &blobs,
                                           CancelWatch &watch) {
  std::map<std::string, const BlobRef *> byKey;
  for (const BlobRef &blob : blobs)
    byKey.emplace(blobKey(blob.digest), &blob);
  std::vector<const BlobRef *> missing;
  for (size_t start = 0; start < blobs.size(); start += kFindMissingChunk) {
    reapi::FindMissingBlobsRequest request;
    request.set_instance_name(endpoint.instance);
    request.set_digest_function(reapi::DigestFunction::SHA256);
    for (size_t i = start; i < std::min(blobs.size(), start + kFindMissingChunk); ++i)
      *request.add_blob_digests() = toProto(blobs[i].digest);
    reapi::FindMissingBlobsResponse response;
    grpc::Status status =
        unary(watch, "FindMissingBlobs", 0, [&](grpc::ClientContext &context) {
          return cas->FindMissingBlobs(&context, request, &response);
        });
    if (!status.ok())
      return rpcError("FindMissingBlobs", status, watch);
    for (const reapi::Digest &proto : response.missing_blob_digests()) {
      FLOWC_ASSIGN_OR_RETURN(cache::Digest digest,
                             fromProto(proto, "FindMissingBlobs from " + where()));
      auto it = byKey.find(blobKey(digest));
      if (it == byKey.end())
        return dataLoss("FindMissingBlobs from " + where() + ": names " +
                        digest.toString() + ", which was not asked about");
      missing.push_back(it->second);
    }
  }

  const int64_t capacity = batchLimit() - kBatchOverheadBytes;
  auto fitsBatch = [&](const BlobRef *blob) {
    return static_cast<int64_t>(blob->digest.size) + kPerBlobOverheadBytes <= capacity;
  };
  std::vector<const BlobRef *> batch;
  int64_t batchSize = 0;
  auto flush = [&]() -> Status {
    if (batch.empty())
      return Status::ok();
    reapi::BatchUpdateBlobsRequest request;
    request.set_instance_name(endpoint.instance);
    request.set_digest_function(reapi::DigestFunction::SHA256);
    for (const BlobRef *blob : batch) {
      reapi::BatchUpdateBlobsRequest::Request *entry = request.add_requests();
      *entry->mutable_digest() = toProto(blob->digest);
      entry->set_data(blob->bytes.data(), blob->bytes.size());
    }
    reapi::BatchUpdateBlobsResponse response;
    grpc::Status status =
        unary(watch, "BatchUpdateBlobs", static_cast<uint64_t>(batchSize),
              [&](grpc::ClientContext &context) {
                return cas->BatchUpdateBlobs(&context, request, &response);
              });
    if (!status.ok())
      return rpcError("BatchUpdateBlobs", status, watch);
    for (const auto &entry : response.responses()) {
      if (entry.status().code() != 0)
        return engineError("BatchUpdateBlobs " + entry.digest().hash() + "/" +
                               std::to_string(entry.digest().size_bytes()),
                           entry.status());
    }
    for (const BlobRef *blob : batch) {
      ++blobsUploaded;
      bytesUploaded += blob->digest.size;
    }
    batch.clear();
    batchSize = 0;
    return Status::ok();
  };
  for (const BlobRef *blob : missing) {
    if (!fitsBatch(blob)) {
      FLOWC_RETURN_IF_ERROR(writeBlob(*blob, watch));
      continue;
    }
    int64_t cost = static_cast<int64_t>(blob->digest.size) + kPerBlobOverheadBytes;
    if (batchSize + cost > capacity)
      FLOWC_RETURN_IF_ERROR(flush());
    batch.push_back(blob);
    batchSize += cost;
  }
  FLOWC_RETURN_IF_ERROR(flush());
  if (!missing.empty())
    spdlog::debug("remote {}: uploaded {} of {} blobs", where(), missing.size(),
                  blobs.size());
  return Status::ok();
}

Status RemoteExecutor::Impl::writeBlob(const BlobRef &blob, CancelWatch &watch) {
  const uint64_t size = blob.digest.size;
  bytestream::WriteResponse response;
  // A failed write is started over under a fresh upload name: the blob is
  // keyed by its content, so a second write of it is harmless.
  grpc::Status status =
      unary(watch, "ByteStream.Write", size, [&](grpc::ClientContext &context) {
        std::string name = resourcePrefix() + "uploads/" + randomUuid() + "/blobs/" +
                           blob.digest.hex() + "/" + std::to_string(size);
        response.Clear();
        std::unique_ptr<grpc::ClientWriter<bytestream::WriteRequest>> writer =
            byteStream->Write(&context, &response);
        uint64_t offset = 0;
        do {
          bytestream::WriteRequest request;
          if (offset == 0)
            request.set_resource_name(name);
          request.set_write_offset(static_cast<int64_t>(offset));
          size_t length = std::min<uint64_t>(kChunkBytes, size - offset);
          request.set_data(blob.bytes.data() + offset, length);
          offset += length;
          request.set_finish_write(offset == size);
          // False: the engine ended the stream, having the blob already or an
          // error that Finish() reports.
          if (!writer->Write(request))
            break;
        } while (offset < size);
        writer->WritesDone();
        return writer->Finish();
      });
  if (!status.ok())
    return rpcError("ByteStream.Write " + blob.digest.toString(), status, watch);
  if (response.committed_size() != static_cast<int64_t>(size))
    return dataLoss("ByteStream.Write " + blob.digest.toString() + " on " + where() +
                    ": the engine committed " +
                    std::to_string(response.committed_size()) + " bytes");
  ++blobsUploaded;
  bytesUploaded += size;
  return Status::ok();
}

Expected<reapi::ExecuteResponse>
RemoteExecutor::Impl::decodeDone(const longrunning::Operation &operation,
                                 const cache::Digest &action) {
  std::string what = "remote action " + action.toString();
  if (operation.has_error())
    return engineError(what, operation.error());
  reapi::ExecuteResponse response;
  if (!operation.has_response() || !operation.response().UnpackTo(&response))
    return dataLoss(what + " on " + where() + ": the finished operation '" +
                    operation.name() + "' carries no ExecuteResponse (type '" +
                    operation.response().type_url() + "')");
  return response;
}

Expected<reapi::ExecuteResponse>
RemoteExecutor::Impl::runExecute(const cache::Digest &action, bool skipCache,
                                 CancelWatch &watch) {
  std::string operationName;
  grpc::Status lastStatus;
  int failures = 0;
  std::optional<std::chrono::steady_clock::time_point> lostSince;
  for (;;) {
    if (watch.cancelled())
      return Status(StatusCode::Cancelled, "remote action " + action.toString() + " on " +
                                               where() + ": cancelled");
    grpc::ClientContext context;
    CancelWatch::Scope scope(watch, context);
    std::unique_ptr<grpc::ClientReader<longrunning::Operation>> reader;
    const bool resuming = !operationName.empty();
    if (resuming) {
      reapi::WaitExecutionRequest request;
      request.set_name(operationName);
      reader = execution->WaitExecution(&context, request);
    } else {
      reapi::ExecuteRequest request;
      request.set_instance_name(endpoint.instance);
      *request.mutable_action_digest() = toProto(action);
      request.set_skip_cache_lookup(skipCache);
      request.set_digest_function(reapi::DigestFunction::SHA256);
      reader = execution->Execute(&context, request);
    }
    longrunning::Operation operation;
    std::optional<longrunning::Operation> done;
    bool progressed = false;
    while (reader->Read(&operation)) {
      progressed = true;
      if (!operation.name().empty())
        operationName = operation.name();
      if (operation.done()) {
        done = std::move(operation);
        // Nothing more is expected; do not wait for the engine to close.
        context.TryCancel();
        break;
      }
    }
    grpc::Status status = reader->Finish();
    if (resuming && progressed)
      ++streamsResumed;
    if (done)
      return decodeDone(*done, action);
    if (watch.cancelled())
      return Status(StatusCode::Cancelled, "remote action " + action.toString() + " on " +
                                               where() + ": cancelled");
    const char *call = resuming ? "WaitExecution" : "Execute";
    if (status.ok() && progressed) {
      // The engine may end a stream while the action runs; resuming is
      // the protocol, not a failure.
      spdlog::debug("remote {} {}: stream ended before the result; resuming", call,
                    operationName);
      continue;
    }
    if (status.error_code() == grpc::StatusCode::NOT_FOUND && resuming) {
      // The engine forgot the operation (restarted without its state):
      // execute again.
      spdlog::warn("remote action {} on {}: operation '{}' is gone; executing again",
                   action.toString(), where(), operationName);
      operationName.clear();
    } else if (!status.ok() && !isTransient(status)) {
      return rpcError(std::string(call) + " " + action.toString(), status, watch);
    }
    lastStatus = status;
    if (progressed) {
      failures = 0;
      lostSince.reset();
    }
    ++failures;
    auto now = std::chrono::steady_clock::now();
    if (!lostSince)
      lostSince = now;
    // An accepted action (its operation named) is followed for as long as
    // the resume window allows, to ride out an engine restart; one the
    // engine never accepted gets a few attempts, as unary calls do.
    const bool accepted = !operationName.empty();
    if (accepted ? now - *lostSince >= options.resumeWindow : failures >= kUnaryAttempts)
      break;
    spdlog::warn("remote {} {} on {}: {}; retrying", call, action.toString(), where(),
                 status.ok() ? "stream ended with no operation" : status.error_message());
    // Cancelled while asleep: reported at the top of the loop.
    watch.sleepFor(backoff(failures));
  }
  std::string what = "Execute " + action.toString();
  if (!operationName.empty())
    what = "WaitExecution " + operationName + " (action " + action.toString() + ")";
  if (lastStatus.ok())
    return unavailable(what + " on " + where() +
                       ": the engine ended its streams without a result");
  return rpcError(what, lastStatus, watch);
}

Expected<std::string> RemoteExecutor::Impl::readBlob(const cache::Digest &digest,
                                                     CancelWatch &watch) {
  std::string bytes;
  bytes.reserve(std::min<uint64_t>(digest.size, kMaxReceiveBytes));
  std::string name =
      resourcePrefix() + "blobs/" + digest.hex() + "/" + std::to_string(digest.size);
  bool tooLong = false;
  // A lost stream resumes at the offset reached.
  grpc::Status status =
      unary(watch, "ByteStream.Read", digest.size, [&](grpc::ClientContext &context) {
        bytestream::ReadRequest request;
        request.set_resource_name(name);
        request.set_read_offset(static_cast<int64_t>(bytes.size()));
        std::unique_ptr<grpc::ClientReader<bytestream::ReadResponse>> reader =
            byteStream->Read(&context, request);
        bytestream::ReadResponse chunk;
        while (reader->Read(&chunk)) {
          if (bytes.size() + chunk.data().size() > digest.size) {
            tooLong = true;
            context.TryCancel();
            break;
          }
          bytes += chunk.data();
        }
        return reader->Finish();
      });
  if (tooLong)
    return dataLoss("ByteStream.Read " + digest.toString() + " from " + where() +
                    ": more bytes than the digest's size");
  if (!status.ok())
    return rpcError("ByteStream.Read " + digest.toString(), status, watch);
  if (bytes.size() != digest.size)
    return dataLoss("ByteStream.Read " + digest.toString() + " from " + where() + ": " +
                    std::to_string(bytes.size()) + " bytes, the digest says " +
                    std::to_string(digest.size));
  return bytes;
}

Status RemoteExecutor::Impl::download(const std::vector<cache::Digest> &digests,
                                      std::map<std::string, std::string> &into,
                                      CancelWatch &watch) {
  const int64_t capacity = batchLimit() - kBatchOverheadBytes;
  std::vector<cache::Digest> batch;
  int64_t batchSize = 0;
  auto accept = [&](const cache::Digest &digest, std::string bytes) -> Status {
    cache::Digest actual = cache::digestOf(bytes);
    if (actual != digest)
      return dataLoss("blob " + digest.toString() + " from " + where() +
                      ": its bytes hash to " + actual.toString());
    ++blobsDownloaded;
    bytesDownloaded += bytes.size();
    into[blobKey(digest)] = std::move(bytes);
    return Status::ok();
  };
  auto flush = [&]() -> Status {
    if (batch.empty())
      return Status::ok();
    reapi::BatchReadBlobsRequest request;
    request.set_instance_name(endpoint.instance);
    request.set_digest_function(reapi::DigestFunction::SHA256);
    for (const cache::Digest &digest : batch)
      *request.add_digests() = toProto(digest);
    reapi::BatchReadBlobsResponse response;
    grpc::Status status =
        unary(watch, "BatchReadBlobs", static_cast<uint64_t>(batchSize),
              [&](grpc::ClientContext &context) {
                return cas->BatchReadBlobs(&context, request, &response);
              });
    if (!status.ok())
      return rpcError("BatchReadBlobs", status, watch);
    for (auto &entry : *response.mutable_responses()) {
      FLOWC_ASSIGN_OR_RETURN(cache::Digest digest,
                             fromProto(entry.digest(), "BatchReadBlobs from " + where()));
      if (entry.status().code() != 0)
        return engineError("BatchReadBlobs " + digest.toString(), entry.status());
      if (std::find(batch.begin(), batch.end(), digest) == batch.end())
        return dataLoss("BatchReadBlobs from " + where() + ": sent " + digest.toString() +
                        ", which was not asked for");
      FLOWC_RETURN_IF_ERROR(accept(digest, std::move(*entry.mutable_data())));
    }
    for (const cache::Digest &digest : batch)
      if (!into.count(blobKey(digest)))
        return dataLoss("BatchReadBlobs from " + where() + ": no answer for " +
                        digest.toString());
    batch.clear();
    batchSize = 0;
    return Status::ok();
  };
  for (const cache::Digest &digest : digests) {
    if (into.count(blobKey(digest)))
      continue;
    if (digest.size > kMaxBlobBytes)
      return resourceExhausted("blob " + digest.toString() + " on " + where() + ": " +
                               std::to_string(digest.size) +
                               " bytes, over flowc's limit of 4 GiB per output");
    int64_t cost = static_cast<int64_t>(digest.size) + kPerBlobOverheadBytes;
    if (cost > capacity) {
      FLOWC_ASSIGN_OR_RETURN(std::string bytes, readBlob(digest, watch));
      FLOWC_RETURN_IF_ERROR(accept(digest, std::move(bytes)));
      continue;
    }
    if (std::find(batch.begin(), batch.end(), digest) != batch.end())
      continue;
    if (batchSize + cost > capacity)
      FLOWC_RETURN_IF_ERROR(flush());
    batch.push_back(digest);
    batchSize += cost;
  }
  return flush();
}

Expected<ActionOutcome> RemoteExecutor::Impl::collect(const reapi::ActionResult &result,
                                                      const EncodedAction &encoded,
                                                      CancelWatch &watch) {
  const std::string what =
      "result of remote action " + encoded.actionDigest.toString() + " from " + where();
  std::map<std::string, size_t> declared;
  for (size_t i = 0; i < encoded.outputFiles.size(); ++i)
    declared.emplace(encoded.outputFiles[i], i);

  struct Pending {
    size_t index;
    cache::Digest digest;
    const std::string *inlined;
  };
  std::vector<Pending> outputs;
  std::vector<bool> seen(encoded.outputFiles.size(), false);
  std::vector<cache::Digest> toFetch;
  for (const reapi::OutputFile &file : result.output_files()) {
    auto it = declared.find(file.path());
    if (it == declared.end())
      return dataLoss(what + ": output '" + file.path().substr(0, 200) +
                      "' was not declared by the action");
    if (seen[it->second])
      return dataLoss(what + ": output '" + file.path() + "' given twice");
    seen[it->second] = true;
    FLOWC_ASSIGN_OR_RETURN(
        cache::Digest digest,
        fromProto(file.digest(), what + ": output '" + file.path() + "'"));
    bool inlined = !file.contents().empty() || digest.size == 0;
    outputs.push_back(Pending{it->second, digest, inlined ? &file.contents() : nullptr});
    if (!inlined)
      toFetch.push_back(digest);
  }
  std::optional<cache::Digest> stdoutDigest, stderrDigest;
  if (result.stdout_raw().empty() && result.has_stdout_digest()) {
    FLOWC_ASSIGN_OR_RETURN(stdoutDigest,
                           fromProto(result.stdout_digest(), what + ": stdout"));
    toFetch.push_back(*stdoutDigest);
  }
  if (result.stderr_raw().empty() && result.has_stderr_digest()) {
    FLOWC_ASSIGN_OR_RETURN(stderrDigest,
                           fromProto(result.stderr_digest(), what + ": stderr"));
    toFetch.push_back(*stderrDigest);
  }

  std::map<std::string, std::string> fetched;
  Status status = download(toFetch, fetched, watch);
  if (!status.isOk())
    return status.withContext(what);

  ActionOutcome outcome;
  outcome.actionDigest = encoded.actionDigest;
  outcome.exitCode = result.exit_code();
  outcome.worker = result.execution_metadata().worker();
  std::sort(outputs.begin(), outputs.end(),
            [](const Pending &a, const Pending &b) { return a.index < b.index; });
  for (const Pending &pending : outputs) {
    OutputFile file;
    file.path = encoded.outputFiles[pending.index];
    file.digest = pending.digest;
    if (pending.inlined) {
      cache::Digest actual = cache::digestOf(*pending.inlined);
      if (actual != pending.digest)
        return dataLoss(what + ": output '" + file.path + "' inlined bytes hash to " +
                        actual.toString() + ", its digest says " +
                        pending.digest.toString());
      file.bytes = *pending.inlined;
    } else {
      file.bytes = fetched.at(blobKey(pending.digest));
    }
    outcome.outputs.push_back(std::move(file));
  }
  outcome.stdoutText =
      stdoutDigest ? fetched.at(blobKey(*stdoutDigest)) : result.stdout_raw();
  outcome.stderrText =
      stderrDigest ? fetched.at(blobKey(*stderrDigest)) : result.stderr_raw();
  return outcome;
}

RemoteExecutor::RemoteExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteExecutor::~RemoteExecutor() = default;

Status ClientOptions::validate() const {
  if (resumeWindow.count() < 0 || resumeWindow > std::chrono::hours(1))
    return invalidArgument("remote resume window " +
                           std::to_string(resumeWindow.count()) +
                           " s: must be 0..3600 s");
  return Status::ok();
}

Expected<std::unique_ptr<RemoteExecutor>>
RemoteExecutor::connect(const Endpoint &endpoint, const ClientOptions &options) {
  FLOWC_RETURN_IF_ERROR(options.validate());
  FLOWC_ASSIGN_OR_RETURN(Endpoint parsed, parseEndpoint(endpoint.url, endpoint.instance));
  parsed.rootCertsPath = endpoint.rootCertsPath;
  const bool tls = parsed.url.starts_with("grpcs://");
  std::string target = parsed.url.substr(tls ? 8 : 7);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls) {
    grpc::SslCredentialsOptions options;
    if (!parsed.rootCertsPath.empty()) {
      FLOWC_ASSIGN_OR_RETURN(options.pem_root_certs,
                             readPem(parsed.rootCertsPath, "remote root certificates"));
    }
    credentials = grpc::SslCredentials(options);
  } else {
    if (!parsed.rootCertsPath.empty())
      return invalidArgument("remote root certificates '" + parsed.rootCertsPath +
                             "' given for the plaintext endpoint " + parsed.url +
                             " (use grpcs://)");
    credentials = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments arguments = channelArguments(kMaxReceiveBytes);
  auto impl = std::make_unique<Impl>();
  impl->endpoint = std::move(parsed);
  impl->options = options;
  impl->channel = grpc::CreateCustomChannel(target, credentials, arguments);
  impl->execution = reapi::Execution::NewStub(impl->channel);
  impl->actionCache = reapi::ActionCache::NewStub(impl->channel);
  impl->cas = reapi::ContentAddressableStorage::NewStub(impl->channel);
  impl->capabilities = reapi::Capabilities::NewStub(impl->channel);
  impl->byteStream = bytestream::ByteStream::NewStub(impl->channel);
  return std::unique_ptr<RemoteExecutor>(new RemoteExecutor(std::move(impl)));
}

Status RemoteExecutor::checkCapabilities() {
  CancelWatch watch(nullptr);
  return impl_->checkCapabilities(watch);
}

Expected<ActionOutcome> RemoteExecutor::execute(const Action &action,
                                                const std::function<bool()> &cancelled) {
  FLOWC_ASSIGN_OR_RETURN(EncodedAction encoded, encodeAction(action));
  CancelWatch watch(cancelled);
  FLOWC_RETURN_IF_ERROR(impl_->ensureCapabilities(watch));
  const std::string name = encoded.actionDigest.toString();

  // The action cache first: a hit runs nothing. A hit whose outputs the
  // CAS has since evicted is executed again, past the cache.
  FLOWC_ASSIGN_OR_RETURN(std::optional<reapi::ActionResult> cachedResult,
                         impl_->getActionResult(encoded.actionDigest, watch));
  if (cachedResult) {
    Expected<ActionOutcome> outcome = impl_->collect(*cachedResult, encoded, watch);
    if (outcome) {
      outcome->cached = true;
      ++impl_->cacheHits;
      spdlog::debug("remote action {}: action cache hit on {}", name, impl_->where());
      return outcome;
    }
    if (outcome.status().code() != StatusCode::NotFound)
      return outcome.status();
    spdlog::info("remote action {}: cached result's outputs are gone ({}); executing",
                 name, outcome.status().message());
  }

  std::vector<BlobRef> blobs = encoded.blobs(action);
  for (int attempt = 0;; ++attempt) {
    FLOWC_RETURN_IF_ERROR(impl_->uploadMissing(blobs, watch));
    FLOWC_ASSIGN_OR_RETURN(reapi::ExecuteResponse response,
                           impl_->runExecute(encoded.actionDigest,
                                             cachedResult.has_value() || attempt > 0,
                                             watch));
    const int code = response.status().code();
    // FAILED_PRECONDITION: the engine misses inputs (evicted since
    // FindMissingBlobs); REAPI asks the client to upload them and retry.
    if (code == static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION) && attempt == 0) {
      spdlog::warn("remote action {} on {}: {}; uploading its inputs again", name,
                   impl_->where(), response.status().message());
      continue;
    }
    if (code != 0) {
      std::string message = response.status().message();
      if (!response.message().empty() && response.message() != message)
        message += " (" + response.message() + ")";
      google::rpc::Status engineStatus = response.status();
      engineStatus.set_message(message);
      return impl_->engineError("remote action " + name, engineStatus);
    }
    FLOWC_ASSIGN_OR_RETURN(ActionOutcome outcome,
                           impl_->collect(response.result(), encoded, watch));
    outcome.cached = response.cached_result();
    ++(outcome.cached ? impl_->cacheHits : impl_->executed);
    spdlog::debug("remote action {} on {}: exit {}{}{}", name, impl_->where(),
                  outcome.exitCode, outcome.cached ? " (cached)" : "",
                  outcome.worker.empty() ? "" : " on " + outcome.worker);
    return outcome;
  }
}

Counters RemoteExecutor::counters() const {
  Counters counters;
  counters.executed = impl_->executed.load();
  counters.cacheHits = impl_->cacheHits.load();
  counters.blobsUploaded = impl_->blobsUploaded.load();
  counters.bytesUploaded = impl_->bytesUploaded.load();
  counters.blobsDownloaded = impl_->blobsDownloaded.load();
  counters.bytesDownloaded = impl_->bytesDownloaded.load();
  counters.streamsResumed = impl_->streamsResumed.load();
  return counters;
}

const Endpoint &RemoteExecutor::endpoint() const { return impl_->endpoint; }

} // namespace flowc::remote
