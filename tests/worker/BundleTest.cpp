// Bundles (Bundle.h), entry signatures (EntrySignature.h) and the key-factor
// manifests --explain compares (KeyFactors.h).
#include "EntrySignature.h"
#include "KeyFactors.h"

#include "flowc/worker/Bundle.h"
#include "flowc/worker/CompileExecutor.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flowc::worker {
namespace {

using namespace flowc::testing;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr const char *kBuild = "flowc-test-build";

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct CompiledModel {
  std::unique_ptr<cache::Cache> cache;
  CompileRequest request;
  CompileResult result;
};

CompiledModel compiled(const TempDir &dir, const std::string &cacheName) {
  writeFile(dir.file("m.onnx"), centeringModel("Sigmoid", 64));
  CompiledModel made;
  made.cache = std::move(*cache::Cache::open(dir.file(cacheName), {}));
  InProcessTaskRunner runner(*made.cache, kBuild, 1);
  CompileExecutor executor(*made.cache, kBuild, CompileExecutor::Eviction::Never,
                           &runner);
  made.request.modelPath = dir.file("m.onnx");
  made.result = *executor.compile(made.request, [](const ProgressEvent &) {});
  return made;
}

TEST(BundleTest, AnImportedBundleAnswersTheSameArtifactInAnotherCache) {
  TempDir dir;
  CompiledModel source = compiled(dir, "a");
  CompileExecutor reader(*source.cache, kBuild, CompileExecutor::Eviction::Never);
  auto entries = reader.recordedEntries(source.request);
  ASSERT_TRUE(entries) << entries.status().toString();
  ASSERT_EQ(entries->size(), 3u); // artifact, code, weight list
  auto written = writeBundle(*source.cache, *entries, dir.file("b.tar"));
  ASSERT_TRUE(written) << written.status().toString();
  EXPECT_GT(written->bytes, source.result.artifactDigest.size);

  auto target = cache::Cache::open(dir.file("b"), {});
  ASSERT_TRUE(target);
  auto read = readBundle(**target, dir.file("b.tar"));
  ASSERT_TRUE(read) << read.status().toString();
  EXPECT_EQ(read->entries, 3u);
  CompileExecutor executor(**target, kBuild, CompileExecutor::Eviction::Never);
  auto hit = executor.compile(source.request, [](const ProgressEvent &) {});
  ASSERT_TRUE(hit) << hit.status().toString();
  EXPECT_TRUE(hit->cacheHit);
  EXPECT_EQ(hit->artifactDigest, source.result.artifactDigest);
  EXPECT_EQ(hit->answeredBy, "local");
}

TEST(BundleTest, AModelNotCompiledWithTheseOptionsHasNoBundle) {
  TempDir dir;
  CompiledModel source = compiled(dir, "a");
  CompileRequest other = source.request;
  other.options.optLevel = 1;
  CompileExecutor reader(*source.cache, kBuild, CompileExecutor::Eviction::Never);
  EXPECT_THAT(reader.recordedEntries(other),
              StatusIs(StatusCode::FailedPrecondition, "submit it first"));
}

/// Bytes of a valid bundle of the compiled model.
std::string bundleBytes(const TempDir &dir, CompiledModel &source) {
  CompileExecutor reader(*source.cache, kBuild, CompileExecutor::Eviction::Never);
  EXPECT_TRUE(writeBundle(*source.cache, *reader.recordedEntries(source.request),
                          dir.file("good.tar")));
  return readFile(dir.file("good.tar"));
}

TEST(BundleTest, ADamagedBundleChangesNothing) {
  TempDir dir;
  CompiledModel source = compiled(dir, "a");
  std::string good = bundleBytes(dir, source);
  struct Case {
    std::string name, bytes, message;
    StatusCode code;
  };
  // A byte inside the artifact's data (its member's header, then the data).
  std::string flipped = good;
  size_t artifact = good.find("blobs/" + source.result.artifactDigest.hex());
  ASSERT_NE(artifact, std::string::npos);
  flipped[artifact + 512 + 100] ^= 0x40;
  std::string unfinished = good;
  size_t complete = unfinished.find("\"complete\": true");
  ASSERT_NE(complete, std::string::npos);
  unfinished.replace(complete, 16, "\"complete\":false");
  std::vector<Case> cases = {
      {"empty", "", "truncated", StatusCode::DataLoss},
      {"not a tar", std::string(2048, 'x'), "not a ustar header",
       StatusCode::InvalidArgument},
      {"cut", good.substr(0, good.size() / 2), "truncated", StatusCode::DataLoss},
      {"a flipped byte", flipped, "blobs/", StatusCode::DataLoss},
      {"unfinished", unfinished, "", StatusCode::DataLoss},
  };
  for (const Case &c : cases) {
    auto target =
        cache::Cache::open(dir.file("t-" + std::to_string(&c - cases.data())), {});
    ASSERT_TRUE(target);
    writeFile(dir.file("bad.tar"), c.bytes);
    auto read = readBundle(**target, dir.file("bad.tar"));
    ASSERT_FALSE(read) << c.name;
    if (c.name != "unfinished") {
      EXPECT_EQ(read.status().code(), c.code)
          << c.name << ": " << read.status().toString();
      EXPECT_THAT(read.status().message(), HasSubstr(c.message)) << c.name;
    }
    auto stats = (*target)->stats();
    ASSERT_TRUE(stats);
    EXPECT_EQ(stats->actionCount, 0u) << c.name;
  }
}

TEST(EntrySignatureTest, OnlyTheTrustedKeyVerifies) {
  TempDir dir;
  for (const char *name : {"a", "b"}) {
    std::string key = dir.file(std::string(name) + ".pem");
    ASSERT_EQ(std::system(("openssl genpkey -algorithm ed25519 -out " + key +
                           " 2>/dev/null && openssl pkey -in " + key + " -pubout -out " +
                           dir.file(std::string(name) + ".pub") + " 2>/dev/null")
                              .c_str()),
              0);
  }
  auto signer = SigningKey::load(dir.file("a.pem"));
  ASSERT_TRUE(signer) << signer.status().toString();
  auto trusted = TrustedKeys::load({dir.file("a.pub")});
  auto other = TrustedKeys::load({dir.file("b.pub")});
  ASSERT_TRUE(trusted && other);
  auto signature = signer->sign("entry text");
  ASSERT_TRUE(signature);
  EXPECT_EQ(signature->size(), 64u);
  EXPECT_TRUE(trusted->verifies("entry text", *signature));
  EXPECT_FALSE(trusted->verifies("entry text!", *signature));
  EXPECT_FALSE(other->verifies("entry text", *signature));
  EXPECT_THAT(SigningKey::load(dir.file("a.pub")).status().message(),
              HasSubstr("not a PEM private key"));
  EXPECT_THAT(TrustedKeys::load({dir.file("none.pub")}).status().message(),
              HasSubstr("cannot be read"));
}

TEST(KeyFactorsTest, EachFactorThatDiffersIsNamed) {
  json base = {{"graph", "g1"},
               {"nodes", {"Conv conv (x,w) -> (y)", "Relu relu (y) -> (z)"}},
               {"weights", {{"w", "float32[8]", "d1"}, {"b", "float32[8]", "d2"}}},
               {"target", "x86_64 znver3 +avx2,+fma,-avx512f"},
               {"options", "target=cpu;opt=2"},
               {"toolchain", "flowc-0.4 flowc.artifact.v2"}};
  EXPECT_TRUE(factorDifferences(base, base).empty());
  json graph = base;
  graph["graph"] = "g2";
  graph["nodes"][1] = "Tanh relu (y) -> (z)";
  EXPECT_THAT(factorDifferences(graph, base),
              ::testing::ElementsAre(HasSubstr("graph: node 1 differs: Tanh relu")));
  json weights = base;
  weights["weights"][1][2] = "d3";
  EXPECT_THAT(factorDifferences(weights, base),
              ::testing::ElementsAre("weights: 1 tensor(s) differ: b (contents)"));
  json options = base;
  options["options"] = "target=cpu;opt=3";
  options["toolchain"] = "flowc-0.5 flowc.artifact.v2";
  EXPECT_THAT(factorDifferences(options, base),
              ::testing::ElementsAre(HasSubstr("options: target=cpu;opt=3"),
                                     HasSubstr("toolchain: flowc-0.5")));
  EXPECT_EQ(modelName("/a/b/net.onnx"), "net.onnx");
}

} // namespace
} // namespace flowc::worker
