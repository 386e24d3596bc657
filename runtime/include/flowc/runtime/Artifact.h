// The `.fca` artifact container: a versioned header, a section table and
// sections (metadata, graph IR bytecode, code object, execution plan,
// packed weights). Weights are page-aligned so the runtime maps them in
// place. The runtime owns the format; the compiler side uses the writer.
#pragma once

#include "flowc/runtime/KernelAbi.h"
#include "flowc/support/AtomicFile.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/Sha256.h"
#include "flowc/support/Status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flowc::runtime {

inline constexpr char kArtifactMagic[8] = {'F', 'L', 'O', 'W', 'C', 'F', 'C', 'A'};
/// 2: the header and every section carry SHA-256 digests (docs/artifact.md).
inline constexpr uint32_t kArtifactVersion = 2;
inline constexpr uint64_t kPageSize = 4096;
/// Sections are digested in chunks of this many bytes, and the chunks'
/// digests digested again (sectionDigests), so that a large section is
/// verified on every core. Part of the format.
inline constexpr uint64_t kDigestChunkBytes = 8 << 20;
/// More sections than kinds is a damaged table, whatever its count says.
inline constexpr uint32_t kMaxSections = 16;

enum class SectionKind : uint32_t {
  Metadata = 1, ///< JSON: model digest, compiler build, options, op counts.
  GraphIr = 2,  ///< MLIR bytecode of the graph, without weight data.
  Code = 3,     ///< ELF shared object exporting `flowc_entry`.
  Plan = 4,     ///< JSON: entry symbol, inputs, outputs, weight table.
  Weights = 5,  ///< Packed weights, each page-aligned.
};

/// "metadata", "graph IR", "code", "plan", "weights": how messages name it.
const char *sectionName(SectionKind kind);

/// The digest of each section as the format defines it: SHA-256 over the
/// SHA-256 of each kDigestChunkBytes chunk, hashed on up to `threads`
/// threads (0: one per core). Thread-safe.
std::vector<Sha256> sectionDigests(const std::vector<std::string_view> &sections,
                                   unsigned threads = 0,
                                   HashedPages pages = HashedPages::Keep);

struct TensorSpec {
  std::string name;
  std::string dtype; ///< "float32"
  std::vector<int64_t> shape;
  /// Bytes of a tensor of this spec; only meaningful once validate() passed.
  uint64_t byteSize() const;
  /// OK when the dtype is known, every dimension non-negative and the byte
  /// size fits in 62 bits; DataLoss naming `what` and the fault otherwise.
  Status validate(const std::string &what) const;
};

struct WeightSpec {
  TensorSpec tensor; ///< tensor.name is the weight's resource key.
  std::string digest;
  uint64_t offset = 0; ///< Within the Weights section (unless external).
  uint64_t size = 0;
  /// Not in the artifact (a thin one): found by digest in a cache.
  bool external = false;
};

/// A constant weight of one library kernel call site already in the layout
/// the site's kernel reads (oneDNN's blocked layouts), packed at link time:
/// sessions read it in place from the mapped artifact instead of repacking
/// their own copy. `layout` describes the layout; a session whose kernel
/// wants another one (another CPU, another library build) repacks as usual.
struct PackedWeightSpec {
  int64_t site = 0;
  int64_t buffer = 0;
  std::string layout;
  std::string digest;
  uint64_t offset = 0; ///< Within the Weights section (unless external).
  uint64_t size = 0;
  bool external = false;
};

/// A kernel search chose a candidate for (runtime/Tuning.h, docs/search.md),
/// and the tuning record the choice came from. A library kernel site
/// (`site` >= 0) runs `candidate`; a loop kernel's (`site` -1, `kernel` its
/// symbol) was compiled with it. Sites not listed run their default.
struct TunedKernelSpec {
  int64_t site = -1;
  std::string kernel;
  std::string signature;
  std::string candidate;
  /// The record: its median and spread, where and when it was measured.
  int64_t timeNs = 0;
  int64_t spreadNs = 0;
  std::string host;
  int64_t measuredMs = 0;
};

/// Plan::tuned as JSON, and back (DataLoss naming the entry that is not
/// one): also how compiled code's weight list carries it.
nlohmann::json tunedKernelsJson(const std::vector<TunedKernelSpec> &tuned);
Expected<std::vector<TunedKernelSpec>> tunedKernelsFromJson(const nlohmann::json &json);

