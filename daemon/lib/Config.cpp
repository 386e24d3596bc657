#include "flowc/daemon/Config.h"

#include "flowc/runtime/Tuning.h"
#include "flowc/support/ByteSize.h"
#include "flowc/support/Environment.h"
#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <map>

namespace flowc::daemon {

namespace {

namespace fs = std::filesystem;

/// One setting with where it came from, for messages.
struct Setting {
  std::string value;
  std::string origin; ///< "--max-size", "FLOWC_CACHE_MAX_SIZE", "flowcd.conf:3".
};

using Settings = std::map<std::string, Setting>;

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos)
    return "";
  size_t end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

bool isConfigKey(const std::string &key) {
  return std::any_of(std::begin(kConfigKeys), std::end(kConfigKeys),
                     [&](const char *known) { return key == known; });
}

Expected<Settings> parseConfigFile(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(std::string text, readFileToString(path));
  Settings settings;
  size_t lineNumber = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    std::string line = trim(std::string_view(text).substr(begin, end - begin));
    begin = end + 1;
    ++lineNumber;
    std::string where = path + ":" + std::to_string(lineNumber);
    if (line.empty() || line[0] == '#')
      continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos)
      return invalidArgument(where + ": expected 'key = value', got '" + line + "'");
    std::string key = trim(line.substr(0, eq));
    if (!isConfigKey(key)) {
      std::string known;
      for (const char *name : kConfigKeys)
        known += (known.empty() ? "" : ", ") + std::string(name);
      return invalidArgument(where + ": unknown key '" + key + "' (known: " + known +
                             ")");
    }
    std::string value = trim(line.substr(eq + 1));
    bool repeatable =
        std::any_of(std::begin(kRepeatableConfigKeys), std::end(kRepeatableConfigKeys),
                    [&](const char *name) { return key == name; });
    if (repeatable && settings.count(key))
      value = settings[key].value + "\n" + value;
    settings[key] = {value, where};
  }
  return settings;
}

/// Flag, then environment variable, then config file.
void layer(Settings &settings, const std::string &key,
           const std::optional<std::string> &flag, const char *variable) {
  if (flag) {
    settings[key] = {*flag, "--" + key};
    return;
  }
  if (variable)
    if (const char *value = std::getenv(variable); value && *value)
      settings[key] = {value, variable};
}

/// The values of a repeatable key (joined by newlines), each trimmed.
std::vector<std::string> repeatedValues(const std::string &value) {
  std::vector<std::string> values;
  for (size_t begin = 0; begin < value.size();) {
    size_t end = std::min(value.find('\n', begin), value.size());
    std::string item = trim(std::string_view(value).substr(begin, end - begin));
    begin = end + 1;
    values.push_back(std::move(item));
  }
  return values;
}

/// The non-empty items of a comma-separated value, trimmed.
std::vector<std::string> commaSeparated(const std::string &value) {
  std::vector<std::string> items;
  for (size_t begin = 0; begin <= value.size();) {
    size_t end = std::min(value.find(',', begin), value.size());
    std::string item = trim(std::string_view(value).substr(begin, end - begin));
    begin = end + 1;
    if (!item.empty())
      items.push_back(std::move(item));
  }
  return items;
}

Status bad(const Setting &setting, const Status &why) {
  return invalidArgument(setting.origin + ": " + why.message());
}

