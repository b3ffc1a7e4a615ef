// BackgroundProcess (tests/util/test_util.h): PeekExit reports an exit without reaping it, so
// failure messages can say which cluster member died, and Stop still returns its exit code.
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

#include "tests/util/test_util.h"

namespace sift::testing {
namespace {

std::string Prefix(const std::string& name) {
  return std::string(::testing::TempDir()) + "/background_process_" + name;
}

TEST(BackgroundProcessTest, PeekExitSeesAnExitWithoutReapingIt) {
  BackgroundProcess p({"/bin/sh", "-c", "exit 7"}, Prefix("exit7"));
  int code = -1;
  for (int i = 0; i < 200 && code < 0; ++i) {  // up to 10 s for /bin/sh to run
    code = p.PeekExit();
    if (code < 0) ::usleep(50000);
  }
  EXPECT_EQ(code, 7);
  EXPECT_EQ(p.PeekExit(), 7);  // still not reaped: asking again gives the same answer
  EXPECT_EQ(p.WaitExit(0), 7);
}

TEST(BackgroundProcessTest, PeekExitOfARunningProcessIsMinusOneAndAKillIsReported) {
  BackgroundProcess p({"/bin/sleep", "60"}, Prefix("sleep"));
  EXPECT_EQ(p.PeekExit(), -1);
  ASSERT_EQ(::kill(p.pid(), SIGKILL), 0);
  int code = -1;
  for (int i = 0; i < 200 && code < 0; ++i) {
    code = p.PeekExit();
    if (code < 0) ::usleep(50000);
  }
  EXPECT_EQ(code, 128 + SIGKILL);
  EXPECT_EQ(p.Stop(SIGTERM), 128 + SIGKILL);  // reaps it; the exit code is the kill's
  EXPECT_EQ(p.PeekExit(), -1);
}

}  // namespace
}  // namespace sift::testing
