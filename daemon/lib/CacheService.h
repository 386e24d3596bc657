#pragma once

#include "DaemonContext.h"

#include "flowc/v1/flowc.grpc.pb.h"

namespace flowc::daemon {

/// `stats` as Cache.Stats answers it (and /api/cache shows it).
flowc::v1::CacheStatsResponse cacheStatsResponse(const cache::CacheStats &stats,
                                                 const std::string &root);

/// flowc.v1.Cache: cache statistics and maintenance, run by the daemon
/// because it owns the pins that eviction must respect.
class CacheService final : public flowc::v1::Cache::Service {
public:
  explicit CacheService(DaemonContext &context) : context_(context) {}

  grpc::Status Stats(grpc::ServerContext *, const flowc::v1::CacheStatsRequest *,
                     flowc::v1::CacheStatsResponse *response) override;
  grpc::Status List(grpc::ServerContext *, const flowc::v1::CacheListRequest *request,
                    flowc::v1::CacheListResponse *response) override;
  grpc::Status Gc(grpc::ServerContext *, const flowc::v1::CacheGcRequest *request,
                  flowc::v1::CacheGcResponse *response) override;
  grpc::Status Verify(grpc::ServerContext *, const flowc::v1::CacheVerifyRequest *request,
                      flowc::v1::CacheVerifyResponse *response) override;
  grpc::Status Pin(grpc::ServerContext *, const flowc::v1::CachePinRequest *request,
                   flowc::v1::CachePinResponse *) override;
  grpc::Status Unpin(grpc::ServerContext *, const flowc::v1::CachePinRequest *request,
                     flowc::v1::CachePinResponse *) override;
  grpc::Status Clear(grpc::ServerContext *, const flowc::v1::CacheClearRequest *,
                     flowc::v1::CacheGcResponse *response) override;

private:
  grpc::Status setPinned(const flowc::v1::CachePinRequest &request, bool pinned);

  DaemonContext &context_;
};

} // namespace flowc::daemon
