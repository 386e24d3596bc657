#include "flowc/worker/RemoteTier.h"

#include "EntrySignature.h"

#include <cstdlib>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

namespace flowc::worker {

namespace {

using cache::Digest;

/// Blobs at most this large download into memory; larger ones stream into
/// a file in the cache's tmp/ and are adopted.
constexpr uint64_t kInMemoryDownloadBytes = 4 << 20;

constexpr char kResult[] = "result";
constexpr char kFactors[] = "factors";
constexpr char kSignature[] = "signature";

bool startsWith(const std::string &text, std::string_view prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

/// Kinds share one remote action cache: each is its own key space there
/// too, and the scheme is versioned.
Digest remoteKey(cache::ActionKind kind, const Digest &key) {
  return cache::digestOf(std::string("flowc.remote-entry.v1\n") + actionKindName(kind) +
                         "\n" + key.toString() + "\n");
}

/// What a signature covers: the entry's kind, key and every output but the
/// signature, in order.
std::string signedText(cache::ActionKind kind, const Digest &key,
                       const remote::RemoteEntry &entry) {
  std::string text = std::string("flowc.signed-entry.v1\n") + actionKindName(kind) +
                     "\n" + key.toString() + "\n";
  for (const remote::EntryOutput &output : entry.outputs)
    if (output.path != kSignature)
      text += output.path + " " + output.digest.toString() + "\n";
  return text;
}

} // namespace

const char *actionKindName(cache::ActionKind kind) {
  switch (kind) {
  case cache::ActionKind::Artifact:
    return "artifact";
  case cache::ActionKind::Code:
    return "code";
  case cache::ActionKind::Kernel:
    return "kernel";
  case cache::ActionKind::DerivedWeight:
    return "derived";
  }
  return "unknown";
}

struct RemoteTier::Impl {
  cache::Cache &local;
  RemoteTierOptions options;
  std::unique_ptr<remote::RemoteCache> client;
  std::optional<SigningKey> signingKey;
  TrustedKeys trusted;

  mutable std::mutex mutex;
  RemoteTierCounters counters;
  /// Set by the first error that says the remote cannot be reached: every
  /// later call of this process goes local at once instead of waiting.
  bool down = false;
  bool writesRefused = false;
  std::optional<remote::RemoteCapabilities> capabilities;

  Impl(cache::Cache &local, RemoteTierOptions options)
      : local(local), options(std::move(options)) {}

  bool isDown() {
    std::lock_guard lock(mutex);
    return down;
  }

  /// Counts and logs a failed request; an unreachable remote is off for the
  /// rest of this process.
  void failed(const char *what, const Status &status) {
    std::lock_guard lock(mutex);
    counters.lastError = std::string(what) + ": " + status.message();
    // A refused write (a read-only endpoint or token) leaves reads on; any
    // other failure (unreachable, timed out, TLS, credentials) turns the
    // remote off for this process rather than failing each request again.
    if (status.code() == StatusCode::PermissionDenied) {
      if (!writesRefused)
        spdlog::warn("remote cache {}: {} refused ({}); nothing more is written (use "
                     "--remote-read-only with a read-only endpoint)",
                     client->describe(), what, status.message());
      writesRefused = true;
      return;
    }
    ++counters.errors;
    if (!down)
      spdlog::warn("remote cache {}: {} failed ({}); going on with the local cache",
                   client->describe(), what, status.message());
    down = true;
  }

  /// Copies one blob of an entry into the local CAS, verified.
  Status download(const Digest &digest) {
    if (digest.size <= kInMemoryDownloadBytes) {
      FLOWC_ASSIGN_OR_RETURN(std::string bytes, client->downloadBytes(digest));
      return local.putVerified(digest, bytes);
    }
    std::string path =
        local.tmpDir() + "/remote." + std::to_string(local.tempOwner()) + ".XXXXXX";
    int fd = ::mkstemp(path.data());
    if (fd < 0)
      return errnoStatus(errno, "cannot create a file in '" + local.tmpDir() + "'");
    Status written = client->downloadToFile(digest, fd);
    if (::close(fd) != 0 && written.isOk())
      written = errnoStatus(errno, "cannot write '" + path + "'");
    if (!written) {
      ::unlink(path.c_str());
      return written;
    }
    FLOWC_ASSIGN_OR_RETURN(Digest stored, local.adoptFile(path));
    if (!(stored == digest))
      return dataLoss("blob " + digest.toString() + " arrived as " + stored.toString());
    return Status::ok();
  }