Status applySettings(const Settings &settings, DaemonOptions &options) {
  for (const auto &[key, setting] : settings) {
    const std::string &value = setting.value;
    if (key == "cache-dir") {
      options.cacheDir = value;
    } else if (key == "socket") {
      options.socketPath = value;
    } else if (key == "listen") {
      options.tcpAddress = value;
    } else if (key == "tls-cert") {
      options.frontDoor.tlsCert = value;
    } else if (key == "tls-key") {
      options.frontDoor.tlsKey = value;
    } else if (key == "tls-client-ca") {
      options.frontDoor.tlsClientCa = value;
    } else if (key == "tokens") {
      options.frontDoor.tokensFile = value;
    } else if (key == "insecure-loopback") {
      if (value == "true" || value == "yes" || value == "1")
        options.frontDoor.insecureLoopback = true;
      else if (value == "false" || value == "no" || value == "0")
        options.frontDoor.insecureLoopback = false;
      else
        return invalidArgument(setting.origin + ": invalid value '" + value +
                               "' for insecure-loopback (true or false)");
    } else if (key == "log-file") {
      options.logFile = value;
    } else if (key == "http") {
      options.http = value;
    } else if (key == "workers") {
      unsigned workers = 0;
      auto [end, ec] =
          std::from_chars(value.data(), value.data() + value.size(), workers);
      if (ec != std::errc() || end != value.data() + value.size() || workers > 1024)
        return invalidArgument(setting.origin + ": invalid worker count '" + value +
                               "' (0 = one per core, at most 1024)");
      options.workers = workers;
    } else if (key == "max-size") {
      auto size = parseByteSize(value);
      if (!size)
        return bad(setting, size.status());
      if (*size < (1u << 20))
        return invalidArgument(setting.origin + ": cache size cap '" + value +
                               "' is below the 1 MiB minimum");
      options.cache.maxBytes = *size;
    } else if (key == "read-only") {
      if (value == "true" || value == "yes" || value == "1")
        options.cache.access = cache::CacheAccess::ReadOnly;
      else if (value == "false" || value == "no" || value == "0")
        options.cache.access = cache::CacheAccess::ReadWrite;
      else
        return invalidArgument(setting.origin + ": invalid value '" + value +
                               "' for read-only (true or false)");
    } else if (key == "task-memory-limit") {
      auto size = parseByteSize(value);
      if (!size)
        return bad(setting, size.status());
      if (*size < (64u << 20))
        return invalidArgument(setting.origin + ": task memory limit '" + value +
                               "' is below the 64 MiB minimum");
      options.taskMemoryLimit = *size;
    } else if (key == "remote-executor") {
      options.remote.url = value;
    } else if (key == "remote-instance") {
      options.remote.instance = value;
    } else if (key == "remote-platform") {
      options.remote.platform.clear();
      for (const std::string &pair : commaSeparated(value)) {
        size_t eq = pair.find('=');
        if (eq == std::string::npos || eq == 0)
          return invalidArgument(setting.origin + ": platform property '" + pair +
                                 "' is not KEY=VALUE");
        options.remote.platform.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
      }
    } else if (key == "remote-gpu") {
      auto devices = runtime::parseGpuNames(commaSeparated(value));
      if (!devices)
        return bad(setting, devices.status());
      options.remote.gpus = std::move(*devices);
    } else if (key == "remote-jobs") {
      unsigned jobs = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), jobs);
      if (ec != std::errc() || end != value.data() + value.size() || jobs == 0 ||
          jobs > 4096)
        return invalidArgument(setting.origin + ": invalid remote job count '" + value +
                               "' (1 to 4096)");
      options.remote.jobs = jobs;
    } else if (key == "remote-fallback") {
      if (value != "local" && value != "none")
        return invalidArgument(setting.origin + ": invalid value '" + value +
                               "' for remote-fallback (local or none)");
      options.remote.fallbackLocal = value == "local";
    } else if (key == "remote-cache") {
      options.remoteCache.url = value;
    } else if (key == "remote-header") {
      options.remoteCache.headers.clear();
      for (const std::string &pair : repeatedValues(value)) {
        size_t eq = pair.find('=');
        if (eq == std::string::npos || eq == 0)
          return invalidArgument(setting.origin + ": header '" +
                                 pair.substr(0, pair.find('=')) + "' is not NAME=VALUE");
        options.remoteCache.headers.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
      }
    } else if (key == "remote-read-only") {
      if (value == "true" || value == "yes" || value == "1")
        options.remoteCache.readOnly = true;
      else if (value == "false" || value == "no" || value == "0")
        options.remoteCache.readOnly = false;
      else
        return invalidArgument(setting.origin + ": invalid value '" + value +
                               "' for remote-read-only (true or false)");
    } else if (key == "remote-ca-file") {
      options.remoteCache.caFile = value;
    } else if (key == "remote-client-cert") {
      options.remoteCache.clientCertFile = value;
    } else if (key == "remote-client-key") {
      options.remoteCache.clientKeyFile = value;
    } else if (key == "remote-upload-weights") {
      if (value != "missing" && value != "never")
        return invalidArgument(setting.origin + ": invalid value '" + value +
                               "' for remote-upload-weights (missing or never)");
      options.remoteCache.uploadWeights = value;
    } else if (key == "remote-timeout") {
      auto seconds = parseDurationSeconds(value);
      if (!seconds)
        return bad(setting, seconds.status());
      if (*seconds == 0 || *seconds > 3600)
        return invalidArgument(setting.origin + ": remote timeout '" + value +
                               "' is not between 1 s and 1 h");
      options.remoteCache.timeoutMs = *seconds * 1000;
    } else if (key == "sign-key") {
      options.remoteCache.signKeyFile = value;
    } else if (key == "trust-key") {
      options.remoteCache.trustKeyFiles.clear();
      for (std::string &path : repeatedValues(value))
        if (!path.empty())
          options.remoteCache.trustKeyFiles.push_back(std::move(path));
    } else if (key == "idle-timeout") {
      auto seconds = parseDurationSeconds(value);
      if (!seconds)
        return bad(setting, seconds.status());
      options.idleTimeoutSeconds = *seconds;
    }
  }
  return Status::ok();
}

} // namespace

