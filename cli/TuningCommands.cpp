// `flowc tuning` in libflowc-cli-runtime.so (see TuningCommand.cpp): the
// cache's tuning records, listed, exported, imported and cleared through
// the cache API on the directory itself.
#include "RuntimeModule.h"

#include "flowc/cache/Cache.h"
#include "flowc/support/MappedFile.h"

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace flowc::cli {

namespace {

using Action = TuningCommandOptions::Action;

/// Opens the cache read-write, as a worker does (migrating an older index;
/// a daemon may share it). A cache that cannot be written is read in place
/// for the commands that only read.
Expected<std::unique_ptr<cache::Cache>> openCache(const GlobalOptions &global,
                                                  Action action) {
  auto cache = cache::Cache::open(global.cacheDir, {});
  bool readsOnly = action == Action::List || action == Action::Export;
  if (cache || !readsOnly || cache.status().code() != StatusCode::Unavailable)
    return cache;
  cache::CacheOptions readOnly;
  readOnly.access = cache::CacheAccess::ReadOnly;
  return cache::Cache::open(global.cacheDir, readOnly);
}

/// "sha256:abcdef...1234" style: the head and the tail of a long text, so
/// that kernels with a common prefix stay apart.
std::string shorten(const std::string &text, size_t width) {
  if (text.size() <= width)
    return text;
  size_t tail = 10;
  return text.substr(0, width - tail - 3) + "..." + text.substr(text.size() - tail);
}

/// "850 ns", "12.4 us", "3.07 ms", "1.25 s".
std::string humanNs(int64_t ns) {
  std::ostringstream out;
  double value = static_cast<double>(ns);
  const char *unit = "ns";
  for (const char *next : {"us", "ms", "s"}) {
    if (value < 1000)
      break;
    value /= 1000;
    unit = next;
  }
  int decimals = unit[0] == 'n' ? 0 : value < 10 ? 2 : value < 100 ? 1 : 0;
  out << std::fixed << std::setprecision(decimals) << value << " " << unit;
  return out.str();
}

/// "42s", "17m", "5h", "3d" since `measuredMs`; a time ahead of this
/// machine's clock (another machine's) reads "0s".
std::string age(int64_t measuredMs) {
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  int64_t seconds = std::max<int64_t>(0, (now - measuredMs) / 1000);
  if (seconds < 120)
    return std::to_string(seconds) + "s";
  if (seconds < 120 * 60)
    return std::to_string(seconds / 60) + "m";
  if (seconds < 48 * 3600)
    return std::to_string(seconds / 3600) + "h";
  return std::to_string(seconds / 86400) + "d";
}

std::string forDevice(const std::string &device) {
  return device.empty() ? "" : " for device '" + device + "'";
}

int runList(cache::Cache &cache, const TuningCommandOptions &options) {
  if (options.json) {
    // The export's records: one spelling of a record in JSON.
    auto document = cache.exportTuning(options.device);
    if (!document)
      return reportError(document.status());
    printJson(nlohmann::json::parse(*document)["records"]);
    return 0;
  }
  auto records = cache.listTuning(options.device);
  if (!records)
    return reportError(records.status());
  if (records->empty()) {
    std::cout << "flowc: no tuning records" << forDevice(options.device) << " in "
              << cache.root() << std::endl;
    return 0;
  }
  // The device goes last, whole: it is long, and what --device takes.
  auto row = [](const std::string &signature, const std::string &candidate,
                const std::string &time, const std::string &samples,
                const std::string &host, const std::string &age,
                const std::string &device) {
    std::cout << std::left << std::setw(42) << signature << " " << std::setw(16)
              << candidate << " " << std::setw(22) << time << " " << std::setw(7)
              << samples << " " << std::setw(16) << host << " " << std::setw(5) << age
              << " " << device << "\n";
  };
  row("SIGNATURE", "CANDIDATE", "TIME", "SAMPLES", "HOST", "AGE", "DEVICE");
  for (const cache::TuningRecord &record : *records)
    row(shorten(record.signature, 42), shorten(record.candidate, 16),
        humanNs(record.timeNs) + " +- " + humanNs(record.spreadNs),
        std::to_string(record.samples), shorten(record.host, 16), age(record.measuredMs),
        record.device);
  std::cout.flush();
  return 0;
}

int runExport(cache::Cache &cache, const TuningCommandOptions &options) {
  auto document = cache.exportTuning(options.device);
  if (!document)
    return reportError(document.status());
  if (options.file.empty()) {
    std::cout << *document << std::flush;
    return 0;
  }
  if (Status written = writeFileAtomically(options.file, *document); !written)
    return reportError(written.withContext("cannot write -o '" + options.file + "'"));
  size_t count = nlohmann::json::parse(*document)["records"].size();
  if (options.json)
    printJson({{"file", options.file}, {"records", count}});
  else
    std::cout << "flowc: exported " << count << " tuning records"
              << forDevice(options.device) << " to " << options.file << std::endl;
  return 0;
}

int runImport(cache::Cache &cache, const TuningCommandOptions &options) {
  std::string context = "cannot import tuning records from '" + options.file + "'";
  // readFileToString refuses what is not a regular file (a directory, a
  // FIFO, which it opens without blocking).
  auto document = readFileToString(options.file);
  if (!document)
    return reportError(document.status().withContext(context));
  auto report = cache.importTuning(*document);
  if (!report)
    return reportError(report.status().withContext(context));
  if (options.json) {
    printJson({{"file", options.file},
               {"imported", report->imported},
               {"ignored", report->ignored},
               {"stale", report->stale}});
    return 0;
  }
  std::cout << "flowc: imported " << report->imported << " tuning records from "
            << options.file << "; ignored " << report->ignored
            << " not valid (warned above), kept " << report->stale
            << " held already as new or newer" << std::endl;
  return 0;
}

int runClear(cache::Cache &cache, const TuningCommandOptions &options) {
  auto removed = cache.clearTuning(options.device);
  if (!removed)
    return reportError(removed.status());
  if (options.json)
    printJson({{"removed", *removed}});
  else
    std::cout << "flowc: removed " << *removed << " tuning records"
              << forDevice(options.device) << std::endl;
  return 0;
}

} // namespace

int runTuning(const TuningCommandOptions &options, GlobalOptions &global) {
  // The cache's warnings (a corrupt record, an ignored import) go to stderr
  // (main.cpp's logger), never into an export or a --json value on stdout.
  auto cache = openCache(global, options.action);
  if (!cache)
    return reportError(cache.status());
  switch (options.action) {
  case Action::List:
    return runList(**cache, options);
  case Action::Export:
    return runExport(**cache, options);
  case Action::Import:
    return runImport(**cache, options);
  case Action::Clear:
    return runClear(**cache, options);
  }
  return kExitUsage;
}

} // namespace flowc::cli
