#include "flowc/support/UnixSocket.h"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

namespace flowc {

int unixSocketConnectError(const std::string &path) {
  if (path.size() > kMaxUnixSocketPath)
    return ENAMETOOLONG;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return errno;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size());
  int error =
      ::connect(fd, reinterpret_cast<const sockaddr *>(&address), sizeof address) == 0
          ? 0
          : errno;
  ::close(fd);
  return error;
}

bool unixSocketAccepts(const std::string &path) {
  return unixSocketConnectError(path) == 0;
}

} // namespace flowc
