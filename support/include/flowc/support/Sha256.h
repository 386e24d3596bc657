// SHA-256 through OpenSSL's EVP interface (SHA-NI where the CPU has it),
// one stream or many buffers in parallel. The cache's digests and the
// runtime's artifact checks both hash through here, so the runtime needs
// no cache to verify an artifact.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowc {

using Sha256 = std::array<uint8_t, 32>;

/// Incremental SHA-256. Not thread-safe; one hasher per stream.
class Sha256Hasher {
public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher &) = delete;
  Sha256Hasher &operator=(const Sha256Hasher &) = delete;

  void update(const void *data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  /// Finishes the stream; the hasher must not be used afterwards.
  Sha256 finish();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// SHA-256 of one buffer, in this thread. Thread-safe.
Sha256 sha256Of(std::string_view bytes);

/// 64 lowercase hex characters.
std::string sha256Hex(const Sha256 &hash);
/// The hash written as 64 lowercase hex characters; nullopt otherwise.
std::optional<Sha256> parseSha256Hex(std::string_view hex);

/// What happens to the pages of mapped buffers once hashed.
enum class HashedPages {
  /// Dropped (MappedFile::releasePages): resident memory stays at a few
  /// tens of MiB however large the buffers (ingest, cache verify).
  Release,
  /// Kept: the caller reads the bytes next (an artifact about to run), and
  /// faulting them in a second time would cost as much as hashing.
  Keep,
};

/// SHA-256 of each buffer, in input order, hashed in parallel on up to
/// `threads` threads (0: one per core), largest first. Mapped buffers are
/// read ahead window by window, in windows small enough that all threads
/// together keep a few tens of MiB in flight. Thread-safe.
std::vector<Sha256> sha256Many(const std::vector<std::string_view> &buffers,
                               unsigned threads = 0,
                               HashedPages pages = HashedPages::Release);

} // namespace flowc
