#include "flowc/support/ErrorFields.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace flowc {

namespace {

/// Fields longer than this are not a name anyone wrote by hand: a message
/// built from hostile input keeps them out of the fields (the message
/// itself still has them).
constexpr size_t kMaxField = 4096;

bool isControl(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

bool hasExtension(std::string_view text) {
  size_t dot = text.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || text.size() - dot - 1 < 1 ||
      text.size() - dot - 1 > 8)
    return false;
  return std::all_of(text.begin() + static_cast<long>(dot) + 1, text.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
}

/// A file name or path: no control characters, and a directory part or
/// an extension ("model.onnx", "/tmp/x", "../w.data").
bool looksLikePath(std::string_view text) {
  if (text.empty() || text.size() > kMaxField ||
      std::any_of(text.begin(), text.end(), isControl))
    return false;
  return text.find('/') != std::string_view::npos || hasExtension(text);
}

/// "PATH: rest": an absolute path may hold spaces; any other leading word
/// must be one word, so that "submit /x.onnx: ..." is not taken for a path.
std::string leadingPath(std::string_view message) {
  size_t colon = message.find(": ");
  if (colon == std::string_view::npos)
    return {};
  std::string_view head = message.substr(0, colon);
  if (!head.starts_with('/') && head.find(' ') != std::string_view::npos)
    return {};
  return looksLikePath(head) ? std::string(head) : std::string();
}

std::string quotedPath(std::string_view message) {
  for (size_t open = message.find('\''); open != std::string_view::npos;) {
    size_t close = message.find('\'', open + 1);
    if (close == std::string_view::npos)
      return {};
    std::string_view inside = message.substr(open + 1, close - open - 1);
    // "node 'NAME'" names a node, not a file.
    bool isNode = open >= 5 && message.substr(open - 5, 5) == "node ";
    if (!isNode && looksLikePath(inside))
      return std::string(inside);
    open = message.find('\'', close + 1);
  }
  return {};
}

bool isOpChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

/// `node 'NAME' (OP)`; a name may itself hold quotes, so the end is the
/// first "' (" that an op name and ")" follow.
void findNode(std::string_view message, ErrorFields &fields) {
  constexpr std::string_view kNode = "node '";
  for (size_t at = message.find(kNode); at != std::string_view::npos;
       at = message.find(kNode, at + 1)) {
    size_t nameBegin = at + kNode.size();
    for (size_t end = message.find("' (", nameBegin); end != std::string_view::npos;
         end = message.find("' (", end + 1)) {
      size_t opBegin = end + 3, opEnd = opBegin;
      while (opEnd < message.size() && isOpChar(message[opEnd]))
        ++opEnd;
      if (opEnd == opBegin || opEnd >= message.size() || message[opEnd] != ')')
        continue;
      if (end - nameBegin > kMaxField || opEnd - opBegin > kMaxField)
        return;
      fields.node = std::string(message.substr(nameBegin, end - nameBegin));
      fields.op = std::string(message.substr(opBegin, opEnd - opBegin));
      return;
    }
  }
}

bool isHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

std::string findDigest(std::string_view message) {
  constexpr std::string_view kPrefix = "sha256:";
  for (size_t at = message.find(kPrefix); at != std::string_view::npos;
       at = message.find(kPrefix, at + 1)) {
    size_t hexBegin = at + kPrefix.size(), hexEnd = hexBegin;
    while (hexEnd < message.size() && isHex(message[hexEnd]))
      ++hexEnd;
    if (hexEnd - hexBegin != 64)
      continue;
    size_t end = hexEnd;
    if (end + 1 < message.size() && message[end] == '/' &&
        std::isdigit(static_cast<unsigned char>(message[end + 1]))) {
      ++end;
      while (end < message.size() &&
             std::isdigit(static_cast<unsigned char>(message[end])))
        ++end;
    }
    return std::string(message.substr(at, end - at));
  }
  return {};
}

} // namespace

ErrorFields parseErrorFields(std::string_view message) {
  ErrorFields fields;
  fields.file = leadingPath(message);
  if (fields.file.empty())
    fields.file = quotedPath(message);
  findNode(message, fields);
  fields.digest = findDigest(message);
  return fields;
}

std::string validUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
    unsigned char lead = byte(0);
    size_t length = lead < 0x80           ? 1
                    : (lead >> 5) == 0x6  ? 2
                    : (lead >> 4) == 0xe  ? 3
                    : (lead >> 3) == 0x1e ? 4
                                          : 0;
    bool ok = length > 0 && i + length <= text.size();
    for (size_t k = 1; ok && k < length; ++k)
      ok = (byte(k) & 0xc0) == 0x80;
    if (ok && length > 1) {
      // Overlong forms, surrogates and code points past U+10FFFF.
      uint32_t point = lead & (0x7f >> length);
      for (size_t k = 1; k < length; ++k)
        point = (point << 6) | (byte(k) & 0x3f);
      static constexpr uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = point >= kMinimum[length] && point <= 0x10ffff &&
           !(point >= 0xd800 && point <= 0xdfff);
    }
    if (!ok) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

const char *statusKindName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok:
    return "ok";
  case StatusCode::InvalidArgument:
    return "invalid_argument";
  case StatusCode::NotFound:
    return "not_found";
  case StatusCode::AlreadyExists:
    return "already_exists";
  case StatusCode::DataLoss:
    return "data_loss";
  case StatusCode::Unavailable:
    return "unavailable";
  case StatusCode::ResourceExhausted:
    return "resource_exhausted";
  case StatusCode::FailedPrecondition:
    return "failed_precondition";
  case StatusCode::Unimplemented:
    return "unimplemented";
  case StatusCode::Internal:
    return "internal";
  case StatusCode::Cancelled:
    return "cancelled";
  case StatusCode::Unauthenticated:
    return "unauthenticated";
  case StatusCode::PermissionDenied:
    return "permission_denied";
  }
  return "unknown";
}

} // namespace flowc
