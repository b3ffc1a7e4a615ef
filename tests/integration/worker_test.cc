// `sift worker` in a real cluster on loopback (coordinator, embedding servers, workers as
// processes): with 1 worker and k = 0 the job's DLLL log (written by the coordinator from the
// worker's step records and evaluation predictions) has the loss curve and AUCs of
// `sift train --embedding-servers` with the same options, bit for bit; 2 workers with k = 1 and a
// mid-epoch checkpoint complete the job, their /metrics pass promtool; SIGTERM exits 0; bad flags
// are usage errors.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/dllogger.h"
#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "tests/util/embedding_servers.h"
#include "tests/util/test_cluster.h"
#include "tests/util/test_util.h"
#include "tests/util/tiny_dataset_suite.h"

namespace sift {
namespace {

namespace cpb = ::sift::coordinator::v1;
using sift::testing::HttpGet;
using sift::testing::RunSift;
using sift::testing::TempDir;
using sift::testing::TestCluster;
using sift::testing::TestClusterOptions;
using sift::testing::TestJob;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class WorkerTest : public sift::testing::TinyDatasetSuite<1> {
 protected:
  // Submits a job of 50 epochs on 1 server and 1 worker (far longer than a test) and waits until
  // it has trained samples; its id ("" when the submission failed).
  static std::string SubmitLongJobUntilItTrains(TestCluster* cluster) {
    TestJob job;
    job.dataset = Tiny();
    job.epochs = 50;
    job.batch_size = 512;
    job.servers = 1;
    job.workers = 1;
    const std::string id = cluster->Submit(job.Yaml());
    if (id.empty()) return id;
    cluster->WaitForJob(
        id, [](const cpb::JobInfo& j) { return j.samples_total() > 0; }, 120);
    return id;
  }

  // The DLLL records of a log: "(epoch, step): total_loss=..." per step record (losses only) and
  // "(epoch,): train_auc=... test_auc=..." per epoch record, with every value in full precision.
  static std::vector<std::string> Curve(const std::string& log) {
    std::vector<std::string> out;
    auto records = ReadDllLogFile(log);
    EXPECT_TRUE(records.ok()) << records.status();
    if (!records.ok()) return out;
    for (const DllRecord& r : *records) {
      if (r.type != DllRecord::Type::kLog || r.step.empty()) continue;
      std::string line = absl::StrCat(FormatPyTuple(r.step), ":");
      for (const auto& [k, v] : r.data) {
        if (k == "total_loss" || k == "classification_loss" || k == "dien_aux_loss" ||
            k == "train_auc" || k == "test_auc") {
          absl::StrAppend(&line, " ", k, "=", absl::StrFormat("%.17g", v));
        }
      }
      out.push_back(line);
    }
    return out;
  }
};

TEST_F(WorkerTest, OneWorkerGivesTheLossCurveOfSiftTrain) {
  TestClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  co.worker_exit_after_jobs = 1;  // as the Kubernetes Job and the Slurm script run it
  TestCluster cluster(*dir_, "one", co);
  TestJob job;
  job.dataset = Tiny();
  job.epochs = 2;
  job.batch_size = 512;
  job.max_steps_per_epoch = 6;
  job.train_eval_samples = 2048;
  job.staleness = 0;
  job.servers = 1;
  job.workers = 1;
  job.results_dir = dir_->Sub("one_results");
  const std::string id = cluster.Submit(job.Yaml());
  ASSERT_FALSE(id.empty());
  const cpb::JobInfo info = cluster.WaitForFinish(id, 240);
  ASSERT_EQ(info.state(), cpb::COMPLETED) << info.message() << "\n" << cluster.AllErrors();
  EXPECT_EQ(info.steps_per_epoch(), 6);
  EXPECT_EQ(info.epochs_done_size(), 2);
  ASSERT_EQ(info.servers_size(), 1);
  // --exit-after-jobs 1: the worker ends with its job, exit code 0.
  EXPECT_EQ(cluster.WaitWorkerExit(0, 60), 0);
  EXPECT_THAT(cluster.WorkerOutput(0), HasSubstr(id + " COMPLETED; 1 of 1 job(s) finished"));
  EXPECT_THAT(cluster.WorkerOutput(0), HasSubstr("sift worker: finished, stopping"));

  // The same run single-process, its tables on a standalone embedding server (the cluster's
  // serves only its jobs).
  const sift::testing::EmbeddingServers standalone(*dir_, "one-train", 1, dir_->Sub("one_snaps"));
  auto train = RunSift({"train",
                        "--dataset",
                        Tiny(),
                        "--model",
                        "sim",
                        "--epochs",
                        "2",
                        "--batch-size",
                        "512",
                        "--max-steps-per-epoch",
                        "6",
                        "--train-eval-samples",
                        "2048",
                        "--threads",
                        "1",
                        "--seed",
                        "7",
                        "--progress",
                        "off",
                        "--embedding-servers",
                        standalone.List(),
                        "--results-dir",
                        dir_->Sub("one_train")});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const std::vector<std::string> want = Curve(dir_->Sub("one_train/log.json"));
  ASSERT_EQ(want.size(), 12u + 2u);
  EXPECT_EQ(info.results_dir(), job.results_dir + "/" + id);
  EXPECT_EQ(Curve(info.results_dir() + "/log.json"), want);
}

TEST_F(WorkerTest, TwoWorkersWithStalenessAndAMidEpochCheckpointComplete) {
  TestClusterOptions co;
  co.servers = 2;
  co.workers = 2;
  co.metrics = true;
  TestCluster cluster(*dir_, "two", co);
  TestJob job;
  job.dataset = Tiny();
  job.epochs = 2;
  job.batch_size = 512;
  job.max_steps_per_epoch = 5;
  job.train_eval_samples = 2048;
  job.staleness = 1;
  job.servers = 2;
  job.workers = 2;
  job.checkpoint_dir = dir_->Sub("two_ckpt");
  job.checkpoint_every_steps = 3;
  job.checkpoint_keep = 2;
  job.results_dir = dir_->Sub("two_results");
  const std::string id = cluster.Submit(job.Yaml());
  ASSERT_FALSE(id.empty());
  const cpb::JobInfo info = cluster.WaitForFinish(id, 240);
  ASSERT_EQ(info.state(), cpb::COMPLETED) << info.message() << "\n" << cluster.AllErrors();
  EXPECT_EQ(info.steps_per_epoch(), 5);
  ASSERT_EQ(info.epochs_done_size(), 2);
  for (const cpb::EpochResult& e : info.epochs_done()) {
    EXPECT_GT(e.test_auc(), 0.5) << "epoch " << e.epoch();
    EXPECT_TRUE(std::isfinite(e.test_loss()));
  }
  EXPECT_EQ(info.samples_total(), 2 * 5 * 512) << "global batch 512 = 2 x 256";
  // Checkpoints after global steps 3, 5 (epoch end), 6, 9 and 10 (the job's final model, which
  // every completed job writes): the last committed is step 10.
  EXPECT_EQ(info.last_checkpoint().global_step(), 10);
  EXPECT_EQ(info.last_checkpoint().epochs_done(), 2);
  // Each job writes its own directory under checkpoint.dir, a step-<N>/ per checkpoint.
  const std::string job_dir = job.checkpoint_dir + "/" + id;
  EXPECT_EQ(info.last_checkpoint().dir(), job_dir + "/step-000000000010");
  const std::string manifest = testing::ReadAll(job_dir + "/step-000000000010/manifest.json");
  EXPECT_THAT(manifest, HasSubstr(absl::StrCat("ckpt-", id, "-g")));
  // checkpoint.keep: 2 — of steps 3, 5, 6, 9, 10 the newest two stay. The servers delete a
  // snapshot at the next snapshot after its checkpoint went: step 5's when step 10's was written
  // (6 and 9 were still on disk then); step 6's would go at the next checkpoint.
  std::vector<std::string> kept, snapshots;
  for (const auto& e : std::filesystem::directory_iterator(job_dir)) {
    kept.push_back(e.path().filename().string());
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_THAT(kept, ElementsAre("step-000000000009", "step-000000000010"));
  for (const auto& e : std::filesystem::directory_iterator(dir_->Sub("two-snapshots"))) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0) snapshots.push_back(name.substr(name.rfind("-step-")));
  }
  std::sort(snapshots.begin(), snapshots.end());
  EXPECT_THAT(snapshots, ElementsAre("-step-10", "-step-6", "-step-9"));

