#include "flowc/cache/Cache.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/SafeOpen.h"

#include "../common/TestUtil.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

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

TEST(MappedFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  TempDir dir;
  std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever comes: a blocking open would hang here.
  EXPECT_THAT(MappedFile::open(fifo),
              StatusIs(StatusCode::InvalidArgument, "is not a regular file"));
}

TEST(MappedFileTest, ReleasesPagesOnlyOfItsOwnMappings) {
  TempDir dir;
  std::string bytes(3 * 4096 + 100, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 7);
  std::ofstream(dir.file("f"), std::ios::binary) << bytes;
  auto file = MappedFile::open(dir.file("f"));
  ASSERT_TRUE(file);
  std::string_view view(reinterpret_cast<const char *>(file->data()), file->size());
  EXPECT_TRUE(MappedFile::isMapped(view.substr(5000, 10)));
  EXPECT_FALSE(MappedFile::isMapped(bytes));
  EXPECT_FALSE(MappedFile::releasePages(bytes)); // heap memory is left alone
  EXPECT_TRUE(MappedFile::releasePages(view));
  // Released pages read back from the page cache, unchanged.
  EXPECT_EQ(view, bytes);
  // Windows cover the view in order, and their digest is the one-shot one.
  std::string seen;
  ASSERT_TRUE(visitInWindows(view, 4096, [&](std::string_view window) {
    seen.append(window);
    return Status::ok();
  }));
  EXPECT_EQ(seen, bytes);
  EXPECT_EQ(digestOf(view), digestOf(bytes));
}

TEST(CacheTest, SmallBlobsLiveInsideTheIndex) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache) << cache.status().toString();
  auto digest = (*cache)->put("weights");
  ASSERT_TRUE(digest);
  EXPECT_TRUE((*cache)->contains(*digest));
  auto handle = (*cache)->get(*digest);
  ASSERT_TRUE(handle);
  EXPECT_EQ(handle->bytes(), "weights");
  // No file: millions of small blobs must not exhaust inodes.
  EXPECT_FALSE(std::filesystem::exists((*cache)->blobPath(*digest)));
  EXPECT_EQ((*cache)->stats()->inlineBlobs, 1u);
}

TEST(CacheTest, LargeBlobsAreShardedFilesReadByMapping) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  std::string bytes(1 << 20, 'w');
  auto digest = (*cache)->put(bytes);
  ASSERT_TRUE(digest);
  // The blob lives at cas/<2 hex>/<62 hex>.
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/cas/" + digest->hex().substr(0, 2) +
                                      "/" + digest->hex().substr(2)));
  auto handle = (*cache)->get(*digest);
  ASSERT_TRUE(handle);
  EXPECT_EQ(handle->bytes(), bytes);
  EXPECT_EQ((*cache)->stats()->inlineBlobs, 0u);
}

TEST(CacheTest, PutFileStreamsLargeFiles) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  std::string bytes(9 << 20, 'f'); // more than two 4 MiB chunks
  bytes[12345] = 'g';
  std::ofstream(dir.file("input.bin"), std::ios::binary) << bytes;
  auto digest = (*cache)->putFile(dir.file("input.bin"));
  ASSERT_TRUE(digest) << digest.status().toString();
  EXPECT_EQ(*digest, digestOf(bytes));
  EXPECT_EQ((*cache)->get(*digest)->bytes(), bytes);
  EXPECT_THAT((*cache)->putFile(dir.file("absent.bin")),
              StatusIs(StatusCode::NotFound, "absent.bin"));
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
  EXPECT_THAT((*cache)->get(digestOf("absent")),
              StatusIs(StatusCode::NotFound, "not in the cache"));
}

TEST(CacheTest, ActionIsReturnedOnlyWhileItsBlobExists) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  Digest key = digestOf("compile request");
  auto result = (*cache)->put(std::string(100 << 10, 'a'));
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
  std::string bytes(200 << 10, 'z');
  std::ofstream(path) << bytes;
  auto digest = (*cache)->adoptFile(path);
  ASSERT_TRUE(digest);
  EXPECT_EQ(*digest, digestOf(bytes));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::exists((*cache)->blobPath(*digest)));
  EXPECT_EQ((*cache)->get(*digest)->bytes(), bytes);
}

TEST(CacheTest, AnAdoptedFileStaysAFileHoweverSmall) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  std::string path = (*cache)->tmpDir() + "/small-artifact";
  std::ofstream(path) << "tiny";
  auto digest = (*cache)->adoptFile(path);
  ASSERT_TRUE(digest);
  // Artifacts are handed out as hard links of their file.
  EXPECT_TRUE(std::filesystem::exists((*cache)->blobPath(*digest)));
  EXPECT_EQ((*cache)->get(*digest)->bytes(), "tiny");
  EXPECT_EQ((*cache)->stats()->inlineBlobs, 0u);
}

TEST(CacheTest, SweepsTempFilesOfCrashedWritersAtOpen) {
  TempDir dir;
  { ASSERT_TRUE(Cache::open(dir.path())); }
  // pid 0x7fffffff does not exist: its temp file is a crashed writer's.
  std::ofstream(dir.path() + "/tmp/blob.2147483647.abc") << "partial";
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

namespace flowc::cache {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;

std::unique_ptr<Cache> openCache(const TempDir &dir, CacheOptions options = {}) {
  auto cache = Cache::open(dir.path(), options);
  EXPECT_TRUE(cache) << cache.status().toString();
  return cache ? cache.takeValue() : nullptr;
}

std::string blobOf(char c, size_t kib) { return std::string(kib << 10, c); }

TEST(EvictionTest, EvictsLeastRecentlyUsedFirst) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest a = *cache->put(blobOf('a', 100)), b = *cache->put(blobOf('b', 100)),
         c = *cache->put(blobOf('c', 100));
  // Reading `a` makes `b` the least recently used.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(cache->get(a));
  auto report = cache->collectGarbage(200 << 10);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->evictedBlobs, 1u);
  EXPECT_FALSE(cache->contains(b));
  EXPECT_TRUE(cache->contains(a));
  EXPECT_TRUE(cache->contains(c));
  EXPECT_EQ(cache->stats()->evictions, 1u);
}

TEST(EvictionTest, NeverEvictsPinnedBlobs) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest persistent = *cache->put(blobOf('p', 80));
  Digest mapped = *cache->put(blobOf('m', 80));
  Digest running = *cache->put(blobOf('r', 80));
  Digest free = *cache->put(blobOf('f', 80));
  ASSERT_TRUE(cache->pin(persistent));
  auto handle = cache->get(mapped); // an artifact being served
  ASSERT_TRUE(handle);
  PinGuard job = cache->pinGuard(); // a running job's blob
  job.add(running);
  auto report = cache->collectGarbage(0);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->evictedBlobs, 1u);
  EXPECT_FALSE(cache->contains(free));
  for (const Digest &d : {persistent, mapped, running})
    EXPECT_TRUE(cache->contains(d)) << d.toString();
  // Released pins make the blobs evictable again.
  job = PinGuard();
  handle = Status(StatusCode::Cancelled, "released");
  ASSERT_TRUE(cache->unpin(persistent));
  EXPECT_EQ(cache->collectGarbage(0)->evictedBlobs, 3u);
}

