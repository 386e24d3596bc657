#include "flowc/remote/RemoteExecution.h"

#include <array>
#include <charconv>

namespace flowc::remote {

namespace {

bool isHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_';
}

Status badUrl(const std::string &url, const std::string &why) {
  return invalidArgument("remote executor URL '" + url.substr(0, 200) + "': " + why +
                         " (expected grpc://HOST:PORT or grpcs://HOST:PORT)");
}

// REAPI builds resource names as "{instance}/blobs/...", so an instance
// segment may not be one of the words that follow it.
constexpr std::array<std::string_view, 7> kReservedSegments = {
    "blobs",      "uploads",      "actions",         "actionResults",
    "operations", "capabilities", "compressed-blobs"};

Status checkInstance(const std::string &instance) {
  auto bad = [&](const std::string &why) {
    return invalidArgument("remote instance name '" + instance.substr(0, 200) +
                           "': " + why);
  };
  if (instance.empty())
    return Status::ok();
  if (instance.size() > 1024)
    return bad("longer than 1024 bytes");
  for (char c : instance) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f)
      return bad("holds a control or non-ASCII byte");
  }
  size_t start = 0;
  while (start <= instance.size()) {
    size_t end = std::min(instance.find('/', start), instance.size());
    std::string_view segment = std::string_view(instance).substr(start, end - start);
    if (segment.empty())
      return bad("empty segment (no leading, trailing or double '/')");
    if (segment == "." || segment == "..")
      return bad("'" + std::string(segment) + "' segment");
    for (std::string_view reserved : kReservedSegments)
      if (segment == reserved)
        return bad("segment '" + std::string(segment) +
                   "' is reserved by REAPI resource names");
    start = end + 1;
  }
  return Status::ok();
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
  if (rest.empty())
    return badUrl(url, "no host");
  size_t hostEnd = 0;
  if (rest.front() == '[') {
    hostEnd = rest.find(']');
    if (hostEnd == std::string_view::npos)
      return badUrl(url, "IPv6 address without ']'");
    std::string_view address = rest.substr(1, hostEnd - 1);
    if (address.empty() ||
        address.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return badUrl(url, "malformed IPv6 address");
    ++hostEnd;
  } else {
    while (hostEnd < rest.size() && isHostChar(rest[hostEnd]))
      ++hostEnd;
    if (hostEnd == 0)
      return badUrl(url, "no host");
  }
  std::string_view afterHost = rest.substr(hostEnd);
  if (afterHost.empty())
    return badUrl(url, "no port");
  if (afterHost.front() != ':')
    return badUrl(url, "unexpected '" + std::string(1, afterHost.front()) +
                           "' after the host (no user, path or query)");
  std::string_view portText = afterHost.substr(1);
  unsigned port = 0;
  auto [end, ec] =
      std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (portText.empty() || ec != std::errc() || port == 0 || port > 65535)
    return badUrl(url, "port must be a number in 1..65535");
  if (end != portText.data() + portText.size())
    return badUrl(url, "unexpected text after the port");
  FLOWC_RETURN_IF_ERROR(checkInstance(instance));
  return Endpoint{std::move(url), std::move(instance), ""};
}

} // namespace flowc::remote