  // Each worker's series: its own samples; the names pass promtool.
  const std::vector<std::string> targets = cluster.MetricsTargets();
  int workers_seen = 0;
  for (const std::string& t : targets) {
    std::vector<std::string> hp = absl::StrSplit(t, ':');
    int port = 0;
    ASSERT_EQ(hp.size(), 2u);
    ASSERT_TRUE(absl::SimpleAtoi(hp[1], &port));
    auto text = HttpGet(hp[0], port, "/metrics");
    ASSERT_TRUE(text.ok()) << text.status();
    if (text->find("sift_worker_samples_total") == std::string::npos) continue;
    ++workers_seen;
    EXPECT_THAT(*text,
                HasSubstr(absl::StrCat("sift_worker_samples_total{job_id=\"", id, "\",rank=\"")));
    EXPECT_THAT(*text, HasSubstr("} 2560\n")) << "5 x 2 steps of 256 samples";
    EXPECT_THAT(*text, HasSubstr("sift_worker_phase_seconds_total{phase=\"allreduce\"}"));
    EXPECT_THAT(*text, HasSubstr("sift_worker_step_seconds_count 10"));
    EXPECT_THAT(*text, HasSubstr("sift_build_info"));
    if (testing::PromtoolAvailable()) {
      auto lint = testing::PromtoolCheckMetrics(*text);
      EXPECT_TRUE(lint.ok()) << lint.status();
    }
  }
  EXPECT_EQ(workers_seen, 2);
  EXPECT_EQ(cluster.StopWorker(0, SIGTERM), 0);
}

// tables.<name>.capacity (issue 16 row 3): a job whose table outgrows its capacity fails at once
// with the table and the spec field named (RESOURCE_EXHAUSTED is not recovered: it would happen
// again); a name the model has no table of fails naming the field.
TEST_F(WorkerTest, ATableBeyondItsCapacityFailsTheJobNamingIt) {
  TestClusterOptions co;
  co.servers = 2;
  co.workers = 1;
  TestCluster cluster(*dir_, "capacity", co);
  TestJob job;
  job.dataset = Tiny();
  job.epochs = 1;
  job.batch_size = 256;
  job.max_steps_per_epoch = 3;
  job.servers = 2;
  job.workers = 1;
  job.extra_yaml = "tables:\n  item_feat_0: {capacity: 20}\n  user_feat_0: {capacity: 0}\n";
  const std::string id = cluster.Submit(job.Yaml());
  ASSERT_FALSE(id.empty());
  cpb::JobInfo info = cluster.WaitForFinish(id, 120);
  EXPECT_EQ(info.state(), cpb::FAILED);
  EXPECT_THAT(info.message(), HasSubstr("table 'item_feat_0'"));
  EXPECT_THAT(info.message(), HasSubstr("the table is full"));
  EXPECT_THAT(info.message(), HasSubstr("tables.item_feat_0.capacity"));

  job.extra_yaml = "tables:\n  item_feat_9: {capacity: 20}\n";
  const std::string bad = cluster.Submit(job.Yaml());
  ASSERT_FALSE(bad.empty());
  info = cluster.WaitForFinish(bad, 120);
  EXPECT_EQ(info.state(), cpb::FAILED);
  EXPECT_THAT(info.message(), HasSubstr("tables.item_feat_9: the model on "));
  EXPECT_THAT(info.message(), HasSubstr("has no table of that name (its tables: user_feat_0, "));
}

// --exit-after-jobs: a worker whose job was cancelled exits 3 (a Kubernetes podFailurePolicy
// fails the Job on it), not 0.
TEST_F(WorkerTest, ExitAfterJobsExitsThreeWhenTheJobDidNotComplete) {
  TestClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  co.worker_exit_after_jobs = 1;
  TestCluster cluster(*dir_, "cancel", co);
  const std::string id = SubmitLongJobUntilItTrains(&cluster);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(cluster.client().CancelJob(id).ok());
  EXPECT_EQ(cluster.WaitWorkerExit(0, 60), 3) << cluster.AllErrors();
  EXPECT_THAT(cluster.WorkerOutput(0), HasSubstr(id + " CANCELLED; 1 of 1 job(s) finished"));
}

// The harness itself: a member that dies without the test stopping it ends WaitForJob at once
// with a failure naming it and its signal, instead of waiting out the timeout (a job whose
// member nothing restarts stays RECOVERING; CI once waited 300 s so for a worker killed by
// SIGPIPE).
TEST_F(WorkerTest, AMemberThatDiesEndsTheWaitNamingIt) {
  TestClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  TestCluster cluster(*dir_, "crash", co);
  const std::string id = SubmitLongJobUntilItTrains(&cluster);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(::kill(cluster.ServerPid(0), SIGKILL), 0);
  EXPECT_NONFATAL_FAILURE(cluster.WaitForFinish(id, 600),
                          "server 0 exited by itself with code 137 (killed by SIGKILL) while "
                          "waiting for " +
                              id);
}

TEST_F(WorkerTest, FlagErrors) {
  auto r = RunSift({"worker", "--metrics-port", "70000"});
  EXPECT_EQ(r.exit_code, 2);
  r = RunSift({"worker", "--coordinator", "127.0.0.1:1", "--register-timeout", "0.5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("127.0.0.1:1"));
}

}  // namespace
}  // namespace sift
