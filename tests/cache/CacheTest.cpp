#include "flowc/cache/Cache.h"

#include "../common/TestUtil.h"

#include <filesystem>
#include <fstream>
#include <thread>

namespace flowc::cache {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;

TEST(DigestTest, MatchesKnownSha256Vector) {
  // FIPS 180-2 test vector for "abc".
  Digest digest = digestOf("abc");
  EXPECT_EQ(digest.hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest.size, 3u);
}

TEST(DigestTest, IncrementalHashingEqualsOneShot) {
  Hasher hasher;
  hasher.update("ab");
  hasher.update("c");
  EXPECT_EQ(hasher.finish(), digestOf("abc"));
}

TEST(DigestTest, ParsesItsOwnText) {
  Digest digest = digestOf("flowc");
  auto parsed = Digest::parse(digest.toString());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, digest);
}

TEST(DigestTest, RejectsMalformedText) {
  for (const char *text :
       {"", "sha256:", "md5:abc/1", "sha256:zz/1",
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad/x",
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"})
    EXPECT_THAT(Digest::parse(text),
                StatusIs(StatusCode::InvalidArgument, "malformed digest"))
        << text;
}

TEST(CacheTest, StoresAndMapsBlobs) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache) << cache.status().toString();
  // Store, then read back through a mapping.
  auto digest = (*cache)->put("weights");
  ASSERT_TRUE(digest);
  EXPECT_TRUE((*cache)->contains(*digest));
  auto mapped = (*cache)->map(*digest);
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->view(), "weights");
  // The blob lives at cas/<2 hex>/<62 hex>.
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/cas/" + digest->hex().substr(0, 2) +
                                      "/" + digest->hex().substr(2)));
}

TEST(CacheTest, StoresIdenticalBytesOnce) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  ASSERT_TRUE((*cache)->put("same"));
  ASSERT_TRUE((*cache)->put("same"));
  auto stats = (*cache)->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->blobCount, 1u);
  EXPECT_EQ(stats->blobBytes, 4u);
}

TEST(CacheTest, ConcurrentWritersOfOneBlobBothSucceed) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  std::string bytes(1 << 20, 'x');
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int i = 0; i < 8; ++i)
    writers.emplace_back([&] {
      if (!(*cache)->put(bytes))
        ++failures;
    });
  for (auto &w : writers)
    w.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ((*cache)->stats()->blobCount, 1u);
  // No temp file is left behind.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/tmp"));
}

TEST(CacheTest, RejectsBytesThatDoNotMatchTheClaimedDigest) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  Digest claimed = digestOf("good");
  EXPECT_THAT((*cache)->putVerified(claimed, "evil"),
              StatusIs(StatusCode::DataLoss, "hashes to"));
  EXPECT_FALSE((*cache)->contains(claimed));
  EXPECT_EQ((*cache)->stats()->blobCount, 0u);
}

TEST(CacheTest, MissingBlobIsNotFound) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  EXPECT_THAT((*cache)->map(digestOf("absent")),
              StatusIs(StatusCode::NotFound, "not in the cache"));
}

TEST(CacheTest, ActionIsReturnedOnlyWhileItsBlobExists) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  Digest key = digestOf("compile request");
  auto result = (*cache)->put("artifact bytes");
  ASSERT_TRUE(result);
  ASSERT_TRUE((*cache)->recordAction(ActionKind::Artifact, key, *result));
  auto hit = (*cache)->lookupAction(ActionKind::Artifact, key);
  ASSERT_TRUE(hit);
  ASSERT_TRUE(hit->has_value());
  EXPECT_EQ(**hit, *result);
  // Kinds are separate namespaces.
  EXPECT_FALSE((*cache)->lookupAction(ActionKind::Code, key)->has_value());
  // Once the blob is gone the entry no longer answers.
  std::filesystem::remove((*cache)->blobPath(*result));
  EXPECT_FALSE((*cache)->lookupAction(ActionKind::Artifact, key)->has_value());
}

TEST(CacheTest, RefusesActionWhoseResultIsMissing) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  EXPECT_THAT(
      (*cache)->recordAction(ActionKind::Code, digestOf("k"), digestOf("missing")),
      StatusIs(StatusCode::FailedPrecondition, "is not in the cache"));
}

TEST(CacheTest, AdoptsAFinishedFile) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  std::string path = (*cache)->tmpDir() + "/artifact";
  std::ofstream(path) << "artifact";
  auto digest = (*cache)->adoptFile(path);
  ASSERT_TRUE(digest);
  EXPECT_EQ(*digest, digestOf("artifact"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ((*cache)->map(*digest)->view(), "artifact");
}

TEST(CacheTest, SweepsTempFilesOfCrashedWritersAtOpen) {
  TempDir dir;
  { ASSERT_TRUE(Cache::open(dir.path())); }
  std::ofstream(dir.path() + "/tmp/blob.crashed") << "partial";
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/tmp"));
}

TEST(CacheTest, PersistsAcrossReopen) {
  TempDir dir;
  Digest key = digestOf("key"), value;
  {
    auto cache = Cache::open(dir.path());
    ASSERT_TRUE(cache);
    value = *(*cache)->put("value");
    ASSERT_TRUE((*cache)->recordAction(ActionKind::Code, key, value));
  }
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  auto hit = (*cache)->lookupAction(ActionKind::Code, key);
  ASSERT_TRUE(hit && hit->has_value());
  EXPECT_EQ(**hit, value);
}

TEST(CacheTest, OpenFailsOnAnUnusableDirectory) {
  TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  EXPECT_FALSE(Cache::open(dir.file("file") + "/cache"));
  EXPECT_THAT(Cache::open(""), StatusIs(StatusCode::InvalidArgument, "cache directory"));
}

} // namespace
} // namespace flowc::cache
