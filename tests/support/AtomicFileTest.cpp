#include "flowc/support/AtomicFile.h"

#include "flowc/support/MappedFile.h"

#include "../common/TestUtil.h"

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc {
namespace {

using testing::StatusIs;
using testing::TempDir;

std::string contents(const std::string &path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

size_t entries(const std::string &dir) {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir),
                                           std::filesystem::directory_iterator()));
}

// The target shows the old bytes until commit, the new ones after, and no
// temp file is left.
// A rename would replace a device or a pipe by the new file (as root, even
// /dev/null): such a target is refused, and stays what it was.
TEST(AtomicFileTest, ADeviceOrPipeIsNotReplaced) {
  TempDir dir;
  std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(AtomicFile::create(fifo),
              StatusIs(StatusCode::FailedPrecondition,
                       "'" + fifo + "' is a FIFO, not a file: it is not replaced"));
  struct stat after;
  ASSERT_EQ(::stat(fifo.c_str(), &after), 0);
  EXPECT_TRUE(S_ISFIFO(after.st_mode));
  EXPECT_STREQ(fileKindName(S_IFCHR), "a character device");
}

TEST(AtomicFileTest, ReplacesTheTargetOnlyAtCommit) {
  TempDir dir;
  std::string path = dir.file("out.bin");
  ASSERT_TRUE(writeFileAtomically(path, "old"));
  auto file = AtomicFile::create(path);
  ASSERT_TRUE(file) << file.status().toString();
  // The temp file lies beside the target, named after it.
  EXPECT_EQ(std::filesystem::path(file->tempPath()).parent_path(),
            std::filesystem::path(path).parent_path());
  EXPECT_TRUE(file->tempPath().starts_with(path + ".tmp."));
  ASSERT_TRUE(file->write("new "));
  ASSERT_TRUE(file->write("bytes"));
  EXPECT_EQ(contents(path), "old");
  ASSERT_TRUE(file->commit());
  EXPECT_EQ(contents(path), "new bytes");
  EXPECT_EQ(entries(dir.path()), 1u);
}

// An abandoned file (an error before commit) leaves the target as it was
// and removes its temp file.
TEST(AtomicFileTest, RemovesTheTempFileWithoutCommit) {
  TempDir dir;
  std::string path = dir.file("out.bin");
  {
    auto file = AtomicFile::create(path);
    ASSERT_TRUE(file);
    ASSERT_TRUE(file->write("partial"));
    EXPECT_TRUE(std::filesystem::exists(file->tempPath()));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(entries(dir.path()), 0u);
}

// Two writers of one target at once get two temp files, never one shared.
TEST(AtomicFileTest, ConcurrentWritersGetDistinctTempFiles) {
  TempDir dir;
  std::string path = dir.file("out.bin");
  auto first = AtomicFile::create(path);
  auto second = AtomicFile::create(path);
  ASSERT_TRUE(first && second);
  EXPECT_NE(first->tempPath(), second->tempPath());
  ASSERT_TRUE(first->write("first"));
  ASSERT_TRUE(second->write("second"));
  ASSERT_TRUE(first->commit());
  ASSERT_TRUE(second->commit());
  EXPECT_EQ(contents(path), "second");
}

// The mode given, less the umask, is the committed file's.
TEST(AtomicFileTest, KeepsTheModeGiven) {
  TempDir dir;
  std::string path = dir.file("secret");
  auto file = AtomicFile::create(path, 0600);
  ASSERT_TRUE(file);
  ASSERT_TRUE(file->commit());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// A directory that does not exist is an error naming the temp path.
TEST(AtomicFileTest, NamesThePathItCannotCreate) {
  TempDir dir;
  std::string path = dir.file("missing/out.bin");
  EXPECT_THAT(AtomicFile::create(path),
              StatusIs(StatusCode::NotFound, "cannot create '" + path + ".tmp."));
}

// A rename that cannot happen (the target is a non-empty directory) fails
// with both paths named, and the temp file is still removed.
TEST(AtomicFileTest, AFailedRenameNamesBothPathsAndCleansUp) {
  TempDir dir;
  std::string path = dir.file("taken");
  {
    auto file = AtomicFile::create(path);
    ASSERT_TRUE(file);
    // A directory takes the name meanwhile: the rename cannot replace it.
    std::filesystem::create_directories(path + "/inside");
    Status committed = file->commit();
    ASSERT_FALSE(committed);
    EXPECT_THAT(committed.message(),
                ::testing::HasSubstr("cannot rename '" + path + ".tmp."));
    EXPECT_THAT(committed.message(), ::testing::HasSubstr("' to '" + path + "'"));
  }
  EXPECT_EQ(entries(dir.path()), 1u);
}

// Writing from a mapping whose file was truncated meanwhile: write(2)
// faults (EFAULT) where a read would raise SIGBUS. The error names the file
// that shrank, not the one written, and the target is left as it was.
TEST(AtomicFileTest, AMappedSourceThatShrankIsDataLossNamingIt) {
  TempDir dir;
  std::string source = dir.file("weights.bin");
  std::string bytes(4 << 20, 'w');
  ASSERT_TRUE(writeFileAtomically(source, bytes));
  auto mapped = MappedFile::open(source);
  ASSERT_TRUE(mapped) << mapped.status().toString();
  ASSERT_EQ(::truncate(source.c_str(), 4096), 0);
  std::string target = dir.file("blob");
  auto file = AtomicFile::create(target);
  ASSERT_TRUE(file) << file.status().toString();
  EXPECT_THAT(file->write(mapped->view()),
              StatusIs(StatusCode::DataLoss,
                       source + ": the file shrank while it was being read"));
  EXPECT_FALSE(std::filesystem::exists(target));
}

} // namespace
} // namespace flowc
