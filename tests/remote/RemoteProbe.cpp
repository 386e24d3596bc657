// remote_probe: drives flowc's REAPI client against a real engine for the
// tests in tests/reapi.
//
//   remote_probe URL [--instance NAME] capabilities
//   remote_probe URL [--instance NAME] [--cancel-after-ms N] [--resume-window-s N]
//                execute SPEC.json
//
// SPEC.json is one action or a list of them (run concurrently, one thread
// each, through one executor):
//   {"arguments": [...], "environment": [[name, value]...],
//    "inputs": [{"path": P, "file": LOCAL_PATH | "text": TEXT, "executable": B}],
//    "outputs": [...], "working_directory": D, "platform": [[name, value]...],
//    "timeout": SECONDS, "out_dir": DIR}
// Prints {"outcomes": [...], "counters": {...}} on stdout; each outcome
// holds the result or {"error": {"code", "message"}}; outputs are written
// under out_dir when given. Exit status: 0 all ran, 1 an action failed, 2
// usage or a bad spec.
#include "flowc/remote/RemoteExecution.h"
#include "flowc/support/MappedFile.h"

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

namespace {

using flowc::Expected;
using flowc::Status;
using nlohmann::json;
namespace remote = flowc::remote;

int usage(const std::string &why) {
  std::cerr << "remote_probe: " << why
            << "\nusage: remote_probe URL [--instance NAME] capabilities\n"
               "       remote_probe URL [--instance NAME] [--cancel-after-ms N] "
               "[--resume-window-s N] execute SPEC.json\n";
  return 2;
}

json errorJson(const Status &status) {
  return {{"code", flowc::statusCodeName(status.code())}, {"message", status.message()}};
}

// An action and the storage its input views point into.
struct LoadedAction {
  remote::Action action;
  std::vector<std::unique_ptr<flowc::MappedFile>> files;
  std::vector<std::unique_ptr<std::string>> texts;
  std::string outDir;
};

Expected<LoadedAction> loadAction(const json &spec) {
  LoadedAction loaded;
  remote::Action &action = loaded.action;
  action.arguments = spec.value("arguments", std::vector<std::string>{});
  for (const auto &pair : spec.value("environment", json::array()))
    action.environment.emplace_back(pair.at(0).get<std::string>(),
                                    pair.at(1).get<std::string>());
  for (const auto &pair : spec.value("platform", json::array()))
    action.platform.emplace_back(pair.at(0).get<std::string>(),
                                 pair.at(1).get<std::string>());
  action.outputFiles = spec.value("outputs", std::vector<std::string>{});
  action.workingDirectory = spec.value("working_directory", std::string());
  action.timeout = std::chrono::seconds(spec.value("timeout", 0));
  loaded.outDir = spec.value("out_dir", std::string());
  for (const auto &entry : spec.value("inputs", json::array())) {
    remote::InputFile file;
    file.path = entry.at("path").get<std::string>();
    file.executable = entry.value("executable", false);
    if (entry.contains("file")) {
      FLOWC_ASSIGN_OR_RETURN(
          flowc::MappedFile mapped,
          flowc::MappedFile::open(entry.at("file").get<std::string>()));
      loaded.files.push_back(std::make_unique<flowc::MappedFile>(std::move(mapped)));
      file.bytes = loaded.files.back()->view();
    } else {
      loaded.texts.push_back(
          std::make_unique<std::string>(entry.at("text").get<std::string>()));
      file.bytes = *loaded.texts.back();
    }
    file.digest = flowc::cache::digestOf(file.bytes);
    action.inputs.push_back(std::move(file));
  }
  return loaded;
}

json outcomeJson(const remote::ActionOutcome &outcome, const std::string &outDir) {
  json outputs = json::array();
  for (const remote::OutputFile &file : outcome.outputs) {
    outputs.push_back({{"path", file.path}, {"digest", file.digest.toString()}});
    if (outDir.empty())
      continue;
    std::filesystem::path target = std::filesystem::path(outDir) / file.path;
    std::filesystem::create_directories(target.parent_path());
    std::ofstream(target, std::ios::binary) << file.bytes;
  }
  return {{"action_digest", outcome.actionDigest.toString()},
          {"exit_code", outcome.exitCode},
          {"cached", outcome.cached},
          {"worker", outcome.worker},
          {"stdout", outcome.stdoutText},
          {"stderr", outcome.stderrText},
          {"outputs", outputs}};
}

json countersJson(const remote::Counters &c) {
  return {{"executed", c.executed},
          {"cache_hits", c.cacheHits},
          {"blobs_uploaded", c.blobsUploaded},
          {"bytes_uploaded", c.bytesUploaded},
          {"blobs_downloaded", c.blobsDownloaded},
          {"bytes_downloaded", c.bytesDownloaded},
          {"streams_resumed", c.streamsResumed}};
}

} // namespace

