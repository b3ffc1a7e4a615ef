// The `sift` binary as a user meets it: help, version, usage errors and their exit codes.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using sift::testing::RunSift;
using ::testing::HasSubstr;

TEST(Cli, HelpListsOnlyWorkingSubcommands) {
  auto r = RunSift({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("data"));
  EXPECT_THAT(r.out, HasSubstr("bench"));
  auto d = RunSift({"data", "--help"});
  EXPECT_EQ(d.exit_code, 0);
  for (const char* sub : {"gen", "amazon", "convert", "inspect"})
    EXPECT_THAT(d.out, HasSubstr(sub));
}

TEST(Cli, UsageErrorsExitWithTwo) {
  EXPECT_EQ(RunSift({}).exit_code, 2);
  EXPECT_EQ(RunSift({"no-such-command"}).exit_code, 2);
  auto r = RunSift({"data", "inspect"});  // missing DIR
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("DIR"));
}

TEST(Cli, RuntimeErrorsExitWithOneAndOneLine) {
  auto r = RunSift({"data", "inspect", "/nonexistent/dataset"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("sift: error: /nonexistent/dataset"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(Cli, VersionAndDevice) {
  auto v = RunSift({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_THAT(v.out, HasSubstr("sift "));
  auto d = RunSift({"device"});
  EXPECT_EQ(d.exit_code, 0);
  EXPECT_FALSE(d.out.empty());
}

}  // namespace
}  // namespace sift
