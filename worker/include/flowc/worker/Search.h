// Search: trial-run autotuning as a compile phase (docs/search.md).
//
// After the plan, every tunable kernel (a library kernel call site, a loop
// kernel with more than one candidate) gets a signature; kernels of equal
// signature are one search. A tuning record for (signature, this device,
// the versions its time depends on) decides the candidate, whatever the
// budget. The others, while the budget lasts, become `measure` tasks: they
// run on the job's executors (local worker processes, remote workers of the
// same platform), on random data of the kernel's shapes, never a weight,
// and their timings become records. What is chosen goes into the code (loop
// kernels are compiled with their candidate) and the artifact's plan
// (library sites), with the record each came from.
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/compiler/Compiler.h"
#include "flowc/runtime/Artifact.h"
#include "flowc/support/SearchBudget.h"
#include "flowc/support/Status.h"
#include "flowc/worker/RemoteTier.h"
#include "flowc/worker/Tasks.h"

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace flowc::worker {

/// What search did in one compile (CompileResult::search).
struct SearchSummary {
  unsigned tunableKernels = 0;
  unsigned tunedKernels = 0;
  unsigned measuredKernels = 0;
  unsigned candidatesMeasured = 0;
  double seconds = 0;
  bool budgetEnded = false;
  /// A CUDA compile: the GPU whose records decided its library kernels
  /// (empty: none), the others choose by trial runs when they first run.
  std::string gpuDevice;
};

/// The machine a measurement describes: CPU name and features (LLVM's
/// host description) and the cores kernels run on.
const std::string &deviceDescriptor();

/// The farm's GPUs (`flowcd --remote-gpu`) beyond this machine's.
struct RemoteGpus {
  /// runtime::gpuTuningDevice form: "gpu NVIDIA H200 sm_90".
  std::vector<std::string> devices;
  /// The task runner's remote engine has workers offering them (each
  /// `gpu=NVIDIA H200 sm_90`): measure tasks may ask for one.
  bool measure = false;
};

/// The GPU whose tuning records decide the library kernels of a compile
/// for CUDA `target` (runtime::gpuTuningDevice form): this machine's device
/// 0 when it has the target's compute capability, else the first of
/// `remoteGpus` (the farm's, `flowcd --remote-gpu`) that has it, else the
/// GPU of that capability measured last in `cache`'s records; nullopt when
/// there is none of these: the artifact's sessions then choose by trial
/// runs.
Expected<std::optional<std::string>>
gpuTuningDeviceFor(cache::Cache &cache, Target target,
                   const std::vector<std::string> &remoteGpus = {});

/// What search chose for a compile's kernels.
struct SearchChoices {
  /// Loop kernels' candidates, by plan index (empty: the default).
  std::vector<std::string> loopCandidates;
  /// Every kernel that runs a chosen candidate, with its record.
  std::vector<runtime::TunedKernelSpec> tuned;
  SearchSummary summary;
};

/// Decides every tunable kernel of `plan`: from `cache`'s records (merged
/// with the `remote` tier's, when there is one), and by measure tasks on
/// `runner` within `budget` for those without one. New records, and GPU
/// records the tier lacks (sessions' trial runs), are published to
/// `remote`. A GPU kernel is measured only on its GPU: this machine's, or
/// one of `remoteGpus` that `runner`'s remote engine offers (the task then
/// waits at most the budget for it). A measure task that fails leaves its
/// kernels at their default with a warning (`warn` is told why); the
/// compile goes on.
Expected<SearchChoices>
searchKernels(cache::Cache &cache, RemoteTier *remote, TaskRunner &runner,
              const compiler::CompilePlan &plan, const compiler::CompileOptions &options,
              const SearchBudget &budget, const RemoteGpus &remoteGpus,
              const std::string &buildId,
              const std::function<void(const std::string &)> &warn);

/// Whether a task.json's "measure" object is a GPU kernel's (its "gpu" is
/// true): measured on the GPU its "device" names.
bool isGpuMeasure(const nlohmann::json &measure);

/// Runs a measure task: `measure` is its task.json's "measure" object, a
/// loop kernel's IR is `kernelFile` in `inputDir`; the measurement goes to
/// `outputFile` in `outputDir`. FailedPrecondition when the task describes
/// another device than this machine (another CPU, or a GPU this machine
/// lacks): a measurement is never taken on a machine other than the one it
/// describes.
Status runMeasureTask(const nlohmann::json &measure,
                      const compiler::CompileOptions &options,
                      const std::string &inputDir, const std::string &outputDir,
                      const std::string &kernelFile, const std::string &outputFile);

} // namespace flowc::worker
