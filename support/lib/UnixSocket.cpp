#include "flowc/support/UnixSocket.h"

#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

namespace flowc {

bool unixSocketAccepts(const std::string &path) {
  if (path.size() > kMaxUnixSocketPath)
    return false;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size());
  bool accepts =
      ::connect(fd, reinterpret_cast<const sockaddr *>(&address), sizeof address) == 0;
  ::close(fd);
  return accepts;
}

} // namespace flowc
