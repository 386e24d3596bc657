// The front door's tokens file and method table.
#include "Auth.h"

#include "../common/TestUtil.h"

#include "flowc/daemon/Server.h"

#include "flowc/support/Sha256.h"
#include "flowc/v1/flowc.grpc.pb.h"

#include <fstream>
#include <sys/stat.h>

namespace flowc::daemon {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;

std::string digestLine(const std::string &name, const std::string &role,
                       const std::string &token) {
  return name + " " + role + " sha256:" + sha256Hex(sha256Of(token)) + "\n";
}

TEST(TokensFileTest, ParsesNamesRolesAndDigests) {
  // Comments, blank lines and tabs between fields are allowed.
  std::string text = "# who role digest\n\n" + digestLine("ci-read", "read", "r1") +
                     "ci-build\tsubmit\tsha256:" + sha256Hex(sha256Of("s1")) + "\n" +
                     digestLine("ops", "admin", "a1");
  auto tokens = parseTokens(text, "tokens");
  ASSERT_TRUE(tokens) << tokens.status().toString();
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0].name, "ci-read");
  EXPECT_EQ((*tokens)[0].role, Role::Read);
  EXPECT_EQ((*tokens)[1].role, Role::Submit);
  EXPECT_EQ((*tokens)[2].role, Role::Admin);
  EXPECT_EQ((*tokens)[2].digest, sha256Of("a1"));
}

TEST(TokensFileTest, RefusesBadLinesNamingTheLine) {
  std::string good = digestLine("a", "read", "t");
  // An unknown role.
  EXPECT_THAT(parseTokens(good + "b root sha256:" + sha256Hex(sha256Of("u")), "f"),
              StatusIs(StatusCode::InvalidArgument, "f:2: unknown role 'root'"));
  // A plaintext token instead of a digest: refused, and not quoted back.
  auto plain = parseTokens("a read hunter2-secret\n", "f");
  EXPECT_THAT(plain, StatusIs(StatusCode::InvalidArgument, "f:1: the credential of 'a'"));
  EXPECT_EQ(plain.status().message().find("hunter2"), std::string::npos);
  // A digest that is too short, or in upper case.
  EXPECT_THAT(parseTokens("a read sha256:abcd\n", "f"),
              StatusIs(StatusCode::InvalidArgument, "not sha256:"));
  std::string upper = sha256Hex(sha256Of("t"));
  for (char &c : upper)
    c = static_cast<char>(std::toupper(c));
  EXPECT_THAT(parseTokens("a read sha256:" + upper + "\n", "f"),
              StatusIs(StatusCode::InvalidArgument, "not sha256:"));
  // Missing and extra fields.
  EXPECT_THAT(
      parseTokens("a read\n", "f"),
      StatusIs(StatusCode::InvalidArgument, "f:1: expected 'NAME ROLE sha256:HEX'"));
  EXPECT_THAT(
      parseTokens(good + "x read sha256:" + sha256Hex(sha256Of("y")) + " extra\n", "f"),
      StatusIs(StatusCode::InvalidArgument, "f:2: expected"));
  // A name used twice, and one token under two names.
  EXPECT_THAT(parseTokens(good + digestLine("a", "admin", "other"), "f"),
              StatusIs(StatusCode::InvalidArgument, "f:2: token name 'a' is used twice"));
  EXPECT_THAT(parseTokens(good + digestLine("b", "admin", "t"), "f"),
              StatusIs(StatusCode::InvalidArgument, "'b' has the same token as 'a'"));
  // A bad name, a control character, no tokens at all.
  EXPECT_THAT(parseTokens(digestLine("a/b", "read", "t"), "f"),
              StatusIs(StatusCode::InvalidArgument, "token name 'a/b'"));
  EXPECT_THAT(parseTokens("a read\x01 sha256:00\n", "f"),
              StatusIs(StatusCode::InvalidArgument, "f:1: control character"));
  EXPECT_THAT(parseTokens("# nothing\n\n", "f"),
              StatusIs(StatusCode::InvalidArgument, "f: no tokens"));
}

TEST(TokensFileTest, RefusesTenantsItCannotKeepApart) {
  EXPECT_THAT(parseTokens("a read tenant=ci sha256:" + sha256Hex(sha256Of("t")), "f"),
              StatusIs(StatusCode::InvalidArgument, "f:1: 'tenant=ci': tenants are not"));
}

TEST(TokensFileTest, RefusesAFileOthersCanRead) {
  TempDir dir;
  std::string path = dir.file("tokens");
  std::ofstream(path) << digestLine("a", "read", "t");
  // Group-readable: refused like ssh refuses a private key.
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  EXPECT_THAT(loadTokensFile(path),
              StatusIs(StatusCode::FailedPrecondition, "has mode 0640"));
  ASSERT_EQ(::chmod(path.c_str(), 0604), 0);
  EXPECT_THAT(loadTokensFile(path),
              StatusIs(StatusCode::FailedPrecondition, "chmod 600"));
  // Owner-only: read.
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  auto tokens = loadTokensFile(path);
  ASSERT_TRUE(tokens) << tokens.status().toString();
  EXPECT_EQ(tokens->size(), 1u);
  // Missing, and a directory.
  EXPECT_THAT(loadTokensFile(dir.file("none")),
              StatusIs(StatusCode::NotFound, "does not exist"));
  EXPECT_THAT(loadTokensFile(dir.path()),
              StatusIs(StatusCode::FailedPrecondition, "not a regular file"));
}