TEST(EvictionTest, EvictingABlobDropsTheEntriesThatNeedIt) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest result = *cache->put(blobOf('r', 100)), dep = *cache->put(blobOf('d', 100));
  Digest key = digestOf("key");
  ASSERT_TRUE(cache->recordAction(ActionKind::Artifact, key, result, {dep}));
  ASSERT_TRUE(cache->pin(result));
  auto report = cache->collectGarbage(0);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->droppedActions, 1u);
  EXPECT_FALSE(cache->lookupAction(ActionKind::Artifact, key)->has_value());
  EXPECT_EQ(cache->stats()->actionCount, 0u);
}

TEST(EvictionTest, EnforcesTheConfiguredCap) {
  TempDir dir;
  CacheOptions options;
  options.maxBytes = 1 << 20;
  auto cache = openCache(dir, options);
  for (char c = 'a'; c < 'a' + 20; ++c)
    ASSERT_TRUE(cache->put(blobOf(c, 100)));
  auto report = cache->enforceLimit();
  ASSERT_TRUE(report);
  EXPECT_GT(report->evictedBlobs, 0u);
  EXPECT_LE(cache->stats()->blobBytes, options.maxBytes);
}

TEST(EvictionTest, RejectsAnUnusableCap) {
  TempDir dir;
  CacheOptions options;
  options.maxBytes = 10;
  EXPECT_THAT(Cache::open(dir.path(), options),
              StatusIs(StatusCode::InvalidArgument, "cap"));
}

TEST(ActionTest, NeedsEveryDependencyPresent) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest result = *cache->put("result"), dep = *cache->put(blobOf('d', 100));
  Digest key = digestOf("k");
  ASSERT_TRUE(cache->recordAction(ActionKind::Kernel, key, result, {dep}));
  EXPECT_TRUE(cache->lookupAction(ActionKind::Kernel, key)->has_value());
  std::filesystem::remove(cache->blobPath(dep));
  EXPECT_FALSE(cache->lookupAction(ActionKind::Kernel, key)->has_value());
  EXPECT_THAT(cache->recordAction(ActionKind::Kernel, key, result, {digestOf("gone")}),
              StatusIs(StatusCode::FailedPrecondition, "dependency"));
}

TEST(ActionTest, CountsHitsAndMisses) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest result = *cache->put("r"), key = digestOf("k");
  EXPECT_FALSE(cache->lookupAction(ActionKind::Artifact, key)->has_value());
  ASSERT_TRUE(cache->recordAction(ActionKind::Artifact, key, result));
  EXPECT_TRUE(cache->lookupAction(ActionKind::Artifact, key)->has_value());
  EXPECT_TRUE(cache->lookupAction(ActionKind::Artifact, key)->has_value());
  EXPECT_EQ(cache->stats()->hits, 2u);
  EXPECT_EQ(cache->stats()->misses, 1u);
}

TEST(StoreTest, CountsBytesSavedByDedup) {
  TempDir dir;
  auto cache = openCache(dir);
  std::string big = blobOf('x', 200);
  ASSERT_TRUE(cache->put(big));
  ASSERT_TRUE(cache->put(big));
  ASSERT_TRUE(cache->putVerified(digestOf(big), big));
  ASSERT_TRUE(cache->put("small"));
  ASSERT_TRUE(cache->put("small"));
  EXPECT_EQ(cache->stats()->dedupBytes, 2 * big.size() + 5);
}

TEST(StoreTest, SameBlobFromTwoProcessesEndsAsOneCopy) {
  TempDir dir;
  { ASSERT_TRUE(openCache(dir)); }
  std::string bytes = blobOf('p', 4096);
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      auto cache = Cache::open(dir.path());
      _exit(cache && (*cache)->put(bytes) ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto cache = openCache(dir);
  EXPECT_EQ(cache->stats()->blobCount, 1u);
  EXPECT_EQ(cache->get(digestOf(bytes))->bytes(), bytes);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/tmp"));
}

/// Sets a file's mtime well in the past, as for a file saved a while ago.
void age(const std::string &path) {
  timespec times[2] = {{1'600'000'000, 0}, {1'600'000'000, 0}};
  utimensat(AT_FDCWD, path.c_str(), times, 0);
}

TEST(StatMemoTest, RemembersAnUnchangedFile) {
  TempDir dir;
  auto cache = openCache(dir);
  std::ofstream(dir.file("model.onnx")) << "model";
  age(dir.file("model.onnx"));
  // ctime cannot be set back: wait out the racy window once.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto file = FileIdentity::of(dir.file("model.onnx"));
  ASSERT_TRUE(file);
  ASSERT_TRUE(cache->recordStat(*file, "purpose", digestOf("model")));
  auto hit = cache->lookupStat(*FileIdentity::of(dir.file("model.onnx")), "purpose");
  ASSERT_TRUE(hit && hit->has_value());
  EXPECT_EQ(**hit, digestOf("model"));
  EXPECT_FALSE(cache->lookupStat(*file, "other purpose")->has_value());
  // Any change to the file invalidates the entry.
  std::ofstream(dir.file("model.onnx"), std::ios::app) << "!";
  EXPECT_FALSE(cache->lookupStat(*FileIdentity::of(dir.file("model.onnx")), "purpose")
                   ->has_value());
}

TEST(StatMemoTest, DoesNotMemoizeARecentlyModifiedFile) {
  TempDir dir;
  auto cache = openCache(dir);
  std::ofstream(dir.file("model.onnx")) << "fresh";
  auto file = FileIdentity::of(dir.file("model.onnx"));
  ASSERT_TRUE(file);
  ASSERT_TRUE(cache->recordStat(*file, "purpose", digestOf("fresh")));
  EXPECT_FALSE(cache->lookupStat(*file, "purpose")->has_value());
  EXPECT_EQ(cache->stats()->statMemoEntries, 0u);
}

TEST(StatMemoTest, DoesNotMemoizeAFileThatChangedWhileRead) {
  TempDir dir;
  auto cache = openCache(dir);
  std::ofstream(dir.file("model.onnx")) << "v1";
  age(dir.file("model.onnx"));
  auto before = FileIdentity::of(dir.file("model.onnx"));
  std::ofstream(dir.file("model.onnx")) << "v2, longer";
  age(dir.file("model.onnx"));
  ASSERT_TRUE(cache->recordStat(*before, "purpose", digestOf("v1")));
  EXPECT_EQ(cache->stats()->statMemoEntries, 0u);
}

TEST(VerifyTest, FindsAndQuarantinesCorruptBlobs) {
  TempDir dir;
  auto cache = openCache(dir);
  std::string bytes = blobOf('v', 128);
  Digest good = *cache->put(blobOf('g', 128)), bad = *cache->put(bytes);
  Digest key = digestOf("k");
  ASSERT_TRUE(cache->recordAction(ActionKind::Artifact, key, bad));
  // Flip one byte of the file behind the cache's back.
  {
    std::fstream file(cache->blobPath(bad),
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(1000);
    file.put('X');
  }
  auto report = cache->verify(/*repair=*/false);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->checked, 2u);
  ASSERT_EQ(report->corrupt.size(), 1u);
  EXPECT_THAT(report->corrupt[0], ::testing::HasSubstr(bad.toString()));
  EXPECT_TRUE(cache->contains(bad)); // reporting changes nothing
  report = cache->verify(/*repair=*/true);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->quarantined, 1u);
  EXPECT_FALSE(cache->contains(bad));
  EXPECT_TRUE(cache->contains(good));
  EXPECT_FALSE(cache->lookupAction(ActionKind::Artifact, key)->has_value());
  EXPECT_FALSE(std::filesystem::is_empty(dir.path() + "/quarantine"));
  EXPECT_TRUE(cache->verify(false)->corrupt.empty());
}

