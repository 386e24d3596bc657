// No damaged artifact runs: every section is checked against its digest at
// open, the header, table, code object and plan against their bounds even
// without digests, and the code again, sealed, before dlopen.
#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Session.h"

#include "../common/TestUtil.h"
#include "SmallArtifact.h"

#include <fcntl.h>
#include <random>
#include <unistd.h>

namespace flowc::runtime {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;
using testing::addPlan;
using testing::kAddSource;
using testing::sectionPlaces;

class ArtifactIntegrityTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto code = testing::compileCode(dir_.path(), kAddSource);
    ASSERT_TRUE(code) << code.status().toString();
    code_ = *code;
    path_ = dir_.file("add.fca");
    ASSERT_TRUE(testing::writeArtifact(path_, code_, addPlan()));
    pristine_ = *readFileToString(path_);
  }

  /// Writes `bytes` as the artifact (a damaged copy of the pristine one).
  void writeBytes(const std::string &bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }
  std::string flipped(uint64_t at) const {
    std::string bytes = pristine_;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
    return bytes;
  }
  testing::SectionPlace place(SectionKind kind) const {
    for (const testing::SectionPlace &p : sectionPlaces(pristine_))
      if (p.kind == kind)
        return p;
    ADD_FAILURE() << "no section " << sectionName(kind);
    return {};
  }
  Expected<std::shared_ptr<Artifact>> open(Verification verification) const {
    OpenOptions options;
    options.verification = verification;
    return Artifact::open(path_, options);
  }

  TempDir dir_;
  std::string code_, path_, pristine_;
};

/// Runs `artifact` on x = 1, 2, 3, 4: y = 11, 22, 33, 44 or an error.
Expected<std::vector<float>> runAdd(std::shared_ptr<Artifact> artifact) {
  FLOWC_ASSIGN_OR_RETURN(auto session, Session::create(std::move(artifact)));
  FLOWC_ASSIGN_OR_RETURN(auto outputs,
                         session->run({{"x", Tensor::fromFloats({4}, {1, 2, 3, 4})}}));
  return outputs.at(0).floats();
}

const std::vector<float> kExpected = {11, 22, 33, 44};

TEST_F(ArtifactIntegrityTest, PristineArtifactVerifiesAndRuns) {
  auto artifact = open(Verification::Digests);
  ASSERT_TRUE(artifact) << artifact.status().toString();
  auto y = runAdd(*artifact);
  ASSERT_TRUE(y) << y.status().toString();
  EXPECT_EQ(*y, kExpected);
}

// A flipped byte in any section is found by that section's digest, and the
// message names the file and the section.
TEST_F(ArtifactIntegrityTest, AFlippedByteInEachSectionNamesTheSection) {
  for (SectionKind kind : {SectionKind::Metadata, SectionKind::GraphIr, SectionKind::Code,
                           SectionKind::Plan, SectionKind::Weights}) {
    testing::SectionPlace p = place(kind);
    for (uint64_t at : {p.offset, p.offset + p.size / 2, p.offset + p.size - 1}) {
      writeBytes(flipped(at));
      EXPECT_THAT(
          open(Verification::Digests),
          StatusIs(StatusCode::DataLoss, "add.fca': " + std::string(sectionName(kind)) +
                                             " section is damaged: sha256 "))
          << sectionName(kind) << " byte " << at;
    }
  }
}

TEST_F(ArtifactIntegrityTest, AFlippedHeaderOrTableByteIsFoundByTheHeaderDigest) {
  uint64_t table = pristine_.size() - sectionPlaces(pristine_).size() * 56;
  // Header digest (32..63), then an offset, a size and a digest in the table.
  for (uint64_t at : {uint64_t(40), table + 8, table + 16, table + 30}) {
    writeBytes(flipped(at));
    EXPECT_THAT(
        open(Verification::Digests),
        StatusIs(StatusCode::DataLoss, "header or section table is damaged: sha256 "))
        << "byte " << at;
  }
}

// Without digests the bounds still hold: a table entry moved, resized or
// retyped is refused before any byte of it is read as what it claims. (A
// section grown by a few bytes into its zero padding is harmless, and
// RandomHeaderAndTableDamageWithoutDigestsNeverCrashes runs such files.)
TEST_F(ArtifactIntegrityTest, WithoutDigestsADamagedTableIsStillRefused) {
  uint64_t table = pristine_.size() - sectionPlaces(pristine_).size() * 56;
  struct Case {
    uint64_t at;
    const char *message;
  };
  for (size_t i = 0; i < sectionPlaces(pristine_).size(); ++i) {
    uint64_t entry = table + i * 56;
    for (const Case &c :
         {Case{entry, "unknown kind"}, Case{entry + 4, "reserved"},
          Case{entry + 8, "section"}, Case{entry + 14, "lies outside"},
          Case{entry + 17, "section"}, Case{entry + 22, "lies outside"}}) {
      writeBytes(flipped(c.at));
      EXPECT_THAT(open(Verification::BoundsOnly),
                  StatusIs(StatusCode::DataLoss, c.message))
          << "entry " << i << " byte " << c.at;
    }
  }
}

