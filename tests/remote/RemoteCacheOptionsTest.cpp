// RemoteCacheOptions::validate() and RemoteCache::connect(): every URL form
// and option the remote cache takes, and each bad one refused with
// InvalidArgument naming the bad part. connect() makes no request, so no
// server is needed here (tests/remotecache runs the real ones).
#include "flowc/remote/RemoteCache.h"

#include "../common/TestUtil.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace flowc::remote {
namespace {

using flowc::testing::StatusIs;

RemoteCacheOptions withUrl(const std::string &url) {
  RemoteCacheOptions options;
  options.url = url;
  return options;
}

TEST(RemoteCacheOptions, AcceptsEveryUrlForm) {
  for (const char *url :
       {"grpc://cache.example:8980", "grpcs://cache.example:443", "grpc://127.0.0.1:1",
        "grpc://[::1]:9092", "http://cache.example", "http://127.0.0.1:8080/cache",
        "https://cache.example/a/b-c_d.e~f", "http://h:80/cache/",
        "https://[::1]:8443"}) {
    SCOPED_TRACE(url);
    EXPECT_TRUE(withUrl(url).validate().isOk()) << withUrl(url).validate().toString();
  }
}

TEST(RemoteCacheOptions, RefusesABadSchemeHostOrPort) {
  // Each bad URL is refused, and the message names what is wrong.
  const std::pair<const char *, const char *> cases[] = {
      {"", "empty"},
      {"ftp://h/x", "scheme must be grpc://, grpcs://, http:// or https://"},
      {"cache.example:8980", "scheme must be"},
      {"grpc://", "no host"},
      {"grpc://:8980", "no host"},
      {"grpc://h", "no port"},
      {"grpc://h:0", "port must be a number in 1..65535"},
      {"grpc://h:65536", "port must be a number in 1..65535"},
      {"grpc://h:80/path", "unexpected text after the port"},
      {"grpc://user@h:80", "unexpected '@' after the host"},
      {"http://user:pw@h/cache", "port must be a number in 1..65535"},
      {"http://user@h/cache", "unexpected '@' after the host"},
      {"http://h/cache?x=1", "path holds '?'"},
      {"http://h/ca%2e%2e/x", "path holds '%'"},
      {"http://h/a/../b", "'..' segment"},
      {"http://h//cache", "empty segment"},
      {"http://[::1/cache", "IPv6 address without ']'"},
      {"https://[zz]/cache", "malformed IPv6 address"},
  };
  for (const auto &[url, why] : cases) {
    SCOPED_TRACE(url);
    EXPECT_THAT(withUrl(url).validate(), StatusIs(StatusCode::InvalidArgument, why));
    EXPECT_THAT(RemoteCache::connect(withUrl(url)),
                StatusIs(StatusCode::InvalidArgument, "remote cache URL"));
  }
}

TEST(RemoteCacheOptions, RefusesAnOverlongUrl) {
  EXPECT_THAT(withUrl("http://h/" + std::string(3000, 'a')).validate(),
              StatusIs(StatusCode::InvalidArgument, "longer than 2048 bytes"));
}

TEST(RemoteCacheOptions, ChecksTheInstanceName) {
  // REAPI's rules for both protocols; for http it is a path segment too.
  RemoteCacheOptions options = withUrl("grpc://h:1");
  options.instance = "main/ci";
  EXPECT_TRUE(options.validate().isOk());
  for (const char *bad : {"/main", "main/", "a//b", "..", "a/blobs", "uploads"}) {
    SCOPED_TRACE(bad);
    options.instance = bad;
    EXPECT_THAT(options.validate(),
                StatusIs(StatusCode::InvalidArgument, "remote instance name"));
  }
  options.url = "http://h/cache";
  options.instance = "tenant a";
  EXPECT_THAT(options.validate(), StatusIs(StatusCode::InvalidArgument, "holds ' '"));
  options.instance = "tenant?x";
  EXPECT_THAT(options.validate(), StatusIs(StatusCode::InvalidArgument, "holds '?'"));
  options.instance = "tenant-a/ci";
  EXPECT_TRUE(options.validate().isOk());
}

TEST(RemoteCacheOptions, RefusesHeadersThatCouldInjectOrOverride) {
  RemoteCacheOptions options = withUrl("https://h/cache");
  options.headers = {{"Authorization", "Bearer abc.def"}, {"x-tenant", "a"}};
  EXPECT_TRUE(options.validate().isOk());
  const std::tuple<const char *, const char *, const char *> cases[] = {
      {"", "v", "empty name"},
      {"Bad Name", "v", "the name may hold only"},
      {"x:y", "v", "the name may hold only"},
      {"authorization", "Bearer a\r\nX-Admin: 1", "control or non-ASCII byte"},
      {"authorization", "a\nb", "control or non-ASCII byte"},
      {"grpc-timeout", "1S", "gRPC's own"},
      {"token-bin", "x", "gRPC's own"},
      {"Content-Length", "0", "flowc sets this header itself"},
      {"host", "evil", "flowc sets this header itself"},
  };
  for (const auto &[name, value, why] : cases) {
    SCOPED_TRACE(name);
    options.headers = {{name, value}};
    EXPECT_THAT(options.validate(), StatusIs(StatusCode::InvalidArgument, why));
  }
  options.headers = {{"x", std::string(9000, 'a')}};
  EXPECT_THAT(options.validate(), StatusIs(StatusCode::InvalidArgument, "longer than"));
}

TEST(RemoteCacheOptions, TlsFilesNeedTlsAndComeInPairs) {
  // A CA file on a plaintext URL would be silently unused: refused.
  RemoteCacheOptions options = withUrl("http://h/cache");
  options.caFile = "/etc/ssl/ca.pem";
  EXPECT_THAT(options.validate(), StatusIs(StatusCode::InvalidArgument,
                                           "'/etc/ssl/ca.pem' given for the plaintext"));
  options = withUrl("grpcs://h:443");
  options.clientCertFile = "client.pem";
  EXPECT_THAT(options.validate(),
              StatusIs(StatusCode::InvalidArgument,
                       "client certificate 'client.pem' without its key"));
  options.clientCertFile.clear();
  options.clientKeyFile = "client.key";
  EXPECT_THAT(options.validate(),
              StatusIs(StatusCode::InvalidArgument,
                       "client key 'client.key' without its certificate"));
}

TEST(RemoteCacheOptions, RefusesATimeoutOutOfRange) {
  RemoteCacheOptions options = withUrl("grpc://h:1");
  options.timeout = std::chrono::milliseconds(0);
  EXPECT_THAT(options.validate(), StatusIs(StatusCode::InvalidArgument, "timeout 0 ms"));
  options.timeout = std::chrono::hours(2);
  EXPECT_THAT(options.validate(),
              StatusIs(StatusCode::InvalidArgument, "must be 1 ms..1 h"));
}

TEST(RemoteCache, ConnectReadsTheTlsFiles) {
  // Unreadable or non-PEM files fail at connect, naming the file, for
  // both protocols.
  const std::filesystem::path dir = ::testing::TempDir();
  const std::string notPem = (dir / "not-pem.txt").string();
  std::ofstream(notPem) << "hello\n";
  for (const char *url : {"grpcs://h:443", "https://h/cache"}) {
    SCOPED_TRACE(url);
    RemoteCacheOptions options = withUrl(url);
    options.caFile = (dir / "missing-ca.pem").string();
    EXPECT_THAT(RemoteCache::connect(options),
                StatusIs(StatusCode::InvalidArgument, "missing-ca.pem': cannot be read"));
    options.caFile = notPem;
    EXPECT_THAT(RemoteCache::connect(options),
                StatusIs(StatusCode::InvalidArgument, "no PEM certificate in the file"));
    options.caFile.clear();
    options.clientCertFile = notPem;
    options.clientKeyFile = notPem;
    EXPECT_THAT(RemoteCache::connect(options),
                StatusIs(StatusCode::InvalidArgument, "client certificate"));
  }
}

TEST(RemoteCache, ConnectMakesNoRequestAndDescribesTheEndpoint) {
  // Nothing listens on port 1: connect still succeeds (no request), and
  // the first request is Unavailable, naming the endpoint.
  RemoteCacheOptions options = withUrl("grpc://127.0.0.1:1");
  options.instance = "main";
  options.timeout = std::chrono::milliseconds(2000);
  auto grpc = RemoteCache::connect(options);
  ASSERT_TRUE(grpc.hasValue()) << grpc.status().toString();
  EXPECT_EQ((*grpc)->describe(), "grpc://127.0.0.1:1 instance main");
  EXPECT_THAT((*grpc)->capabilities(),
              StatusIs(StatusCode::Unavailable, "GetCapabilities on grpc://127.0.0.1:1"));

  options.url = "http://127.0.0.1:1/cache";
  auto http = RemoteCache::connect(options);
  ASSERT_TRUE(http.hasValue()) << http.status().toString();
  EXPECT_EQ((*http)->describe(), "http://127.0.0.1:1/cache instance main");
  cache::Digest key = cache::digestOf("key");
  EXPECT_THAT((*http)->getEntry(key),
              StatusIs(StatusCode::Unavailable,
                       "GET http://127.0.0.1:1/cache/main/ac/" + key.hex()));
}

} // namespace
} // namespace flowc::remote
