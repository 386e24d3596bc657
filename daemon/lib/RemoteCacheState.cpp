#include "RemoteCacheState.h"

#include <algorithm>
#include <spdlog/spdlog.h>

namespace flowc::daemon {

namespace {

constexpr std::chrono::seconds kFirstBackoff{5};
constexpr std::chrono::seconds kMaxBackoff{300};

/// Who the daemon is to the server, without the secret: the header names
/// it sends, and the client certificate.
std::string identityOf(const RemoteCacheOptions &options) {
  std::string identity;
  for (const auto &[name, value] : options.headers)
    identity += (identity.empty() ? "" : ", ") + name + " header";
  if (!options.clientCertFile.empty())
    identity += (identity.empty() ? "" : ", ") + std::string("client certificate ") +
                options.clientCertFile;
  return identity.empty() ? "anonymous" : identity;
}

void add(flowc::v1::RemoteCacheCounters &total,
         const flowc::v1::RemoteCacheCounters &job) {
  total.set_hits(total.hits() + job.hits());
  total.set_misses(total.misses() + job.misses());
  total.set_uploads(total.uploads() + job.uploads());
  total.set_blobs_uploaded(total.blobs_uploaded() + job.blobs_uploaded());
  total.set_bytes_uploaded(total.bytes_uploaded() + job.bytes_uploaded());
  total.set_bytes_downloaded(total.bytes_downloaded() + job.bytes_downloaded());
  total.set_errors(total.errors() + job.errors());
  total.set_data_loss(total.data_loss() + job.data_loss());
  total.set_too_large(total.too_large() + job.too_large());
  total.set_too_large_bytes(total.too_large_bytes() + job.too_large_bytes());
  total.set_bad_signatures(total.bad_signatures() + job.bad_signatures());
  if (!job.last_error().empty())
    total.set_last_error(job.last_error());
}

} // namespace

RemoteCacheState::RemoteCacheState(const DaemonOptions &options) {
  const RemoteCacheOptions &remote = options.remoteCache;
  if (remote.url.empty())
    return;
  config_.set_url(remote.url);
  config_.set_instance(options.remote.instance);
  for (const auto &[name, value] : remote.headers) {
    flowc::v1::Header *header = config_.add_headers();
    header->set_name(name);
    header->set_value(value);
  }
  config_.set_read_only(remote.readOnly);
  config_.set_ca_file(remote.caFile);
  config_.set_client_cert_file(remote.clientCertFile);
  config_.set_client_key_file(remote.clientKeyFile);
  config_.set_upload_weights(remote.uploadWeights);
  config_.set_timeout_ms(remote.timeoutMs);
  config_.set_sign_key_file(remote.signKeyFile);
  for (const std::string &key : remote.trustKeyFiles)
    config_.add_trust_key_files(key);
  identity_ = identityOf(remote);
}

std::optional<flowc::v1::RemoteCacheConfig> RemoteCacheState::forJob() {
  if (!configured())
    return std::nullopt;
  std::lock_guard lock(mutex_);
  if (std::chrono::steady_clock::now() < retryAt_)
    return std::nullopt;
  return config_;
}

void RemoteCacheState::record(const flowc::v1::RemoteCacheCounters &job) {
  if (!configured())
    return;
  std::lock_guard lock(mutex_);
  add(total_, job);
  if (job.errors() == 0) {
    if (backoff_.count() && (job.hits() || job.misses() || job.uploads())) {
      spdlog::info("remote cache {} answers again", config_.url());
      backoff_ = std::chrono::seconds(0);
      state_ = "ok";
    }
    return;
  }
  bool newOutage = backoff_.count() == 0;
  backoff_ = newOutage ? kFirstBackoff : std::min(backoff_ * 2, kMaxBackoff);
  retryAt_ = std::chrono::steady_clock::now() + backoff_;
  state_ = job.last_error() + " (local only; retried in " +
           std::to_string(backoff_.count()) + " s)";
  if (newOutage)
    spdlog::warn("remote cache {}: {}; compiles go on with the local cache, retrying in "
                 "{} s",
                 config_.url(), job.last_error(), backoff_.count());
}

bool RemoteCacheState::status(flowc::v1::RemoteCacheStatus &out) {
  if (!configured())
    return false;
  std::lock_guard lock(mutex_);
  out.set_url(config_.url());
  out.set_instance(config_.instance());
  out.set_mode(config_.read_only() ? "read-only" : "read-write");
  out.set_identity(identity_);
  out.set_state(state_);
  *out.mutable_counters() = total_;
  return true;
}

} // namespace flowc::daemon