TEST(VerifyTest, ReconcileIndexesCommittedOrphansAndDropsRowsWithoutFiles) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest lost = *cache->put(blobOf('l', 100));
  std::filesystem::remove(cache->blobPath(lost));
  // A file renamed into place just before a crash, never indexed.
  std::string orphanBytes = blobOf('o', 100);
  Digest orphan = digestOf(orphanBytes);
  std::filesystem::create_directories(
      std::filesystem::path(cache->blobPath(orphan)).parent_path());
  std::ofstream(cache->blobPath(orphan), std::ios::binary) << orphanBytes;
  // And a file whose name does not match its content.
  Digest liar = digestOf(blobOf('x', 100));
  std::filesystem::create_directories(
      std::filesystem::path(cache->blobPath(liar)).parent_path());
  std::ofstream(cache->blobPath(liar), std::ios::binary) << blobOf('y', 100);

  auto report = cache->reconcile();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->missingFiles, 1u);
  EXPECT_EQ(report->orphanFiles, 2u);
  EXPECT_TRUE(cache->contains(orphan));
  EXPECT_FALSE(cache->contains(liar));
  EXPECT_EQ(cache->stats()->blobCount, 1u);
  auto verify = cache->verify(false);
  EXPECT_TRUE(verify->corrupt.empty());
  EXPECT_EQ(verify->orphanFiles, 0u);
}

TEST(IndexTest, MigratesAVersionOneIndex) {
  TempDir dir;
  std::filesystem::create_directories(dir.path());
  std::string bytes = blobOf('m', 100);
  Digest blob = digestOf(bytes);
  // The foundation's schema, with one blob and one action.
  std::string sql = "CREATE TABLE blobs (digest TEXT PRIMARY KEY, size INTEGER NOT NULL, "
                    "created_ms INTEGER "
                    "NOT NULL, last_access_ms INTEGER NOT NULL);"
                    "CREATE TABLE actions (kind TEXT NOT NULL, key TEXT NOT NULL, result "
                    "TEXT NOT NULL, "
                    "created_ms INTEGER NOT NULL, PRIMARY KEY (kind, key));"
                    "INSERT INTO blobs VALUES('" +
                    blob.hex() + "', " + std::to_string(blob.size) +
                    ", 1, 1);"
                    "INSERT INTO actions VALUES('artifact', '" +
                    digestOf("key").toString() + "', '" + blob.toString() + "', 1);" +
                    "PRAGMA user_version = 1;";
  ASSERT_EQ(
      std::system(("sqlite3 '" + dir.file("index.sqlite") + "' \"" + sql + "\"").c_str()),
      0);
  std::filesystem::create_directories(
      std::filesystem::path(dir.path() + "/cas/" + blob.hex().substr(0, 2)));
  std::ofstream(dir.path() + "/cas/" + blob.hex().substr(0, 2) + "/" +
                    blob.hex().substr(2),
                std::ios::binary)
      << bytes;
  auto cache = openCache(dir);
  auto hit = cache->lookupAction(ActionKind::Artifact, digestOf("key"));
  ASSERT_TRUE(hit && hit->has_value());
  EXPECT_EQ(**hit, blob);
  EXPECT_EQ(cache->get(blob)->bytes(), bytes);
}

TEST(IndexTest, RefusesAnIndexFromANewerFlowc) {
  TempDir dir;
  { ASSERT_TRUE(openCache(dir)); }
  ASSERT_EQ(std::system(
                ("sqlite3 '" + dir.file("index.sqlite") + "' 'PRAGMA user_version = 99'")
                    .c_str()),
            0);
  EXPECT_THAT(Cache::open(dir.path()),
              StatusIs(StatusCode::FailedPrecondition, "schema version 99"));
}

/// A valid record of (signature, device, versions, candidate).
TuningRecord tuning(std::string signature, std::string device, std::string versions,
                    std::string candidate, int64_t timeNs, int64_t measuredMs = 1000) {
  TuningRecord record;
  record.signature = std::move(signature);
  record.device = std::move(device);
  record.versions = std::move(versions);
  record.candidate = std::move(candidate);
  record.timeNs = timeNs;
  record.spreadNs = timeNs / 20;
  record.samples = 15;
  record.separated = true;
  record.noise = 0.0125;
  record.measuredMs = measuredMs;
  record.host = "host-a";
  return record;
}

std::string stateOf(Cache &cache, std::string_view device) {
  auto state = cache.tuningState(device);
  EXPECT_TRUE(state) << state.status().message();
  return state ? *state : "";
}

/// Runs `sql` on the cache's index with the sqlite3 shell (what another
/// program, or damage, could leave there).
void runSql(const TempDir &dir, const std::string &sql) {
  ASSERT_EQ(
      std::system(("sqlite3 '" + dir.file("index.sqlite") + "' \"" + sql + "\"").c_str()),
      0);
}

