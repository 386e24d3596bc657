// Unix-domain socket facts shared by the daemon and its clients.
#pragma once

#include <cstddef>
#include <string>
#include <sys/un.h>

namespace flowc {

/// The longest unix socket path the kernel takes (sun_path less its NUL).
inline constexpr size_t kMaxUnixSocketPath = sizeof(sockaddr_un{}.sun_path) - 1;

/// True if a process accepts connections on the unix socket at `path`: one
/// connect(), microseconds. False for a path longer than kMaxUnixSocketPath.
bool unixSocketAccepts(const std::string &path);

/// The errno of one connect() to the unix socket at `path`, 0 if it was
/// accepted (ENAMETOOLONG for a path longer than kMaxUnixSocketPath).
int unixSocketConnectError(const std::string &path);

} // namespace flowc
