// The two tiers of the action cache as a compile sees them (the local one,
// then RemoteTier.h's), and what --explain says about them. Besides each
// artifact entry, a model-name index (also an entry, in both tiers) lists
// the recent artifact keys compiled for a model of that file name with their
// key-factor manifests, so that a miss names what differs from the nearest.
#include "flowc/worker/CompileExecutor.h"

#include "KeyFactors.h"

#include <ctime>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace flowc::worker {

namespace {

using cache::Digest;
using nlohmann::json;

/// Entries an index keeps, newest first.
constexpr size_t kNameIndexEntries = 16;

Digest nameIndexKey(const std::string &model) {
  return cache::digestOf("flowc.model-names.v1\n" + model + "\n");
}

json parseObject(std::string_view text) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : json::object();
}

/// An index's entries: {"key", "factors" (a blob digest)}.
json indexEntries(cache::Cache &cache, const Digest &index) {
  auto blob = cache.get(index);
  if (!blob)
    return json::array();
  json parsed = parseObject(blob->bytes());
  return parsed.contains("entries") && parsed["entries"].is_array() ? parsed["entries"]
                                                                    : json::array();
}

/// The local name index's entries for `indexKey` (none if it has none).
json localIndexEntries(cache::Cache &cache, const Digest &indexKey) {
  auto index = cache.lookupAction(cache::ActionKind::Artifact, indexKey,
                                  cache::Cache::CountLookup::No);
  return index && *index ? indexEntries(cache, **index) : json::array();
}

std::string describeEntry(const json &factors) {
  std::string when = "?";
  if (factors.contains("when") && factors["when"].is_number_integer()) {
    time_t seconds = factors["when"].get<int64_t>();
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&seconds));
    when = text;
  }
  return "artifact entry " + factors.value("key", std::string("?")) + " (compiled on " +
         factors.value("host", std::string("?")) + " at " + when + " by " +
         factors.value("toolchain", std::string("?")) + ")";
}

} // namespace

Expected<std::optional<Digest>>
CompileExecutor::lookupTiered(cache::ActionKind kind, const Digest &key,
                              cache::Cache::CountLookup count) {
  FLOWC_ASSIGN_OR_RETURN(auto cached, cache_.lookupAction(kind, key, count));
  if (cached || !remote_)
    return cached;
  return remote_->fetch(kind, key);
}

void CompileExecutor::publish(cache::ActionKind kind, const Digest &key,
                              TierEntry entry) {
  if (remote_)
    remote_->publish(kind, key, entry);
}

Expected<std::optional<Digest>>
CompileExecutor::lookupArtifact(const Digest &key, const IngestedModel &ingested,
                                std::string &answeredBy, std::string *factors) {
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         cache_.lookupAction(cache::ActionKind::Artifact, key));
  if (cached) {
    answeredBy = "local";
    return cached;
  }
  if (!remote_)
    return cached;
  // A thin artifact's weights are the model's: stored from the model at
  // hand rather than downloaded.
  std::unordered_map<std::string, std::string_view> weights;
  std::vector<std::string_view> views = ingested.weightViews();
  for (size_t i = 0; i < views.size(); ++i)
    weights.emplace(ingested.weightDigests[i].toString(), views[i]);
  LocalBytes local = [&](const Digest &digest) -> const std::string_view * {
    auto it = weights.find(digest.toString());
    return it == weights.end() ? nullptr : &it->second;
  };
  cached = remote_->fetch(cache::ActionKind::Artifact, key, local, factors);
  if (cached)
    answeredBy = "remote";
  return cached;
}

