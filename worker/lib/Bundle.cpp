#include "flowc/worker/Bundle.h"

#include "flowc/support/AtomicFile.h"
#include "flowc/support/MappedFile.h"
#include "flowc/worker/RemoteTier.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace flowc::worker {

namespace {

using cache::Digest;
using nlohmann::json;

constexpr size_t kBlock = 512;
constexpr char kManifest[] = "flowc-bundle.json";
constexpr char kFormat[] = "flowc.bundle.v1";
/// Written in slices, each released from memory once written.
constexpr size_t kWriteSlice = 8 << 20;

std::optional<cache::ActionKind> kindNamed(const std::string &name) {
  for (auto kind : {cache::ActionKind::Artifact, cache::ActionKind::Code,
                    cache::ActionKind::Kernel, cache::ActionKind::DerivedWeight})
    if (name == actionKindName(kind))
      return kind;
  return std::nullopt;
}

std::string memberName(const Digest &digest) {
  return "blobs/" + digest.hex() + "-" + std::to_string(digest.size);
}

/// A ustar header; sizes of 8 GiB and more in the base-256 form GNU tar
/// and libarchive read.
std::string header(const std::string &name, uint64_t size) {
  std::string block(kBlock, '\0');
  std::memcpy(block.data(), name.data(), std::min<size_t>(name.size(), 99));
  std::snprintf(block.data() + 100, 8, "%07o", 0444);
  std::snprintf(block.data() + 108, 8, "%07o", 0);
  std::snprintf(block.data() + 116, 8, "%07o", 0);
  if (size < (uint64_t(1) << 33)) {
    std::snprintf(block.data() + 124, 12, "%011llo",
                  static_cast<unsigned long long>(size));
  } else {
    block[124] = static_cast<char>(0x80);
    for (int i = 11; i >= 1; --i, size >>= 8)
      block[124 + i] = static_cast<char>(size & 0xff);
  }
  std::snprintf(block.data() + 136, 12, "%011o", 0);
  block[156] = '0';
  std::memcpy(block.data() + 257, "ustar", 6);
  std::memcpy(block.data() + 263, "00", 2);
  std::memset(block.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : block)
    sum += c;
  std::snprintf(block.data() + 148, 8, "%06o", sum);
  return block;
}

Status writeMember(AtomicFile &file, const std::string &name, std::string_view bytes) {
  FLOWC_RETURN_IF_ERROR(file.write(header(name, bytes.size())));
  for (size_t offset = 0; offset < bytes.size(); offset += kWriteSlice) {
    std::string_view slice = bytes.substr(offset, kWriteSlice);
    FLOWC_RETURN_IF_ERROR(file.write(slice));
    MappedFile::releasePages(slice);
  }
  size_t padding = (kBlock - bytes.size() % kBlock) % kBlock;
  return file.write(std::string(padding, '\0'));
}

json entryJson(const cache::ActionRecord &entry) {
  json deps = json::array();
  for (const Digest &dep : entry.deps)
    deps.push_back(dep.toString());
  return {{"kind", actionKindName(entry.kind)},
          {"key", entry.key.toString()},
          {"result", entry.result.toString()},
          {"deps", deps}};
}

/// One member of a tar being read.
struct Member {
  std::string name;
  std::string_view bytes;
};

Expected<uint64_t> memberSize(const char *field, const std::string &where) {
  if (static_cast<unsigned char>(field[0]) & 0x80) {
    uint64_t size = 0;
    for (int i = 1; i < 12; ++i)
      size = size << 8 | static_cast<unsigned char>(field[i]);
    return size;
  }
  uint64_t size = 0;
  bool digits = false;
  for (int i = 0; i < 12 && field[i] && field[i] != ' '; ++i) {
    if (field[i] < '0' || field[i] > '7')
      return invalidArgument(where + ": not a tar header (bad size field)");
    size = size * 8 + static_cast<uint64_t>(field[i] - '0');
    digits = true;
  }
  if (!digits)
    return invalidArgument(where + ": not a tar header (no size)");
  return size;
}

/// The members of the tar in `bytes`, in order; InvalidArgument or
/// DataLoss (truncated) naming the member.
Expected<std::vector<Member>> members(std::string_view bytes, const std::string &path) {
  std::vector<Member> found;
  size_t offset = 0;
  while (true) {
    if (offset + kBlock > bytes.size())
      return dataLoss(path + ": truncated (no end-of-archive marker after " +
                      std::to_string(found.size()) + " members)");
    const char *block = bytes.data() + offset;
    if (std::all_of(block, block + kBlock, [](char c) { return c == 0; }))
      return found;
    std::string where = path + " at byte " + std::to_string(offset);
    if (std::memcmp(block + 257, "ustar", 5) != 0)
      return invalidArgument(where + ": not a ustar header (is this a flowc bundle?)");
    unsigned sum = 0;
    for (size_t i = 0; i < kBlock; ++i)
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(block[i]);
    if (std::strtoul(std::string(block + 148, 8).c_str(), nullptr, 8) != sum)
      return dataLoss(where + ": header checksum mismatch");
    std::string name(block, strnlen(block, 100));
    FLOWC_ASSIGN_OR_RETURN(uint64_t size, memberSize(block + 124, where));
    offset += kBlock;
    if (size > bytes.size() - offset)
      return dataLoss(path + ": member '" + name + "' is truncated (" +
                      std::to_string(bytes.size() - offset) + " of " +
                      std::to_string(size) + " bytes)");
    if (block[156] == '0' || block[156] == '\0')
      found.push_back({name, bytes.substr(offset, size)});
    offset += (size + kBlock - 1) / kBlock * kBlock;
  }
}

Expected<std::vector<cache::ActionRecord>> parseEntries(std::string_view text,
                                                        const std::string &path) {
  json manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || manifest.value("format", "") != kFormat)
    return invalidArgument(path + ": " + kManifest + " is not a " + kFormat +
                           " manifest");
  if (!manifest.value("complete", false))
    return failedPrecondition(path +
                              ": the bundle was not finished (written before every "
                              "part was compiled); refused");
  if (!manifest.contains("entries") || !manifest["entries"].is_array() ||
      manifest["entries"].empty())
    return invalidArgument(path + ": " + kManifest + " lists no entries");
  std::vector<cache::ActionRecord> entries;
  for (const json &item : manifest["entries"]) {
    std::string where = path + ": entry " + std::to_string(entries.size());
    if (!item.is_object() || !item.contains("deps") || !item["deps"].is_array())
      return invalidArgument(where + " is malformed");
    auto kind = kindNamed(item.value("kind", ""));
    auto key = Digest::parse(item.value("key", ""));
    auto result = Digest::parse(item.value("result", ""));
    if (!kind || !key || !result)
      return invalidArgument(where + " has a bad kind, key or result");
    cache::ActionRecord entry{*kind, *key, *result, {}};
    for (const json &dep : item["deps"]) {
      auto digest = Digest::parse(dep.is_string() ? dep.get<std::string>() : "");
      if (!digest)
        return invalidArgument(where + " has a bad dependency");
      entry.deps.push_back(*digest);
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

} // namespace

Expected<BundleReport> writeBundle(cache::Cache &cache,
                                   const std::vector<cache::ActionRecord> &entries,
                                   const std::string &path) {
  std::set<std::string> seen;
  std::vector<Digest> blobs;
  for (const cache::ActionRecord &entry : entries) {
    std::vector<Digest> needed = entry.deps;
    needed.push_back(entry.result);
    for (const Digest &digest : needed)
      if (seen.insert(digest.toString()).second)
        blobs.push_back(digest);
  }
  FLOWC_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  json list = json::array();
  for (const cache::ActionRecord &entry : entries)
    list.push_back(entryJson(entry));
  json manifest = {{"format", kFormat}, {"complete", true}, {"entries", list}};
  FLOWC_RETURN_IF_ERROR(writeMember(file, kManifest, manifest.dump(2)));
  BundleReport report;
  report.entries = entries.size();
  for (const Digest &digest : blobs) {
    auto blob = cache.get(digest);
    if (!blob)
      return failedPrecondition("blob " + digest.toString() +
                                " of the bundle is gone from '" + cache.root() +
                                "': " + blob.status().message());
    FLOWC_RETURN_IF_ERROR(writeMember(file, memberName(digest), blob->bytes()));
    ++report.blobs;
    report.bytes += digest.size;
  }
  FLOWC_RETURN_IF_ERROR(file.write(std::string(2 * kBlock, '\0')));
  FLOWC_RETURN_IF_ERROR(file.commit());
  return report;
}

Expected<BundleReport> readBundle(cache::Cache &cache, const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  FLOWC_ASSIGN_OR_RETURN(std::vector<Member> found, members(file.view(), path));
  if (found.empty() || found.front().name != kManifest)
    return invalidArgument(path + ": the first member is not " + kManifest +
                           " (not a flowc bundle)");
  FLOWC_ASSIGN_OR_RETURN(std::vector<cache::ActionRecord> entries,
                         parseEntries(found.front().bytes, path));
  std::map<std::string, std::string_view> blobs;
  for (size_t i = 1; i < found.size(); ++i)
    blobs[found[i].name] = found[i].bytes;
  // Every blob an entry needs must be in the bundle (or the cache), before
  // anything is written.
  std::vector<Digest> needed;
  std::set<std::string> seen;
  for (const cache::ActionRecord &entry : entries) {
    std::vector<Digest> all = entry.deps;
    all.push_back(entry.result);
    for (const Digest &digest : all) {
      if (!seen.insert(digest.toString()).second)
        continue;
      if (!blobs.count(memberName(digest)) && !cache.contains(digest))
        return invalidArgument(path + ": blob " + digest.toString() + " of a " +
                               actionKindName(entry.kind) +
                               " entry is not in the bundle");
      needed.push_back(digest);
    }
  }
  BundleReport report;
  report.entries = entries.size();
  for (const Digest &digest : needed) {
    if (cache.contains(digest)) {
      ++report.blobsPresent;
      continue;
    }
    std::string_view bytes = blobs[memberName(digest)];
    if (Status stored = cache.putVerified(digest, bytes); !stored)
      return Status(stored.code(),
                    path + ": member '" + memberName(digest) + "': " + stored.message());
    MappedFile::releasePages(bytes);
    ++report.blobs;
    report.bytes += digest.size;
  }
  FLOWC_RETURN_IF_ERROR(cache.recordActions(entries));
  return report;
}

} // namespace flowc::worker