TEST(MethodTableTest, EveryFlowcMethodHasARole) {
  // A method added to flowc.proto without a role here would be refused
  // over TCP, and the daemon would not start.
  EXPECT_EQ(methodsWithoutRole(), std::vector<std::string>());
  // The check sees every service: the file holds Compiler, Admin and Cache.
  const auto *file = flowc::v1::SubmitRequest::descriptor()->file();
  EXPECT_GE(file->service_count(), 3);
}

TEST(MethodTableTest, RolesFollowTheIssue) {
  EXPECT_EQ(requiredRole("/flowc.v1.Compiler/FetchArtifact"), Role::Read);
  EXPECT_EQ(requiredRole("/flowc.v1.Admin/Health"), Role::Read);
  EXPECT_EQ(requiredRole("/flowc.v1.Cache/List"), Role::Read);
  EXPECT_EQ(requiredRole("/flowc.v1.Compiler/Submit"), Role::Submit);
  EXPECT_EQ(requiredRole("/flowc.v1.Compiler/UploadBlob"), Role::Submit);
  EXPECT_EQ(requiredRole("/flowc.v1.Cache/Clear"), Role::Admin);
  EXPECT_EQ(requiredRole("/flowc.v1.Cache/Pin"), Role::Admin);
  EXPECT_EQ(requiredRole("/flowc.v1.Admin/Shutdown"), Role::Admin);
  // Unknown methods, and near misses, need a role nobody has.
  EXPECT_EQ(requiredRole("/flowc.v1.Cache/Nuke"), std::nullopt);
  EXPECT_EQ(requiredRole("/flowc.v1.Cache/clear"), std::nullopt);
  EXPECT_EQ(requiredRole(""), std::nullopt);
}

TEST(PeerCheckTest, OpensAsAnotherUser) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root to take another uid";
  TempDir dir;
  std::string path = dir.file("secret");
  std::ofstream(path) << "x";
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  // 65534 (nobody) cannot read a root file of mode 0600; root can.
  EXPECT_EQ(openErrorAs(65534, 65534, path), EACCES);
  EXPECT_EQ(openErrorAs(0, 0, path), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(openErrorAs(65534, 65534, path), 0);
  EXPECT_EQ(openErrorAs(65534, 65534, dir.file("missing")), ENOENT);
  // A readable file in a directory it cannot search.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  EXPECT_EQ(openErrorAs(65534, 65534, path), EACCES);
}

DaemonOptions tcpOptions(const std::string &address) {
  DaemonOptions options;
  options.cacheDir = "/tmp/cache";
  options.tcpAddress = address;
  return options;
}

TEST(FrontDoorOptionsTest, TcpNeedsTlsAndTokensOrLoopback) {
  // Plaintext on loopback, for development: each loopback spelling.
  for (const char *address : {"127.0.0.1:7000", "[::1]:7000", "localhost:7000"}) {
    DaemonOptions options = tcpOptions(address);
    options.frontDoor.insecureLoopback = true;
    EXPECT_TRUE(options.validateFrontDoor().isOk()) << address;
  }
  // Plaintext anywhere else is refused.
  for (const char *address :
       {"0.0.0.0:7000", "[::]:7000", "10.1.2.3:7000", "example.com:1"}) {
    DaemonOptions options = tcpOptions(address);
    options.frontDoor.insecureLoopback = true;
    EXPECT_THAT(options.validateFrontDoor(),
                StatusIs(StatusCode::InvalidArgument, "is not a loopback address"))
        << address;
  }
  // No TLS, then TLS without tokens.
  DaemonOptions options = tcpOptions("0.0.0.0:7000");
  EXPECT_THAT(options.validateFrontDoor(),
              StatusIs(StatusCode::InvalidArgument, "needs TLS: --tls-cert FILE"));
  options.frontDoor.tlsCert = "c.pem";
  EXPECT_THAT(options.validateFrontDoor(),
              StatusIs(StatusCode::InvalidArgument, "needs TLS"));
  options.frontDoor.tlsKey = "k.pem";
  EXPECT_THAT(options.validateFrontDoor(),
              StatusIs(StatusCode::InvalidArgument, "needs --tokens FILE"));
  options.frontDoor.tokensFile = "tokens";
  EXPECT_TRUE(options.validateFrontDoor().isOk());
  // TLS and plaintext at once is a contradiction.
  options.frontDoor.insecureLoopback = true;
  options.tcpAddress = "127.0.0.1:7000";
  EXPECT_THAT(options.validateFrontDoor(),
              StatusIs(StatusCode::InvalidArgument, "--insecure-loopback is plaintext"));
}

TEST(FrontDoorOptionsTest, FrontDoorSettingsNeedListen) {
  DaemonOptions options = tcpOptions("");
  options.frontDoor.tokensFile = "tokens";
  EXPECT_THAT(options.validateFrontDoor(),
              StatusIs(StatusCode::InvalidArgument, "they need --listen"));
}

} // namespace
} // namespace flowc::daemon
