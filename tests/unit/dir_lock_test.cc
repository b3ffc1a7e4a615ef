#include "common/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

TEST(DirLockTest, OneOwnerAtATimeAndReleasedWithTheLock) {
  testing::TempDir dir;
  const std::string d = dir.Sub("state");  // created by Acquire
  StatusOr<DirLock> first = DirLock::Acquire(d, "a coordinator");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(PathExists(d + "/.sift.lock"));
  StatusOr<DirLock> second = DirLock::Acquire(d, "another coordinator");
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(d + " is in use by a coordinator (pid " + std::to_string(getpid()) + ")"));
  // Another lock file in the same directory is another lock.
  EXPECT_TRUE(DirLock::Acquire(d, "shard 1", ".shard-1.lock").ok());
  // Moved, still held; destroyed, released.
  DirLock moved = std::move(*first);
  EXPECT_FALSE(DirLock::Acquire(d, "x").ok());
  { DirLock gone = std::move(moved); }
  EXPECT_TRUE(DirLock::Acquire(d, "x").ok());
}

// A process that dies holding the lock leaves none behind (the kernel drops a flock with its
// last descriptor), and a child process does not inherit it.
TEST(DirLockTest, ADeadOwnerLeavesNoLockAndChildrenDoNotHoldIt) {
  testing::TempDir dir;
  const std::string d = dir.Sub("w");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    StatusOr<DirLock> held = DirLock::Acquire(d, "child");
    _exit(held.ok() ? 0 : 1);  // dies holding it
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  StatusOr<DirLock> mine = DirLock::Acquire(d, "parent");
  ASSERT_TRUE(mine.ok()) << mine.status();
  // A child started (fork + exec) while the parent holds it: the lock goes away with the parent's
  // DirLock alone, whatever the child does.
  // A close-on-exec pipe: its read end sees EOF once the child has exec'd (until then the child
  // still holds copies of every descriptor).
  int exec_done[2];
  ASSERT_EQ(pipe2(exec_done, O_CLOEXEC), 0);
  const pid_t sleeper = fork();
  ASSERT_GE(sleeper, 0);
  if (sleeper == 0) {
    execl("/bin/sleep", "sleep", "5", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(exec_done[1]);
  char byte;
  ASSERT_EQ(read(exec_done[0], &byte, 1), 0);
  close(exec_done[0]);
  { DirLock released = std::move(*mine); }
  EXPECT_TRUE(DirLock::Acquire(d, "again").ok());  // the sleeping child holds nothing
  kill(sleeper, SIGKILL);
  waitpid(sleeper, &status, 0);
}

}  // namespace
}  // namespace sift
