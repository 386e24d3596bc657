// ONNX ingest as flowcd does it: parse the model over its mapping, import it
// to weight-free graph IR, hash the IR and every weight and, with --store,
// put the weights and the IR into a cache. Prints the time of each phase,
// the weight bytes and rates, and the peak RSS; asserts nothing.
// bench/ingest_bench.py runs it next to Python's `onnx.load`.
//
//   ingest_bench MODEL.onnx [--store DIR] [--json]
//
// The reference is one core's SHA-256 over bytes already in memory, per
// CPU-second (other load on the machine does not change it): hashing is
// bound by it, and the hash phase's CPU time says how close it comes. The
// store is bound by the disk.
#include "flowc/cache/Cache.h"
#include "flowc/cache/Digest.h"
#include "flowc/compiler/Compiler.h"
#include "flowc/compiler/OnnxModel.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <thread>
#include <time.h>
#include <vector>

namespace {

using namespace flowc;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::string storeDir;
  bool json = false;
};

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// A figure of /proc/self/status in MiB ("VmHWM", "VmRSS"); -1 if absent.
double procStatusMiB(std::string_view key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(key) && line.size() > key.size() && line[key.size()] == ':')
      return std::strtod(line.c_str() + key.size() + 1, nullptr) / 1024;
  return -1;
}

/// User + system CPU seconds of this process so far.
double processCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval &tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

/// GiB of SHA-256 per CPU-second on one core, over 256 MiB of bytes
/// already in memory.
double sha256GibPerCpuSecond() {
  std::string buffer(16 << 20, '\0');
  for (size_t i = 0; i < buffer.size(); ++i)
    buffer[i] = static_cast<char>(i * 2654435761u >> 24);
  constexpr int kRounds = 16;
  double start = threadCpuSeconds();
  for (int round = 0; round < kRounds; ++round)
    (void)cache::digestOf(buffer);
  return gib(uint64_t{buffer.size()} * kRounds) / (threadCpuSeconds() - start);
}

int fail(const Status &status) {
  std::fprintf(stderr, "ingest_bench: error: %s\n", status.toString().c_str());
  return 1;
}

bool parseArgs(int argc, char **argv, Options &options) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json")
      options.json = true;
    else if (arg == "--store" && i + 1 < argc)
      options.storeDir = argv[++i];
    else if (!arg.starts_with("--") && options.model.empty())
      options.model = arg;
    else
      return false;
  }
  return !options.model.empty();
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (!parseArgs(argc, argv, options)) {
    std::fprintf(stderr, "usage: ingest_bench MODEL.onnx [--store DIR] [--json]\n");
    return 2;
  }
  nlohmann::json out = {{"model", options.model},
                        {"cores", std::thread::hardware_concurrency()}};
  // The binary's own floor: libMLIR and libLLVM pages and static state.
  nlohmann::json peaks = {{"start", procStatusMiB("VmHWM")}};

  // Parse: the file is mapped and walked; initializers stay views.
  auto start = Clock::now();
  auto model = compiler::loadOnnxModel(options.model);
  if (!model)
    return fail(model.status());
  out["parse_s"] = since(start);
  peaks["parse"] = procStatusMiB("VmHWM");

  // Import: weight-free graph IR as MLIR bytecode.
  start = Clock::now();
  auto graph = compiler::importOnnx(*model);
  if (!graph)
    return fail(graph.status());
  out["import_s"] = since(start);
  peaks["import"] = procStatusMiB("VmHWM");

  // Hash: the IR and every weight, on every core, as worker::ingestModel.
  std::vector<std::string_view> weights;
  uint64_t weightBytes = 0;
  for (const compiler::WeightRef &weight : graph->weights) {
    weights.push_back(weight.bytes);
    weightBytes += weight.bytes.size();
  }
  start = Clock::now();
  double cpuStart = processCpuSeconds();
  (void)cache::digestOf(graph->irBytecode);
  std::vector<cache::Digest> digests = cache::digestMany(weights);
  double hashSeconds = since(start);
  out["hash_s"] = hashSeconds;
  out["hash_cpu_s"] = processCpuSeconds() - cpuStart;
  out["hash_gib_s"] = gib(weightBytes) / hashSeconds;
  peaks["hash"] = procStatusMiB("VmHWM");
  double ingestSeconds =
      out["parse_s"].get<double>() + out["import_s"].get<double>() + hashSeconds;

  // Store: the weights and the IR become blobs, as CompileExecutor::compile.
  if (!options.storeDir.empty()) {
    start = Clock::now();
    cpuStart = processCpuSeconds();
    auto cache = cache::Cache::open(options.storeDir);
    if (!cache)
      return fail(cache.status());
    auto stored = (*cache)->putMany(weights);
    if (!stored)
      return fail(stored.status());
    auto ir = (*cache)->put(graph->irBytecode);
    if (!ir)
      return fail(ir.status());
    double storeSeconds = since(start);
    out["store_s"] = storeSeconds;
    out["store_cpu_s"] = processCpuSeconds() - cpuStart;
    out["store_gib_s"] = gib(weightBytes) / storeSeconds;
    peaks["store"] = procStatusMiB("VmHWM");
    ingestSeconds += storeSeconds;
  }

  out["weights"] = graph->weights.size();
  out["weight_bytes"] = weightBytes;
  out["external_files"] = model->externalFiles.size();
  out["ingest_s"] = ingestSeconds;
  out["peak_rss_mib"] = procStatusMiB("VmHWM");
  out["peak_rss_mib_after"] = peaks;
  // Last, so that its buffer does not count in the peak above.
  out["sha256_gib_per_cpu_s"] = sha256GibPerCpuSecond();

  if (options.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  auto figure = [&](const char *key) { return out[key].get<double>(); };
  std::printf("model            %s (%zu weights, %zu external data files)\n",
              options.model.c_str(), graph->weights.size(), model->externalFiles.size());
  std::printf("weight bytes     %.3f GiB\n", gib(weightBytes));
  std::printf("parse            %.3f s\n", figure("parse_s"));
  std::printf("import           %.3f s\n", figure("import_s"));
  std::printf("hash             %.3f s  %.2f GiB/s on %u cores, CPU %.3f s\n",
              figure("hash_s"), figure("hash_gib_s"), std::thread::hardware_concurrency(),
              figure("hash_cpu_s"));
  if (out.contains("store_s"))
    std::printf("store            %.3f s  %.2f GiB/s into %s, CPU %.3f s\n",
                figure("store_s"), figure("store_gib_s"), options.storeDir.c_str(),
                figure("store_cpu_s"));
  std::printf("ingest           %.3f s\n", figure("ingest_s"));
  std::string storePeak;
  if (peaks.contains("store"))
    storePeak = ", store " + std::to_string(std::lround(peaks["store"].get<double>()));
  std::printf(
      "peak RSS         %.0f MiB (VmHWM at start %.0f, after parse %.0f, import %.0f, "
      "hash %.0f%s)\n",
      figure("peak_rss_mib"), peaks["start"].get<double>(), peaks["parse"].get<double>(),
      peaks["import"].get<double>(), peaks["hash"].get<double>(), storePeak.c_str());
  std::printf("sha256 reference %.2f GiB per CPU-second (one core, bytes in memory)\n",
              figure("sha256_gib_per_cpu_s"));
  return 0;
}
