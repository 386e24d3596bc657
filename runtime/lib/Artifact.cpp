#include "flowc/runtime/Artifact.h"

#include <algorithm>
#include "flowc/runtime/Tensor.h"

#include "flowc/support/MappedFile.h"

#include <cerrno>
#include <cstring>
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
  uint8_t reserved[32];
};
static_assert(sizeof(FileHeader) == 64);

struct SectionEntry {
  uint32_t kind;
  uint32_t reserved;
  uint64_t offset;
  uint64_t size;
};
static_assert(sizeof(SectionEntry) == 24);

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
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

uint64_t TensorSpec::byteSize() const {
  uint64_t count = 1;
  for (int64_t dim : shape)
    count *= static_cast<uint64_t>(dim);
  return count * dtypeBytes(dtype);
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
  return json;
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
    // Artifacts linked before packed weights existed have none.
    for (const auto &w : json.value("packed", nlohmann::json::array()))
      plan.packed.push_back(PackedWeightSpec{
          w.at("site").get<int64_t>(), w.at("buffer").get<int64_t>(),
          w.at("layout").get<std::string>(), w.at("digest").get<std::string>(),
          w.at("offset").get<uint64_t>(), w.at("size").get<uint64_t>(),
          w.value("external", false)});
    return plan;
  } catch (const nlohmann::json::exception &e) {
    return dataLoss(std::string("malformed execution plan: ") + e.what());
  }
}

Expected<std::unique_ptr<ArtifactWriter>>
ArtifactWriter::create(const std::string &path) {
  std::string tmpPath = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmpPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return errnoStatus(errno, "cannot create artifact '" + tmpPath + "'");
  std::unique_ptr<ArtifactWriter> writer(new ArtifactWriter(path, tmpPath, fd));
  FileHeader placeholder{};
  FLOWC_RETURN_IF_ERROR(
      writer->write({reinterpret_cast<const char *>(&placeholder), 64}));
  return writer;
}

ArtifactWriter::~ArtifactWriter() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!finished_)
    ::unlink(tmpPath_.c_str());
}

Status ArtifactWriter::write(std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errnoStatus(errno, "cannot write artifact '" + tmpPath_ + "'");
    done += static_cast<size_t>(n);
  }
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
  FLOWC_RETURN_IF_ERROR(padTo(64));
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
  FileHeader header{};
  std::memcpy(header.magic, kArtifactMagic, 8);
  header.version = kArtifactVersion;
  header.sectionCount = static_cast<uint32_t>(entries_.size());
  header.tableOffset = position_;
  for (const Entry &entry : entries_) {
    SectionEntry raw{static_cast<uint32_t>(entry.kind), 0, entry.offset, entry.size};
    FLOWC_RETURN_IF_ERROR(write({reinterpret_cast<const char *>(&raw), sizeof raw}));
  }
  header.fileSize = position_;
  if (pwrite(fd_, &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    return errnoStatus(errno, "cannot write artifact header '" + tmpPath_ + "'");
  if (fsync(fd_) != 0)
    return errnoStatus(errno, "cannot fsync artifact '" + tmpPath_ + "'");
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmpPath_.c_str(), path_.c_str()) != 0)
    return errnoStatus(errno, "cannot rename artifact to '" + path_ + "'");
  finished_ = true;
  return Status::ok();
}

