// Executes an artifact on the host CPU: loads its code object, binds the
// packed weights in place (no copy) and runs the graph.
#pragma once

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Tensor.h"

#include <map>
#include <memory>

namespace flowc::runtime {

class Session {
public:
  ~Session();

  /// Loads the artifact's code. Unavailable if the code object cannot be
  /// loaded on this host, DataLoss if it lacks the entry symbol.
  static Expected<std::unique_ptr<Session>> create(std::shared_ptr<Artifact> artifact);

  const Plan &plan() const { return artifact_->plan(); }

  /// Runs the graph once. `inputs` maps every plan input name to a tensor of
  /// exactly its shape (InvalidArgument otherwise). Returns outputs in plan
  /// order. Not thread-safe: one run at a time per session.
  Expected<std::vector<Tensor>> run(const std::map<std::string, Tensor> &inputs);

private:
  Session(std::shared_ptr<Artifact> artifact, void *library, void (*entry)(void **))
      : artifact_(std::move(artifact)), library_(library), entry_(entry) {}

  std::shared_ptr<Artifact> artifact_;
  void *library_;
  void (*entry_)(void **);
};

} // namespace flowc::runtime
