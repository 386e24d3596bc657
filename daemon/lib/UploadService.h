// Remote submit: a client that cannot name a path on the daemon's machine
// uploads the model's files as blobs (only those the cache lacks) and
// submits a manifest of digests, which the daemon materializes in a
// private directory and compiles as a path.
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/support/Status.h"

#include "flowc/v1/flowc.grpc.pb.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace flowc::daemon {

/// What one client may ask of the upload service.
struct UploadLimits {
  /// Bytes of one UploadChunk's data.
  uint64_t maxChunkBytes = 1 << 20;
  /// Digests in one FindMissingBlobs request.
  size_t maxDigestsPerRequest = 10000;
  /// Files in one submit's manifest (an exporter may write one per tensor).
  size_t maxManifestFiles = 10000;
  /// Bytes of a manifest path (PATH_MAX).
  size_t maxPathBytes = 4096;
  /// An interrupted upload untouched for this long is removed.
  std::chrono::seconds partialMaxAge{24 * 3600};
  /// The interrupted uploads kept, in total; 0: the cache's size cap. The
  /// oldest idle ones make room for a new upload.
  uint64_t maxPartialBytes = 0;
};

/// A model's files materialized from the cache in a directory of its own
/// under the cache's tmp/ (hard links of blob files; small inline blobs
/// written out), removed when this is destroyed (and swept at the next
/// open of the cache if the daemon dies first).
class MaterializedModel {
public:
  MaterializedModel(const MaterializedModel &) = delete;
  MaterializedModel &operator=(const MaterializedModel &) = delete;
  ~MaterializedModel();

  /// The submit as a path submit of the materialized model.
  const flowc::v1::SubmitRequest &request() const { return request_; }
  /// `status` with the directory left out of its message: the client
  /// knows the model by its manifest paths, not by the daemon's cache.
  grpc::Status scrub(const grpc::Status &status) const;

private:
  friend class UploadService;
  MaterializedModel(std::string dir, cache::PinGuard pins)
      : dir_(std::move(dir)), pins_(std::move(pins)) {}
  std::string dir_;
  cache::PinGuard pins_;
  flowc::v1::SubmitRequest request_;
};

/// FindMissingBlobs, UploadBlob and QueryUpload of flowc.v1.Compiler, and
/// the materialization of a submit's manifest. Uploads stream into a
/// partial file under `<cache>/uploads/` (memory does not grow with the
/// blob), hashed as they arrive; only a blob whose bytes match its digest
/// becomes visible, adopted into the CAS. Thread-safe; one upload of a
/// digest at a time.
class UploadService {
public:
  /// `cache` outlives this. Sweeps stale partial uploads.
  explicit UploadService(cache::Cache &cache, UploadLimits limits = {});

  grpc::Status findMissingBlobs(const flowc::v1::FindMissingBlobsRequest &request,
                                flowc::v1::FindMissingBlobsResponse *response);
  grpc::Status uploadBlob(grpc::ServerContext *context,
                          grpc::ServerReader<flowc::v1::UploadChunk> *reader,
                          flowc::v1::UploadBlobResponse *response);
  grpc::Status queryUpload(const flowc::v1::QueryUploadRequest &request,
                           flowc::v1::QueryUploadResponse *response);

  /// For a submit with `model` set: checks the manifest (InvalidArgument
  /// naming a path that is empty, absolute, has `.`/`..`/empty components,
  /// is duplicated or nested under another file, or a bad digest;
  /// FailedPrecondition naming a blob the cache lacks) and materializes it.
  Expected<std::unique_ptr<MaterializedModel>>
  materialize(const flowc::v1::SubmitRequest &request);

private:
  struct Claim;
  /// Receives the rest of an upload whose first chunk is `first`.
  Status receive(grpc::ServerContext *context, const cache::Digest &digest,
                 const flowc::v1::UploadChunk &first,
                 grpc::ServerReader<flowc::v1::UploadChunk> *reader, uint64_t &committed);
  /// Removes partial uploads older than the age bound or not named as one,
  /// then the oldest idle ones until `needed` more bytes fit the total
  /// bound; ResourceExhausted if they cannot.
  Status sweepPartials(const std::string &keep, uint64_t needed);
  std::string partialPath(const cache::Digest &digest) const;
  uint64_t maxPartialBytes() const;

  cache::Cache &cache_;
  UploadLimits limits_;
  std::string uploadsDir_;
  std::mutex mutex_;
  /// Partial files an upload is writing (their names).
  std::set<std::string> active_;
};

} // namespace flowc::daemon
