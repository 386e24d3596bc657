// The machine's memory, which sizes what a compile may build in it.
#pragma once

#include <cstdint>
#include <optional>

#include <unistd.h>

namespace flowc {

/// The physical memory in bytes; nullopt where sysconf cannot tell.
inline std::optional<uint64_t> physicalMemory() {
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || pageSize <= 0)
    return std::nullopt;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize);
}

} // namespace flowc