TEST(TuningTest, ARecordIsReusedAfterReopening) {
  TempDir dir;
  {
    auto cache = openCache(dir);
    ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900)));
    ASSERT_TRUE(
        cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nchw16c", 700)));
    // Measured again, slower this time: the new measurement replaces the old.
    ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 950)));
  }
  // The record lasts: another process (a later compile) reads it.
  auto cache = openCache(dir);
  auto best = cache->bestTuning("conv3x3", "xeon", "dnnl-3.6");
  ASSERT_TRUE(best && best->has_value()) << best.status().message();
  EXPECT_EQ((*best)->candidate, "nchw16c");
  EXPECT_EQ((*best)->timeNs, 700);
  EXPECT_EQ((*best)->spreadNs, 35);
  EXPECT_EQ((*best)->samples, 15);
  EXPECT_TRUE((*best)->separated);
  EXPECT_DOUBLE_EQ((*best)->noise, 0.0125);
  EXPECT_EQ((*best)->measuredMs, 1000);
  EXPECT_EQ((*best)->host, "host-a");
  auto all = cache->listTuning();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[1].candidate, "nhwc");
  EXPECT_EQ((*all)[1].timeNs, 950);
}

TEST(TuningTest, ARecordForAnotherDeviceOrOtherVersionsIsNotReturned) {
  TempDir dir;
  auto cache = openCache(dir);
  ASSERT_TRUE(
      cache->recordTuning(tuning("conv3x3", "xeon-8480", "dnnl-3.6", "nhwc", 900)));
  // Another CPU model, other library versions, another kernel: no record.
  EXPECT_FALSE(cache->bestTuning("conv3x3", "epyc-9654", "dnnl-3.6")->has_value());
  EXPECT_FALSE(cache->bestTuning("conv3x3", "xeon-8480", "dnnl-3.7")->has_value());
  EXPECT_FALSE(cache->bestTuning("conv5x5", "xeon-8480", "dnnl-3.6")->has_value());
  EXPECT_TRUE(cache->bestTuning("conv3x3", "xeon-8480", "dnnl-3.6")->has_value());
  EXPECT_EQ(cache->listTuning("epyc-9654")->size(), 0u);
  EXPECT_EQ(cache->listTuning("xeon-8480")->size(), 1u);
}

// The devices of a name prefix, and each one's latest measurement: how a
// compile for a GPU finds the GPU whose records it uses, without reading
// every record.
TEST(TuningTest, DevicesOfAPrefixComeWithTheirLatestMeasurement) {
  TempDir dir;
  auto cache = openCache(dir);
  ASSERT_TRUE(cache->recordTuning(tuning("c", "gpu H100 sm_90", "v", "a", 9, 300)));
  ASSERT_TRUE(cache->recordTuning(tuning("d", "gpu H100 sm_90", "v", "a", 9, 500)));
  ASSERT_TRUE(cache->recordTuning(tuning("c", "gpu A100 sm_80", "v", "a", 9, 900)));
  ASSERT_TRUE(cache->recordTuning(tuning("c", "gpt", "v", "a", 9, 950)));
  ASSERT_TRUE(cache->recordTuning(tuning("c", "gpu!", "v", "a", 9, 950)));
  ASSERT_TRUE(cache->recordTuning(tuning("c", "xeon", "v", "a", 9, 990)));
  auto devices = cache->tuningDevices("gpu ");
  ASSERT_TRUE(devices) << devices.status().message();
  EXPECT_EQ(*devices, (std::vector<std::string>{"gpu A100 sm_80", "gpu H100 sm_90"}));
  EXPECT_EQ(*cache->latestTuning("gpu H100 sm_90"), 500);
  EXPECT_EQ(*cache->latestTuning("gpu A100 sm_80"), 900);
  EXPECT_EQ(*cache->latestTuning("gpu B200 sm_100"), 0);
  auto all = cache->tuningDevices();
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 5u);
  EXPECT_EQ(cache->tuningDevices("tpu ")->size(), 0u);
  // A device whose records are cleared is no longer one.
  ASSERT_TRUE(cache->clearTuning("gpu A100 sm_80"));
  EXPECT_EQ(*cache->tuningDevices("gpu "), std::vector<std::string>{"gpu H100 sm_90"});
}

// Records kept as one import (a session's timings): a record that is not
// valid is counted and skipped, the others land; a record measured no later
// than the one held is stale.
TEST(TuningTest, ARecordListIsImportedAsADocumentIs) {
  TempDir dir;
  auto cache = openCache(dir);
  TuningRecord bad = tuning("c", "gpu H100 sm_90", "v", "b", 9);
  bad.timeNs = 0;
  auto kept = cache->importTuning(
      std::vector<TuningRecord>{tuning("c", "gpu H100 sm_90", "v", "a", 9), bad,
                                tuning("d", "gpu H100 sm_90", "v", "a", 5)});
  ASSERT_TRUE(kept) << kept.status().message();
  EXPECT_EQ(kept->imported, 2u);
  EXPECT_EQ(kept->ignored, 1u);
  EXPECT_EQ(kept->stale, 0u);
  auto again = cache->importTuning(
      std::vector<TuningRecord>{tuning("c", "gpu H100 sm_90", "v", "a", 7)});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->imported, 0u);
  EXPECT_EQ(again->stale, 1u);
  EXPECT_EQ(cache->listTuning("gpu H100 sm_90")->size(), 2u);
}

TEST(TuningTest, AnInvalidRecordIsRefusedNamingTheField) {
  TempDir dir;
  auto cache = openCache(dir);
  auto with = [](auto change) {
    TuningRecord record = tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900);
    change(record);
    return record;
  };
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.signature.clear(); })),
              StatusIs(StatusCode::InvalidArgument, "signature is empty"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.device.clear(); })),
              StatusIs(StatusCode::InvalidArgument, "device is empty"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.versions.clear(); })),
              StatusIs(StatusCode::InvalidArgument, "versions is empty"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.candidate.clear(); })),
              StatusIs(StatusCode::InvalidArgument, "candidate is empty"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.timeNs = 0; })),
              StatusIs(StatusCode::InvalidArgument, "time_ns is 0, not positive"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.spreadNs = -1; })),
              StatusIs(StatusCode::InvalidArgument, "spread_ns is -1"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.samples = 0; })),
              StatusIs(StatusCode::InvalidArgument, "samples is 0"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.noise = NAN; })),
              StatusIs(StatusCode::InvalidArgument, "noise is"));
  EXPECT_THAT(cache->recordTuning(with([](TuningRecord &r) { r.noise = -0.5; })),
              StatusIs(StatusCode::InvalidArgument, "noise is"));
  // Nothing was kept.
  EXPECT_EQ(cache->listTuning()->size(), 0u);
  // A read-only cache writes no record.
  CacheOptions options;
  options.access = CacheAccess::ReadOnly;
  auto readOnly = Cache::open(dir.path(), options);
  ASSERT_TRUE(readOnly);
  EXPECT_THAT((*readOnly)->recordTuning(with([](TuningRecord &) {})),
              StatusIs(StatusCode::Unavailable, "read-only"));
  EXPECT_THAT((*readOnly)->importTuning(R"({"format":"flowc.tuning.v1","records":[]})"),
              StatusIs(StatusCode::Unavailable, "read-only"));
  EXPECT_THAT((*readOnly)->clearTuning(), StatusIs(StatusCode::Unavailable, "read-only"));
}

