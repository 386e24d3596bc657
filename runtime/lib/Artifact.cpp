#include "flowc/runtime/Artifact.h"

#include "flowc/runtime/Tensor.h"

#include "flowc/support/MappedFile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

namespace flowc::runtime {

namespace {

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t sectionCount;
  uint64_t tableOffset;
  uint64_t fileSize;
  /// SHA-256 of this header (with these bytes zero) followed by the table.
  uint8_t digest[32];
};
static_assert(sizeof(FileHeader) == 64);

struct SectionEntry {
  uint32_t kind;
  uint32_t reserved;
  uint64_t offset;
  uint64_t size;
  uint8_t digest[32]; ///< sectionDigests() of the section's bytes.
};
static_assert(sizeof(SectionEntry) == 56);

/// Below this many bytes in all, hashing on one thread beats starting more.
constexpr uint64_t kParallelHashBytes = 4 * kDigestChunkBytes;
/// Tensors above 2^62 bytes are damage, and their sizes would overflow.
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 62;
constexpr size_t kMaxRank = 64;

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

bool isKnownKind(uint32_t kind) { return kind >= 1 && kind <= 5; }

uint64_t alignmentOf(SectionKind kind) {
  return kind == SectionKind::Weights ? kPageSize : 64;
}

Sha256 headerDigest(FileHeader header, std::string_view table) {
  std::memset(header.digest, 0, sizeof header.digest);
  Sha256Hasher hasher;
  hasher.update(&header, sizeof header);
  hasher.update(table);
  return hasher.finish();
}

Sha256 toSha256(const uint8_t (&bytes)[32]) {
  Sha256 hash;
  std::memcpy(hash.data(), bytes, hash.size());
  return hash;
}

/// Whether `digest` is "sha256:<64 lowercase hex>/<size>" for `size` bytes.
std::optional<Sha256> parseWeightDigest(const std::string &digest, uint64_t size) {
  constexpr std::string_view prefix = "sha256:";
  std::string_view text = digest;
  if (!text.starts_with(prefix) || text.size() < prefix.size() + 66 ||
      text[prefix.size() + 64] != '/')
    return std::nullopt;
  std::string_view sizeText = text.substr(prefix.size() + 65);
  uint64_t stated = 0;
  auto [end, ec] =
      std::from_chars(sizeText.data(), sizeText.data() + sizeText.size(), stated);
  if (ec != std::errc() || end != sizeText.data() + sizeText.size() || stated != size)
    return std::nullopt;
  return parseSha256Hex(text.substr(prefix.size(), 64));
}

bool isSymbolName(const std::string &name) {
  if (name.empty() || name.size() > 256 ||
      std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

/// What is wrong with the ELF headers of `code` (empty if nothing): dlopen
/// trusts them, so they are checked against the section's bounds before it
/// sees them, verified or not.
std::string codeObjectFault(std::string_view code) {
  if (code.size() < sizeof(Elf64_Ehdr))
    return "shorter than an ELF header";
  Elf64_Ehdr elf;
  std::memcpy(&elf, code.data(), sizeof elf);
  if (std::memcmp(elf.e_ident, ELFMAG, SELFMAG) != 0)
    return "not an ELF object";
  if (elf.e_ident[EI_CLASS] != ELFCLASS64 || elf.e_ident[EI_DATA] != ELFDATA2LSB)
    return "not a 64-bit little-endian ELF object";
  if (elf.e_type != ET_DYN)
    return "not a shared object";
  uint64_t size = code.size();
  if (elf.e_phentsize != sizeof(Elf64_Phdr) || elf.e_phnum == 0 || elf.e_phoff > size ||
      uint64_t(elf.e_phnum) * sizeof(Elf64_Phdr) > size - elf.e_phoff)
    return "program headers out of bounds";
  if (elf.e_shnum != 0 &&
      (elf.e_shentsize != sizeof(Elf64_Shdr) || elf.e_shoff > size ||
       uint64_t(elf.e_shnum) * sizeof(Elf64_Shdr) > size - elf.e_shoff ||
       elf.e_shstrndx >= elf.e_shnum))
    return "section headers out of bounds";
  for (uint16_t i = 0; i < elf.e_phnum; ++i) {
    Elf64_Phdr segment;
    std::memcpy(&segment, code.data() + elf.e_phoff + i * sizeof segment, sizeof segment);
    if (segment.p_offset > size || segment.p_filesz > size - segment.p_offset)
      return "segment " + std::to_string(i) + " lies outside the code";
    if (segment.p_type == PT_LOAD && segment.p_filesz > segment.p_memsz)
      return "segment " + std::to_string(i) + " is larger in the file than in memory";
  }
  return {};
}

nlohmann::json specToJson(const TensorSpec &spec) {
  return {{"name", spec.name}, {"dtype", spec.dtype}, {"shape", spec.shape}};
}

TensorSpec specFromJson(const nlohmann::json &json) {
  return TensorSpec{json.at("name").get<std::string>(),
                    json.at("dtype").get<std::string>(),
                    json.at("shape").get<std::vector<int64_t>>()};
}

} // namespace

const char *sectionName(SectionKind kind) {
  switch (kind) {
  case SectionKind::Metadata:
    return "metadata";
  case SectionKind::GraphIr:
    return "graph IR";
  case SectionKind::Code:
    return "code";
  case SectionKind::Plan:
    return "plan";
  case SectionKind::Weights:
    return "weights";
  }
  return "unknown";
}

std::vector<Sha256> sectionDigests(const std::vector<std::string_view> &sections,
                                   unsigned threads, HashedPages pages) {
  std::vector<std::string_view> chunks;
  std::vector<size_t> firstChunk;
  uint64_t total = 0;
  for (std::string_view section : sections) {
    firstChunk.push_back(chunks.size());
    for (uint64_t at = 0; at < section.size(); at += kDigestChunkBytes)
      chunks.push_back(section.substr(at, kDigestChunkBytes));
    total += section.size();
  }
  firstChunk.push_back(chunks.size());
  std::vector<Sha256> chunkDigests =
      sha256Many(chunks, total < kParallelHashBytes ? 1 : threads, pages);
  std::vector<Sha256> digests;
  for (size_t i = 0; i < sections.size(); ++i) {
    Sha256Hasher hasher;
    for (size_t c = firstChunk[i]; c < firstChunk[i + 1]; ++c)
      hasher.update(chunkDigests[c].data(), chunkDigests[c].size());
    digests.push_back(hasher.finish());
  }
  return digests;
}

uint64_t TensorSpec::byteSize() const {
  uint64_t count = 1;
  for (int64_t dim : shape)
    count *= static_cast<uint64_t>(dim);
  return count * dtypeBytes(dtype);
}

Status TensorSpec::validate(const std::string &what) const {
  uint64_t elementBytes = dtypeBytes(dtype);
  if (elementBytes == 0)
    return dataLoss(what + " has unknown dtype '" + dtype + "'");
  if (shape.size() > kMaxRank)
    return dataLoss(what + " has rank " + std::to_string(shape.size()) + " (at most " +
                    std::to_string(kMaxRank) + ")");
  uint64_t bytes = elementBytes;
  for (int64_t dim : shape) {
    if (dim < 0)
      return dataLoss(what + " has negative dimension " + std::to_string(dim));
    if (dim != 0 && bytes > kMaxTensorBytes / static_cast<uint64_t>(dim))
      return dataLoss(what + " has more than 2^62 bytes");
    bytes *= static_cast<uint64_t>(dim);
  }
  return Status::ok();
}

nlohmann::json Plan::toJson() const {
  nlohmann::json json = {{"entry", entry}};
  json["inputs"] = nlohmann::json::array();
  json["outputs"] = nlohmann::json::array();
  json["weights"] = nlohmann::json::array();
  for (const TensorSpec &spec : inputs)
    json["inputs"].push_back(specToJson(spec));
  for (const TensorSpec &spec : outputs)
    json["outputs"].push_back(specToJson(spec));
  for (const WeightSpec &weight : weights) {
    nlohmann::json w = specToJson(weight.tensor);
    w["digest"] = weight.digest;
    w["offset"] = weight.offset;
    w["size"] = weight.size;
    if (weight.external)
      w["external"] = true;
    json["weights"].push_back(w);
  }
  json["packed"] = nlohmann::json::array();
  for (const PackedWeightSpec &weight : packed) {
    nlohmann::json w = {{"site", weight.site},     {"buffer", weight.buffer},
                        {"layout", weight.layout}, {"digest", weight.digest},
                        {"offset", weight.offset}, {"size", weight.size}};
    if (weight.external)
      w["external"] = true;
    json["packed"].push_back(w);
  }
  // Only with entries: a plan without search reads as before.
  if (!tuned.empty())
    json["tuned"] = tunedKernelsJson(tuned);
  return json;
}

nlohmann::json tunedKernelsJson(const std::vector<TunedKernelSpec> &tuned) {
  nlohmann::json list = nlohmann::json::array();
  for (const TunedKernelSpec &kernel : tuned)
    list.push_back({{"site", kernel.site},
                    {"kernel", kernel.kernel},
                    {"signature", kernel.signature},
                    {"candidate", kernel.candidate},
                    {"time_ns", kernel.timeNs},
                    {"spread_ns", kernel.spreadNs},
                    {"host", kernel.host},
                    {"measured_ms", kernel.measuredMs}});
  return list;
}

namespace {

/// Entry `index` of a plan's "tuned", every field of its own type (JSON
/// converts a float or a boolean to an integer silently otherwise).
Expected<TunedKernelSpec> tunedFromJson(const nlohmann::json &json, size_t index) {
  std::string what = "malformed execution plan: tuned kernel " + std::to_string(index);
  if (!json.is_object())
    return dataLoss(what + " is not an object");
  auto field = [&](const char *name, bool integer) -> Expected<const nlohmann::json *> {
    auto found = json.find(name);
    if (found == json.end())
      return dataLoss(what + " has no \"" + name + "\"");
    if (integer ? !found->is_number_integer() : !found->is_string())
      return dataLoss(what + ": \"" + name + "\" is not " +
                      (integer ? "an integer" : "a string"));
    return &*found;
  };
  auto integer = [&](const char *name, int64_t &out) -> Status {
    FLOWC_ASSIGN_OR_RETURN(const nlohmann::json *value, field(name, true));
    out = value->get<int64_t>();
    return Status::ok();
  };
  auto text = [&](const char *name, std::string &out) -> Status {
    FLOWC_ASSIGN_OR_RETURN(const nlohmann::json *value, field(name, false));
    out = value->get<std::string>();
    return Status::ok();
  };
  TunedKernelSpec kernel;
  FLOWC_RETURN_IF_ERROR(integer("site", kernel.site));
  FLOWC_RETURN_IF_ERROR(text("kernel", kernel.kernel));
  FLOWC_RETURN_IF_ERROR(text("signature", kernel.signature));
  FLOWC_RETURN_IF_ERROR(text("candidate", kernel.candidate));
  FLOWC_RETURN_IF_ERROR(integer("time_ns", kernel.timeNs));
  FLOWC_RETURN_IF_ERROR(integer("spread_ns", kernel.spreadNs));
  FLOWC_RETURN_IF_ERROR(text("host", kernel.host));
  FLOWC_RETURN_IF_ERROR(integer("measured_ms", kernel.measuredMs));
  if (kernel.site < -1)
    return dataLoss(what + " has site " + std::to_string(kernel.site));
  return kernel;
}

} // namespace

Expected<std::vector<TunedKernelSpec>> tunedKernelsFromJson(const nlohmann::json &json) {
  if (!json.is_array())
    return dataLoss("malformed execution plan: \"tuned\" is not an array");
  std::vector<TunedKernelSpec> tuned;
  for (size_t i = 0; i < json.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(TunedKernelSpec kernel, tunedFromJson(json[i], i));
    tuned.push_back(std::move(kernel));
  }
  return tuned;
}

Expected<Plan> Plan::fromJson(const nlohmann::json &json) {
  try {
    Plan plan;
    plan.entry = json.at("entry").get<std::string>();
    for (const auto &spec : json.at("inputs"))
      plan.inputs.push_back(specFromJson(spec));
    for (const auto &spec : json.at("outputs"))
      plan.outputs.push_back(specFromJson(spec));
    for (const auto &w : json.at("weights"))
      plan.weights.push_back(
          WeightSpec{specFromJson(w), w.at("digest").get<std::string>(),
                     w.at("offset").get<uint64_t>(), w.at("size").get<uint64_t>(),
                     w.value("external", false)});
    for (const auto &w : json.at("packed"))
      plan.packed.push_back(PackedWeightSpec{
          w.at("site").get<int64_t>(), w.at("buffer").get<int64_t>(),
          w.at("layout").get<std::string>(), w.at("digest").get<std::string>(),
          w.at("offset").get<uint64_t>(), w.at("size").get<uint64_t>(),
          w.value("external", false)});
    // Optional: artifacts from before search have none.
    if (json.contains("tuned")) {
      FLOWC_ASSIGN_OR_RETURN(plan.tuned, tunedKernelsFromJson(json.at("tuned")));
    }
    return plan;
  } catch (const nlohmann::json::exception &e) {
    return dataLoss(std::string("malformed execution plan: ") + e.what());
  }
}

Expected<std::unique_ptr<ArtifactWriter>>
ArtifactWriter::create(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  std::unique_ptr<ArtifactWriter> writer(new ArtifactWriter(std::move(file)));
  FileHeader placeholder{};
  FLOWC_RETURN_IF_ERROR(
      writer->write({reinterpret_cast<const char *>(&placeholder), sizeof placeholder}));
  return writer;
}

Status ArtifactWriter::write(std::string_view bytes) {
  FLOWC_RETURN_IF_ERROR(file_.write(bytes));
  position_ += bytes.size();
  return Status::ok();
}

Status ArtifactWriter::padTo(uint64_t alignment) {
  static const char zeros[kPageSize] = {};
  uint64_t target = alignUp(position_, alignment);
  while (position_ < target)
    FLOWC_RETURN_IF_ERROR(write({zeros, static_cast<size_t>(target - position_)}));
  return Status::ok();
}

Status ArtifactWriter::addSection(SectionKind kind, std::string_view bytes) {
  FLOWC_RETURN_IF_ERROR(padTo(alignmentOf(kind)));
  entries_.push_back({kind, position_, bytes.size()});
  return write(bytes);
}

Expected<std::vector<uint64_t>>
ArtifactWriter::addWeights(const std::vector<std::string_view> &pieces) {
  FLOWC_RETURN_IF_ERROR(padTo(kPageSize));
  uint64_t start = position_;
  std::vector<uint64_t> offsets;
  for (std::string_view piece : pieces) {
    FLOWC_RETURN_IF_ERROR(padTo(kPageSize));
    offsets.push_back(position_ - start);
    // Weights come mapped from the cache: copied window by window, each
    // released once written, so linking costs no memory per weight byte.
    FLOWC_RETURN_IF_ERROR(
        visitInWindows(piece, kDefaultWindowBytes,
                       [&](std::string_view window) { return write(window); }));
  }
  entries_.push_back({SectionKind::Weights, start, position_ - start});
  return offsets;
}

Status ArtifactWriter::finish() {
  FLOWC_RETURN_IF_ERROR(padTo(8));
  // The digests come from the file as written (the page cache has it), so
  // they cover exactly the bytes a reader will map, on every core at once.
  FLOWC_ASSIGN_OR_RETURN(MappedFile written, MappedFile::open(file_.tempPath()));
  if (written.size() != position_)
    return dataLoss("artifact '" + file_.tempPath() + "' has " +
                    std::to_string(written.size()) + " bytes after writing " +
                    std::to_string(position_));
  std::vector<std::string_view> sections;
  for (const Entry &entry : entries_)
    sections.push_back(written.view().substr(entry.offset, entry.size));
  std::vector<Sha256> digests = sectionDigests(sections, 0, HashedPages::Release);
  std::string table;
  for (size_t i = 0; i < entries_.size(); ++i) {
    SectionEntry raw{static_cast<uint32_t>(entries_[i].kind),
                     0,
                     entries_[i].offset,
                     entries_[i].size,
                     {}};
    std::memcpy(raw.digest, digests[i].data(), sizeof raw.digest);
    table.append(reinterpret_cast<const char *>(&raw), sizeof raw);
  }
  FileHeader header{};
  std::memcpy(header.magic, kArtifactMagic, 8);
  header.version = kArtifactVersion;
  header.sectionCount = static_cast<uint32_t>(entries_.size());
  header.tableOffset = position_;
  header.fileSize = position_ + table.size();
  Sha256 digest = headerDigest(header, table);
  std::memcpy(header.digest, digest.data(), sizeof header.digest);
  FLOWC_RETURN_IF_ERROR(write(table));
  if (pwrite(file_.fd(), &header, sizeof header, 0) !=
      static_cast<ssize_t>(sizeof header))
    return errnoStatus(errno, "cannot write artifact header '" + file_.tempPath() + "'");
  return file_.commit();
}

Expected<std::shared_ptr<Artifact>> Artifact::open(const std::string &path,
                                                   const OpenOptions &options) {
  FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  bool verify = options.verification == Verification::Digests;
  std::string_view bytes = file.view();
  auto notArtifact = [&](const std::string &what) {
    return invalidArgument("'" + path + "' is not a flowc artifact: " + what);
  };
  auto damaged = [&](const std::string &what) {
    return dataLoss("'" + path + "' is damaged: " + what);
  };
  auto mismatch = [&](const std::string &what, const Sha256 &actual,
                      const Sha256 &recorded, const std::string &where) {
    return dataLoss("'" + path + "': " + what + " is damaged: sha256 " +
                    sha256Hex(actual) + " does not match " + where + " (" +
                    sha256Hex(recorded) + ")");
  };

  // The header: every later offset is checked against the file it states.
  if (bytes.size() < sizeof(FileHeader))
    return notArtifact("file of " + std::to_string(bytes.size()) +
                       " bytes is shorter than the header");
  FileHeader header;
  std::memcpy(&header, bytes.data(), sizeof header);
  if (std::memcmp(header.magic, kArtifactMagic, 8) != 0)
    return notArtifact("bad magic (not an .fca file)");
  if (header.version == 1)
    return failedPrecondition("'" + path +
                              "' is an artifact of format version 1, which carries no "
                              "digests to verify it by: rebuild it (flowc submit the "
                              "model again)");
  if (header.version != kArtifactVersion)
    return failedPrecondition("'" + path + "' has artifact format version " +
                              std::to_string(header.version) + ", this runtime reads " +
                              std::to_string(kArtifactVersion) +
                              " (a damaged header, or a newer flowc): rebuild it");
  if (header.fileSize != bytes.size())
    return dataLoss("'" + path + "' is " +
                    (bytes.size() < header.fileSize ? "truncated" : "extended") +
                    ": its header says " + std::to_string(header.fileSize) +
                    " bytes, the file has " + std::to_string(bytes.size()));
  if (header.sectionCount == 0 || header.sectionCount > kMaxSections)
    return damaged("header: " + std::to_string(header.sectionCount) + " sections (1 to " +
                   std::to_string(kMaxSections) + ")");
  uint64_t tableBytes = uint64_t(header.sectionCount) * sizeof(SectionEntry);
  if (header.tableOffset % 8 != 0 || header.tableOffset < sizeof(FileHeader) ||
      header.tableOffset > bytes.size() ||
      bytes.size() - header.tableOffset != tableBytes)
    return damaged("header: a section table of " + std::to_string(header.sectionCount) +
                   " entries at offset " + std::to_string(header.tableOffset) +
                   " does not end the file");
  std::string_view table = bytes.substr(header.tableOffset, tableBytes);
  if (verify) {
    Sha256 actual = headerDigest(header, table);
    if (actual != toSha256(header.digest))
      return mismatch("header or section table", actual, toSha256(header.digest),
                      "the header's digest");
  }

  // The table: known kinds, once each, aligned, inside the file, no overlap,
  // and nothing but zeros between them, so every byte is accounted for.
  auto artifact = std::make_shared<Artifact>();
  artifact->verification_ = options.verification;
  std::vector<SectionEntry> entries(header.sectionCount);
  std::memcpy(entries.data(), table.data(), tableBytes);
  for (size_t i = 0; i < entries.size(); ++i) {
    const SectionEntry &entry = entries[i];
    if (!isKnownKind(entry.kind))
      return damaged("section table: entry " + std::to_string(i) + " has unknown kind " +
                     std::to_string(entry.kind));
    if (entry.reserved != 0)
      return damaged("section table: entry " + std::to_string(i) +
                     " has non-zero reserved bytes");
    auto kind = static_cast<SectionKind>(entry.kind);
    std::string name = std::string(sectionName(kind)) + " section";
    if (std::any_of(artifact->sections_.begin(), artifact->sections_.end(),
                    [&](const Section &s) { return s.kind == kind; }))
      return damaged("section table: two " + name + "s");
    if (entry.offset % alignmentOf(kind) != 0 || entry.offset < sizeof(FileHeader) ||
        entry.offset > header.tableOffset ||
        entry.size > header.tableOffset - entry.offset)
      return damaged("section table: " + name + " at offset " +
                     std::to_string(entry.offset) + " of " + std::to_string(entry.size) +
                     " bytes lies outside the sections");
    artifact->sections_.push_back(
        {kind, bytes.substr(entry.offset, entry.size), toSha256(entry.digest)});
  }
  std::vector<Section> byOffset = artifact->sections_;
  std::sort(byOffset.begin(), byOffset.end(), [](const Section &a, const Section &b) {
    return a.bytes.data() < b.bytes.data();
  });
  const char *cursor = bytes.data() + sizeof(FileHeader);
  for (size_t i = 0; i <= byOffset.size(); ++i) {
    const char *next = i < byOffset.size() ? byOffset[i].bytes.data()
                                           : bytes.data() + header.tableOffset;
    if (next < cursor)
      return damaged("section table: the " + std::string(sectionName(byOffset[i].kind)) +
                     " section overlaps the one before it");
    if (std::any_of(cursor, next, [](char c) { return c != 0; }))
      return damaged("the padding before the " +
                     (i < byOffset.size()
                          ? std::string(sectionName(byOffset[i].kind)) + " section"
                          : std::string("section table")) +
                     " (offset " + std::to_string(next - bytes.data()) +
                     ") is not zeros: a section's size is wrong, or bytes were added");
    if (i < byOffset.size())
      cursor = next + byOffset[i].bytes.size();
  }
  for (SectionKind required :
       {SectionKind::Metadata, SectionKind::Plan, SectionKind::Code})
    if (std::none_of(artifact->sections_.begin(), artifact->sections_.end(),
                     [&](const Section &s) { return s.kind == required; }))
      return damaged(std::string("no ") + sectionName(required) + " section");

  // Every section against its digest, all of them on all cores at once.
  if (verify) {
    std::vector<std::string_view> views;
    for (const Section &section : artifact->sections_)
      views.push_back(section.bytes);
    std::vector<Sha256> actual = sectionDigests(views, options.threads);
    for (size_t i = 0; i < views.size(); ++i)
      if (actual[i] != artifact->sections_[i].digest)
        return mismatch(std::string(sectionName(artifact->sections_[i].kind)) +
                            " section",
                        actual[i], artifact->sections_[i].digest, "the artifact's table");
  }
  if (std::string fault = codeObjectFault(artifact->section(SectionKind::Code));
      !fault.empty())
    return damaged("code section: " + fault);

  // Metadata and plan: well-formed JSON objects, and a plan whose every
  // size and offset fits what the runtime will allocate and read.
  auto parse = [&](SectionKind kind) -> Expected<nlohmann::json> {
    auto json = nlohmann::json::parse(artifact->section(kind), nullptr,
                                      /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object())
      return damaged(std::string(sectionName(kind)) + " section is not a JSON object");
    return json;
  };
  FLOWC_ASSIGN_OR_RETURN(artifact->metadata_, parse(SectionKind::Metadata));
  FLOWC_ASSIGN_OR_RETURN(nlohmann::json planJson, parse(SectionKind::Plan));
  auto plan = Plan::fromJson(planJson);
  if (!plan)
    return damaged("plan section: " + plan.status().message());
  artifact->plan_ = plan.takeValue();
  const Plan &p = artifact->plan_;
  auto badPlan = [&](const Status &status) {
    return damaged("plan section: " + status.message());
  };
  if (!isSymbolName(p.entry))
    return damaged("plan section: entry symbol '" + p.entry.substr(0, 64) +
                   "' is not a symbol name");
  for (const TensorSpec &spec : p.inputs)
    if (Status status = spec.validate("input '" + spec.name + "'"); !status)
      return badPlan(status);
  for (const TensorSpec &spec : p.outputs)
    if (Status status = spec.validate("output '" + spec.name + "'"); !status)
      return badPlan(status);

  // Weights: inside the weights section, page-aligned, of the size their
  // shape needs, named by a well-formed digest of that size.
  std::string_view weights = artifact->section(SectionKind::Weights);
  std::vector<std::pair<std::string_view *, size_t>> externals;
  std::vector<std::string> externalNames;
  auto locate = [&](const auto &weight, const std::string &what,
                    std::string_view &out) -> Status {
    if (!parseWeightDigest(weight.digest, weight.size))
      return damaged("plan section: " + what + " has digest '" +
                     weight.digest.substr(0, 80) + "', not sha256:<hex>/" +
                     std::to_string(weight.size));
    if (!weight.external) {
      if (weight.offset % kPageSize != 0 || weight.offset > weights.size() ||
          weight.size > weights.size() - weight.offset)
        return damaged("plan section: " + what + " lies outside the weights section");
      out = weights.substr(weight.offset, weight.size);
      return Status::ok();
    }
    if (!options.external)
      return Status::ok();
    auto mapped = options.external(weight.digest, artifact->metadata_);
    if (!mapped)
      return mapped.status().withContext(path + ": " + what);
    if (mapped->size() != weight.size)
      return dataLoss("'" + path + "': " + what + " (" + weight.digest + ") is " +
                      std::to_string(mapped->size()) + " bytes where the plan says " +
                      std::to_string(weight.size));
    out = mapped->view();
    artifact->externalFiles_.push_back(mapped.takeValue());
    externalNames.push_back(what + " (" + artifact->externalFiles_.back().path() + ")");
    return Status::ok();
  };
  artifact->weightBytes_.resize(p.weights.size());
  artifact->packedBytes_.resize(p.packed.size());
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const WeightSpec &weight = p.weights[i];
    std::string what = "weight '" + weight.tensor.name + "'";
    if (Status status = weight.tensor.validate(what); !status)
      return badPlan(status);
    if (weight.size != weight.tensor.byteSize())
      return damaged("plan section: " + what + " has " + std::to_string(weight.size) +
                     " bytes, its shape needs " +
                     std::to_string(weight.tensor.byteSize()));
    FLOWC_RETURN_IF_ERROR(locate(weight, what, artifact->weightBytes_[i]));
  }
  for (size_t i = 0; i < p.packed.size(); ++i) {
    const PackedWeightSpec &weight = p.packed[i];
    std::string what = "packed weight of kernel site " + std::to_string(weight.site);
    if (weight.site < 0 || weight.buffer < 0)
      return damaged("plan section: " + what + " has buffer " +
                     std::to_string(weight.buffer));
    FLOWC_RETURN_IF_ERROR(locate(weight, what, artifact->packedBytes_[i]));
  }

  // A thin artifact's external weights against their digests: a cache file
  // is as open to damage as the artifact (measured in docs/benchmarks.md).
  if (verify && !artifact->externalFiles_.empty()) {
    std::vector<std::string_view> views;
    for (const MappedFile &mapped : artifact->externalFiles_)
      views.push_back(mapped.view());
    std::vector<Sha256> actual = sha256Many(views, options.threads, HashedPages::Keep);
    size_t k = 0;
    auto check = [&](const auto &weight) -> Status {
      if (!weight.external)
        return Status::ok();
      size_t at = k++;
      Sha256 recorded = *parseWeightDigest(weight.digest, weight.size);
      if (actual[at] != recorded)
        return mismatch("external " + externalNames[at], actual[at], recorded,
                        "the plan's digest");
      return Status::ok();
    };
    for (const WeightSpec &weight : p.weights)
      FLOWC_RETURN_IF_ERROR(check(weight));
    for (const PackedWeightSpec &weight : p.packed)
      FLOWC_RETURN_IF_ERROR(check(weight));
  }
  artifact->file_ = std::move(file);
  return artifact;
}

bool Artifact::isThin() const {
  return std::any_of(plan_.weights.begin(), plan_.weights.end(),
                     [](const WeightSpec &w) { return w.external; }) ||
         std::any_of(plan_.packed.begin(), plan_.packed.end(),
                     [](const PackedWeightSpec &w) { return w.external; });
}

Status Artifact::requireWeights() const {
  for (size_t i = 0; i < plan_.weights.size(); ++i)
    if (plan_.weights[i].external && weightBytes_[i].empty() && plan_.weights[i].size)
      return failedPrecondition("'" + path() + "' is a thin artifact: weight '" +
                                plan_.weights[i].tensor.name + "' (" +
                                plan_.weights[i].digest +
                                ") lives in the flowc cache that made it; run it where "
                                "that cache is (--cache-dir) "
                                "or submit without --thin for a self-contained artifact");
  for (size_t i = 0; i < plan_.packed.size(); ++i)
    if (plan_.packed[i].external && packedBytes_[i].empty() && plan_.packed[i].size)
      return failedPrecondition("'" + path() + "' is a thin artifact: a packed weight (" +
                                plan_.packed[i].digest +
                                ") lives in the flowc cache that "
                                "made it; run it where that cache is (--cache-dir)");
  return Status::ok();
}

std::string_view Artifact::section(SectionKind kind) const {
  for (const Section &section : sections_)
    if (section.kind == kind)
      return section.bytes;
  return {};
}

const Sha256 &Artifact::sectionDigest(SectionKind kind) const {
  static const Sha256 absent{};
  for (const Section &section : sections_)
    if (section.kind == kind)
      return section.digest;
  return absent;
}

} // namespace flowc::runtime
