// remote_cache_probe: drives flowc's remote cache client against a real
// server for the tests in tests/remotecache.
//
//   remote_cache_probe URL [--instance I] [--header K=V]... [--ca FILE]
//                      [--cert FILE --key FILE] [--timeout-ms N] COMMAND
//   COMMAND: capabilities | put-file DIGEST PATH | get-file DIGEST OUT |
//            put-entry KEY NAME=DIGEST... | get-entry KEY |
//            find-missing DIGEST...
//
// Digests are flowc's text form (sha256:<hex>/<size>). Prints one JSON
// object on stdout with the command's answer, the client's counters and the
// probe's peak RSS ("peak_rss_kb", VmHWM). Errors go to stderr as
// "remote_cache_probe: error: <Code>: message" with flowc's exit status for
// the code (cli/Common.cpp exitCodeFor: 3 bad input or data loss, 5
// unavailable, 1 otherwise); 2 for a bad command line.
#include "flowc/remote/RemoteCache.h"

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

#include <fcntl.h>
#include <unistd.h>

namespace {

using flowc::Expected;
using flowc::Status;
using flowc::StatusCode;
using nlohmann::json;
namespace remote = flowc::remote;
namespace cache = flowc::cache;

constexpr const char *kUsage =
    "usage: remote_cache_probe URL [--instance I] [--header K=V]... [--ca FILE]\n"
    "                          [--cert FILE --key FILE] [--timeout-ms N] COMMAND\n"
    "  COMMAND: capabilities | put-file DIGEST PATH | get-file DIGEST OUT |\n"
    "           put-entry KEY NAME=DIGEST... | get-entry KEY | find-missing DIGEST...\n";

int usage(const std::string &why) {
  std::cerr << "remote_cache_probe: " << why << "\n" << kUsage;
  return 2;
}

// The exit statuses flowc's CLI gives these codes.
int exitCodeFor(StatusCode code) {
  switch (code) {
  case StatusCode::InvalidArgument:
  case StatusCode::NotFound:
  case StatusCode::FailedPrecondition:
  case StatusCode::DataLoss:
    return 3;
  case StatusCode::Unimplemented:
    return 4;
  case StatusCode::Unavailable:
  case StatusCode::ResourceExhausted:
    return 5;
  default:
    return 1;
  }
}

int fail(const Status &status) {
  std::cerr << "remote_cache_probe: error: " << status.toString() << "\n";
  return exitCodeFor(status.code());
}

// VmHWM: the most memory this process ever had resident.
long peakRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmHWM:"))
      return std::stol(line.substr(6));
  return -1;
}

json countersJson(const remote::TransferCounters &c) {
  return {{"requests", c.requests},
          {"blobs_uploaded", c.blobsUploaded},
          {"bytes_uploaded", c.bytesUploaded},
          {"blobs_downloaded", c.blobsDownloaded},
          {"bytes_downloaded", c.bytesDownloaded},
          {"blobs_streamed", c.blobsStreamed}};
}

Expected<std::vector<cache::Digest>> parseDigests(const std::vector<std::string> &texts) {
  std::vector<cache::Digest> digests;
  for (const std::string &text : texts) {
    FLOWC_ASSIGN_OR_RETURN(cache::Digest digest, cache::Digest::parse(text));
    digests.push_back(digest);
  }
  return digests;
}

