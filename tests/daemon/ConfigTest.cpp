#include "flowc/daemon/Config.h"
#include "flowc/support/Environment.h"

#include "../common/TestUtil.h"

#include <cstdlib>
#include <fstream>

namespace flowc::daemon {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;

/// Sets an environment variable for one test and restores it after.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
}

/// A cache directory of its own and no FLOWC_* settings from the caller.
struct ConfigTest : ::testing::Test {
  TempDir dir;
  ScopedEnv noCacheDir{"FLOWC_CACHE_DIR", nullptr};
  ScopedEnv noSize{"FLOWC_CACHE_MAX_SIZE", nullptr};
  ScopedEnv noConfig{"FLOWC_CONFIG", nullptr};
  ScopedEnv noSocket{"FLOWC_SOCKET", nullptr};
  ScopedEnv noReadOnly{"FLOWC_CACHE_READ_ONLY", nullptr};
  ScopedEnv noRemoteCache{"FLOWC_REMOTE_CACHE", nullptr};
  ScopedEnv noRemoteReadOnly{"FLOWC_REMOTE_READ_ONLY", nullptr};
  ScopedEnv noHttp{"FLOWC_HTTP", nullptr};
  DaemonFlags flags() const {
    DaemonFlags flags;
    flags.cacheDir = dir.path();
    return flags;
  }
};

TEST_F(ConfigTest, DefaultsWithoutFlagsEnvOrFile) {
  auto options = resolveDaemonOptions(flags());
  ASSERT_TRUE(options) << options.status().toString();
  EXPECT_EQ(options->cacheDir, dir.path());
  EXPECT_EQ(options->cache.maxBytes, 20ull << 30);
  EXPECT_EQ(options->idleTimeoutSeconds, 0u);
  EXPECT_TRUE(options->logFile.empty());
}

TEST_F(ConfigTest, FlagsBeatEnvironmentBeatsConfigFile) {
  // The config file in the cache directory sets all three.
  writeFile(dir.file("flowcd.conf"),
            "# comment\n\nmax-size = 300M\nidle-timeout = 15m\nworkers = 3\n");
  auto fromFile = resolveDaemonOptions(flags());
  ASSERT_TRUE(fromFile) << fromFile.status().toString();
  EXPECT_EQ(fromFile->cache.maxBytes, 300ull << 20);
  EXPECT_EQ(fromFile->idleTimeoutSeconds, 900u);
  EXPECT_EQ(fromFile->workers, 3u);
  // The environment beats the file.
  ScopedEnv size("FLOWC_CACHE_MAX_SIZE", "200M");
  auto fromEnv = resolveDaemonOptions(flags());
  ASSERT_TRUE(fromEnv);
  EXPECT_EQ(fromEnv->cache.maxBytes, 200ull << 20);
  // A flag beats both.
  DaemonFlags withFlag = flags();
  withFlag.maxSize = "100M";
  auto fromFlag = resolveDaemonOptions(withFlag);
  ASSERT_TRUE(fromFlag);
  EXPECT_EQ(fromFlag->cache.maxBytes, 100ull << 20);
  EXPECT_EQ(fromFlag->idleTimeoutSeconds, 900u);
}

TEST_F(ConfigTest, TheWebFrontsAddressLayersAsTheOthers) {
  auto byDefault = resolveDaemonOptions(flags());
  ASSERT_TRUE(byDefault);
  EXPECT_EQ(byDefault->http, "auto");
  writeFile(dir.file("flowcd.conf"), "http = off\n");
  auto fromFile = resolveDaemonOptions(flags());
  ASSERT_TRUE(fromFile) << fromFile.status().toString();
  EXPECT_EQ(fromFile->http, "off");
  ScopedEnv http("FLOWC_HTTP", "127.0.0.1:9000");
  auto fromEnv = resolveDaemonOptions(flags());
  ASSERT_TRUE(fromEnv);
  EXPECT_EQ(fromEnv->http, "127.0.0.1:9000");
  DaemonFlags withFlag = flags();
  withFlag.http = "127.0.0.1:0";
  auto fromFlag = resolveDaemonOptions(withFlag);
  ASSERT_TRUE(fromFlag);
  EXPECT_EQ(fromFlag->http, "127.0.0.1:0");
}