Status CompileExecutor::recordArtifact(const Digest &key, const Digest &artifact,
                                       const std::vector<Digest> &deps,
                                       const std::vector<Digest> &weights,
                                       const std::string &factors) {
  std::vector<Digest> all = deps;
  all.insert(all.end(), weights.begin(), weights.end());
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::Artifact, key, artifact, all));
  publish(cache::ActionKind::Artifact, key, TierEntry{artifact, deps, weights, factors});

  // The model-name index: what was here and in the remote, this entry first.
  json wanted = parseObject(factors);
  Digest indexKey = nameIndexKey(wanted.value("model", std::string()));
  FLOWC_ASSIGN_OR_RETURN(Digest factorsBlob, cache_.put(factors));
  json entries =
      json::array({{{"key", key.toString()}, {"factors", factorsBlob.toString()}}});
  std::vector<json> known;
  for (const json &entry : localIndexEntries(cache_, indexKey))
    known.push_back(entry);
  if (remote_)
    if (auto fetched = remote_->fetchEntry(cache::ActionKind::Artifact, indexKey))
      for (const json &entry : indexEntries(cache_, fetched->result))
        known.push_back(entry);
  std::vector<Digest> factorBlobs{factorsBlob};
  for (const json &entry : known) {
    if (entries.size() >= kNameIndexEntries)
      break;
    bool seen = false;
    for (const json &kept : entries)
      seen = seen || kept["key"] == entry.value("key", json());
    auto blob = Digest::parse(entry.value("factors", std::string()));
    if (seen || !blob || !cache_.contains(*blob))
      continue;
    entries.push_back(entry);
    factorBlobs.push_back(*blob);
  }
  json index = {{"format", "flowc.model-names.v1"}, {"entries", entries}};
  FLOWC_ASSIGN_OR_RETURN(Digest indexBlob, cache_.put(index.dump()));
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::Artifact, indexKey, indexBlob, factorBlobs));
  publish(cache::ActionKind::Artifact, indexKey,
          TierEntry{indexBlob, factorBlobs, {}, {}});
  return Status::ok();
}

std::string CompileExecutor::explainHit(const std::string &factors,
                                        const std::string &answeredBy,
                                        const std::string &wantedFactors) {
  json wanted = parseObject(wantedFactors);
  json found = parseObject(factors);
  if (found.empty()) {
    // A local hit: its manifest is in the name index.
    Digest indexKey = nameIndexKey(wanted.value("model", std::string()));
    for (const json &entry : localIndexEntries(cache_, indexKey))
      if (entry.value("key", json()) == wanted["key"])
        if (auto digest = Digest::parse(entry.value("factors", std::string())))
          if (auto blob = cache_.get(*digest))
            found = parseObject(blob->bytes());
  }
  if (found.empty())
    found = {{"key", wanted.value("key", std::string())}};
  return "hit: answered by the " + answeredBy + " cache: " + describeEntry(found);
}

std::string CompileExecutor::explainMiss(const std::string &wantedFactors) {
  json wanted = parseObject(wantedFactors);
  std::string model = wanted.value("model", std::string());
  Digest indexKey = nameIndexKey(model);
  std::vector<json> candidates;
  auto collect = [&](const json &entries) {
    for (const json &entry : entries)
      if (auto digest = Digest::parse(entry.value("factors", std::string())))
        if (auto blob = cache_.get(*digest))
          candidates.push_back(parseObject(blob->bytes()));
  };
  collect(localIndexEntries(cache_, indexKey));
  if (remote_)
    if (auto fetched = remote_->fetchEntry(cache::ActionKind::Artifact, indexKey))
      collect(indexEntries(cache_, fetched->result));
  const json *nearest = nullptr;
  size_t best = 0;
  for (const json &candidate : candidates) {
    if (candidate.value("key", json()) == wanted["key"])
      continue;
    size_t distance = factorDistance(wanted, candidate);
    if (!nearest || distance < best) {
      nearest = &candidate;
      best = distance;
    }
  }
  if (!nearest)
    return "miss: no cached entry for a model named '" + model + "'" +
           (remote_ ? " here or in the remote cache" : "") + "; compiling";
  std::string text = "miss: the nearest cached entry for '" + model + "' is " +
                     describeEntry(*nearest) + "; it differs in:";
  for (const std::string &line : factorDifferences(wanted, *nearest))
    text += "\n  " + line;
  return text;
}

} // namespace flowc::worker
