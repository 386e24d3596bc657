#include "flowc/cache/Digest.h"

#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <thread>
#include <openssl/evp.h>

namespace flowc::cache {

namespace {
constexpr std::string_view kPrefix = "sha256:";
/// Mapped bytes that digestMany keeps resident at once, over all threads.
constexpr size_t kResidentBudget = 32 << 20;
constexpr size_t kMinWindowBytes = 1 << 20;

/// Hashes `bytes` window by window, releasing the pages of mapped windows.
Digest digestInWindows(std::string_view bytes, size_t windowBytes) {
  Hasher hasher;
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

std::string Digest::hex() const {
  static const char *digits = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < hash.size(); ++i) {
    out[2 * i] = digits[hash[i] >> 4];
    out[2 * i + 1] = digits[hash[i] & 15];
  }
  return out;
}

std::string Digest::toString() const {
  return std::string(kPrefix) + hex() + "/" + std::to_string(size);
}

std::string blobPathUnder(const std::string &root, const Digest &digest) {
  std::string hex = digest.hex();
  return root + "/cas/" + hex.substr(0, 2) + "/" + hex.substr(2);
}

Expected<Digest> Digest::parse(std::string_view text) {
  auto bad = [&] {
    return invalidArgument("malformed digest '" + std::string(text) +
                           "' (expected sha256:<64 hex>/<size>)");
  };
  if (!text.starts_with(kPrefix))
    return bad();
  std::string_view rest = text.substr(kPrefix.size());
  if (rest.size() < 66 || rest[64] != '/')
    return bad();
  Digest digest;
  for (size_t i = 0; i < 32; ++i) {
    int hi = hexValue(rest[2 * i]), lo = hexValue(rest[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return bad();
    digest.hash[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  std::string_view sizeText = rest.substr(65);
  auto [end, ec] =
      std::from_chars(sizeText.data(), sizeText.data() + sizeText.size(), digest.size);
  if (ec != std::errc() || end != sizeText.data() + sizeText.size())
    return bad();
  return digest;
}

struct Hasher::Impl {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Hasher::Hasher() : impl_(std::make_unique<Impl>()) {
  EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr);
}

Hasher::~Hasher() = default;

void Hasher::update(const void *data, size_t size) {
  EVP_DigestUpdate(impl_->ctx, data, size);
  size_ += size;
}

Digest Hasher::finish() {
  Digest digest;
  unsigned int length = 0;
  EVP_DigestFinal_ex(impl_->ctx, digest.hash.data(), &length);
  digest.size = size_;
  return digest;
}

Digest digestOf(std::string_view bytes) {
  if (bytes.size() > kDefaultWindowBytes)
    return digestInWindows(bytes, kDefaultWindowBytes);
  Hasher hasher;
  hasher.update(bytes);
  return hasher.finish();
}

} // namespace flowc::cache

namespace flowc::cache {

std::vector<Digest> digestMany(const std::vector<std::string_view> &buffers,
                               unsigned threads) {
  std::vector<Digest> digests(buffers.size());
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(buffers.size()));
  size_t windowBytes = std::clamp<size_t>(kResidentBudget / std::max(1u, threads),
                                          kMinWindowBytes, kDefaultWindowBytes);
  if (threads <= 1) {
    for (size_t i = 0; i < buffers.size(); ++i)
      digests[i] = digestInWindows(buffers[i], windowBytes);
    return digests;
  }
  // Largest first, handed out one at a time, keeps the cores evenly busy.
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return buffers[a].size() > buffers[b].size(); });
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      for (size_t k = next++; k < order.size(); k = next++)
        digests[order[k]] = digestInWindows(buffers[order[k]], windowBytes);
    });
  for (std::thread &worker : workers)
    worker.join();
  return digests;
}

} // namespace flowc::cache
