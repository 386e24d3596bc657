// Weight-free reproducers: a directory holding a model's graph IR
// (graph.mlirbc) and a manifest (repro.json) with its inputs, outputs,
// weight shapes, compile options and the toolchain that wrote it. Weight
// values are not stored: each is generated from a seed when the reproducer
// is loaded, so a reproducer of a 1 GB model is a few hundred kB and still
// compiles (and runs) like the model. The format is in docs/repro.md.
#pragma once

#include "flowc/compiler/Compiler.h"
#include "flowc/worker/CompileExecutor.h"

#include <cstdint>
#include <string>

namespace flowc::worker {

inline constexpr const char *kReproFormat = "flowc.repro.v1";
inline constexpr const char *kReproManifestFile = "repro.json";
inline constexpr const char *kReproGraphFile = "graph.mlirbc";

/// How one weight's values are made at load time.
struct WeightInit {
  enum class Kind { Uniform, Splat };
  Kind kind = Kind::Uniform;
  /// Element i depends on (seed, i) only: the same on every machine and for
  /// any number of generating threads.
  uint64_t seed = 0;
  /// Uniform: [low, high) for floating-point types, [low, high] for integers.
  double low = -0.1;
  double high = 0.1;
  /// Splat: every element.
  double value = 0;
};

/// What the daemon records about itself in a new reproducer.
struct ReproToolchain {
  std::string buildId;    ///< FLOWC_BUILD_ID, part of every cache key.
  std::string hostTarget; ///< compiler::hostTargetDescription().
};

/// A loaded reproducer, shaped like what ingestModel imports from ONNX.
struct LoadedReproducer {
  /// path = the directory; opset and producer of the source model; nodes
  /// carry names, op types and the attributes the static profile reads.
  compiler::OnnxModel model;
  /// IR as read; weights generated into owned storage.
  compiler::ImportedGraph graph;
  /// The options the reproducer was made with.
  compiler::CompileOptions options;
  /// Wall time spent generating weight values.
  double generateSeconds = 0;
};

/// True when `path` names a directory: flowc reads directories as
/// reproducers (and reports what is missing when one is not).
bool isReproducerPath(const std::string &path);

/// The repro.json text for `ingested` compiled with `options`. Weights get
/// seeds derived from their keys and value ranges that keep the graph's
/// arithmetic finite (positive where an op needs it, e.g. a variance).
std::string makeReproManifest(const IngestedModel &ingested,
                              const compiler::CompileOptions &options,
                              const ReproToolchain &toolchain);

/// Reads and validates the reproducer in directory `dir`: repro.json's
/// fields, graph.mlirbc parsing and verifying, and @main's inputs, weights
/// and results matching the manifest; then generates every weight.
/// NotFound for a missing file, InvalidArgument (naming the file and field)
/// for a malformed or mismatching manifest, DataLoss for IR that does not
/// parse, ResourceExhausted when the weights would not fit in memory.
/// Thread-safe.
Expected<LoadedReproducer> loadReproducer(const std::string &dir);

/// Writes `elements` values of `dtype` per `init` into `out`
/// (elements * dtypeSize(dtype) bytes). InvalidArgument for a dtype flowc
/// cannot store. Uses up to `threads` threads (0: one per core).
Status generateWeight(const WeightInit &init, compiler::DType dtype, char *out,
                      size_t elements, unsigned threads = 0);

} // namespace flowc::worker