TEST_F(ConfigTest, ExplicitConfigFileAndFlowcConfigVariable) {
  writeFile(dir.file("other.conf"), "max-size = 2G\n");
  DaemonFlags explicitFile = flags();
  explicitFile.configFile = dir.file("other.conf");
  auto options = resolveDaemonOptions(explicitFile);
  ASSERT_TRUE(options);
  EXPECT_EQ(options->cache.maxBytes, 2ull << 30);
  ScopedEnv config("FLOWC_CONFIG", dir.file("other.conf").c_str());
  auto fromEnv = resolveDaemonOptions(flags());
  ASSERT_TRUE(fromEnv);
  EXPECT_EQ(fromEnv->cache.maxBytes, 2ull << 30);
}

TEST_F(ConfigTest, BadValuesNameWhereTheyCameFrom) {
  DaemonFlags garbage = flags();
  garbage.maxSize = "garbage";
  EXPECT_THAT(
      resolveDaemonOptions(garbage),
      StatusIs(StatusCode::InvalidArgument, "--max-size: invalid size 'garbage'"));
  DaemonFlags tiny = flags();
  tiny.maxSize = "10";
  EXPECT_THAT(resolveDaemonOptions(tiny),
              StatusIs(StatusCode::InvalidArgument, "below the 1 MiB minimum"));
  DaemonFlags workers = flags();
  workers.workers = "lots";
  EXPECT_THAT(
      resolveDaemonOptions(workers),
      StatusIs(StatusCode::InvalidArgument, "--workers: invalid worker count 'lots'"));
  DaemonFlags idle = flags();
  idle.idleTimeout = "soon";
  EXPECT_THAT(
      resolveDaemonOptions(idle),
      StatusIs(StatusCode::InvalidArgument, "--idle-timeout: invalid duration 'soon'"));
  ScopedEnv size("FLOWC_CACHE_MAX_SIZE", "12Q");
  EXPECT_THAT(
      resolveDaemonOptions(flags()),
      StatusIs(StatusCode::InvalidArgument, "FLOWC_CACHE_MAX_SIZE: invalid size"));
}

TEST_F(ConfigTest, ConfigFileErrorsNameTheLine) {
  writeFile(dir.file("flowcd.conf"), "max-size = 1G\nmax_size = 1G\n");
  EXPECT_THAT(
      resolveDaemonOptions(flags()),
      StatusIs(StatusCode::InvalidArgument, "flowcd.conf:2: unknown key 'max_size'"));
  writeFile(dir.file("flowcd.conf"), "max-size 1G\n");
  EXPECT_THAT(
      resolveDaemonOptions(flags()),
      StatusIs(StatusCode::InvalidArgument, "flowcd.conf:1: expected 'key = value'"));
  writeFile(dir.file("flowcd.conf"), "idle-timeout = soon\n");
  EXPECT_THAT(resolveDaemonOptions(flags()),
              StatusIs(StatusCode::InvalidArgument, "flowcd.conf:1: invalid duration"));
  DaemonFlags missing = flags();
  missing.configFile = dir.file("missing.conf");
  EXPECT_THAT(resolveDaemonOptions(missing),
              StatusIs(StatusCode::NotFound, "missing.conf' does not exist"));
}

TEST(DurationTest, AcceptsSecondsMinutesHours) {
  EXPECT_EQ(*parseDurationSeconds("0"), 0u);
  EXPECT_EQ(*parseDurationSeconds("90"), 90u);
  EXPECT_EQ(*parseDurationSeconds("90s"), 90u);
  EXPECT_EQ(*parseDurationSeconds("15m"), 900u);
  EXPECT_EQ(*parseDurationSeconds("2h"), 7200u);
  for (const char *bad : {"", "-5", "5x", "h", "1.5h", "99999999h"})
    EXPECT_THAT(parseDurationSeconds(bad),
                StatusIs(StatusCode::InvalidArgument, "invalid duration"))
        << bad;
}

