// Subprocess: exit codes and signals, output to the log, SIGTERM then SIGKILL, a clean signal
// state and no leaked descriptors in the child, and the death signal when the parent dies.
#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

StatusOr<Subprocess> StartShell(const std::string& script, const std::string& log) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.log_path = log;
  return Subprocess::Start(o);
}

TEST(Subprocess, ExitCodeAndOutputGoToTheLog) {
  testing::TempDir dir;
  const std::string log = dir.Sub("child.log");
  testing::WriteAll(log, "earlier line\n");
  auto p = StartShell("echo to-stdout; echo to-stderr >&2; exit 3", log);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->running());
  EXPECT_GT(p->pid(), 0);
  const ExitInfo e = p->Wait();
  EXPECT_FALSE(p->running());
  EXPECT_FALSE(e.signaled);
  EXPECT_EQ(e.code, 3);
  EXPECT_EQ(e.ShellCode(), 3);
  EXPECT_EQ(e.Describe(), "exited with code 3");
  // Appended, both streams.
  EXPECT_EQ(testing::ReadAll(log), "earlier line\nto-stdout\nto-stderr\n");
}

TEST(Subprocess, KilledBySignal) {
  auto p = StartShell("exec sleep 30", "");
  ASSERT_TRUE(p.ok()) << p.status();
  ExitInfo e;
  EXPECT_FALSE(p->Poll(&e));
  p->Signal(SIGKILL);
  e = p->Wait();
  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_EQ(e.ShellCode(), 128 + SIGKILL);
  EXPECT_THAT(e.Describe(), HasSubstr("killed by signal 9"));
}

TEST(Subprocess, StopSendsTermThenKill) {
  auto polite = StartShell("exec sleep 30", "");
  ASSERT_TRUE(polite.ok());
  ExitInfo e = polite->Stop(absl::Seconds(30));
  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_FALSE(polite->running());

  // Ignores SIGTERM (an ignored disposition survives exec): Stop must fall back to SIGKILL.
  testing::TempDir dir;
  const std::string ready = dir.Sub("ready");
  auto ignores_term =
      StartShell(absl::StrCat("trap '' TERM; echo x > ", ready, "; exec sleep 30"), "");
  ASSERT_TRUE(ignores_term.ok());
  ASSERT_EQ(testing::WaitForFile(ready, 30), "x\n");  // the trap is set
  e = ignores_term->Stop(absl::Milliseconds(300));
  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.signal, SIGKILL);
}

TEST(Subprocess, ExecFailureIsExitCode127WithTheReasonInTheLog) {
  testing::TempDir dir;
  SubprocessOptions o;
  o.argv = {"/nonexistent/program", "x"};
  o.log_path = dir.Sub("log");
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->Wait().code, 127);
  EXPECT_THAT(testing::ReadAll(o.log_path), HasSubstr("cannot exec /nonexistent/program"));
}

TEST(Subprocess, BadOptionsAreErrors) {
  EXPECT_EQ(Subprocess::Start(SubprocessOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  SubprocessOptions o;
  o.argv = {"/bin/true"};
  o.log_path = "/nonexistent/dir/log";
  auto p = Subprocess::Start(o);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(p.status().message(), HasSubstr("/nonexistent/dir/log"));
}

TEST(Subprocess, ChildGetsDefaultSignalsAndNoParentDescriptors) {
  // The parent ignores SIGINT and blocks SIGTERM; the child must not inherit either.
  struct sigaction ign {
  }, old_int{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ign, &old_int);
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &term, &old_mask);
  // A descriptor without O_CLOEXEC at a fixed high number.
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::dup2(fd, 100), 100);
  ::close(fd);

  testing::TempDir dir;
  SubprocessOptions o;
  o.argv = {"/bin/ls", "/proc/self/fd"};
  o.log_path = dir.Sub("fds");
  auto ls = Subprocess::Start(o);
  auto sleeper = StartShell("exec sleep 30", "");
  ASSERT_TRUE(ls.ok());
  ASSERT_TRUE(sleeper.ok());
  EXPECT_EQ(ls->Wait().code, 0);
  sleeper->Signal(SIGINT);
  const ExitInfo e = sleeper->Wait();

  ::close(100);
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGINT, &old_int, nullptr);

  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.signal, SIGINT);
  const std::string fds = testing::ReadAll(o.log_path);
  EXPECT_THAT(fds, HasSubstr("0\n1\n2\n"));
  EXPECT_THAT(fds, Not(HasSubstr("100")));
}

TEST(Subprocess, DestructorAndStopAllLeaveNoChild) {
  pid_t pid = -1;
  {
    auto p = StartShell("exec sleep 30", "");
    ASSERT_TRUE(p.ok());
    pid = p->pid();
  }
  // Reaped by the destructor: no such child any more.
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);

  auto a = StartShell("exec sleep 30", "");
  auto b = StartShell("trap '' TERM; exec sleep 30", "");
  auto c = StartShell("exit 0", "");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  c->Wait();
  StopAll({&*a, &*b, &*c, nullptr}, absl::Milliseconds(500));
  EXPECT_FALSE(a->running());
  EXPECT_FALSE(b->running());
  // Moving keeps exactly one owner.
  auto d = StartShell("exec sleep 30", "");
  ASSERT_TRUE(d.ok());
  Subprocess moved = std::move(*d);
  EXPECT_FALSE(d->running());
  EXPECT_TRUE(moved.running());
  EXPECT_TRUE(moved.Stop(absl::Seconds(10)).signaled);
}

TEST(Subprocess, ChildDiesWithItsParent) {
  // Orphans come back to this process, so the grandchild can be reaped and observed here.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  testing::TempDir dir;
  const std::string ready = dir.Sub("ready");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t middle = ::fork();
  if (middle == 0) {
    // The middle process starts a long child, waits until it runs (its death signal is set up
    // before exec), reports its pid and dies without cleaning up.
    SubprocessOptions o;
    o.argv = {"/bin/sh", "-c", absl::StrCat("echo x > ", ready, "; exec sleep 60")};
    auto p = Subprocess::Start(o);
    const int grandchild = p.ok() ? p->pid() : -1;
    for (int i = 0; i < 1000 && ::access(ready.c_str(), F_OK) != 0; ++i) ::usleep(10000);
    if (::write(fds[1], &grandchild, sizeof(grandchild)) < 0) ::_exit(2);
    ::_exit(0);  // no destructors run: only the death signal can end the grandchild
  }
  ::close(fds[1]);
  int grandchild = -1;
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof(grandchild)),
            static_cast<ssize_t>(sizeof(grandchild)));
  ::close(fds[0]);
  ASSERT_GT(grandchild, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(middle, &status, 0), middle);
  // Without the death signal the grandchild would sleep 60 s: wait for it with a bound.
  pid_t r = 0;
  for (int i = 0; i < 3000 && r == 0; ++i) {
    r = ::waitpid(grandchild, &status, WNOHANG);
    if (r == 0) ::usleep(10000);
  }
  if (r == 0) ::kill(grandchild, SIGKILL), ::waitpid(grandchild, &status, 0);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_EQ(r, grandchild) << "the grandchild outlived its parent";
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

}  // namespace
}  // namespace sift
