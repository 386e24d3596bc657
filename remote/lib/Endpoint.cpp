#include "flowc/remote/RemoteExecution.h"

#include "RemoteSupport.h"

namespace flowc::remote {

namespace {

Status badUrl(const std::string &url, const std::string &why) {
  return invalidArgument("remote executor URL '" + url.substr(0, 200) + "': " + why +
                         " (expected grpc://HOST:PORT or grpcs://HOST:PORT)");
}

} // namespace

Expected<Endpoint> parseEndpoint(std::string url, std::string instance) {
  std::string_view rest = url;
  if (rest.starts_with("grpcs://"))
    rest.remove_prefix(8);
  else if (rest.starts_with("grpc://"))
    rest.remove_prefix(7);
  else
    return badUrl(url, "scheme must be grpc:// or grpcs://");
  Expected<Authority> authority = parseAuthority(rest);
  if (!authority)
    return badUrl(url, authority.status().message());
  std::string_view after = rest.substr(authority->length);
  if (authority->port != 0 && !after.empty())
    return badUrl(url, "unexpected text after the port");
  if (authority->port == 0 && after.empty())
    return badUrl(url, "no port");
  if (authority->port == 0)
    return badUrl(url, "unexpected '" + std::string(1, after.front()) +
                           "' after the host (no user, path or query)");
  FLOWC_RETURN_IF_ERROR(checkInstance(instance));
  return Endpoint{std::move(url), std::move(instance), ""};
}

} // namespace flowc::remote
