// The `sift` binary as a user meets it: help, version, usage errors and their exit codes.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

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

// Launchers (Kubernetes manifests, Slurm scripts) set role flags through the environment.
TEST(Cli, RoleFlagsComeFromTheEnvironment) {
  testing::TempDir dir;
  auto missing = RunSift({"embedding-server", "--port", "0"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--shard is required"));

  ::setenv("SIFT_SHARD", "5", 1);
  ::setenv("SIFT_NUM_SHARDS", "2", 1);
  ::setenv("SIFT_SNAPSHOT_DIR", dir.Sub("snap").c_str(), 1);
  auto out_of_range = RunSift({"embedding-server", "--port", "0"});
  ::setenv("SIFT_SHARD", "bogus", 1);
  auto bad = RunSift({"embedding-server", "--port", "0"});
  ::unsetenv("SIFT_SHARD");
  ::unsetenv("SIFT_NUM_SHARDS");
  ::unsetenv("SIFT_SNAPSHOT_DIR");
  EXPECT_EQ(out_of_range.exit_code, 2);
  EXPECT_THAT(out_of_range.err, HasSubstr("--shard 5 is out of range: --num-shards is 2"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("expected a shard index (0, 1, ...) or 'ordinal', got 'bogus'"));

  auto help = RunSift({"embedding-server", "--help"});
  for (const char* env : {"SIFT_SHARD", "SIFT_NUM_SHARDS", "SIFT_SNAPSHOT_DIR", "SIFT_COORDINATOR",
                          "SIFT_ADVERTISE_HOST"}) {
    EXPECT_THAT(help.out, HasSubstr(env));
  }
  EXPECT_THAT(RunSift({"worker", "--help"}).out, HasSubstr("SIFT_ADVERTISE_HOST"));
  EXPECT_THAT(RunSift({"coordinator", "--help"}).out, HasSubstr("SIFT_STATE_DIR"));
}

// A second (and third) SIGTERM while a role drains must not kill it: Kubernetes, systemd and Slurm
// send more than one. Threads that existed before the role blocked the signals (a library's pool)
// would otherwise take one with the default action (exit 143).
TEST(Cli, RepeatedStopSignalsStillExitCleanly) {
  testing::TempDir dir;
  for (const std::vector<std::string>& role : std::vector<std::vector<std::string>>{
           {"embedding-server", "--port", "0", "--shard", "0", "--num-shards", "1",
            "--snapshot-dir", dir.Sub("snap"), "--metrics-port", "-1", "--threads", "2"},
           {"coordinator", "--port", "0", "--state-dir", dir.Sub("state"), "--metrics-port",
            "-1"}}) {
    std::vector<std::string> args = role;
    const std::string port_file = dir.Sub(role[0] + ".port");
    args.push_back("--port-file");
    args.push_back(port_file);
    testing::SiftProcess p(args, dir.Sub(role[0]));
    ASSERT_FALSE(testing::WaitForFile(port_file).empty()) << p.Err();
    for (int i = 0; i < 3; ++i) {  // spaced: the later ones land while the role shuts down
      ::kill(p.pid(), SIGTERM);
      ::usleep(20000);
    }
    EXPECT_EQ(p.WaitExit(60), 0) << role[0] << ": " << p.Err();
  }
}

// Whether /proc/<pid>/status lists SIGPIPE among the signals the process ignores (SigIgn: a hex
// mask, bit n - 1 for signal n).
bool IgnoresSigpipe(int pid) {
  const std::string status = testing::ReadAll(absl::StrCat("/proc/", pid, "/status"));
  const size_t at = status.find("SigIgn:\t");
  if (at == std::string::npos) return false;
  const uint64_t mask = std::strtoull(status.c_str() + at + 8, nullptr, 16);
  return (mask >> (SIGPIPE - 1)) & 1;
}

// Every long-running role ignores SIGPIPE once it is up, so a peer that goes away is an error
// Status and not exit 141: Gloo writes with plain writev(), and a worker whose peer left an
// allreduce (a stale generation after a coordinator restart) died of SIGPIPE while the
// restarted coordinator waited for it forever (ClusterTest.RestartedCoordinatorResumesTheJob
// failed so in CI). The port file is written after start-up, so the check does not race it.
TEST(Cli, RolesSurviveWritesToAPeerThatWentAway) {
  testing::TempDir dir;
  const std::string coordinator_port = dir.Sub("coordinator.port");
  testing::SiftProcess coordinator({"coordinator", "--port", "0", "--state-dir", dir.Sub("state"),
                                    "--metrics-port", "-1", "--port-file", coordinator_port},
                                   dir.Sub("coordinator"));
  const std::string port = testing::WaitForFile(coordinator_port);
  ASSERT_FALSE(port.empty()) << coordinator.Err();
  const std::string address = absl::StrCat("127.0.0.1:", absl::StripAsciiWhitespace(port));
  const std::string server_port = dir.Sub("server.port");
  testing::SiftProcess server(
      {"embedding-server", "--port", "0", "--shard", "0", "--num-shards", "1", "--snapshot-dir",
       dir.Sub("snap"), "--metrics-port", "-1", "--port-file", server_port},
      dir.Sub("server"));
  const std::string worker_port = dir.Sub("worker.port");
  testing::SiftProcess worker(
      {"worker", "--coordinator", address, "--metrics-port", "-1", "--port-file", worker_port},
      dir.Sub("worker"));
  ASSERT_FALSE(testing::WaitForFile(server_port).empty()) << server.Err();
  ASSERT_FALSE(testing::WaitForFile(worker_port).empty()) << worker.Err();
  EXPECT_TRUE(IgnoresSigpipe(coordinator.pid()));
  EXPECT_TRUE(IgnoresSigpipe(server.pid()));
  EXPECT_TRUE(IgnoresSigpipe(worker.pid()));
  // And they still stop cleanly.
  EXPECT_EQ(worker.Stop(SIGTERM), 0) << worker.Err();
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.Err();
  EXPECT_EQ(coordinator.Stop(SIGTERM), 0) << coordinator.Err();
}

// A stop signal while a role is still starting (a worker registering with a coordinator that
// is not there) ends it at once, with an error, rather than after the registration timeout.
TEST(Cli, StopSignalWhileStartingEndsTheRole) {
  testing::TempDir dir;
  testing::SiftProcess p({"worker", "--coordinator", "127.0.0.1:1", "--register-timeout", "600"},
                         dir.Sub("worker"));
  ::usleep(300000);  // inside the registration loop (either way the signal must end it)
  ::kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.WaitExit(60), 1) << "still running 60 s after SIGTERM, or killed";
  EXPECT_THAT(p.Err(), HasSubstr("stopped by a signal while registering with the coordinator"));
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