Expected<std::shared_ptr<Artifact>> Artifact::open(const std::string &path,
                                                   const ExternalWeightSource &external) {
  FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  auto bad = [&](const std::string &what) {
    return invalidArgument("'" + path + "' is not a valid flowc artifact: " + what);
  };
  if (file.size() < sizeof(FileHeader))
    return bad("file of " + std::to_string(file.size()) +
               " bytes is shorter than the header");
  FileHeader header;
  std::memcpy(&header, file.data(), sizeof header);
  if (std::memcmp(header.magic, kArtifactMagic, 8) != 0)
    return bad("bad magic (not an .fca file)");
  if (header.version != kArtifactVersion)
    return bad("format version " + std::to_string(header.version) +
               ", this runtime reads " + std::to_string(kArtifactVersion));
  if (header.fileSize != file.size())
    return dataLoss("'" + path + "' is truncated: header says " +
                    std::to_string(header.fileSize) + " bytes, file has " +
                    std::to_string(file.size()));
  uint64_t tableEnd =
      header.tableOffset + uint64_t(header.sectionCount) * sizeof(SectionEntry);
  if (header.tableOffset > file.size() || tableEnd > file.size())
    return bad("section table out of range");
  auto artifact = std::make_shared<Artifact>();
  for (uint32_t i = 0; i < header.sectionCount; ++i) {
    SectionEntry entry;
    std::memcpy(&entry, file.data() + header.tableOffset + i * sizeof entry,
                sizeof entry);
    if (entry.offset > file.size() || entry.size > file.size() - entry.offset)
      return bad("section " + std::to_string(entry.kind) + " out of range");
    std::string_view bytes(reinterpret_cast<const char *>(file.data()) + entry.offset,
                           entry.size);
    artifact->sections_.emplace_back(static_cast<SectionKind>(entry.kind), bytes);
  }
  artifact->file_ = std::move(file);
  auto parse = [&](SectionKind kind, const char *name) -> Expected<nlohmann::json> {
    std::string_view text = artifact->section(kind);
    if (text.empty())
      return bad(std::string("missing ") + name + " section");
    auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded())
      return bad(std::string("malformed ") + name + " section");
    return json;
  };
  FLOWC_ASSIGN_OR_RETURN(artifact->metadata_, parse(SectionKind::Metadata, "metadata"));
  FLOWC_ASSIGN_OR_RETURN(nlohmann::json planJson, parse(SectionKind::Plan, "plan"));
  FLOWC_ASSIGN_OR_RETURN(artifact->plan_, Plan::fromJson(planJson));
  std::string_view weights = artifact->section(SectionKind::Weights);
  auto locate = [&](const auto &weight,
                    const std::string &what) -> Expected<std::string_view> {
    if (!weight.external) {
      if (weight.offset > weights.size() || weight.size > weights.size() - weight.offset)
        return bad(what + " lies outside the weights section");
      return weights.substr(weight.offset, weight.size);
    }
    if (!external)
      return std::string_view();
    auto file = external(weight.digest);
    if (!file)
      return file.status().withContext(path + ": " + what);
    if (file->size() != weight.size)
      return bad(what + " (" + weight.digest + ") is " + std::to_string(file->size()) +
                 " bytes where the plan says " + std::to_string(weight.size));
    std::string_view bytes = file->view();
    artifact->externalFiles_.push_back(file.takeValue());
    return bytes;
  };
  for (const WeightSpec &weight : artifact->plan_.weights) {
    if (weight.size != weight.tensor.byteSize())
      return bad("weight '" + weight.tensor.name + "' has " +
                 std::to_string(weight.size) + " bytes, its shape needs " +
                 std::to_string(weight.tensor.byteSize()));
    FLOWC_ASSIGN_OR_RETURN(std::string_view bytes,
                           locate(weight, "weight '" + weight.tensor.name + "'"));
    artifact->weightBytes_.push_back(bytes);
  }
  for (const PackedWeightSpec &weight : artifact->plan_.packed) {
    FLOWC_ASSIGN_OR_RETURN(
        std::string_view bytes,
        locate(weight, "packed weight of kernel site " + std::to_string(weight.site)));
    artifact->packedBytes_.push_back(bytes);
  }
  if (artifact->section(SectionKind::Code).empty())
    return bad("missing code section");
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
  for (const auto &[k, bytes] : sections_)
    if (k == kind)
      return bytes;
  return {};
}

} // namespace flowc::runtime