TEST(TuningTest, ACorruptRowIsIgnoredWithAWarning) {
  TempDir dir;
  {
    auto cache = openCache(dir);
    ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900)));
  }
  // A row no cache would write: a negative time, which would sort first.
  runSql(dir, "INSERT INTO tuning_records VALUES('conv3x3', 'xeon', 'dnnl-3.6', "
              "'broken', -5, 0, 10, 1, 0.01, 1000, 'h')");
  auto cache = openCache(dir);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  auto best = cache->bestTuning("conv3x3", "xeon", "dnnl-3.6");
  auto all = cache->listTuning();
  std::string logged =
      ::testing::internal::GetCapturedStdout() + ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(best && best->has_value()) << best.status().message();
  EXPECT_EQ((*best)->candidate, "nhwc");
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_THAT(logged, ::testing::HasSubstr("candidate 'broken')"));
  EXPECT_THAT(logged, ::testing::HasSubstr("is ignored: tuning record: time_ns is -5"));
  // The export leaves it out too.
  EXPECT_THAT(*cache->exportTuning(), ::testing::Not(::testing::HasSubstr("broken")));
}

TEST(TuningTest, StateIsEqualForTheSameBestsWhateverTheOrder) {
  TempDir dirA, dirB, dirEmpty;
  auto a = openCache(dirA);
  auto b = openCache(dirB);
  auto empty = openCache(dirEmpty);
  std::vector<TuningRecord> records = {
      tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900),
      tuning("conv3x3", "xeon", "dnnl-3.6", "nchw16c", 700),
      tuning("matmul", "xeon", "dnnl-3.6", "brgemm", 300),
      tuning("matmul", "xeon", "dnnl-3.7", "gemm", 350),
  };
  for (const TuningRecord &record : records)
    ASSERT_TRUE(a->recordTuning(record));
  for (auto it = records.rbegin(); it != records.rend(); ++it)
    ASSERT_TRUE(b->recordTuning(*it));
  // B also measured a slower candidate, with other times: same bests.
  ASSERT_TRUE(b->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "jit", 1200, 5000)));
  EXPECT_EQ(stateOf(*a, "xeon"), stateOf(*b, "xeon"));
  EXPECT_THAT(stateOf(*a, "xeon"), ::testing::StartsWith("sha256:"));
  EXPECT_NE(stateOf(*a, "xeon"), stateOf(*empty, "xeon"));
  // Another device's state is that of no records, in every cache.
  EXPECT_EQ(stateOf(*a, "epyc"), stateOf(*empty, "xeon"));
  EXPECT_EQ(stateOf(*a, "epyc"), stateOf(*empty, "epyc"));
}

TEST(TuningTest, StateChangesWithANewBestOnly) {
  TempDir dir, dirEmpty;
  auto cache = openCache(dir);
  std::string none = stateOf(*openCache(dirEmpty), "xeon");
  ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900)));
  std::string first = stateOf(*cache, "xeon");
  EXPECT_NE(first, none);
  // A slower candidate leaves the best, so the state, alone.
  ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "jit", 1500)));
  EXPECT_EQ(stateOf(*cache, "xeon"), first);
  // So does a record for another device.
  ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "epyc", "dnnl-3.6", "gemm", 10)));
  EXPECT_EQ(stateOf(*cache, "xeon"), first);
  // A faster one is a new best.
  ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nchw16c", 600)));
  std::string second = stateOf(*cache, "xeon");
  EXPECT_NE(second, first);
  // A new kernel is a new best too.
  ASSERT_TRUE(cache->recordTuning(tuning("matmul", "xeon", "dnnl-3.6", "brgemm", 300)));
  EXPECT_NE(stateOf(*cache, "xeon"), second);
  // Cleared, the state is that of no records again.
  ASSERT_TRUE(cache->clearTuning("xeon"));
  EXPECT_EQ(stateOf(*cache, "xeon"), none);
}

TEST(TuningTest, ExportThenImportGivesTheSameRecordsAndState) {
  TempDir dirA, dirB;
  auto a = openCache(dirA);
  ASSERT_TRUE(a->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900)));
  ASSERT_TRUE(a->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nchw16c", 700)));
  ASSERT_TRUE(
      a->recordTuning(tuning("loop:sha256:ab", "epyc", "llvm-22", "tile8x4", 40)));
  auto document = a->exportTuning();
  ASSERT_TRUE(document) << document.status().message();
  auto b = openCache(dirB);
  auto report = b->importTuning(*document);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->imported, 3u);
  EXPECT_EQ(report->ignored, 0u);
  EXPECT_EQ(report->stale, 0u);
  // Every field came across.
  EXPECT_EQ(*b->exportTuning(), *document);
  EXPECT_EQ(stateOf(*b, "xeon"), stateOf(*a, "xeon"));
  EXPECT_EQ(stateOf(*b, "epyc"), stateOf(*a, "epyc"));
  // One device's export holds that device's records only.
  auto epyc = nlohmann::json::parse(*a->exportTuning("epyc"));
  EXPECT_EQ(epyc["format"], "flowc.tuning.v1");
  ASSERT_EQ(epyc["records"].size(), 1u);
  EXPECT_EQ(epyc["records"][0]["candidate"], "tile8x4");
  // Imported again, nothing is newer than what is held.
  report = b->importTuning(*document);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->imported, 0u);
  EXPECT_EQ(report->stale, 3u);
}

TEST(TuningTest, ImportReplacesARecordOnlyWithANewerOne) {
  TempDir dir;
  auto cache = openCache(dir);
  ASSERT_TRUE(
      cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900, 2000)));
  auto documentOf = [](const TuningRecord &record) {
    nlohmann::json json = {{"format", "flowc.tuning.v1"},
                           {"records",
                            {{{"signature", record.signature},
                              {"device", record.device},
                              {"versions", record.versions},
                              {"candidate", record.candidate},
                              {"time_ns", record.timeNs},
                              {"spread_ns", record.spreadNs},
                              {"samples", record.samples},
                              {"separated", record.separated},
                              {"noise", record.noise},
                              {"measured_ms", record.measuredMs},
                              {"host", record.host}}}}};
    return json.dump();
  };
  // Older: the cache keeps its own.
  auto older = cache->importTuning(
      documentOf(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 500, 1000)));
  ASSERT_TRUE(older) << older.status().message();
  EXPECT_EQ(older->imported, 0u);
  EXPECT_EQ(older->stale, 1u);
  EXPECT_EQ((*cache->bestTuning("conv3x3", "xeon", "dnnl-3.6"))->timeNs, 900);
  // Newer: replaced.
  auto newer = cache->importTuning(
      documentOf(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 800, 3000)));
  ASSERT_TRUE(newer);
  EXPECT_EQ(newer->imported, 1u);
  EXPECT_EQ((*cache->bestTuning("conv3x3", "xeon", "dnnl-3.6"))->timeNs, 800);
}

