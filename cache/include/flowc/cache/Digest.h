// Content digests: SHA-256 of the bytes plus their size, printed as
// `sha256:<hex>/<size>`. SHA-256 because a shared multi-tenant cache needs
// collision resistance (as the Bazel remote-cache ecosystem does).
#pragma once

#include "flowc/support/Sha256.h"
#include "flowc/support/Status.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flowc::cache {

struct Digest {
  std::array<uint8_t, 32> hash{};
  uint64_t size = 0;

  /// 64 lowercase hex characters.
  std::string hex() const;
  /// `sha256:<hex>/<size>`.
  std::string toString() const;
  /// Parses the form written by toString(); InvalidArgument otherwise.
  static Expected<Digest> parse(std::string_view text);

  bool operator==(const Digest &other) const = default;
};

/// Where a large blob's file lies under the cache root `root`:
/// `ROOT/cas/<first 2 hex>/<other 62 hex>`. The one definition of the CAS
/// layout, for the cache and for readers that map its files without opening
/// it (`flowc run` of a thin artifact).
std::string blobPathUnder(const std::string &root, const Digest &digest);

/// Incremental digest: SHA-256 (flowc/support/Sha256.h) and the byte count.
/// Not thread-safe; one hasher per stream.
class Hasher {
public:
  void update(const void *data, size_t size) {
    hasher_.update(data, size);
    size_ += size;
  }
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  /// Finishes the stream; the hasher must not be used afterwards.
  Digest finish() { return Digest{hasher_.finish(), size_}; }

private:
  Sha256Hasher hasher_;
  uint64_t size_ = 0;
};

/// Digest of a whole buffer. Where `bytes` lies inside a MappedFile's
/// mapping, its pages are released as they are hashed (the page cache keeps
/// them), so resident memory does not grow with its size. Thread-safe.
Digest digestOf(std::string_view bytes);

/// Digests of many buffers, hashed in parallel on up to `threads` threads
/// (0: one per core). Results are in input order. Mapped buffers are hashed
/// as by digestOf(), in windows small enough that all threads together keep
/// a few tens of MiB of them resident, however large the buffers are.
std::vector<Digest> digestMany(const std::vector<std::string_view> &buffers,
                               unsigned threads = 0);

} // namespace flowc::cache
