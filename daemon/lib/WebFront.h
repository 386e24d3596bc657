// flowcd's HTTP front (docs/web-ui.md): the pages of web_ui/, the JSON API
// that docs/api.yaml describes, a Server-Sent Events stream of job changes
// and /metrics in Prometheus text format. On loopback, or off it over HTTPS
// with the TCP front's certificate; every request carries the daemon's
// access token or, off loopback, one of the TCP front's tokens (a bearer
// header, a cookie set from the URL's ?token=, or that query parameter).
#pragma once

#include "DaemonContext.h"

#include "flowc/support/Status.h"

#include <memory>
#include <string>

namespace flowc::daemon {

class WebFront {
public:
  ~WebFront();
  /// Listens on `address` ("HOST:PORT"; PORT 0 for any free one), or for
  /// "auto" on 127.0.0.1 from kDefaultPort up, then any free port. Writes
  /// the URL with its token to `<cache>/flowcd.http` (owner-only).
  /// Off loopback, HTTPS with the TCP front's certificate, client CA and
  /// tokens (InvalidArgument without them or when they do not load).
  /// Unavailable when it cannot listen.
  static Expected<std::unique_ptr<WebFront>> start(DaemonContext &context,
                                                   const std::string &address);
  /// http://HOST:PORT/ (https:// off loopback)
  const std::string &url() const;
  /// The URL that lets a browser in: url() + "?token=…".
  std::string urlWithToken() const;
  /// Ends the event streams and stops listening.
  void stop();

  static constexpr int kDefaultPort = 8470;

private:
  struct State;
  explicit WebFront(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// Whether `address`'s host is a loopback one ("127.0.0.1:80", "[::1]:0",
/// "localhost:1").
bool isLoopbackAddress(const std::string &address);

} // namespace flowc::daemon
