// What an error message says is at fault, as fields: the file, the graph
// node and its op, a digest. Messages follow one convention (Status.h:
// "FILE: node 'NAME' (OP): what is wrong"), so clients that want fields
// (`--json`, the Python client) need not parse text themselves.
#pragma once

#include "flowc/support/Status.h"

#include <string>
#include <string_view>

namespace flowc {

struct ErrorFields {
  /// A path the message names: a leading "PATH: ", else the first quoted
  /// 'PATH' that looks like one. Empty when none.
  std::string file;
  /// The importer's `node 'NAME' (OP)`: the first one the message names.
  std::string node;
  std::string op;
  /// "sha256:<64 hex>" with its "/SIZE" when the message gives one.
  std::string digest;
};

/// The fields `message` names; any of them empty when it names none.
/// Never fails: a message of any bytes and length gives some fields or
/// none. Pure; thread-safe.
ErrorFields parseErrorFields(std::string_view message);

/// `text` with every byte that is not part of well-formed UTF-8 replaced by
/// U+FFFD: for protobuf strings and JSON, which must be UTF-8, when the
/// text quotes a hostile file's bytes.
std::string validUtf8(std::string_view text);

/// The code's name in snake case ("invalid_argument"), stable, as clients
/// see it in `kind` (flowc.v1.ErrorDetail, `--json` errors).
const char *statusKindName(StatusCode code);

} // namespace flowc
