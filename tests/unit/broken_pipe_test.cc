// IgnoreBrokenPipes (common/broken_pipe.h): a write to a socket whose peer has closed, with the
// call Gloo's TCP transport uses (writev), fails with EPIPE and the process lives; without it the
// same write kills the process with SIGPIPE (the control: what a worker died of in CI). Each case
// runs in a death-test child, so the test binary's own disposition is untouched.
#include "common/broken_pipe.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "gtest/gtest.h"

namespace sift {
namespace {

// Exit codes of the child: 0 = the write failed with EPIPE; 1 = it succeeded; 2 = another error.
[[noreturn]] void WriteToAClosedPeerAndExit() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::_Exit(2);
  close(fds[1]);
  char data[4096] = {};
  struct iovec iov = {data, sizeof(data)};
  const ssize_t n = writev(fds[0], &iov, 1);
  if (n >= 0) std::_Exit(1);
  std::_Exit(errno == EPIPE ? 0 : 2);
}

class BrokenPipeTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(BrokenPipeTest, WithoutItAWriteToAClosedPeerKillsTheProcess) {
  EXPECT_EXIT(
      {
        signal(SIGPIPE, SIG_DFL);
        WriteToAClosedPeerAndExit();
      },
      ::testing::KilledBySignal(SIGPIPE), "");
}

TEST_F(BrokenPipeTest, WithItTheWriteFailsWithEpipeAndTheProcessLives) {
  EXPECT_EXIT(
      {
        signal(SIGPIPE, SIG_DFL);
        IgnoreBrokenPipes();
        WriteToAClosedPeerAndExit();
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(BrokenPipeTest, IsIdempotentAndLeavesSigpipeIgnored) {
  EXPECT_EXIT(
      {
        IgnoreBrokenPipes();
        IgnoreBrokenPipes();
        struct sigaction now = {};
        sigaction(SIGPIPE, nullptr, &now);
        std::_Exit(now.sa_handler == SIG_IGN ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace sift