TEST(EnvironmentTest, UnknownFlowcVariablesAreReported) {
  ScopedEnv typo("FLOWC_CACHE_DIRS", "/tmp/x");
  ScopedEnv known("FLOWC_AUTOSTART", "0");
  ScopedEnv other("NOT_FLOWC_THING", "1");
  std::vector<std::string> unknown = unknownEnvironmentVariables();
  EXPECT_EQ(unknown, std::vector<std::string>{"FLOWC_CACHE_DIRS"});
  std::vector<std::string> warnings = unknownEnvironmentWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], ::testing::HasSubstr("FLOWC_CACHE_DIRS"));
  EXPECT_THAT(warnings[0], ::testing::HasSubstr("FLOWC_CACHE_MAX_SIZE"));
}

TEST_F(ConfigTest, ReadOnlyComesFromTheFlagTheEnvironmentOrTheFile) {
  // Read-write unless told.
  EXPECT_EQ(resolveDaemonOptions(flags())->cache.access, cache::CacheAccess::ReadWrite);
  writeFile(dir.file("flowcd.conf"), "read-only = true\n");
  EXPECT_EQ(resolveDaemonOptions(flags())->cache.access, cache::CacheAccess::ReadOnly);
  // The environment overrides the file, the flag the environment.
  writeFile(dir.file("flowcd.conf"), "read-only = no\n");
  ScopedEnv env("FLOWC_CACHE_READ_ONLY", "1");
  EXPECT_EQ(resolveDaemonOptions(flags())->cache.access, cache::CacheAccess::ReadOnly);
  ScopedEnv off("FLOWC_CACHE_READ_ONLY", "false");
  DaemonFlags withFlag = flags();
  withFlag.readOnly = "true";
  EXPECT_EQ(resolveDaemonOptions(withFlag)->cache.access, cache::CacheAccess::ReadOnly);
}

TEST_F(ConfigTest, ABadReadOnlyValueNamesWhereItCameFrom) {
  writeFile(dir.file("flowcd.conf"), "# settings\nread-only = maybe\n");
  EXPECT_THAT(resolveDaemonOptions(flags()),
              StatusIs(StatusCode::InvalidArgument,
                       "flowcd.conf:2: invalid value 'maybe' for read-only"));
  ScopedEnv env("FLOWC_CACHE_READ_ONLY", "ro");
  EXPECT_THAT(resolveDaemonOptions(flags()),
              StatusIs(StatusCode::InvalidArgument,
                       "FLOWC_CACHE_READ_ONLY: invalid value 'ro' for read-only"));
}

TEST_F(ConfigTest, RemoteCacheSettingsFromTheFileRepeatHeadersAndKeys) {
  writeFile(dir.file("flowcd.conf"), "remote-cache = grpcs://cache.example:443\n"
                                     "remote-instance = ci/main\n"
                                     "remote-header = authorization=Bearer abc\n"
                                     "remote-header = x-tenant=ml\n"
                                     "remote-read-only = true\n"
                                     "remote-upload-weights = never\n"
                                     "remote-timeout = 30s\n"
                                     "trust-key = /keys/a.pub\n"
                                     "trust-key = /keys/b.pub\n");
  auto options = resolveDaemonOptions(flags());
  ASSERT_TRUE(options) << options.status().toString();
  const RemoteCacheOptions &remote = options->remoteCache;
  EXPECT_EQ(remote.url, "grpcs://cache.example:443");
  EXPECT_EQ(options->remote.instance, "ci/main");
  ASSERT_EQ(remote.headers.size(), 2u);
  EXPECT_EQ(remote.headers[0].first, "authorization");
  EXPECT_EQ(remote.headers[0].second, "Bearer abc");
  EXPECT_EQ(remote.headers[1].first, "x-tenant");
  EXPECT_TRUE(remote.readOnly);
  EXPECT_EQ(remote.uploadWeights, "never");
  EXPECT_EQ(remote.timeoutMs, 30000u);
  EXPECT_EQ(remote.trustKeyFiles,
            (std::vector<std::string>{"/keys/a.pub", "/keys/b.pub"}));

  // A flag replaces the file's value; the environment sits between.
  ScopedEnv env("FLOWC_REMOTE_CACHE", "http://127.0.0.1:8080/cache");
  DaemonFlags withFlag = flags();
  withFlag.remoteHeaders = "authorization=Bearer other";
  options = resolveDaemonOptions(withFlag);
  ASSERT_TRUE(options);
  EXPECT_EQ(options->remoteCache.url, "http://127.0.0.1:8080/cache");
  ASSERT_EQ(options->remoteCache.headers.size(), 1u);
  EXPECT_EQ(options->remoteCache.headers[0].second, "Bearer other");
}

