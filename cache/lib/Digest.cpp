#include "flowc/cache/Digest.h"

#include <charconv>
#include <openssl/evp.h>

namespace flowc::cache {

namespace {
constexpr std::string_view kPrefix = "sha256:";

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
  Hasher hasher;
  hasher.update(bytes);
  return hasher.finish();
}

} // namespace flowc::cache