  /// The signature's check, when readers trust keys: false refuses the entry.
  bool signatureAccepted(cache::ActionKind kind, const Digest &key,
                         const remote::RemoteEntry &entry) {
    if (trusted.empty())
      return true;
    for (const remote::EntryOutput &output : entry.outputs) {
      if (output.path != kSignature)
        continue;
      auto signature = client->downloadBytes(output.digest);
      if (signature && trusted.verifies(signedText(kind, key, entry), *signature))
        return true;
    }
    std::lock_guard lock(mutex);
    ++counters.badSignatures;
    spdlog::error("remote cache {}: {} entry {} is unsigned or not signed by a trusted "
                  "key (--trust-key); not used",
                  client->describe(), actionKindName(kind), key.toString());
    return false;
  }

  /// The remote's entry with every blob in the local CAS, verified;
  /// nullopt on a miss or failure. `count`: a hit or miss in the figures.
  std::optional<TierEntry> fetchEntry(cache::ActionKind kind, const Digest &key,
                                      const LocalBytes &localBytes, bool count) {
    if (isDown())
      return std::nullopt;
    auto miss = [&] {
      std::lock_guard lock(mutex);
      counters.misses += count;
      return std::nullopt;
    };
    auto entry = client->getEntry(remoteKey(kind, key));
    if (!entry) {
      failed("lookup", entry.status());
      return std::nullopt;
    }
    if (!*entry)
      return miss();
    if (!signatureAccepted(kind, key, **entry))
      return std::nullopt;
    std::optional<Digest> result;
    TierEntry found;
    uint64_t downloaded = 0;
    for (const remote::EntryOutput &output : (*entry)->outputs) {
      if (output.path == kSignature)
        continue;
      if (output.path == kResult)
        result = output.digest;
      else if (startsWith(output.path, "dep/"))
        found.deps.push_back(output.digest);
      else if (startsWith(output.path, "weight/"))
        found.weights.push_back(output.digest);
      if (local.contains(output.digest))
        continue;
      Status stored;
      if (const std::string_view *bytes =
              localBytes ? localBytes(output.digest) : nullptr)
        stored = local.putVerified(output.digest, *bytes);
      else {
        stored = download(output.digest);
        downloaded += output.digest.size;
      }
      // A weight the writer kept (--remote-upload-weights=never) that this
      // machine does not have at hand, or a blob the server evicted.
      if (stored.code() == StatusCode::NotFound)
        return miss();
      if (stored.code() == StatusCode::DataLoss) {
        std::lock_guard lock(mutex);
        ++counters.dataLoss;
        counters.lastError = stored.message();
        spdlog::error("remote cache {}: {} entry {}: {}; not used, compiling instead",
                      client->describe(), actionKindName(kind), key.toString(),
                      stored.message());
        return std::nullopt;
      }
      if (!stored) {
        failed("download", stored);
        return std::nullopt;
      }
    }
    if (!result) {
      std::lock_guard lock(mutex);
      ++counters.dataLoss;
      spdlog::error("remote cache {}: {} entry {} has no result; not used",
                    client->describe(), actionKindName(kind), key.toString());
      return std::nullopt;
    }
    found.result = *result;
    for (const remote::EntryOutput &output : (*entry)->outputs)
      if (output.path == kFactors)
        if (auto blob = local.get(output.digest))
          found.factors = std::string(blob->bytes());
    std::lock_guard lock(mutex);
    counters.hits += count;
    counters.bytesDownloaded += downloaded;
    return found;
  }

  std::optional<Digest> fetch(cache::ActionKind kind, const Digest &key,
                              const LocalBytes &localBytes, std::string *factors) {
    std::optional<TierEntry> entry = fetchEntry(kind, key, localBytes, true);
    if (!entry)
      return std::nullopt;
    std::vector<Digest> deps = entry->deps;
    deps.insert(deps.end(), entry->weights.begin(), entry->weights.end());
    if (Status recorded = local.recordAction(kind, key, entry->result, deps); !recorded) {
      spdlog::warn("remote hit {} {} not recorded locally: {}", actionKindName(kind),
                   key.toString(), recorded.message());
      return std::nullopt;
    }
    if (factors)
      *factors = std::move(entry->factors);
    return entry->result;
  }

  Expected<remote::RemoteCapabilities> serverCapabilities() {
    {
      std::lock_guard lock(mutex);
      if (capabilities)
        return *capabilities;
    }
    FLOWC_ASSIGN_OR_RETURN(remote::RemoteCapabilities read, client->capabilities());
    std::lock_guard lock(mutex);
    capabilities = read;
    return read;
  }

  /// Uploads one local blob: its file streams when it has one.
  Status upload(const Digest &digest) {
    std::string path = local.blobPath(digest);
    if (::access(path.c_str(), R_OK) == 0)
      return client->uploadFile(digest, path);
    FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob, local.get(digest));
    return client->uploadBytes(digest, blob.bytes());
  }

