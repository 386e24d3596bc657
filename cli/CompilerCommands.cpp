// libflowc-cli-compiler.so: `flowc compile` (see CompilerModule.h). Its
// calls into flowc itself (reportError, printJson, placeLocalArtifact)
// resolve against the executable, which exports them.
#include "CompilerModule.h"
#include "PlaceArtifact.h"

#include "flowc/cache/Cache.h"
#include "flowc/runtime/Tuning.h"
#include "flowc/worker/Bundle.h"
#include "flowc/worker/CompileExecutor.h"
#include "flowc/worker/Tasks.h"

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <thread>

namespace flowc::cli {

namespace {

Expected<worker::CompileRequest> compileRequest(const std::string &model,
                                                const CompileFlags &flags) {
  worker::CompileRequest request;
  FLOWC_ASSIGN_OR_RETURN(request.modelPath, absoluteModelOrReproducer(model));
  FLOWC_ASSIGN_OR_RETURN(request.options.target, parseTarget(flags.target));
  request.options.optLevel = flags.optLevel;
  FLOWC_ASSIGN_OR_RETURN(request.options.precision, parsePrecision(flags.precision));
  request.options.disabledPasses = flags.disabledPasses;
  FLOWC_RETURN_IF_ERROR(request.options.validate());
  for (const std::string &spec : flags.inputShapes) {
    FLOWC_ASSIGN_OR_RETURN(auto shape, parseInputShape(spec));
    request.inputShapes[shape.first] = shape.second;
  }
  request.kind = flags.thin ? worker::ArtifactKind::Thin : worker::ArtifactKind::Packed;
  FLOWC_ASSIGN_OR_RETURN(request.search, SearchBudget::parse(flags.searchBudget));
  return request;
}

int runCompile(const CompileCommandOptions &options, GlobalOptions &global) {
  reportToStderrIfStandardOutput(options.output);
  auto request = compileRequest(options.model, options.compile);
  if (!request)
    return reportError(request.status());
  std::string output =
      options.output.empty()
          ? std::filesystem::path(request->modelPath).stem().string() + ".fca"
          : options.output;
  if (Status writable = checkOutputPath(output); !writable)
    return reportError(writable);
  auto cache = cache::Cache::open(global.cacheDir, {});
  if (!cache)
    return reportError(cache.status());
  unsigned threads = options.threads ? options.threads
                                     : std::max(1u, std::thread::hardware_concurrency());
  worker::InProcessTaskRunner tasks(**cache, FLOWC_BUILD_ID, threads);
  auto remoteGpus = runtime::parseGpuNames(options.remoteGpus);
  if (!remoteGpus)
    return reportError(remoteGpus.status().withContext("--remote-gpu"));
  // A daemon may share this cache: it evicts, knowing what its jobs pin.
  worker::CompileExecutor executor(**cache, FLOWC_BUILD_ID,
                                   worker::CompileExecutor::Eviction::Never, &tasks);
  executor.setRemoteGpus({*remoteGpus, /*measure=*/false});
  auto progress = [&](const worker::ProgressEvent &event) {
    if (!options.progress)
      return;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - global.started)
            .count();
    std::cerr << "flowc: [" << std::fixed << std::setprecision(3) << seconds << "s] "
              << event.stage << ": " << event.detail << "\n";
  };
  auto result = executor.compile(*request, progress);
  if (!result)
    return reportError(result.status());
  auto placed = placeLocalArtifact((*cache)->blobPath(result->artifactDigest),
                                   result->artifactDigest.size, output);
  if (!placed)
    return reportError(placed.status());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - global.started)
          .count();
  std::string hit = result->cacheHit ? "hit" : "miss";
  if (options.json) {
    printJson({{"artifact", output},
               {"artifact_digest", result->artifactDigest.toString()},
               {"model_digest", result->modelDigest.toString()},
               {"cache", hit},
               {"code_cache", result->codeCacheHit ? "hit" : "miss"},
               {"seconds", seconds},
               {"kernels_compiled", result->kernelsCompiled},
               {"kernels_reused", result->kernelsReused},
               {"search",
                {{"tunable_kernels", result->search.tunableKernels},
                 {"tuned_kernels", result->search.tunedKernels},
                 {"measured_kernels", result->search.measuredKernels},
                 {"candidates_measured", result->search.candidatesMeasured},
                 {"seconds", result->search.seconds},
                 {"budget_ended", result->search.budgetEnded}}},
               {"artifact_transfer", placementName(*placed)},
               {"threads", threads}});
    return 0;
  }
  std::cout << "flowc: compiled in-process, cache " << hit << " in " << std::fixed
            << std::setprecision(3) << seconds << " s -> " << output << " "
            << result->artifactDigest.toString() << std::endl;
  return 0;
}

void printBundle(const char *verb, const BundleCommandOptions &options,
                 const worker::BundleReport &report) {
  if (options.json) {
    printJson({{"bundle", options.bundle},
               {"entries", report.entries},
               {"blobs", report.blobs},
               {"blobs_present", report.blobsPresent},
               {"bytes", report.bytes}});
    return;
  }
  std::cout << "flowc: " << verb << " " << report.entries << " entries, " << report.blobs
            << " blobs (" << humanBytes(report.bytes) << ")"
            << (report.blobsPresent
                    ? ", " + std::to_string(report.blobsPresent) + " blobs already cached"
                    : "")
            << ": " << options.bundle << std::endl;
}

int runExport(const BundleCommandOptions &options, GlobalOptions &global) {
  auto request = compileRequest(options.model, options.compile);
  if (!request)
    return reportError(request.status());
  if (Status writable = checkOutputPath(options.bundle); !writable)
    return reportError(writable);
  // Reading only: a daemon may own this cache.
  cache::CacheOptions readOnly;
  readOnly.access = cache::CacheAccess::ReadOnly;
  auto cache = cache::Cache::open(global.cacheDir, readOnly);
  if (!cache)
    return reportError(cache.status());
  auto remoteGpus = runtime::parseGpuNames(options.remoteGpus);
  if (!remoteGpus)
    return reportError(remoteGpus.status().withContext("--remote-gpu"));
  worker::CompileExecutor executor(**cache, FLOWC_BUILD_ID,
                                   worker::CompileExecutor::Eviction::Never);
  executor.setRemoteGpus({*remoteGpus, /*measure=*/false});
  auto entries = executor.recordedEntries(*request);
  if (!entries)
    return reportError(entries.status());
  auto report = worker::writeBundle(**cache, *entries, options.bundle);
  if (!report)
    return reportError(report.status());
  printBundle("exported", options, *report);
  return 0;
}

int runImport(const BundleCommandOptions &options, GlobalOptions &global) {
  // Written as a worker writes: the daemon that owns the cache evicts.
  auto cache = cache::Cache::open(global.cacheDir, {});
  if (!cache)
    return reportError(cache.status());
  auto report = worker::readBundle(**cache, options.bundle);
  if (!report)
    return reportError(report.status());
  printBundle("imported", options, *report);
  return 0;
}

} // namespace

} // namespace flowc::cli

extern "C" __attribute__((visibility("default"))) const flowc::cli::CompilerModule *
flowcCliCompilerModule() {
  static const flowc::cli::CompilerModule module = {
      flowc::cli::runCompile, flowc::cli::runExport, flowc::cli::runImport};
  return &module;
}