int main(int argc, char **argv) {
  // Logs to stderr: stdout carries the JSON report.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("remote_probe"));
  spdlog::set_level(spdlog::level::warn);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return usage("no URL");
  std::string url = args[0], instance, command, specPath;
  int cancelAfterMs = -1;
  remote::ClientOptions options;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--instance" && i + 1 < args.size()) {
      instance = args[++i];
    } else if (args[i] == "--cancel-after-ms" && i + 1 < args.size()) {
      cancelAfterMs = std::stoi(args[++i]);
    } else if (args[i] == "--resume-window-s" && i + 1 < args.size()) {
      options.resumeWindow = std::chrono::seconds(std::stoi(args[++i]));
    } else if (command.empty()) {
      command = args[i];
    } else if (specPath.empty()) {
      specPath = args[i];
    } else {
      return usage("unexpected argument '" + args[i] + "'");
    }
  }
  Expected<remote::Endpoint> endpoint = remote::parseEndpoint(url, instance);
  if (!endpoint) {
    std::cerr << "remote_probe: " << endpoint.status().toString() << "\n";
    return 2;
  }
  Expected<std::unique_ptr<remote::RemoteExecutor>> executor =
      remote::RemoteExecutor::connect(*endpoint, options);
  if (!executor) {
    std::cerr << "remote_probe: " << executor.status().toString() << "\n";
    return 2;
  }
  if (command == "capabilities") {
    Status status = (*executor)->checkCapabilities();
    std::cout << json{{"ok", status.isOk()},
                      {"error", status.isOk() ? json() : errorJson(status)}}
              << "\n";
    return status.isOk() ? 0 : 1;
  }
  if (command != "execute" || specPath.empty())
    return usage("expected 'capabilities' or 'execute SPEC.json'");

  json spec;
  try {
    std::ifstream in(specPath);
    spec = json::parse(in);
  } catch (const json::exception &error) {
    return usage("spec " + specPath + ": " + error.what());
  }
  std::vector<LoadedAction> actions;
  try {
    for (const json &entry : spec.is_array() ? spec : json::array({spec})) {
      Expected<LoadedAction> loaded = loadAction(entry);
      if (!loaded)
        return usage("spec " + specPath + ": " + loaded.status().toString());
      actions.push_back(loaded.takeValue());
    }
  } catch (const json::exception &error) {
    return usage("spec " + specPath + ": " + error.what());
  }

  std::atomic<bool> cancelled{false};
  std::thread canceller;
  if (cancelAfterMs >= 0)
    canceller = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(cancelAfterMs));
      cancelled = true;
    });
  std::vector<json> outcomes(actions.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < actions.size(); ++i)
    threads.emplace_back([&, i] {
      Expected<remote::ActionOutcome> outcome = (*executor)->execute(
          actions[i].action, cancelAfterMs >= 0
                                 ? std::function<bool()>([&] { return cancelled.load(); })
                                 : nullptr);
      outcomes[i] = outcome ? outcomeJson(*outcome, actions[i].outDir)
                            : json{{"error", errorJson(outcome.status())}};
    });
  for (std::thread &thread : threads)
    thread.join();
  if (canceller.joinable())
    canceller.join();
  bool allRan = std::none_of(outcomes.begin(), outcomes.end(),
                             [](const json &o) { return o.contains("error"); });
  std::cout << json{{"outcomes", outcomes},
                    {"counters", countersJson((*executor)->counters())}}
            << "\n";
  return allRan ? 0 : 1;
}
