// filterThroughProgram (Subprocess.h): the input reaches the program, its
// output comes back, and a program that fails, hangs, floods or is missing
// is an error, never a hang.
#include "flowc/support/Subprocess.h"

#include <gtest/gtest.h>


namespace flowc {
namespace {

TEST(SubprocessTest, FiltersTheInputThroughTheProgram) {
  std::string input(3 << 20, 'x');
  input += "end";
  auto output = filterThroughProgram({"cat"}, input, 30, 16 << 20);
  ASSERT_TRUE(output) << output.status().toString();
  EXPECT_EQ(*output, input);
}

TEST(SubprocessTest, AFailureCarriesItsStderr) {
  auto output =
      filterThroughProgram({"sh", "-c", "echo broken >&2; exit 3"}, "", 30, 1024);
  ASSERT_FALSE(output);
  EXPECT_EQ(output.status().code(), StatusCode::Internal);
  EXPECT_NE(output.status().message().find("broken"), std::string::npos);
}

// Stopped, not waited for: a sleep that ran its course would succeed.
TEST(SubprocessTest, AHungProgramIsStoppedAtItsTimeout) {
  auto output = filterThroughProgram({"sleep", "30"}, "", 0.3, 1024);
  ASSERT_FALSE(output);
  EXPECT_EQ(output.status().code(), StatusCode::Unavailable);
  EXPECT_NE(output.status().message().find("stopped"), std::string::npos);
}

TEST(SubprocessTest, AFloodIsStopped) {
  auto output = filterThroughProgram({"yes"}, "", 30, 1 << 20);
  ASSERT_FALSE(output);
  EXPECT_EQ(output.status().code(), StatusCode::ResourceExhausted);
}

TEST(SubprocessTest, AMissingProgramIsUnavailable) {
  auto output = filterThroughProgram({"flowc-no-such-program"}, "", 30, 1024);
  ASSERT_FALSE(output);
  EXPECT_EQ(output.status().code(), StatusCode::Unavailable);
  EXPECT_NE(output.status().message().find("cannot run"), std::string::npos);
}

} // namespace
} // namespace flowc
