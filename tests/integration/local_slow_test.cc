// sift local under faults, and its embedded default job: a worker killed with SIGKILL mid-job is
// restarted (same index; the cluster file shows the new pid) and the job recovers and completes;
// a coordinator killed mid-job comes back on its port with its state and the job completes; a
// child that keeps dying beyond --max-restarts stops everything with exit 1; the embedded
// default (no JOB.yaml) trains 3 epochs on --dataset and prints the table.
#include <signal.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_test_util.h"

namespace sift {
namespace {

using local_test::ChildPid;
using local_test::ChildPids;
using local_test::ReadJson;
using local_test::Survivors;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Polls `log` (up to 60 s) until it contains `text`.
bool WaitForText(const std::string& log, const std::string& text) {
  for (int i = 0; i < 600; ++i) {
    if (testing::ReadAll(log).find(text) != std::string::npos) return true;
    ::usleep(100000);
  }
  return false;
}

// Starts `sift local` on a job of `epochs` x `steps` steps with checkpoints, waits until it
// trains, kills the child `role` 0 with SIGKILL, and returns its exit code and output.
struct FaultRun {
  ExitInfo exit;
  std::string out;
  nlohmann::json before, after;  // the cluster file before the kill and at the end
};

FaultRun KillDuringJob(const testing::TempDir& dir, const std::string& role, int max_restarts) {
  FaultRun run;
  const std::string data = local_test::MakeSmallDataset(dir);
  const std::string spec = local_test::WriteSpec(
      // Whole epochs (about 40 steps each): the kill comes after `sift local` printed epoch 1,
      // up to a poll (0.5 s) after it ended, so two epochs must be left to kill into — at 6 steps
      // an epoch took 0.2 s on a fast CPU and the job completed before the kill.
      dir, data, /*epochs=*/3, /*steps=*/0,
      absl::StrCat("checkpoint: {dir: \"", dir.Sub("ckpt"), "\", every_steps: 8}\n"));
  const std::string log = dir.Sub("local.log");
  const std::string cluster_file = dir.Sub("cluster.json");
  Subprocess local = local_test::StartLocal(
      {spec, "--servers", "2", "--workers", "1", "--work-dir", dir.Sub("work"), "--cluster-file",
       cluster_file, "--max-restarts", std::to_string(max_restarts), "--progress", "off"},
      log);
  EXPECT_FALSE(testing::WaitForFile(cluster_file, 60).empty()) << testing::ReadAll(log);
  run.before = ReadJson(cluster_file);
  // In the middle of the job: after the first epoch's evaluation.
  EXPECT_TRUE(WaitForText(log, "epoch 1/3: train AUC")) << testing::ReadAll(log);
  const int pid = ChildPid(run.before, role, 0);
  EXPECT_GT(pid, 0);
  if (pid > 0) ::kill(pid, SIGKILL);
  run.exit = local.Wait();
  run.out = testing::ReadAll(log);
  run.after = ReadJson(cluster_file);
  return run;
}

TEST(LocalSlow, KilledWorkerIsRestartedAndTheJobCompletes) {
  testing::TempDir dir;
  const FaultRun run = KillDuringJob(dir, "worker", /*max_restarts=*/3);
  EXPECT_EQ(run.exit.ShellCode(), 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("worker 0 exited (killed by signal 9); restarting (1 of 3)"));
  // The coordinator restarted the job as generation 2 (through RECOVERING, which the 0.5 s polls
  // may not catch).
  EXPECT_THAT(run.out, HasSubstr("RUNNING (generation 2)"));
  EXPECT_THAT(run.out, HasSubstr("generation 2, 1 recovery"));
  EXPECT_THAT(run.out, HasSubstr("COMPLETED (3 of 3 epochs"));
  // The cluster file was rewritten: a new worker pid, one restart.
  const nlohmann::json& w = run.after["children"][3];
  EXPECT_EQ(w["role"], "worker");
  EXPECT_EQ(w["restarts"], 1);
  EXPECT_NE(w["pid"], run.before["children"][3]["pid"]);
  EXPECT_THAT(Survivors(ChildPids(run.before)), IsEmpty());
  EXPECT_THAT(Survivors(ChildPids(run.after)), IsEmpty());
}

TEST(LocalSlow, KilledCoordinatorComesBackOnItsPortAndTheJobCompletes) {
  testing::TempDir dir;
  const FaultRun run = KillDuringJob(dir, "coordinator", /*max_restarts=*/3);
  EXPECT_EQ(run.exit.ShellCode(), 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("coordinator 0 exited (killed by signal 9); restarting"));
  EXPECT_THAT(run.out, HasSubstr("COMPLETED (3 of 3 epochs"));
  EXPECT_EQ(run.after["coordinator"], run.before["coordinator"]);
  EXPECT_EQ(run.after["children"][0]["restarts"], 1);
  EXPECT_THAT(Survivors(ChildPids(run.after)), IsEmpty());
}

TEST(LocalSlow, BeyondMaxRestartsEverythingStopsWithExitOne) {
  testing::TempDir dir;
  const FaultRun run = KillDuringJob(dir, "embedding-server", /*max_restarts=*/0);
  EXPECT_EQ(run.exit.ShellCode(), 1) << run.out;
  EXPECT_THAT(run.out, HasSubstr("embedding server 0 exited (killed by signal 9)"));
  EXPECT_THAT(run.out, HasSubstr("--max-restarts 0"));
  EXPECT_THAT(Survivors(ChildPids(run.before)), IsEmpty());
}

TEST(LocalSlow, EmbeddedDefaultJob) {
  testing::TempDir dir;
  const std::string data = local_test::MakeSmallDataset(dir, /*users=*/100);
  auto r = testing::RunSift(
      {"local", "--dataset", data, "--work-dir", dir.Sub("work"), "--progress", "off"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // 2 servers and 1 worker by default; SIM, 3 epochs, batch 2048, staleness 0.
  EXPECT_THAT(r.out, HasSubstr("2 embedding server(s)"));
  EXPECT_THAT(r.out, HasSubstr("1 worker(s)"));
  EXPECT_THAT(r.out, HasSubstr("job job-1 (sim on " + data + ")"));
  EXPECT_THAT(r.out, HasSubstr("COMPLETED (3 of 3 epochs"));
  const std::string spec = testing::ReadAll(dir.Sub("work/state/jobs/job-1.json"));
  EXPECT_THAT(spec, HasSubstr("batch_size: 2048"));
  EXPECT_THAT(spec, HasSubstr("staleness: 0"));
  // A checkpoint per epoch under the work dir.
  EXPECT_TRUE(PathExists(dir.Sub("work/checkpoints")));
}

}  // namespace
}  // namespace sift
