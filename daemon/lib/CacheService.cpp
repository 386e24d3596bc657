#include "CacheService.h"

#include "flowc/rpc/GrpcStatus.h"

#include <spdlog/spdlog.h>

namespace flowc::daemon {

namespace {

void fillGc(const cache::GcReport &report, flowc::v1::CacheGcResponse *response) {
  response->set_evicted_blobs(report.evictedBlobs);
  response->set_evicted_bytes(report.evictedBytes);
  response->set_dropped_actions(report.droppedActions);
  response->set_remaining_bytes(report.remainingBytes);
}

} // namespace

flowc::v1::CacheStatsResponse cacheStatsResponse(const cache::CacheStats &stats,
                                                 const std::string &root) {
  flowc::v1::CacheStatsResponse response;
  for (const auto &[kind, counts] : stats.byKind) {
    flowc::v1::LookupCounts &out = (*response.mutable_kinds())[kind];
    out.set_hits(counts.hits);
    out.set_misses(counts.misses);
  }
  response.set_blob_count(stats.blobCount);
  response.set_blob_bytes(stats.blobBytes);
  response.set_inline_blobs(stats.inlineBlobs);
  response.set_action_count(stats.actionCount);
  response.set_pinned_blobs(stats.pinnedBlobs);
  response.set_max_bytes(stats.maxBytes);
  response.set_hits(stats.hits);
  response.set_misses(stats.misses);
  response.set_evictions(stats.evictions);
  response.set_evicted_bytes(stats.evictedBytes);
  response.set_dedup_bytes(stats.dedupBytes);
  response.set_stat_memo_entries(stats.statMemoEntries);
  response.set_cache_dir(root);
  return response;
}

grpc::Status CacheService::Stats(grpc::ServerContext *,
                                 const flowc::v1::CacheStatsRequest *request,
                                 flowc::v1::CacheStatsResponse *response) {
  auto stats = context_.cache->stats();
  if (!stats)
    return rpc::toGrpcStatus(stats.status());
  if (request->zero()) {
    if (Status zeroed = context_.cache->zeroCounters(); !zeroed)
      return rpc::toGrpcStatus(zeroed);
    spdlog::info("cache counters zeroed");
  }
  *response = cacheStatsResponse(*stats, context_.cache->root());
  return grpc::Status::OK;
}

grpc::Status CacheService::List(grpc::ServerContext *,
                                const flowc::v1::CacheListRequest *request,
                                flowc::v1::CacheListResponse *response) {
  auto blobs = context_.cache->list(request->limit() ? request->limit() : 1000);
  if (!blobs)
    return rpc::toGrpcStatus(blobs.status());
  for (const cache::BlobInfo &blob : *blobs) {
    flowc::v1::CacheBlob *out = response->add_blobs();
    out->set_digest(blob.digest.toString());
    out->set_inline_(blob.isInline);
    out->set_created_ms(blob.createdMs);
    out->set_last_access_ms(blob.lastAccessMs);
    out->set_pinned(blob.pinned);
  }
  return grpc::Status::OK;
}

grpc::Status CacheService::Gc(grpc::ServerContext *,
                              const flowc::v1::CacheGcRequest *request,
                              flowc::v1::CacheGcResponse *response) {
  uint64_t target = request->has_max_bytes() ? request->max_bytes()
                                             : context_.cache->options().maxBytes;
  auto report = context_.cache->collectGarbage(target);
  if (!report)
    return rpc::toGrpcStatus(report.status());
  fillGc(*report, response);
  spdlog::info("cache gc target_bytes={} evicted_blobs={} evicted_bytes={}", target,
               report->evictedBlobs, report->evictedBytes);
  return grpc::Status::OK;
}

grpc::Status CacheService::Verify(grpc::ServerContext *,
                                  const flowc::v1::CacheVerifyRequest *request,
                                  flowc::v1::CacheVerifyResponse *response) {
  auto report = context_.cache->verify(request->repair());
  if (!report)
    return rpc::toGrpcStatus(report.status());
  response->set_checked(report->checked);
  for (const std::string &bad : report->corrupt)
    response->add_corrupt(bad);
  response->set_quarantined(report->quarantined);
  response->set_missing_files(report->missingFiles);
  response->set_orphan_files(report->orphanFiles);
  for (const std::string &unreadable : report->unreadable)
    response->add_unreadable(unreadable);
  spdlog::info(
      "cache verify repair={} checked={} corrupt={} unreadable={} quarantined={}",
      request->repair(), report->checked, report->corrupt.size(),
      report->unreadable.size(), report->quarantined);
  return grpc::Status::OK;
}

grpc::Status CacheService::setPinned(const flowc::v1::CachePinRequest &request,
                                     bool pinned) {
  auto digest = cache::Digest::parse(request.digest());
  if (!digest)
    return rpc::toGrpcStatus(digest.status());
  Status status = pinned ? context_.cache->pin(*digest) : context_.cache->unpin(*digest);
  spdlog::info("cache {} digest={} status={}", pinned ? "pin" : "unpin", request.digest(),
               status.toString());
  return rpc::toGrpcStatus(status);
}

grpc::Status CacheService::Pin(grpc::ServerContext *,
                               const flowc::v1::CachePinRequest *request,
                               flowc::v1::CachePinResponse *) {
  return setPinned(*request, true);
}

grpc::Status CacheService::Unpin(grpc::ServerContext *,
                                 const flowc::v1::CachePinRequest *request,
                                 flowc::v1::CachePinResponse *) {
  return setPinned(*request, false);
}

grpc::Status CacheService::Clear(grpc::ServerContext *,
                                 const flowc::v1::CacheClearRequest *,
                                 flowc::v1::CacheGcResponse *response) {
  auto report = context_.cache->clear();
  if (!report)
    return rpc::toGrpcStatus(report.status());
  fillGc(*report, response);
  spdlog::info("cache clear evicted_blobs={} dropped_actions={}", report->evictedBlobs,
               report->droppedActions);
  return grpc::Status::OK;
}

} // namespace flowc::daemon