TEST_F(ArtifactIntegrityTest, WithoutDigestsADamagedHeaderIsStillRefused) {
  auto withField = [&](uint64_t at, uint64_t value, size_t width) {
    std::string bytes = pristine_;
    std::memcpy(bytes.data() + at, &value, width);
    return bytes;
  };
  writeBytes(withField(12, 0, 4));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::DataLoss, "0 sections"));
  writeBytes(withField(12, 1u << 30, 4));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::DataLoss, "1073741824 sections"));
  writeBytes(withField(12, 4, 4));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::DataLoss, "does not end the file"));
  writeBytes(withField(16, ~uint64_t(0) - 7, 8));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::DataLoss, "does not end the file"));
  writeBytes(withField(24, pristine_.size() + 4096, 8));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::DataLoss, "truncated"));
  writeBytes(withField(8, 1, 4));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::FailedPrecondition, "format version 1"));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::FailedPrecondition, "rebuild it"));
  writeBytes(withField(8, 7, 4));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::FailedPrecondition, "format version 7"));
}

TEST_F(ArtifactIntegrityTest, TruncatedOrExtendedFilesAreRefused) {
  for (uint64_t cut : {uint64_t(1), uint64_t(56), pristine_.size() / 2}) {
    writeBytes(pristine_.substr(0, pristine_.size() - cut));
    EXPECT_THAT(open(Verification::BoundsOnly),
                StatusIs(StatusCode::DataLoss, "add.fca' is truncated"));
  }
  writeBytes(pristine_ + "x");
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::DataLoss, "add.fca' is extended"));
}

// Padding between sections must be zeros: no byte of the file escapes both
// the digests and the bounds.
TEST_F(ArtifactIntegrityTest, NonZeroPaddingIsRefused) {
  testing::SectionPlace weights = place(SectionKind::Weights);
  writeBytes(flipped(weights.offset - 1));
  EXPECT_THAT(open(Verification::BoundsOnly),
              StatusIs(StatusCode::DataLoss, "is not zeros"));
}

TEST_F(ArtifactIntegrityTest, CodeThatIsNoSharedObjectIsRefusedAtOpen) {
  for (const std::string &code : {std::string("code bytes"), std::string(100, '\x7f')}) {
    ASSERT_TRUE(testing::writeArtifact(path_, code, addPlan()));
    EXPECT_THAT(open(Verification::BoundsOnly),
                StatusIs(StatusCode::DataLoss, "code section: "));
  }
  // ELF headers whose program header table lies past the code's end.
  std::string code = code_;
  uint64_t phoff = code.size();
  std::memcpy(code.data() + 32, &phoff, 8);
  ASSERT_TRUE(testing::writeArtifact(path_, code, addPlan()));
  EXPECT_THAT(
      open(Verification::Digests),
      StatusIs(StatusCode::DataLoss, "code section: program headers out of bounds"));
}

