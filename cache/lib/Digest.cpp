#include "flowc/cache/Digest.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/Sha256.h"

#include <charconv>

namespace flowc::cache {

namespace {
constexpr std::string_view kPrefix = "sha256:";
} // namespace

std::string Digest::hex() const { return sha256Hex(hash); }

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
  std::optional<Sha256> hash = parseSha256Hex(rest.substr(0, 64));
  if (!hash)
    return bad();
  Digest digest;
  digest.hash = *hash;
  std::string_view sizeText = rest.substr(65);
  auto [end, ec] =
      std::from_chars(sizeText.data(), sizeText.data() + sizeText.size(), digest.size);
  if (ec != std::errc() || end != sizeText.data() + sizeText.size())
    return bad();
  return digest;
}

Digest digestOf(std::string_view bytes) {
  if (bytes.size() <= kDefaultWindowBytes)
    return Digest{sha256Of(bytes), bytes.size()};
  return Digest{sha256Many({bytes}, 1)[0], bytes.size()};
}

std::vector<Digest> digestMany(const std::vector<std::string_view> &buffers,
                               unsigned threads) {
  std::vector<Sha256> hashes = sha256Many(buffers, threads);
  std::vector<Digest> digests(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i)
    digests[i] = Digest{hashes[i], buffers[i].size()};
  return digests;
}

} // namespace flowc::cache