TEST_F(ConfigTest, BadRemoteCacheSettingsNameTheirOrigin) {
  for (auto [line, message] :
       {std::pair{"remote-header = no-equals", "flowcd.conf:1: header 'no-equals'"},
        std::pair{"remote-upload-weights = some", "missing or never"},
        std::pair{"remote-timeout = 0", "not between 1 s and 1 h"},
        std::pair{"remote-read-only = maybe", "true or false"}}) {
    writeFile(dir.file("flowcd.conf"), std::string(line) + "\n");
    EXPECT_THAT(resolveDaemonOptions(flags()),
                StatusIs(StatusCode::InvalidArgument, message))
        << line;
  }
}

// The remote engine's GPUs: named as their workers' `gpu` property names
// them, kept as tuning devices, once each; a bad name says where it was.
TEST_F(ConfigTest, RemoteGpusComeFromTheFileOrTheFlag) {
  writeFile(dir.file("flowcd.conf"),
            "remote-gpu = NVIDIA H200 sm_90, NVIDIA A100-SXM4-80GB sm_80, "
            "NVIDIA H200 sm_90\n");
  auto options = resolveDaemonOptions(flags());
  ASSERT_TRUE(options) << options.status().toString();
  EXPECT_EQ(options->remote.gpus,
            (std::vector<std::string>{"gpu NVIDIA H200 sm_90",
                                      "gpu NVIDIA A100-SXM4-80GB sm_80"}));
  DaemonFlags withFlag = flags();
  withFlag.remoteGpus = "NVIDIA L4 sm_89";
  options = resolveDaemonOptions(withFlag);
  ASSERT_TRUE(options) << options.status().toString();
  EXPECT_EQ(options->remote.gpus, (std::vector<std::string>{"gpu NVIDIA L4 sm_89"}));
  writeFile(dir.file("flowcd.conf"), "remote-gpu = NVIDIA H200\n");
  EXPECT_THAT(resolveDaemonOptions(flags()),
              StatusIs(StatusCode::InvalidArgument,
                       "flowcd.conf:1: GPU 'NVIDIA H200': no name followed by ' sm_NN'"));
}

TEST_F(ConfigTest, FrontDoorSettingsComeFromFlagsOrTheFile) {
  // The config file sets the TCP port's TLS, tokens and client CA.
  writeFile(dir.file("flowcd.conf"),
            "listen = 0.0.0.0:7411\ntls-cert = /etc/c.pem\ntls-key = /etc/k.pem\n"
            "tls-client-ca = /etc/ca.pem\ntokens = /etc/tokens\n");
  auto fromFile = resolveDaemonOptions(flags());
  ASSERT_TRUE(fromFile) << fromFile.status().toString();
  EXPECT_EQ(fromFile->frontDoor.tlsCert, "/etc/c.pem");
  EXPECT_EQ(fromFile->frontDoor.tlsKey, "/etc/k.pem");
  EXPECT_EQ(fromFile->frontDoor.tlsClientCa, "/etc/ca.pem");
  EXPECT_EQ(fromFile->frontDoor.tokensFile, "/etc/tokens");
  EXPECT_FALSE(fromFile->frontDoor.insecureLoopback);
  // A flag beats the file.
  DaemonFlags withFlags = flags();
  withFlags.tokensFile = "/run/tokens";
  withFlags.insecureLoopback = "true";
  auto fromFlags = resolveDaemonOptions(withFlags);
  ASSERT_TRUE(fromFlags);
  EXPECT_EQ(fromFlags->frontDoor.tokensFile, "/run/tokens");
  EXPECT_TRUE(fromFlags->frontDoor.insecureLoopback);
  // A value that is no boolean names the file and line.
  writeFile(dir.file("flowcd.conf"), "insecure-loopback = sure\n");
  EXPECT_THAT(resolveDaemonOptions(flags()),
              StatusIs(StatusCode::InvalidArgument,
                       "flowcd.conf:1: invalid value 'sure' for insecure-loopback"));
}

} // namespace
} // namespace flowc::daemon
