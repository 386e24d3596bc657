#include "RemoteSupport.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

namespace flowc::remote {

std::chrono::milliseconds backoff(int attempt) {
  return std::chrono::milliseconds(100 << std::min(attempt - 1, 4));
}

std::chrono::system_clock::time_point
deadlineFor(std::chrono::milliseconds base, uint64_t bytes, uint64_t bytesPerSecond) {
  return std::chrono::system_clock::now() + base +
         std::chrono::seconds(bytes / bytesPerSecond);
}

const char *grpcCodeName(int code) {
  static constexpr const char *kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(std::size(kNames)))
    return "UNKNOWN_CODE";
  return kNames[code];
}

StatusCode fromRpcCode(int code) {
  switch (static_cast<grpc::StatusCode>(code)) {
  case grpc::StatusCode::OK:
    return StatusCode::Ok;
  case grpc::StatusCode::CANCELLED:
    return StatusCode::Cancelled;
  case grpc::StatusCode::INVALID_ARGUMENT:
  case grpc::StatusCode::OUT_OF_RANGE:
    return StatusCode::InvalidArgument;
  case grpc::StatusCode::DEADLINE_EXCEEDED:
  case grpc::StatusCode::RESOURCE_EXHAUSTED:
    return StatusCode::ResourceExhausted;
  case grpc::StatusCode::NOT_FOUND:
    return StatusCode::NotFound;
  case grpc::StatusCode::ALREADY_EXISTS:
    return StatusCode::AlreadyExists;
  case grpc::StatusCode::PERMISSION_DENIED:
  case grpc::StatusCode::UNAUTHENTICATED:
  case grpc::StatusCode::FAILED_PRECONDITION:
  case grpc::StatusCode::ABORTED:
    return StatusCode::FailedPrecondition;
  case grpc::StatusCode::UNIMPLEMENTED:
    return StatusCode::Unimplemented;
  case grpc::StatusCode::UNAVAILABLE:
    return StatusCode::Unavailable;
  case grpc::StatusCode::DATA_LOSS:
    return StatusCode::DataLoss;
  default:
    return StatusCode::Internal;
  }
}

bool isTransient(const grpc::Status &status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::CANCELLED;
}

grpc::ChannelArguments channelArguments(int maxMessageBytes) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(maxMessageBytes);
  arguments.SetMaxSendMessageSize(maxMessageBytes);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return arguments;
}

Expected<std::string> readPem(const std::string &path, std::string_view what,
                              PemKind kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return invalidArgument(std::string(what) + " '" + path + "': cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  // "-----BEGIN PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----", ...
  const bool found =
      kind == PemKind::Certificate
          ? text.str().find("-----BEGIN CERTIFICATE-----") != std::string::npos
          : text.str().find("PRIVATE KEY-----") != std::string::npos;
  if (!found)
    return invalidArgument(
        std::string(what) + " '" + path + "': no PEM " +
        (kind == PemKind::Certificate ? "certificate" : "private key") + " in the file");
  return text.str();
}

std::string randomUuid() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  std::uniform_int_distribution<int> nibble(0, 15);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string uuid;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20)
      uuid += '-';
    // Version 4, variant 1 (RFC 4122), as engines that parse it expect.
    int value = i == 12 ? 4 : i == 16 ? 8 + nibble(generator) % 4 : nibble(generator);
    uuid += kHex[value];
  }
  return uuid;
}

namespace {

bool isHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_';
}

// REAPI builds resource names as "{instance}/blobs/...", so an instance
// segment may not be one of the words that follow it.
constexpr std::array<std::string_view, 7> kReservedSegments = {
    "blobs",      "uploads",      "actions",         "actionResults",
    "operations", "capabilities", "compressed-blobs"};

} // namespace

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

Expected<Authority> parseAuthority(std::string_view text) {
  Authority authority;
  if (text.empty())
    return invalidArgument("no host");
  size_t hostEnd = 0;
  if (text.front() == '[') {
    hostEnd = text.find(']');
    if (hostEnd == std::string_view::npos)
      return invalidArgument("IPv6 address without ']'");
    std::string_view address = text.substr(1, hostEnd - 1);
    if (address.empty() ||
        address.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return invalidArgument("malformed IPv6 address");
    ++hostEnd;
  } else {
    while (hostEnd < text.size() && isHostChar(text[hostEnd]))
      ++hostEnd;
    if (hostEnd == 0)
      return invalidArgument("no host");
  }
  authority.host = std::string(text.substr(0, hostEnd));
  authority.length = hostEnd;
  if (hostEnd == text.size() || text[hostEnd] != ':')
    return authority;
  std::string_view portText = text.substr(hostEnd + 1);
  unsigned port = 0;
  auto [end, ec] =
      std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (portText.empty() || ec != std::errc() || port == 0 || port > 65535)
    return invalidArgument("port must be a number in 1..65535");
  authority.port = port;
  authority.length = static_cast<size_t>(end - text.data());
  return authority;
}

} // namespace flowc::remote
