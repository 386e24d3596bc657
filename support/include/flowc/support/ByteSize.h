// Human byte sizes for flags and config: "20G", "512M", "64K", "1048576".
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <string>

namespace flowc {

/// Parses a size with an optional K/M/G/T suffix (powers of 1024, an
/// optional trailing "iB"/"B"). InvalidArgument naming the text otherwise.
Expected<uint64_t> parseByteSize(const std::string &text);

} // namespace flowc