  void publish(cache::ActionKind kind, const Digest &key, const TierEntry &tierEntry) {
    {
      std::lock_guard lock(mutex);
      if (options.readOnly || down || writesRefused)
        return;
    }
    bool weightsStay = options.uploadWeights == UploadWeights::Never;
    // A derived weight is a weight: under `never` it stays here.
    if (weightsStay && kind == cache::ActionKind::DerivedWeight)
      return;
    auto capabilities = serverCapabilities();
    if (!capabilities) {
      failed("capabilities", capabilities.status());
      return;
    }
    if (!capabilities->actionCacheWritable)
      return;
    remote::RemoteEntry entry;
    std::vector<Digest> blobs;
    auto add = [&](std::string path, const Digest &digest, bool isWeight) {
      entry.outputs.push_back({std::move(path), digest});
      bool tooLarge =
          capabilities->maxBlobBytes && digest.size > capabilities->maxBlobBytes;
      if (tooLarge) {
        std::lock_guard lock(mutex);
        ++counters.tooLarge;
        counters.tooLargeBytes += digest.size;
      }
      // A weight left out is one a reader stores from its own copy of the
      // model; any other blob left out makes the entry useless.
      if (isWeight && (weightsStay || tooLarge))
        return true;
      blobs.push_back(digest);
      return !tooLarge;
    };
    bool complete = add(kResult, tierEntry.result, false);
    for (size_t i = 0; i < tierEntry.deps.size(); ++i)
      complete &= add("dep/" + std::to_string(i), tierEntry.deps[i], false);
    for (size_t i = 0; i < tierEntry.weights.size(); ++i)
      complete &= add("weight/" + std::to_string(i), tierEntry.weights[i], true);
    if (!tierEntry.factors.empty()) {
      auto factors = local.put(tierEntry.factors);
      if (factors)
        complete &= add(kFactors, *factors, false);
    }
    if (!complete) {
      spdlog::info("remote cache {}: {} entry {} not uploaded: a blob is over the "
                   "server's limit of {} bytes",
                   client->describe(), actionKindName(kind), key.toString(),
                   capabilities->maxBlobBytes);
      return;
    }
    if (signingKey) {
      auto signature = signingKey->sign(signedText(kind, key, entry));
      if (!signature) {
        failed("signing", signature.status());
        return;
      }
      Digest digest = cache::digestOf(*signature);
      if (Status sent = client->uploadBytes(digest, *signature); !sent) {
        failed("upload", sent);
        return;
      }
      entry.outputs.push_back({kSignature, digest});
    }
    auto missing = client->findMissing(blobs);
    if (!missing) {
      failed("find-missing", missing.status());
      return;
    }
    uint64_t bytes = 0;
    for (const Digest &digest : *missing) {
      if (Status sent = upload(digest); !sent) {
        failed("upload", sent);
        return;
      }
      bytes += digest.size;
    }
    if (Status stored = client->putEntry(remoteKey(kind, key), entry); !stored) {
      failed("entry upload", stored);
      return;
    }
    std::lock_guard lock(mutex);
    ++counters.uploads;
    counters.blobsUploaded += missing->size();
    counters.bytesUploaded += bytes;
  }
};

Expected<std::unique_ptr<RemoteTier>> RemoteTier::open(cache::Cache &local,
                                                       RemoteTierOptions options) {
  auto impl = std::make_unique<Impl>(local, std::move(options));
  FLOWC_ASSIGN_OR_RETURN(impl->client,
                         remote::RemoteCache::connect(impl->options.client));
  if (!impl->options.signKeyFile.empty()) {
    FLOWC_ASSIGN_OR_RETURN(SigningKey key, SigningKey::load(impl->options.signKeyFile));
    impl->signingKey = std::move(key);
  }
  FLOWC_ASSIGN_OR_RETURN(impl->trusted, TrustedKeys::load(impl->options.trustKeyFiles));
  return std::unique_ptr<RemoteTier>(new RemoteTier(std::move(impl)));
}

Status checkRemoteTierOptions(const RemoteTierOptions &options) {
  FLOWC_RETURN_IF_ERROR(options.client.validate());
  if (!options.signKeyFile.empty())
    FLOWC_RETURN_IF_ERROR(SigningKey::load(options.signKeyFile).status());
  return TrustedKeys::load(options.trustKeyFiles).status();
}

RemoteTier::RemoteTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteTier::~RemoteTier() = default;

std::optional<Digest> RemoteTier::fetch(cache::ActionKind kind, const Digest &key,
                                        const LocalBytes &local, std::string *factors) {
  return impl_->fetch(kind, key, local, factors);
}

std::optional<TierEntry> RemoteTier::fetchEntry(cache::ActionKind kind,
                                                const Digest &key) {
  return impl_->fetchEntry(kind, key, nullptr, false);
}

void RemoteTier::publish(cache::ActionKind kind, const Digest &key,
                         const TierEntry &entry) {
  impl_->publish(kind, key, entry);
}

RemoteTierCounters RemoteTier::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

std::string RemoteTier::describe() const { return impl_->client->describe(); }

} // namespace flowc::worker
