// Ed25519 signatures over remote cache entries (OpenSSL): a CI job that
// can write the shared cache but holds no signing key cannot plant an
// entry that readers trusting only the farm's key would use.
#pragma once

#include "flowc/support/Status.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flowc::worker {

class SigningKey {
public:
  /// An Ed25519 private key in PEM; InvalidArgument naming the file when it
  /// cannot be read, does not parse, or is another kind of key.
  static Expected<SigningKey> load(const std::string &path);
  /// The 64-byte signature of `message`.
  Expected<std::string> sign(std::string_view message) const;

private:
  std::shared_ptr<void> key_;
};

class TrustedKeys {
public:
  /// Ed25519 public keys in PEM, one file each.
  static Expected<TrustedKeys> load(const std::vector<std::string> &paths);
  bool empty() const { return keys_.empty(); }
  /// Whether one of the keys made `signature` over `message`.
  bool verifies(std::string_view message, std::string_view signature) const;

private:
  std::vector<std::shared_ptr<void>> keys_;
};

} // namespace flowc::worker