struct Plan {
  std::string entry;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<WeightSpec> weights;
  std::vector<PackedWeightSpec> packed;
  std::vector<TunedKernelSpec> tuned;

  nlohmann::json toJson() const;
  static Expected<Plan> fromJson(const nlohmann::json &json);
};

/// Streams an artifact to a file: sections in order, then the table.
/// Not thread-safe. The file appears at `path` only after finish().
class ArtifactWriter {
public:
  static Expected<std::unique_ptr<ArtifactWriter>> create(const std::string &path);

  Status addSection(SectionKind kind, std::string_view bytes);
  /// Adds the Weights section from pieces, each starting on a page boundary;
  /// returns each piece's offset within the section.
  Expected<std::vector<uint64_t>> addWeights(const std::vector<std::string_view> &pieces);
  /// Digests every section (in parallel, from the written file), writes the
  /// table and the header with their digests, fsyncs and renames into place.
  Status finish();

private:
  explicit ArtifactWriter(AtomicFile file) : file_(std::move(file)) {}
  Status write(std::string_view bytes);
  Status padTo(uint64_t alignment);

  struct Entry {
    SectionKind kind;
    uint64_t offset;
    uint64_t size;
  };
  /// Removed unless finish() renamed it into place.
  AtomicFile file_;
  uint64_t position_ = 0;
  std::vector<Entry> entries_;
};

/// Finds an external weight of a thin artifact by digest ("sha256:<hex>/<size>"):
/// its bytes mapped read-only, or NotFound naming the digest and where it
/// looked. `metadata` is the artifact's (its "weights_cache" says which
/// cache linked it).
using ExternalWeightSource = std::function<Expected<MappedFile>(
    const std::string &digest, const nlohmann::json &metadata)>;

/// Whether Artifact::open checks the digests. The bounds of the header, the
/// table, the code object and the plan are checked either way.
enum class Verification {
  /// Every section and external weight against its SHA-256 (the default).
  Digests,
  /// No digests: for benchmarks of open only (`flowc run --no-verify`); a
  /// damaged byte inside a section's bounds then goes unnoticed.
  BoundsOnly,
};

struct OpenOptions {
  Verification verification = Verification::Digests;
  /// Maps a thin artifact's external weights; without one they stay
  /// unresolved (inspect works, sessions refuse).
  ExternalWeightSource external;
  /// Threads that hash; 0: one per core.
  unsigned threads = 0;
};

/// A mapped, validated artifact. Immutable and thread-safe once opened.
class Artifact {
public:
  /// Maps and validates `path`. InvalidArgument for a file that is no
  /// artifact (bad magic, shorter than the header), FailedPrecondition for
  /// another format version (rebuild it), DataLoss naming the file and the
  /// section for a damaged one: a digest that does not match, a header,
  /// table, code object or plan out of bounds, a truncated or extended file.
  /// NotFound / DataLoss from `options.external` for an external weight.
  static Expected<std::shared_ptr<Artifact>> open(const std::string &path,
                                                  const OpenOptions &options = {});

  /// The bytes of plan().weights[i] / plan().packed[i]; empty for an
  /// external weight that was not resolved.
  std::string_view weightBytes(size_t i) const { return weightBytes_[i]; }
  std::string_view packedBytes(size_t i) const { return packedBytes_[i]; }
  /// Whether weights live outside the file (a thin artifact).
  bool isThin() const;
  /// OK when every weight's bytes are at hand; FailedPrecondition naming
  /// the first external weight that is not, and how to make it resolvable.
  Status requireWeights() const;

  /// The section's bytes; empty if absent.
  std::string_view section(SectionKind kind) const;
  /// The section's digest as the table records it (all zeros if absent).
  const Sha256 &sectionDigest(SectionKind kind) const;
  /// How open() checked the file.
  Verification verification() const { return verification_; }
  const Plan &plan() const { return plan_; }
  const nlohmann::json &metadata() const { return metadata_; }
  const std::string &path() const { return file_.path(); }
  uint64_t fileSize() const { return file_.size(); }

private:
  struct Section {
    SectionKind kind;
    std::string_view bytes;
    Sha256 digest;
  };
  MappedFile file_;
  Verification verification_ = Verification::Digests;
  std::vector<Section> sections_;
  Plan plan_;
  nlohmann::json metadata_;
  std::vector<MappedFile> externalFiles_;
  std::vector<std::string_view> weightBytes_;
  std::vector<std::string_view> packedBytes_;
};

} // namespace flowc::runtime
