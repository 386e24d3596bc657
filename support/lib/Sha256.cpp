#include "flowc/support/Sha256.h"

#include "flowc/support/Concurrently.h"
#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <thread>
#include <openssl/evp.h>

namespace flowc {

namespace {
/// Mapped bytes that sha256Many keeps in flight at once, over all threads.
constexpr size_t kResidentBudget = 32 << 20;
constexpr size_t kMinWindowBytes = 1 << 20;

Sha256 hashInWindows(std::string_view bytes, size_t windowBytes, HashedPages pages) {
  Sha256Hasher hasher;
  if (pages == HashedPages::Keep) {
    // Reading ahead still pays on a cold file; only the release is skipped.
    for (size_t at = 0; at < bytes.size(); at += windowBytes) {
      std::string_view window = bytes.substr(at, windowBytes);
      if (at + windowBytes < bytes.size())
        MappedFile::readAhead(bytes.substr(at + windowBytes, windowBytes));
      hasher.update(window);
    }
    return hasher.finish();
  }
  // Hashing never fails, so neither does the visit.
  (void)visitInWindows(bytes, windowBytes, [&](std::string_view window) {
    hasher.update(window);
    return Status::ok();
  });
  return hasher.finish();
}

int hexValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}
} // namespace

struct Sha256Hasher::Impl {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256Hasher::Sha256Hasher() : impl_(std::make_unique<Impl>()) {
  EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr);
}

Sha256Hasher::~Sha256Hasher() = default;

void Sha256Hasher::update(const void *data, size_t size) {
  EVP_DigestUpdate(impl_->ctx, data, size);
}

Sha256 Sha256Hasher::finish() {
  Sha256 hash{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(impl_->ctx, hash.data(), &length);
  return hash;
}

Sha256 sha256Of(std::string_view bytes) {
  Sha256Hasher hasher;
  hasher.update(bytes);
  return hasher.finish();
}

std::string sha256Hex(const Sha256 &hash) {
  static const char *digits = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < hash.size(); ++i) {
    out[2 * i] = digits[hash[i] >> 4];
    out[2 * i + 1] = digits[hash[i] & 15];
  }
  return out;
}

std::optional<Sha256> parseSha256Hex(std::string_view hex) {
  if (hex.size() != 64)
    return std::nullopt;
  Sha256 hash{};
  for (size_t i = 0; i < hash.size(); ++i) {
    int hi = hexValue(hex[2 * i]), lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return std::nullopt;
    hash[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return hash;
}

std::vector<Sha256> sha256Many(const std::vector<std::string_view> &buffers,
                               unsigned threads, HashedPages pages) {
  std::vector<Sha256> hashes(buffers.size());
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(buffers.size()));
  size_t windowBytes = std::clamp<size_t>(kResidentBudget / std::max(1u, threads),
                                          kMinWindowBytes, kDefaultWindowBytes);
  // Largest first, handed out one at a time, keeps the cores evenly busy.
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return buffers[a].size() > buffers[b].size(); });
  forEachConcurrently(order.size(), threads, [&](size_t k) {
    hashes[order[k]] = hashInWindows(buffers[order[k]], windowBytes, pages);
  });
  return hashes;
}

} // namespace flowc