Expected<json> run(remote::RemoteCache &client, const std::string &command,
                   const std::vector<std::string> &args) {
  auto need = [&](size_t count) -> Status {
    if (args.size() < count)
      return flowc::invalidArgument(command + ": " + std::to_string(count) +
                                    " argument(s) expected");
    return Status::ok();
  };
  if (command == "capabilities") {
    FLOWC_ASSIGN_OR_RETURN(remote::RemoteCapabilities caps, client.capabilities());
    return json{{"max_blob_bytes", caps.maxBlobBytes},
                {"action_cache_writable", caps.actionCacheWritable}};
  }
  if (command == "put-file") {
    FLOWC_RETURN_IF_ERROR(need(2));
    FLOWC_ASSIGN_OR_RETURN(cache::Digest digest, cache::Digest::parse(args[0]));
    FLOWC_RETURN_IF_ERROR(client.uploadFile(digest, args[1]));
    return json{{"uploaded", digest.toString()}};
  }
  if (command == "get-file") {
    FLOWC_RETURN_IF_ERROR(need(2));
    FLOWC_ASSIGN_OR_RETURN(cache::Digest digest, cache::Digest::parse(args[0]));
    int fd = ::open(args[1].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      return flowc::errnoStatus(errno, "get-file: " + args[1]);
    Status status = client.downloadToFile(digest, fd);
    ::close(fd);
    // The caller discards what a failed download wrote.
    if (!status)
      ::unlink(args[1].c_str());
    FLOWC_RETURN_IF_ERROR(status);
    return json{{"downloaded", digest.toString()}, {"path", args[1]}};
  }
  if (command == "put-entry") {
    FLOWC_RETURN_IF_ERROR(need(1));
    FLOWC_ASSIGN_OR_RETURN(cache::Digest key, cache::Digest::parse(args[0]));
    remote::RemoteEntry entry;
    for (size_t i = 1; i < args.size(); ++i) {
      size_t eq = args[i].rfind('=');
      if (eq == std::string::npos)
        return flowc::invalidArgument("put-entry: output '" + args[i] +
                                      "' is not NAME=DIGEST");
      FLOWC_ASSIGN_OR_RETURN(cache::Digest digest,
                             cache::Digest::parse(args[i].substr(eq + 1)));
      entry.outputs.push_back({args[i].substr(0, eq), digest});
    }
    FLOWC_RETURN_IF_ERROR(client.putEntry(key, entry));
    return json{{"stored", key.toString()}};
  }
  if (command == "get-entry") {
    FLOWC_RETURN_IF_ERROR(need(1));
    FLOWC_ASSIGN_OR_RETURN(cache::Digest key, cache::Digest::parse(args[0]));
    FLOWC_ASSIGN_OR_RETURN(std::optional<remote::RemoteEntry> entry,
                           client.getEntry(key));
    json outputs = json::array();
    if (entry)
      for (const remote::EntryOutput &output : entry->outputs)
        outputs.push_back({{"path", output.path}, {"digest", output.digest.toString()}});
    return json{{"hit", entry.has_value()}, {"outputs", outputs}};
  }
  if (command == "find-missing") {
    FLOWC_ASSIGN_OR_RETURN(std::vector<cache::Digest> digests, parseDigests(args));
    FLOWC_ASSIGN_OR_RETURN(std::vector<cache::Digest> missing,
                           client.findMissing(digests));
    json list = json::array();
    for (const cache::Digest &digest : missing)
      list.push_back(digest.toString());
    return json{{"missing", list}};
  }
  return flowc::invalidArgument("unknown command '" + command + "'");
}

} // namespace

int main(int argc, char **argv) {
  spdlog::set_default_logger(spdlog::stderr_logger_mt("remote_cache_probe"));
  spdlog::set_level(spdlog::level::warn);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return usage("no URL");
  remote::RemoteCacheOptions options;
  options.url = args[0];
  size_t i = 1;
  for (; i < args.size() && args[i].starts_with("--"); ++i) {
    const std::string &flag = args[i];
    if (i + 1 >= args.size())
      return usage(flag + " needs a value");
    const std::string &value = args[++i];
    if (flag == "--instance") {
      options.instance = value;
    } else if (flag == "--header") {
      size_t eq = value.find('=');
      if (eq == std::string::npos)
        return usage("--header '" + value + "' is not NAME=VALUE");
      options.headers.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else if (flag == "--ca") {
      options.caFile = value;
    } else if (flag == "--cert") {
      options.clientCertFile = value;
    } else if (flag == "--key") {
      options.clientKeyFile = value;
    } else if (flag == "--timeout-ms") {
      try {
        options.timeout = std::chrono::milliseconds(std::stoll(value));
      } catch (const std::exception &) {
        return usage("--timeout-ms '" + value + "' is not a number");
      }
    } else {
      return usage("unknown option " + flag);
    }
  }
  if (i >= args.size())
    return usage("no command");
  const std::string command = args[i];
  std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());

  Expected<std::unique_ptr<remote::RemoteCache>> client =
      remote::RemoteCache::connect(options);
  if (!client)
    return fail(client.status());
  Expected<json> answer = run(**client, command, rest);
  if (!answer)
    return fail(answer.status());
  json out = *answer;
  out["counters"] = countersJson((*client)->counters());
  out["endpoint"] = (*client)->describe();
  out["peak_rss_kb"] = peakRssKb();
  std::cout << out.dump() << "\n";
  return 0;
}