// Plans are checked even when their digest matches (a buggy or hostile
// writer): sizes the runtime would allocate or read must fit.
TEST_F(ArtifactIntegrityTest, PlanFieldsAreValidated) {
  struct Case {
    std::function<void(Plan &)> damage;
    const char *message;
  };
  std::vector<Case> cases = {
      {[](Plan &p) { p.entry = ""; }, "entry symbol '' is not a symbol name"},
      {[](Plan &p) { p.entry = "flowc entry;"; },
       "entry symbol 'flowc entry;' is not a symbol name"},
      {[](Plan &p) { p.inputs[0].shape = {-1}; }, "input 'x' has negative dimension -1"},
      {[](Plan &p) {
         p.outputs[0].shape = {1 << 30, 1 << 30, 1 << 30};
       },
       "output 'y' has more than 2^62 bytes"},
      {[](Plan &p) { p.outputs[0].dtype = "float99"; },
       "output 'y' has unknown dtype 'float99'"},
      {[](Plan &p) { p.inputs[0].shape = std::vector<int64_t>(65, 1); },
       "input 'x' has rank 65"},
      {[](Plan &p) { p.weights[0].offset = 4096; },
       "weight 'w' lies outside the weights section"},
      {[](Plan &p) { p.weights[0].offset = 8; },
       "weight 'w' lies outside the weights section"},
      {[](Plan &p) { p.weights[0].tensor.shape = {8}; },
       "weight 'w' has 16 bytes, its shape needs 32"},
      {[](Plan &p) { p.weights[0].digest = "sha256:abc"; },
       "weight 'w' has digest 'sha256:abc', not sha256:<hex>/16"},
      {[](Plan &p) { p.weights[0].digest = "sha256:" + std::string(64, 'a') + "/17"; },
       "weight 'w' has digest "
       "'sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "aaaaaaaaaaa/17', not sha256:<hex>/16"},
      {[](Plan &p) {
         p.packed = {{-1, 0, "l", p.weights[0].digest, 0, 16}};
       },
       "packed weight of kernel site -1"},
  };
  for (const Case &c : cases) {
    Plan plan = addPlan();
    c.damage(plan);
    ASSERT_TRUE(testing::writeArtifact(path_, code_, plan));
    EXPECT_THAT(open(Verification::Digests),
                StatusIs(StatusCode::DataLoss,
                         "add.fca' is damaged: plan section: " + std::string(c.message)));
  }
}

TEST_F(ArtifactIntegrityTest, MalformedJsonSectionsAreRefused) {
  auto writer = ArtifactWriter::create(path_);
  ASSERT_TRUE(writer);
  ASSERT_TRUE((*writer)->addSection(SectionKind::Metadata, "[1, 2]"));
  ASSERT_TRUE((*writer)->addSection(SectionKind::Code, code_));
  ASSERT_TRUE((*writer)->addSection(SectionKind::Plan, addPlan().toJson().dump()));
  ASSERT_TRUE((*writer)->finish());
  EXPECT_THAT(open(Verification::Digests),
              StatusIs(StatusCode::DataLoss, "metadata section is not a JSON object"));
  nlohmann::json plan = addPlan().toJson();
  plan["weights"][0]["size"] = "sixteen";
  writer = ArtifactWriter::create(path_);
  ASSERT_TRUE(writer);
  ASSERT_TRUE((*writer)->addSection(SectionKind::Metadata, "{}"));
  ASSERT_TRUE((*writer)->addSection(SectionKind::Code, code_));
  ASSERT_TRUE((*writer)->addSection(SectionKind::Plan, plan.dump()));
  ASSERT_TRUE((*writer)->finish());
  EXPECT_THAT(open(Verification::Digests),
              StatusIs(StatusCode::DataLoss, "plan section: malformed execution plan"));
}

TEST_F(ArtifactIntegrityTest, AnEntrySymbolTheCodeLacksIsDataLoss) {
  Plan plan = addPlan();
  plan.entry = "flowc_other";
  ASSERT_TRUE(testing::writeArtifact(path_, code_, plan));
  auto artifact = open(Verification::Digests);
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::DataLoss, "code has no entry symbol 'flowc_other'"));
}

// The code is checked again, sealed in its memfd, right before dlopen: a
// file rewritten in place after open does not get its new code loaded.
TEST_F(ArtifactIntegrityTest, CodeChangedAfterOpenIsNotLoaded) {
  auto artifact = open(Verification::Digests);
  ASSERT_TRUE(artifact);
  testing::SectionPlace code = place(SectionKind::Code);
  int fd = ::open(path_.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  char byte = static_cast<char>(pristine_[code.offset + code.size / 2] ^ 1);
  ASSERT_EQ(pwrite(fd, &byte, 1, code.offset + code.size / 2), 1);
  close(fd);
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::DataLoss, "code section is damaged"));
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::DataLoss, "changed after it was opened"));
}

// Sessions alive at once each run their own code, with globals of their
// own: two artifacts' sessions, whatever descriptor number each memfd had
// (dlopen finds a loaded library by the name it was loaded under, and a
// closed descriptor's number comes back at once), and two sessions of one
// artifact (generated code keeps its kernel table in a global).
TEST_F(ArtifactIntegrityTest, SessionsAliveAtOnceRunTheirOwnCode) {
  // y[i] = the number of runs this copy of the code has seen.
  const char *kCountSource = "static float runs;\n"
                             "void flowc_entry(void **args) {\n"
                             "  float *y = args[2];\n"
                             "  runs += 1;\n"
                             "  for (int i = 0; i < 4; ++i) y[i] = runs;\n"
                             "}\n";
  TempDir other;
  auto countCode = testing::compileCode(other.path(), kCountSource);
  ASSERT_TRUE(countCode) << countCode.status().toString();
  std::string countPath = other.file("count.fca");
  ASSERT_TRUE(testing::writeArtifact(countPath, *countCode, addPlan()));
  auto add = open(Verification::Digests);
  auto count = Artifact::open(countPath);
  ASSERT_TRUE(add && count);
  auto run = [](Session &session) {
    auto outputs = session.run({{"x", Tensor::fromFloats({4}, {1, 2, 3, 4})}});
    return outputs ? outputs->at(0).floats() : std::vector<float>{};
  };
  auto runs = [](float n) { return std::vector<float>(4, n); };
  auto adding = Session::create(*add);
  auto counting = Session::create(*count);
  auto countingToo = Session::create(*count);
  ASSERT_TRUE(adding && counting && countingToo);
  EXPECT_EQ(run(**counting), runs(1));
  EXPECT_EQ(run(**counting), runs(2));
  EXPECT_EQ(run(**countingToo), runs(1));
  EXPECT_EQ(run(**adding), kExpected);
  // A number freed by a closed session's code, and a new session.
  adding->reset();
  auto countingThird = Session::create(*count);
  ASSERT_TRUE(countingThird);
  EXPECT_EQ(run(**countingThird), runs(1));
  EXPECT_EQ(run(**counting), runs(3));
}