TEST(TuningTest, ImportRefusesADocumentThatIsNotAnExport) {
  TempDir dir;
  auto cache = openCache(dir);
  EXPECT_THAT(cache->importTuning("PK\x03\x04 not json"),
              StatusIs(StatusCode::InvalidArgument, "not a tuning export: not JSON"));
  EXPECT_THAT(cache->importTuning("[1, 2]"),
              StatusIs(StatusCode::InvalidArgument,
                       "not a tuning export: no \"format\": \"flowc.tuning.v1\""));
  EXPECT_THAT(cache->importTuning(R"({"format":"flowc.bundle.v1","records":[]})"),
              StatusIs(StatusCode::InvalidArgument,
                       "format is 'flowc.bundle.v1', expected 'flowc.tuning.v1'"));
  EXPECT_THAT(cache->importTuning(R"({"format":"flowc.tuning.v1"})"),
              StatusIs(StatusCode::InvalidArgument, "\"records\" is missing"));
}

TEST(TuningTest, ImportIgnoresAndCountsRecordsThatAreNotValid) {
  TempDir dir;
  auto cache = openCache(dir);
  nlohmann::json good = nlohmann::json::parse(R"({"signature": "conv3x3",
      "device": "xeon", "versions": "dnnl-3.6", "candidate": "nhwc", "time_ns": 900,
      "spread_ns": 40, "samples": 15, "separated": true, "noise": 0.01,
      "measured_ms": 1000, "host": "h"})");
  nlohmann::json negative = good;
  negative["candidate"] = "jit";
  negative["time_ns"] = -3;
  nlohmann::json wrongType = good;
  wrongType["candidate"] = "gemm";
  wrongType["samples"] = "many";
  nlohmann::json missing = good;
  missing["candidate"] = "brg";
  missing.erase("host");
  nlohmann::json document = {{"format", "flowc.tuning.v1"},
                             {"records", {good, negative, wrongType, missing, 7}}};
  ::testing::internal::CaptureStdout();
  auto report = cache->importTuning(document.dump());
  std::string logged = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->imported, 1u);
  EXPECT_EQ(report->ignored, 4u);
  EXPECT_THAT(logged,
              ::testing::HasSubstr("record 1 is ignored: tuning record: time_ns is -3"));
  EXPECT_THAT(logged,
              ::testing::HasSubstr("record 2 is ignored: 'samples' is missing or not"));
  EXPECT_THAT(logged, ::testing::HasSubstr("record 3 is ignored: 'host' is missing"));
  EXPECT_THAT(logged, ::testing::HasSubstr("record 4 is ignored: not an object"));
  auto all = cache->listTuning();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].candidate, "nhwc");
}

TEST(TuningTest, ClearRemovesOneDeviceOrEveryRecord) {
  TempDir dir;
  auto cache = openCache(dir);
  ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "nhwc", 900)));
  ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "xeon", "dnnl-3.6", "jit", 950)));
  ASSERT_TRUE(cache->recordTuning(tuning("conv3x3", "epyc", "dnnl-3.6", "nhwc", 800)));
  std::string epycState = stateOf(*cache, "epyc");
  EXPECT_EQ(*cache->clearTuning("xeon"), 2u);
  EXPECT_FALSE(cache->bestTuning("conv3x3", "xeon", "dnnl-3.6")->has_value());
  EXPECT_TRUE(cache->bestTuning("conv3x3", "epyc", "dnnl-3.6")->has_value());
  EXPECT_EQ(stateOf(*cache, "epyc"), epycState);
  EXPECT_EQ(*cache->clearTuning(), 1u);
  EXPECT_EQ(cache->listTuning()->size(), 0u);
  EXPECT_EQ(*cache->clearTuning(), 0u);
}

} // namespace
} // namespace flowc::cache

namespace flowc::cache {
namespace {

TEST(PutManyTest, StoresABatchOnceEachAndReturnsDigestsInOrder) {
  flowc::testing::TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  std::string big1(300 << 10, '1'), big2(200 << 10, '2'), small = "tiny";
  ASSERT_TRUE((*cache)->put(big2)); // already present: deduplicated
  std::vector<std::string_view> blobs = {big1, small, big2, big1};
  auto digests = (*cache)->putMany(blobs);
  ASSERT_TRUE(digests) << digests.status().toString();
  ASSERT_EQ(digests->size(), 4u);
  for (size_t i = 0; i < blobs.size(); ++i) {
    EXPECT_EQ((*digests)[i], digestOf(blobs[i]));
    EXPECT_EQ((*cache)->get((*digests)[i])->bytes(), blobs[i]);
  }
  auto stats = (*cache)->stats();
  EXPECT_EQ(stats->blobCount, 3u);
  EXPECT_EQ(stats->inlineBlobs, 1u);
  EXPECT_EQ(stats->dedupBytes, big2.size() + big1.size());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/tmp"));
}

TEST(PutManyTest, EmptyBatchIsFine) {
  flowc::testing::TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  auto digests = (*cache)->putMany({});
  ASSERT_TRUE(digests);
  EXPECT_TRUE(digests->empty());
}

TEST(CacheTest, BlobFilesAreReadOnly) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  auto digest = (*cache)->put(std::string(1 << 20, 'r'));
  ASSERT_TRUE(digest);
  struct stat st;
  ASSERT_EQ(::stat((*cache)->blobPath(*digest).c_str(), &st), 0);
  // Hard links hand these files to users: nobody may write them.
  EXPECT_EQ(st.st_mode & 0777, 0400u);
}

TEST(CacheTest, AFileModifiedAfterItWasStoredIsQuarantined) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  std::string bytes(1 << 20, 'm');
  auto digest = (*cache)->put(bytes);
  ASSERT_TRUE(digest);
  // Unchanged: one stat says so.
  EXPECT_TRUE((*cache)->checkUnmodified(*digest));
  // Written later (as root can, through a hard link), with a later mtime.
  std::string path = (*cache)->blobPath(*digest);
  ::chmod(path.c_str(), 0600);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.write("XXXX", 4);
  }
  timespec later[2] = {{0, UTIME_OMIT}, {::time(nullptr) + 10, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0);
  EXPECT_THAT((*cache)->checkUnmodified(*digest),
              StatusIs(StatusCode::DataLoss, "modified after it was stored"));
  EXPECT_FALSE((*cache)->contains(*digest));
  // A touched but intact file is still served.
  auto again = (*cache)->put(bytes);
  ASSERT_TRUE(again);
  std::string fresh = (*cache)->blobPath(*again);
  ASSERT_EQ(::utimensat(AT_FDCWD, fresh.c_str(), later, 0), 0);
  EXPECT_TRUE((*cache)->checkUnmodified(*again));
}

