#include "EntrySignature.h"

#include <cstdio>
#include <openssl/evp.h>
#include <openssl/pem.h>

namespace flowc::worker {

namespace {

using KeyReader = EVP_PKEY *(*)(FILE *, EVP_PKEY **, pem_password_cb *, void *);

Expected<std::shared_ptr<void>> readKey(const std::string &path, KeyReader reader,
                                        const char *what) {
  FILE *file = std::fopen(path.c_str(), "r");
  if (!file)
    return invalidArgument(std::string(what) + " '" + path + "': cannot be read");
  EVP_PKEY *key = reader(file, nullptr, nullptr, nullptr);
  std::fclose(file);
  if (!key)
    return invalidArgument(std::string(what) + " '" + path + "': not a PEM " + what);
  std::shared_ptr<void> owned(key,
                              [](void *k) { EVP_PKEY_free(static_cast<EVP_PKEY *>(k)); });
  if (EVP_PKEY_id(key) != EVP_PKEY_ED25519)
    return invalidArgument(std::string(what) + " '" + path +
                           "': not an Ed25519 key (make one with `openssl genpkey "
                           "-algorithm ed25519`)");
  return owned;
}

} // namespace

Expected<SigningKey> SigningKey::load(const std::string &path) {
  SigningKey key;
  FLOWC_ASSIGN_OR_RETURN(key.key_, readKey(path, PEM_read_PrivateKey, "private key"));
  return key;
}

Expected<std::string> SigningKey::sign(std::string_view message) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  std::string signature(64, '\0');
  size_t length = signature.size();
  auto *key = static_cast<EVP_PKEY *>(key_.get());
  if (!context ||
      EVP_DigestSignInit(context.get(), nullptr, nullptr, nullptr, key) != 1 ||
      EVP_DigestSign(context.get(), reinterpret_cast<unsigned char *>(signature.data()),
                     &length, reinterpret_cast<const unsigned char *>(message.data()),
                     message.size()) != 1)
    return internalError("Ed25519 signing failed");
  signature.resize(length);
  return signature;
}

Expected<TrustedKeys> TrustedKeys::load(const std::vector<std::string> &paths) {
  TrustedKeys keys;
  for (const std::string &path : paths) {
    FLOWC_ASSIGN_OR_RETURN(auto key, readKey(path, PEM_read_PUBKEY, "public key"));
    keys.keys_.push_back(std::move(key));
  }
  return keys;
}

bool TrustedKeys::verifies(std::string_view message, std::string_view signature) const {
  for (const auto &key : keys_) {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                    EVP_MD_CTX_free);
    if (!context || EVP_DigestVerifyInit(context.get(), nullptr, nullptr, nullptr,
                                         static_cast<EVP_PKEY *>(key.get())) != 1)
      continue;
    if (EVP_DigestVerify(
            context.get(), reinterpret_cast<const unsigned char *>(signature.data()),
            signature.size(), reinterpret_cast<const unsigned char *>(message.data()),
            message.size()) == 1)
      return true;
  }
  return false;
}

} // namespace flowc::worker