// A thin artifact's external weight is hashed at open against its plan digest.
TEST_F(ArtifactIntegrityTest, ADamagedExternalWeightIsRefused) {
  Plan plan = addPlan();
  plan.weights[0].external = true;
  ASSERT_TRUE(testing::writeArtifact(path_, code_, plan));
  std::string weightFile = dir_.file("w.bin");
  ExternalWeightSource source = [&](const std::string &, const nlohmann::json &) {
    return MappedFile::open(weightFile);
  };
  std::string w = testing::addWeightBytes();
  std::ofstream(weightFile, std::ios::binary) << w;
  auto artifact = Artifact::open(path_, {Verification::Digests, source});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  auto y = runAdd(*artifact);
  ASSERT_TRUE(y) << y.status().toString();
  EXPECT_EQ(*y, kExpected);
  w[3] ^= 1;
  std::ofstream(weightFile, std::ios::binary | std::ios::trunc) << w;
  EXPECT_THAT(Artifact::open(path_, {Verification::Digests, source}),
              StatusIs(StatusCode::DataLoss,
                       "external weight 'w' (" + weightFile + ") is damaged: sha256 "));
  // --no-verify trusts it; a wrong size is refused either way.
  EXPECT_TRUE(Artifact::open(path_, {Verification::BoundsOnly, source}));
  std::ofstream(weightFile, std::ios::binary | std::ios::trunc) << w << "x";
  EXPECT_THAT(Artifact::open(path_, {Verification::BoundsOnly, source}),
              StatusIs(StatusCode::DataLoss, "is 17 bytes where the plan says 16"));
}

// Random damage anywhere: every open either fails with a bad-input code or
// yields an artifact that runs to the right outputs, never a crash.
TEST_F(ArtifactIntegrityTest, RandomDamageNeverRunsWrongly) {
  std::mt19937_64 random(13);
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bytes = pristine_;
    uint64_t at = random() % bytes.size();
    switch (random() % 3) {
    case 0:
      bytes[at] = static_cast<char>(bytes[at] ^ (1 + random() % 255));
      break;
    case 1:
      bytes.resize(at);
      break;
    default:
      bytes.insert(at, 1 + random() % 64, static_cast<char>(random()));
    }
    writeBytes(bytes);
    auto artifact = open(Verification::Digests);
    if (!artifact) {
      StatusCode code = artifact.status().code();
      EXPECT_TRUE(code == StatusCode::DataLoss || code == StatusCode::InvalidArgument ||
                  code == StatusCode::FailedPrecondition)
          << artifact.status().toString();
      ++refused;
      continue;
    }
    auto y = runAdd(*artifact);
    ASSERT_TRUE(y) << "damage at " << at << ": " << y.status().toString();
    EXPECT_EQ(*y, kExpected) << "damage at " << at;
  }
  EXPECT_EQ(refused, 400);
}

// Without digests, random damage to the header and table (the bytes that
// say where everything is) is refused or harmless, never a crash.
TEST_F(ArtifactIntegrityTest, RandomHeaderAndTableDamageWithoutDigestsNeverCrashes) {
  std::mt19937_64 random(31);
  uint64_t table = pristine_.size() - sectionPlaces(pristine_).size() * 56;
  std::vector<uint64_t> structural;
  for (uint64_t at = 8; at < 32; ++at)
    structural.push_back(at);
  for (uint64_t at = table; at < pristine_.size(); ++at)
    if ((at - table) % 56 < 24)
      structural.push_back(at);
  for (int i = 0; i < 400; ++i) {
    std::string bytes = pristine_;
    uint64_t at = structural[random() % structural.size()];
    bytes[at] = static_cast<char>(bytes[at] ^ (1 + random() % 255));
    writeBytes(bytes);
    auto artifact = open(Verification::BoundsOnly);
    if (!artifact)
      continue;
    auto y = runAdd(*artifact);
    ASSERT_TRUE(y) << "damage at " << at << ": " << y.status().toString();
    EXPECT_EQ(*y, kExpected) << "damage at " << at;
  }
}

} // namespace
} // namespace flowc::runtime
