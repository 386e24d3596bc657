// Executes an artifact on the host CPU: loads its code object, binds the
// packed weights in place (no copy), connects its library kernels and runs
// the graph.
#pragma once

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Tensor.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace flowc::runtime {

class KernelContext;
struct KernelContextDeleter {
  void operator()(KernelContext *context) const;
};

struct SessionOptions {
  /// Threads library kernels use; 0 keeps the process default (all cores).
  int threads = 0;
  /// Time each kernel call of every run (Session::profile). Unavailable
  /// for code without profile marks (KernelAbi.h).
  bool profile = false;
};

/// One kernel call of the graph, over the runs a profiling session made.
struct KernelCallTiming {
  /// The callee: a loop kernel's symbol or a library kernel's function.
  std::string kernel;
  /// A library call's site and kind (kernelKindName); -1 and "loops" for a
  /// generated loop kernel.
  int64_t site = -1;
  std::string kind = "loops";
  /// Graph nodes it computes (indices in graph order).
  std::vector<int32_t> nodes;
  /// What ran: the library's implementation (oneDNN's impl_info_str), or
  /// "generated".
  std::string implementation = "generated";
  uint64_t calls = 0;
  double seconds = 0;
};

struct RunProfile {
  uint64_t runs = 0;
  /// Wall time of those runs in the generated code, kernels included.
  double seconds = 0;
  /// In the graph's call order.
  std::vector<KernelCallTiming> calls;
};

struct ProfileRecorder;

class Session {
public:
  ~Session();

  /// Loads the artifact's code. Unavailable if the code object cannot be
  /// loaded on this host or needs a kernel this runtime lacks, DataLoss if
  /// it lacks the entry symbol.
  static Expected<std::unique_ptr<Session>> create(std::shared_ptr<Artifact> artifact,
                                                   SessionOptions options = {});

  const Plan &plan() const { return artifact_->plan(); }

  /// Bytes of the activation arena allocated for this session (0: the code
  /// allocates its temporaries itself, as -O0 code does).
  uint64_t arenaBytes() const { return arenaBytes_; }
  /// Library kernel call sites (convolutions, matrix products) in the code.
  int64_t libraryKernelSites() const;
  /// Library kernel sites made so far (on their first run) that read their
  /// weights in place from the artifact's packed weights.
  int64_t prepackedWeightsInUse() const;

  /// Runs the graph once. `inputs` maps every plan input name to a tensor of
  /// exactly its shape (InvalidArgument otherwise). Returns outputs in plan
  /// order. Not thread-safe: one run at a time per session.
  Expected<std::vector<Tensor>> run(const std::map<std::string, Tensor> &inputs);

  /// Runs the graph once on caller memory: `inputs[i]` holds plan().inputs[i]
  /// and the code writes plan().outputs[i] into `outputs[i]`, each buffer
  /// dense, of exactly its spec's size and aligned to its element size (the
  /// caller checks; this does not: the C API and run() do). Not thread-safe.
  Status runInPlace(const std::vector<const void *> &inputs,
                    const std::vector<void *> &outputs);

  /// What the runs since creation spent per kernel call; empty unless the
  /// session was created with `profile`.
  RunProfile profile() const;

private:
  Status startProfiling();
  void applyThreads() const;
  Status allocateArena();

  Session(std::shared_ptr<Artifact> artifact, void *library, void (*entry)(void **),
          SessionOptions options)
      : artifact_(std::move(artifact)), library_(library), entry_(entry),
        options_(options) {}

  std::shared_ptr<Artifact> artifact_;
  void *library_;
  void (*entry_)(void **);
  SessionOptions options_;
  uint64_t arenaBytes_ = 0;
  std::unique_ptr<std::byte, void (*)(void *)> arena_{nullptr, std::free};
  std::shared_ptr<ProfileRecorder> profile_;
  /// Declared last: destroyed before the code it serves is unloaded.
  std::unique_ptr<KernelContext, KernelContextDeleter> kernels_;
};

} // namespace flowc::runtime