Expected<unsigned> parseDurationSeconds(const std::string &text) {
  auto invalid = [&] {
    return invalidArgument("invalid duration '" + text +
                           "' (examples: 0 = never, 90, 90s, 15m, 2h)");
  };
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data())
    return invalid();
  std::string_view suffix(end, text.data() + text.size() - end);
  unsigned scale = 1;
  if (suffix == "m")
    scale = 60;
  else if (suffix == "h")
    scale = 3600;
  else if (!suffix.empty() && suffix != "s")
    return invalid();
  if (value > 100u * 24 * 3600 / scale)
    return invalid();
  return value * scale;
}

Expected<DaemonOptions> resolveDaemonOptions(const DaemonFlags &flags) {
  // The cache directory first: the default config file lives in it.
  Settings early;
  layer(early, "cache-dir", flags.cacheDir, "FLOWC_CACHE_DIR");
  std::optional<std::string> configPath = flags.configFile;
  if (!configPath)
    if (const char *value = std::getenv("FLOWC_CONFIG"); value && *value)
      configPath = value;
  bool explicitConfig = configPath.has_value();
  if (!configPath) {
    std::string dir =
        early.count("cache-dir") ? early["cache-dir"].value : defaultCacheDir();
    configPath = dir + "/flowcd.conf";
  }

  Settings settings;
  std::error_code ec;
  if (fs::exists(*configPath, ec)) {
    FLOWC_ASSIGN_OR_RETURN(settings, parseConfigFile(*configPath));
  } else if (explicitConfig) {
    return notFound("config file '" + *configPath + "' does not exist");
  }
  layer(settings, "cache-dir", flags.cacheDir, "FLOWC_CACHE_DIR");
  layer(settings, "socket", flags.socketPath, "FLOWC_SOCKET");
  layer(settings, "listen", flags.tcpAddress, nullptr);
  layer(settings, "tls-cert", flags.tlsCert, nullptr);
  layer(settings, "tls-key", flags.tlsKey, nullptr);
  layer(settings, "tls-client-ca", flags.tlsClientCa, nullptr);
  layer(settings, "tokens", flags.tokensFile, nullptr);
  layer(settings, "insecure-loopback", flags.insecureLoopback, nullptr);
  layer(settings, "workers", flags.workers, nullptr);
  layer(settings, "max-size", flags.maxSize, "FLOWC_CACHE_MAX_SIZE");
  layer(settings, "idle-timeout", flags.idleTimeout, nullptr);
  layer(settings, "log-file", flags.logFile, nullptr);
  layer(settings, "http", flags.http, "FLOWC_HTTP");
  layer(settings, "read-only", flags.readOnly, "FLOWC_CACHE_READ_ONLY");
  layer(settings, "task-memory-limit", flags.taskMemoryLimit, nullptr);
  layer(settings, "remote-executor", flags.remoteExecutor, "FLOWC_REMOTE_EXECUTOR");
  layer(settings, "remote-instance", flags.remoteInstance, nullptr);
  layer(settings, "remote-platform", flags.remotePlatform, nullptr);
  layer(settings, "remote-gpu", flags.remoteGpus, nullptr);
  layer(settings, "remote-fallback", flags.remoteFallback, nullptr);
  layer(settings, "remote-jobs", flags.remoteJobs, nullptr);
  layer(settings, "remote-cache", flags.remoteCache, "FLOWC_REMOTE_CACHE");
  layer(settings, "remote-header", flags.remoteHeaders, nullptr);
  layer(settings, "remote-read-only", flags.remoteReadOnly, "FLOWC_REMOTE_READ_ONLY");
  layer(settings, "remote-ca-file", flags.remoteCaFile, nullptr);
  layer(settings, "remote-client-cert", flags.remoteClientCert, nullptr);
  layer(settings, "remote-client-key", flags.remoteClientKey, nullptr);
  layer(settings, "remote-upload-weights", flags.remoteUploadWeights, nullptr);
  layer(settings, "remote-timeout", flags.remoteTimeout, nullptr);
  layer(settings, "sign-key", flags.signKey, nullptr);
  layer(settings, "trust-key", flags.trustKeys, nullptr);

  DaemonOptions options;
  options.cacheDir = defaultCacheDir();
  FLOWC_RETURN_IF_ERROR(applySettings(settings, options));
  FLOWC_RETURN_IF_ERROR(options.cache.validate());
  return options;
}

} // namespace flowc::daemon