TEST(CacheTest, CountsHitsAndMissesPerKindAndZeroesThem) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  auto result = (*cache)->put("object");
  ASSERT_TRUE(result);
  Digest key = digestOf("kernel key");
  ASSERT_TRUE((*cache)->recordAction(ActionKind::Kernel, key, *result));
  ASSERT_TRUE((*cache)->lookupAction(ActionKind::Kernel, key));
  ASSERT_TRUE((*cache)->lookupAction(ActionKind::Code, key));
  // A lookup that belongs to the same answer is not counted.
  ASSERT_TRUE((*cache)->lookupAction(ActionKind::Code, key, Cache::CountLookup::No));
  auto stats = (*cache)->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->byKind["kernel"].hits, 1u);
  EXPECT_EQ(stats->byKind["code"].misses, 1u);
  EXPECT_EQ(stats->byKind["artifact"].hits + stats->byKind["artifact"].misses, 0u);
  EXPECT_EQ(stats->byKind.count("derived"), 1u);
  ASSERT_TRUE((*cache)->zeroCounters());
  stats = (*cache)->stats();
  EXPECT_EQ(stats->byKind["kernel"].hits, 0u);
  EXPECT_EQ(stats->byKind["code"].misses, 0u);
}

TEST(CacheTest, ClearIsNotCountedAsEvictions) {
  TempDir dir;
  auto cache = Cache::open(dir.path());
  ASSERT_TRUE(cache);
  ASSERT_TRUE((*cache)->put(std::string(1 << 20, 'a')));
  ASSERT_TRUE((*cache)->clear());
  EXPECT_EQ((*cache)->stats()->evictions, 0u);
  EXPECT_EQ((*cache)->stats()->blobCount, 0u);
  ASSERT_TRUE((*cache)->put(std::string(1 << 20, 'b')));
  ASSERT_TRUE((*cache)->collectGarbage(0));
  EXPECT_EQ((*cache)->stats()->evictions, 1u);
}

// Safe opens ---------------------------------------------------------------

/// Both ways of opening beneath a directory: openat2, and the walk used
/// where the kernel has no openat2.
using OpenBeneathFn = Expected<UniqueFd> (*)(int, const std::string &);

class OpenBeneathTest : public ::testing::TestWithParam<OpenBeneathFn> {
protected:
  void SetUp() override {
    std::filesystem::create_directories(dir.file("sub"));
    std::ofstream(dir.file("sub/w.bin")) << "weights";
    std::ofstream(outside.file("secret")) << "secret";
    dirFd = UniqueFd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dirFd);
  }
  TempDir dir, outside;
  UniqueFd dirFd;
};

TEST_P(OpenBeneathTest, OpensARegularFileBeneathTheDirectory) {
  auto fd = GetParam()(dirFd.get(), "sub/./w.bin");
  ASSERT_TRUE(fd) << fd.status().toString();
  auto file = MappedFile::fromFd(fd->get(), "w.bin");
  ASSERT_TRUE(file);
  EXPECT_EQ(file->view(), "weights");
}

TEST_P(OpenBeneathTest, RefusesASymlinkAnywhereOnThePath) {
  // The last component, an intermediate directory, and a link that stays
  // inside the directory: none is followed.
  std::filesystem::create_symlink(outside.file("secret"), dir.file("link.bin"));
  std::filesystem::create_directory_symlink(outside.path(), dir.file("linkdir"));
  std::filesystem::create_symlink("sub/w.bin", dir.file("inside.bin"));
  for (const char *path : {"link.bin", "linkdir/secret", "inside.bin"})
    EXPECT_THAT(
        GetParam()(dirFd.get(), path),
        StatusIs(StatusCode::InvalidArgument,
                 std::string("'") + path + "' is a symlink or passes through one"))
        << path;
}

TEST_P(OpenBeneathTest, RefusesEscapesAndReportsMissingFiles) {
  EXPECT_THAT(GetParam()(dirFd.get(), "../secret"),
              StatusIs(StatusCode::InvalidArgument, "escapes the directory"));
  EXPECT_THAT(GetParam()(dirFd.get(), "/etc/passwd"),
              StatusIs(StatusCode::InvalidArgument, "escapes the directory"));
  EXPECT_THAT(GetParam()(dirFd.get(), "sub/none.bin"),
              StatusIs(StatusCode::NotFound, "cannot open 'sub/none.bin'"));
}

TEST_P(OpenBeneathTest, OpensAFifoWithoutBlockingAndMappingRefusesIt) {
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  auto fd = GetParam()(dirFd.get(), "fifo");
  ASSERT_TRUE(fd) << fd.status().toString();
  EXPECT_THAT(MappedFile::fromFd(fd->get(), "fifo"),
              StatusIs(StatusCode::InvalidArgument, "'fifo' is not a regular file"));
}

INSTANTIATE_TEST_SUITE_P(Both, OpenBeneathTest,
                         ::testing::Values(&openBeneath, &openBeneathByWalk));

// Stat memo inputs -----------------------------------------------------------

/// A model file and one external data file, both older than the racy window.
struct MemoInputs {
  explicit MemoInputs(const TempDir &dir)
      : model(dir.file("model.onnx")), data(dir.file("model.data")) {
    std::ofstream(model) << "model";
    std::ofstream(data) << "weights-v1";
    age(model);
    age(data);
    // ctime cannot be set back: wait out the racy window once.
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  }
  /// The data file's identity as the importer takes it: fstat of its fd.
  FileIdentity dataIdentity() const {
    UniqueFd fd(::open(data.c_str(), O_RDONLY | O_CLOEXEC));
    return FileIdentity::from(data, *fileStatOf(fd.get(), data));
  }
  std::string model, data;
};

TEST(StatMemoTest, AnInputRewrittenWithTheSameSizeAndMtimeIsAMiss) {
  TempDir dir;
  auto cache = openCache(dir);
  MemoInputs files(dir);
  auto model = *FileIdentity::of(files.model);
  ASSERT_TRUE(cache->recordStat(model, "p", digestOf("m1"), {files.dataIdentity()}));
  ASSERT_TRUE(cache->lookupStat(model, "p")->has_value());
  // New values, same size, and the old mtime put back (touch -d): only
  // ctime tells, and it is enough.
  struct stat before;
  ASSERT_EQ(::stat(files.data.c_str(), &before), 0);
  std::ofstream(files.data) << "weights-v2";
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, files.data.c_str(), times, 0), 0);
  EXPECT_FALSE(cache->lookupStat(model, "p")->has_value());
}

