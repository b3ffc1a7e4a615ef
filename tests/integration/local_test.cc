// sift local: bad use exits 2 before starting anything; a short job on a small dataset runs on a
// real local cluster (coordinator, 2 servers, 1 worker), prints the final table, writes the
// cluster file and the Prometheus targets, exits 0 and leaves no process; SIGINT in the middle
// of a job cancels it, stops every child and exits 130; SIGKILL of the launcher takes its
// children with it; --secure runs the job over mutual TLS with the same result.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dir_lock.h"
#include "common/dllogger.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_test_util.h"

namespace sift {
namespace {

using local_test::ChildPids;
using local_test::ReadJson;
using local_test::Survivors;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::RunSift;

TEST(Local, BadUseExitsTwoAndStartsNothing) {
  testing::TempDir dir;
  auto missing = RunSift({"local", dir.Sub("nope.yaml"), "--work-dir", dir.Sub("w1")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr(dir.Sub("nope.yaml")));
  EXPECT_FALSE(PathExists(dir.Sub("w1")));

  const std::string bad = dir.Sub("bad.yaml");
  testing::WriteAll(bad, "dataset: d\nmodel: {type: bert}\n");
  auto r = RunSift({"local", bad, "--work-dir", dir.Sub("w2")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(bad + ":2: model.type"));
  EXPECT_FALSE(PathExists(dir.Sub("w2")));

  // The dataset is on this machine: a missing one is an error before anything starts.
  const std::string no_data = dir.Sub("no_data.yaml");
  testing::WriteAll(no_data, "dataset: " + dir.Sub("nothing-here") + "\n");
  r = RunSift({"local", no_data, "--work-dir", dir.Sub("w3")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("dataset " + dir.Sub("nothing-here") + " does not exist"));
  EXPECT_FALSE(PathExists(dir.Sub("w3")));
  // So is a mistyped --dataset of the default job: nothing is generated there unless asked
  // (--preset), and nothing starts.
  r = RunSift({"local", "--dataset", dir.Sub("tinyy"), "--work-dir", dir.Sub("w4")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--dataset " + dir.Sub("tinyy") +
                               " does not exist (pass --preset tiny to generate"));
  EXPECT_FALSE(PathExists(dir.Sub("tinyy")));
  EXPECT_FALSE(PathExists(dir.Sub("w4")));
  r = RunSift({"local", "--dataset", dir.Sub("tinyy"), "--preset", "huge-typo", "--work-dir",
               dir.Sub("w5")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--preset"));
  EXPECT_FALSE(PathExists(dir.Sub("w5")));

  // A non-empty directory that sift local did not make is not taken over.
  const std::string foreign = dir.Sub("foreign");
  ASSERT_TRUE(MakeDirs(foreign).ok());
  testing::WriteAll(foreign + "/precious.txt", "keep me\n");
  const std::string good = dir.Sub("good.yaml");
  testing::WriteAll(good, "dataset: " + dir.path() + "\n");
  r = RunSift({"local", good, "--work-dir", foreign});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--work-dir " + foreign));
  EXPECT_EQ(testing::ReadAll(foreign + "/precious.txt"), "keep me\n");
}

// Issue 16 row 7: a work directory has one owner. While another process holds it (here the
// test, through the same lock a running `sift local` holds), a second `sift local` is refused
// at once, names the owner, and deletes nothing; once released, the directory is usable.
TEST(Local, ASecondRunOnTheSameWorkDirIsRefused) {
  testing::TempDir dir;
  const std::string work = dir.Sub("work");
  const std::string good = dir.Sub("good.yaml");
  testing::WriteAll(good, "dataset: " + dir.path() + "\n");
  ASSERT_TRUE(MakeDirs(work + "/logs").ok());
  testing::WriteAll(work + "/.sift-local", "sift local work directory\n");
  testing::WriteAll(work + "/logs/first-run.log", "the first run's log\n");
  {
    StatusOr<DirLock> held = DirLock::Acquire(work, "sift local", ".sift-local.lock");
    ASSERT_TRUE(held.ok()) << held.status();
    auto r = RunSift({"local", good, "--work-dir", work});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("--work-dir " + work + " is in use by sift local (pid " +
                                 std::to_string(getpid()) + ")"));
    EXPECT_EQ(testing::ReadAll(work + "/logs/first-run.log"), "the first run's log\n");
  }
  // Released: the next run takes it (and fails later, on the dataset, which is not one).
  auto r = RunSift({"local", good, "--work-dir", work});
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("is in use by")));
}

TEST(Local, RunsAJobPrintsTheTableAndLeavesNoProcess) {
  testing::TempDir dir;
  const std::string data = local_test::MakeSmallDataset(dir);
  const std::string spec = local_test::WriteSpec(dir, data, /*epochs=*/2, /*steps=*/4);
  const std::string work = dir.Sub("work");
  auto r = RunSift({"local", spec, "--servers", "2", "--workers", "1", "--work-dir", work,
                    "--cluster-file", dir.Sub("cluster.json"), "--prometheus-targets",
                    dir.Sub("targets.json"), "--progress", "off"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Progress: one line per epoch and state change (stdout is not a terminal), then the table.
  EXPECT_THAT(r.out, HasSubstr("RUNNING"));
  EXPECT_THAT(r.out, HasSubstr("epoch 1/2: train AUC"));
  EXPECT_THAT(r.out, HasSubstr("epoch 2/2: train AUC"));
  EXPECT_THAT(r.out, HasSubstr("COMPLETED (2 of 2 epochs"));
  EXPECT_THAT(r.out, HasSubstr("test_auc"));
  EXPECT_THAT(r.out, HasSubstr("oracle AUC"));
  EXPECT_THAT(r.out, HasSubstr("ratio"));
  EXPECT_THAT(r.out, HasSubstr("time to train"));
  EXPECT_THAT(r.out, HasSubstr("samples/s"));
  const std::string dlll = work + "/results/job-1/log.json";
  EXPECT_THAT(r.out, HasSubstr("DLLL log   " + dlll));
  EXPECT_TRUE(PathExists(dlll));
  EXPECT_TRUE(PathExists(work + "/logs/coordinator-0.log"));
  EXPECT_TRUE(PathExists(work + "/logs/embedding-server-1.log"));
  EXPECT_TRUE(PathExists(work + "/logs/worker-0.log"));

  const nlohmann::json cluster = ReadJson(dir.Sub("cluster.json"));
  ASSERT_EQ(cluster["children"].size(), 4u);
  std::vector<std::string> roles;
  for (const auto& c : cluster["children"]) {
    roles.push_back(c["role"]);
    EXPECT_GT(c["pid"].get<int>(), 0);
    EXPECT_GT(c["metrics_port"].get<int>(), 0);
  }
  EXPECT_THAT(roles, ElementsAre("coordinator", "embedding-server", "embedding-server", "worker"));
  EXPECT_EQ(cluster["coordinator"], cluster["children"][0]["address"]);
  EXPECT_THAT(Survivors(ChildPids(cluster)), IsEmpty());

  // Prometheus file_sd: one target group per child, labelled with role and index.
  const nlohmann::json targets = ReadJson(dir.Sub("targets.json"));
  ASSERT_EQ(targets.size(), 4u);
  EXPECT_EQ(targets[1]["labels"]["role"], "embedding-server");
  EXPECT_EQ(targets[2]["labels"]["index"], "1");
  EXPECT_EQ(targets[3]["targets"][0], cluster["children"][3]["metrics_address"]);

  // The same work dir again: a previous sift local directory is reused (state starts fresh).
  auto again = RunSift(
      {"local", spec, "--servers", "1", "--workers", "1", "--work-dir", work, "--progress", "off"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("job job-1 COMPLETED"));
}

// Issue 19: model selection in a cluster job. lr 1e-30 and the reference order make every
// epoch's validation AUC equal epoch 0's (no parameter moves, the same 8 batches every epoch), so
// patience 3 must end the job after epoch 4 of 6 — decided alike by both workers (from the
// validation predictions they gather) and by the coordinator (from the same predictions), or the
// job would hang or recover — keeping epoch 1's model, whose step checkpoint is not pruned.
TEST(Local, PatienceEndsAClusterJobEarlyAndKeepsTheBestCheckpoint) {
  testing::TempDir dir;
  const std::string data = local_test::MakeSmallDataset(dir, 400);
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(
      spec, absl::StrCat("dataset: \"", data,
                         "\"\nmodel: {type: din}\ntraining: {epochs: 6, batch_size: 256, "
                         "staleness: 0, seed: 1, lr: 1.0e-30, order: reference, "
                         "train_eval_samples: 512, max_steps_per_epoch: 4, "
                         "validation_fraction: 0.2, keep_best: validation_auc, patience: 3}\n"
                         "checkpoint: {dir: \"",
                         dir.Sub("ckpt"), "\", keep: 1}\n"));
  const std::string work = dir.Sub("work");
  auto r = RunSift(
      {"local", spec, "--servers", "2", "--workers", "2", "--work-dir", work, "--progress", "off"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("COMPLETED (4 of 6 epochs"));
  EXPECT_THAT(r.out, HasSubstr("0 recoveries"));
  EXPECT_THAT(r.out, HasSubstr("valid_auc"));
  EXPECT_THAT(r.out, HasSubstr("kept model  epoch 1 (best validation AUC"));
  auto recs = ReadDllLogFile(work + "/results/job-1/log.json");
  ASSERT_TRUE(recs.ok()) << recs.status();
  std::vector<double> validation;
  double final_test_auc = -1, epoch0_test_auc = -2, kept = -1;
  for (const DllRecord& rec : *recs) {
    if (rec.type != DllRecord::Type::kLog || rec.step.size() > 1) continue;
    for (const auto& [k, v] : rec.data) {
      if (rec.step.size() == 1 && k == "validation_auc") validation.push_back(v);
      if (rec.step.size() == 1 && rec.step[0] == 0 && k == "test_auc") epoch0_test_auc = v;
      if (rec.step.empty() && k == "test_auc") final_test_auc = v;
      if (rec.step.empty() && k == "kept_epoch") kept = v;
    }
  }
  ASSERT_EQ(validation.size(), 4u);
  for (double v : validation) EXPECT_EQ(v, validation[0]);
  EXPECT_GT(validation[0], 0.0);
  EXPECT_EQ(kept, 0);
  EXPECT_EQ(final_test_auc, epoch0_test_auc);
  EXPECT_THAT(testing::ReadAll(work + "/state/jobs/job-1.log"),
              HasSubstr("early stop after epoch 4"));
  // keep 1: the newest checkpoint (epoch 3's, step 12; a job takes none after its last epoch)
  // and the kept one (epoch 1's, step 4); epoch 2's is pruned.
  EXPECT_TRUE(PathExists(dir.Sub("ckpt") + "/job-1/step-000000000004/manifest.json"));
  EXPECT_TRUE(PathExists(dir.Sub("ckpt") + "/job-1/step-000000000012/manifest.json"));
  EXPECT_FALSE(PathExists(dir.Sub("ckpt") + "/job-1/step-000000000008"));
}

// The final table's "test AUC   0.8337 ..." value ("" when absent).
std::string FinalTestAuc(const std::string& out) {
  const size_t at = out.find("  test AUC   ");
  if (at == std::string::npos) return "";
  const size_t start = at + 13;
  return out.substr(start, out.find(' ', start) - start);
}

// Issue 17: --secure runs the job with TLS, member certificates and a token, and trains exactly
// as without it (k = 0: the same test AUC to the last printed digit).
TEST(Local, SecureRunsTheJobOverMutualTlsWithTheSameResult) {
  testing::TempDir dir;
  const std::string data = local_test::MakeSmallDataset(dir);
  const std::string spec = local_test::WriteSpec(dir, data, /*epochs=*/1, /*steps=*/4);
  auto plain = RunSift({"local", spec, "--servers", "1", "--workers", "1", "--work-dir",
                        dir.Sub("plain"), "--progress", "off"});
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  const std::string work = dir.Sub("secure");
  auto secure = RunSift({"local", spec, "--servers", "1", "--workers", "1", "--work-dir", work,
                         "--progress", "off", "--secure"});
  ASSERT_EQ(secure.exit_code, 0) << secure.out << secure.err;
  EXPECT_THAT(secure.out, HasSubstr("security on"));
  EXPECT_THAT(secure.out, HasSubstr("COMPLETED (1 of 1 epochs"));
  EXPECT_FALSE(FinalTestAuc(plain.out).empty()) << plain.out;
  EXPECT_EQ(FinalTestAuc(secure.out), FinalTestAuc(plain.out));
  // Every child ran with its own member directory; keys and tokens are private.
  EXPECT_THAT(testing::ReadAll(work + "/logs/coordinator-0.log"),
              HasSubstr("TLS on (" + work + "/security/coordinator)"));
  EXPECT_THAT(testing::ReadAll(work + "/logs/embedding-server-0.log"),
              HasSubstr("--tls-dir " + work + "/security/server-0"));
  EXPECT_THAT(testing::ReadAll(work + "/logs/worker-0.log"),
              HasSubstr("--tls-dir " + work + "/security/worker-0"));
  for (const std::string& f : {"/security/worker-0/tls.key", "/security/tokens.csv",
                               "/security/client/token", "/security/ca/ca.key"}) {
    struct stat st;
    ASSERT_EQ(::stat((work + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
}

TEST(Local, SigintMidJobCancelsAndLeavesNoProcess) {
  testing::TempDir dir;
  const std::string data = local_test::MakeSmallDataset(dir);
  // Long enough to be interrupted: whole epochs.
  const std::string spec = local_test::WriteSpec(dir, data, /*epochs=*/20, /*steps=*/0);
  const std::string log = dir.Sub("local.log");
  Subprocess local = local_test::StartLocal(
      {spec, "--servers", "1", "--workers", "1", "--work-dir", dir.Sub("work"), "--cluster-file",
       dir.Sub("cluster.json"), "--progress", "off"},
      log);
  ASSERT_TRUE(local.running());
  ASSERT_FALSE(testing::WaitForFile(dir.Sub("cluster.json"), 60).empty()) << testing::ReadAll(log);
  const nlohmann::json cluster = ReadJson(dir.Sub("cluster.json"));
  // Wait until the job trains (its first RUNNING line), then interrupt.
  for (int i = 0; i < 600 && testing::ReadAll(log).find("RUNNING") == std::string::npos; ++i) {
    ::usleep(100000);
  }
  ASSERT_THAT(testing::ReadAll(log), HasSubstr("RUNNING"));
  local.Signal(SIGINT);
  const ExitInfo exit = local.Wait();
  EXPECT_EQ(exit.ShellCode(), 130) << testing::ReadAll(log);
  EXPECT_THAT(testing::ReadAll(log), HasSubstr("interrupted by SIGINT"));
  EXPECT_THAT(Survivors(ChildPids(cluster)), IsEmpty());
  // The job was cancelled before the coordinator stopped: its persisted log says so.
  EXPECT_THAT(testing::ReadAll(dir.Sub("work/state/jobs/job-1.log")), HasSubstr("CANCELLED"));
}

TEST(Local, ChildrenDieWithAKilledLauncher) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeDirs(dir.Sub("empty")).ok());  // never trained on: the launcher dies first
  const std::string spec = local_test::WriteSpec(dir, dir.Sub("empty"), 1, 1);
  const std::string log = dir.Sub("local.log");
  Subprocess local = local_test::StartLocal(
      {spec, "--servers", "1", "--workers", "1", "--work-dir", dir.Sub("work"), "--cluster-file",
       dir.Sub("cluster.json"), "--progress", "off"},
      log);
  ASSERT_FALSE(testing::WaitForFile(dir.Sub("cluster.json"), 60).empty()) << testing::ReadAll(log);
  const std::vector<int> pids = ChildPids(ReadJson(dir.Sub("cluster.json")));
  ASSERT_EQ(pids.size(), 3u);
  // SIGKILL leaves the launcher no chance to clean up: the kernel's death signal must do it.
  local.Signal(SIGKILL);
  EXPECT_EQ(local.Wait().signal, SIGKILL);
  EXPECT_THAT(Survivors(pids, /*timeout_s=*/30), IsEmpty());
}

}  // namespace
}  // namespace sift