TEST(StatMemoTest, AnInputReplacedByASymlinkOrRemovedIsAMiss) {
  TempDir dir;
  auto cache = openCache(dir);
  MemoInputs files(dir);
  auto model = *FileIdentity::of(files.model);
  ASSERT_TRUE(cache->recordStat(model, "p", digestOf("m1"), {files.dataIdentity()}));
  // A link to the very same file: the path's own entry is what counts.
  std::filesystem::rename(files.data, dir.file("real.data"));
  std::filesystem::create_symlink(dir.file("real.data"), files.data);
  EXPECT_FALSE(cache->lookupStat(model, "p")->has_value());
  std::filesystem::remove(files.data);
  EXPECT_FALSE(cache->lookupStat(model, "p")->has_value());
}

TEST(StatMemoTest, AnInputThatChangedSinceItWasOpenedIsNotMemoized) {
  TempDir dir;
  auto cache = openCache(dir);
  MemoInputs files(dir);
  FileIdentity opened = files.dataIdentity();
  // Rewritten while the model was being ingested.
  std::ofstream(files.data) << "weights-v2";
  age(files.data);
  ASSERT_TRUE(
      cache->recordStat(*FileIdentity::of(files.model), "p", digestOf("m1"), {opened}));
  EXPECT_EQ(cache->stats()->statMemoEntries, 0u);
}

// Permissions ----------------------------------------------------------------

mode_t modeOf(const std::string &path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

/// Runs with the most permissive umask, so that modes come from the code.
struct OpenUmask {
  OpenUmask() : old(::umask(0)) {}
  ~OpenUmask() { ::umask(old); }
  mode_t old;
};

TEST(PermissionsTest, AFreshCacheIsItsOwnersOnlyWhateverTheUmask) {
  OpenUmask umask0;
  TempDir dir;
  std::string root = dir.file("cache");
  {
    auto cache = Cache::open(root);
    ASSERT_TRUE(cache) << cache.status().toString();
    Digest large = *(*cache)->put(blobOf('l', 100));
    ASSERT_TRUE((*cache)->put("small"));
    EXPECT_EQ(modeOf((*cache)->blobPath(large)), 0400u);
    EXPECT_EQ(modeOf(std::filesystem::path((*cache)->blobPath(large)).parent_path()),
              0700u);
    for (const char *file : {"/index.sqlite", "/index.sqlite-wal", "/index.sqlite-shm"})
      EXPECT_EQ(modeOf(root + file), 0600u) << file;
  }
  for (const char *sub : {"", "/cas", "/tmp"})
    EXPECT_EQ(modeOf(root + sub), 0700u) << sub;
}

TEST(PermissionsTest, OpenRestrictsAnOlderCachesModes) {
  OpenUmask umask0;
  TempDir dir;
  std::string root = dir.file("cache");
  Digest large;
  {
    auto cache = Cache::open(root);
    ASSERT_TRUE(cache);
    large = *(*cache)->put(blobOf('l', 100));
  }
  // As an older flowc left them under umask 022.
  std::string blobDir = std::filesystem::path(blobPathUnder(root, large)).parent_path();
  for (const std::string &path : {root, root + "/cas", root + "/tmp", blobDir})
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((root + "/index.sqlite").c_str(), 0644), 0);
  ASSERT_TRUE(Cache::open(root));
  for (const std::string &path : {root, root + "/cas", root + "/tmp", blobDir})
    EXPECT_EQ(modeOf(path), 0700u) << path;
  EXPECT_EQ(modeOf(root + "/index.sqlite"), 0600u);
}

// Read-only caches -------------------------------------------------------------

TEST(ReadOnlyCacheTest, ServesWhatIsCachedAndWritesNothing) {
  TempDir dir;
  Digest blob, key = digestOf("key");
  {
    auto cache = openCache(dir);
    blob = *cache->put(blobOf('r', 100));
    ASSERT_TRUE(cache->recordAction(ActionKind::Artifact, key, blob));
  }
  CacheOptions options;
  options.access = CacheAccess::ReadOnly;
  auto cache = openCache(dir, options);
  ASSERT_TRUE(cache);
  EXPECT_TRUE(cache->readOnly());
  auto hit = cache->lookupAction(ActionKind::Artifact, key);
  ASSERT_TRUE(hit && hit->has_value());
  ASSERT_TRUE(cache->get(blob));
  // No counter was written, and every write names the cache.
  EXPECT_EQ(cache->stats()->hits, 0u);
  EXPECT_THAT(cache->put("new"), StatusIs(StatusCode::Unavailable,
                                          "cache '" + dir.path() + "' is read-only"));
  EXPECT_THAT(cache->recordAction(ActionKind::Artifact, digestOf("k2"), blob),
              StatusIs(StatusCode::Unavailable, "is read-only"));
  EXPECT_THAT(cache->verify(/*repair=*/true),
              StatusIs(StatusCode::Unavailable, "cannot repair it"));
  EXPECT_TRUE(cache->verify(/*repair=*/false));
}

TEST(ReadOnlyCacheTest, ADirectoryWithoutAnIndexIsRefused) {
  TempDir dir;
  CacheOptions options;
  options.access = CacheAccess::ReadOnly;
  EXPECT_THAT(Cache::open(dir.path(), options),
              StatusIs(StatusCode::FailedPrecondition, "has no index"));
  // Nothing was created in it.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// Verify: unreadable is not corrupt -------------------------------------------

TEST(VerifyTest, AnUnreadableBlobIsReportedButNeverQuarantined) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest blob = *cache->put(blobOf('u', 128));
  // A blob file that cannot be opened as one (root reads any mode, so a
  // symlink, which blob reads never follow, stands in for EACCES or EIO).
  std::string path = cache->blobPath(blob);
  std::filesystem::rename(path, dir.file("elsewhere"));
  std::filesystem::create_symlink(dir.file("elsewhere"), path);
  auto report = cache->verify(/*repair=*/true);
  ASSERT_TRUE(report);
  EXPECT_TRUE(report->corrupt.empty());
  ASSERT_EQ(report->unreadable.size(), 1u);
  EXPECT_NE(report->unreadable[0].find(blob.toString() + ": cannot open"),
            std::string::npos)
      << report->unreadable[0];
  EXPECT_EQ(report->quarantined, 0u);
  EXPECT_TRUE(std::filesystem::is_symlink(path));
  EXPECT_TRUE(cache->list(10)->size() == 1);
}

TEST(VerifyTest, VerifyDoesNotTouchAccessTimes) {
  TempDir dir;
  auto cache = openCache(dir);
  Digest blob = *cache->put(blobOf('t', 128));
  int64_t before = (*cache->list(1))[0].lastAccessMs;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(cache->verify(/*repair=*/false));
  EXPECT_EQ((*cache->list(1))[0].lastAccessMs, before);
  (void)blob;
}

} // namespace
} // namespace flowc::cache
