// The one step engine under a TrainerEnv (in-process tables, world 1): the env sees every step,
// the epoch perf, the evaluation predictions and the checkpoint protocol in order; a mid-epoch
// checkpoint (every_steps) resumed inside its epoch continues exactly like the uninterrupted run,
// with and without a learning-rate schedule (each step's rate by the formula);
// staleness 1 trains the same steps; BatchLoader::StartEpoch(epoch, first_step) gives the same
// batches as the full epoch from that step on; sparse gradients scale by 1/W.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/loader.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/data/dataset_fixture.h"
#include "tests/util/test_util.h"
#include "worker/checkpoint.h"
#include "worker/trainer.h"

namespace sift::worker {
namespace {

using ::testing::HasSubstr;

using sift::testing::RandomTimeline;
using sift::testing::TempDir;

// Records what the engine hands to its env; AUC/loss as the local env computes them.
class RecordingEnv : public TrainerEnv {
 public:
  RecordingEnv() : collectives_(CreateLocalCollectives()) {}
  Collectives* collectives() override { return collectives_.get(); }
  Status CheckAbort() override {
    return steps.size() >= abort_after ? absl::CancelledError("stop") : absl::OkStatus();
  }
  Status OnSetup(double) override {
    events.push_back("setup");
    return absl::OkStatus();
  }
  Status OnStep(const StepReport& r) override {
    steps.push_back(r);
    return absl::OkStatus();
  }
  Status OnEpochTrained(int64_t epoch, const DllMetrics& perf, double) override {
    events.push_back("trained " + std::to_string(epoch));
    EXPECT_FALSE(perf.empty());
    return absl::OkStatus();
  }
  StatusOr<EvalResult> OnEvaluation(int64_t epoch, data::Split split,
                                    const EvalPredictions& p) override {
    events.push_back("eval " + std::to_string(epoch) + " " + data::SplitName(split));
    EXPECT_EQ(p.scores.size(), p.labels.size());
    int64_t rows = 0;
    for (int64_t r : p.batch_rows) rows += r;
    EXPECT_EQ(rows, static_cast<int64_t>(p.scores.size()));
    eval_sizes.push_back(static_cast<int64_t>(p.scores.size()));
    return EvalResult{0.5, p.scores.empty() ? 0 : p.loss_sum / p.scores.size()};
  }
  std::string SnapshotName(int64_t step) override { return "snap-" + std::to_string(step); }
  Status CheckpointBegin(int64_t step) override {
    events.push_back("begin " + std::to_string(step));
    if (on_begin) on_begin();
    return absl::OkStatus();
  }
  Status CheckpointFailed(int64_t step, const Status& error) override {
    events.push_back("failed " + std::to_string(step));
    failures.push_back(std::string(error.message()));
    return absl::OkStatus();
  }
  Status CheckpointCommit(const std::string&, int64_t epochs_done, int64_t step) override {
    events.push_back("commit " + std::to_string(epochs_done) + " " + std::to_string(step));
    return absl::OkStatus();
  }
  Status OnEpochEnd(const EpochMetrics& em, const DllMetrics&) override {
    events.push_back("end " + std::to_string(em.epoch));
    return absl::OkStatus();
  }
  Status OnFinish(RunMode, const RunResult&, const DllMetrics&) override {
    events.push_back("finish");
    return absl::OkStatus();
  }

  std::vector<StepReport> steps;
  std::vector<std::string> events;
  std::vector<std::string> failures;
  std::function<void()> on_begin;  // runs inside CheckpointBegin (e.g. breaks the directory)
  std::vector<int64_t> eval_sizes;
  size_t abort_after = SIZE_MAX;

 private:
  std::unique_ptr<Collectives> collectives_;
};

class TrainerEnvTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    data::TimelineData t = RandomTimeline(/*seed=*/3, /*users=*/80, /*items=*/500, /*cats=*/20,
                                          /*min_len=*/4, /*max_len=*/60);
    ASSERT_TRUE(data::WriteTimelineDataset(dir_->Sub("ds"), t, {80}, {500, 20},
                                           /*negative_seed=*/5, YAML::Node())
                    .ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static TrainerOptions Options() {
    TrainerOptions o;
    o.dataset = dir_->Sub("ds");
    o.model.type = ModelType::kSim;
    o.model.embedding_dim = 4;
    o.model.long_len = 8;
    o.model.short_len = 4;
    o.model.top_k = 4;
    o.model.stage_one_mlp = {8};
    o.model.stage_two_mlp = {8, 4};
    o.model.aux_mlp = {4};
    o.model.attention_mlp = {4};
    o.threads = 1;
    o.epochs = 2;
    o.batch_size = 32;
    o.max_steps_per_epoch = 5;
    o.train_eval_samples = 64;
    o.seed = 9;
    return o;
  }
  static std::vector<double> Losses(const RecordingEnv& env) {
    std::vector<double> out;
    for (const StepReport& r : env.steps) out.push_back(r.losses.total);
    return out;
  }
  static TempDir* dir_;
};
TempDir* TrainerEnvTest::dir_ = nullptr;

TEST_F(TrainerEnvTest, EnvSeesStepsEvaluationAndTheCheckpointProtocolInOrder) {
  TrainerOptions o = Options();
  o.save_checkpoint = dir_->Sub("ckpt_order");
  o.checkpoint_every_steps = 3;
  o.checkpoint_final_epoch = false;
  RecordingEnv env;
  auto r = RunTrainerWithEnv(o, RunMode::kTrain, &env);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(env.steps.size(), 10u);
  for (size_t i = 0; i < env.steps.size(); ++i) {
    EXPECT_EQ(env.steps[i].global_step, static_cast<int64_t>(i));
    EXPECT_EQ(env.steps[i].epoch, static_cast<int64_t>(i / 5));
    EXPECT_EQ(env.steps[i].step, static_cast<int64_t>(i % 5));
    EXPECT_EQ(env.steps[i].steps_per_epoch, 5);
    EXPECT_EQ(env.steps[i].samples, 32);
    EXPECT_TRUE(std::isfinite(env.steps[i].losses.total));
  }
  // Steps 3, 6, 9 (mid-epoch, epochs_done = the epoch in progress), the end of epoch 0 (after
  // its evaluation); none after the final epoch.
  const std::vector<std::string> want = {
      "setup",      "begin 3",    "commit 0 3",   "trained 0",   "eval 0 train", "eval 0 test",
      "begin 5",    "commit 1 5", "end 0",        "begin 6",     "commit 1 6",   "begin 9",
      "commit 1 9", "trained 1",  "eval 1 train", "eval 1 test", "end 1",        "finish"};
  EXPECT_EQ(env.events, want);
  EXPECT_EQ(env.eval_sizes[0], 64) << "train_eval_samples, whole batches";
}

// Issue 16 row 5: an unwritable checkpoint directory (here: its parent is a file) failed the
// job outright. Now each save is retried, then reported failed while training goes on with the
// same losses as a run without checkpoints; three failed checkpoints in a row fail the run,
// saying why.
TEST_F(TrainerEnvTest, AFailedCheckpointIsRetriedAndTrainingGoesOn) {
  TrainerOptions o = Options();
  RecordingEnv plain;
  ASSERT_TRUE(RunTrainerWithEnv(o, RunMode::kTrain, &plain).ok());
  // Writable when the run starts; at the first checkpoint the directory becomes a file (as a
  // disk gone read-only or full would fail every write).
  const std::string ckpt = dir_->Sub("broken_ckpt");
  o.save_checkpoint = ckpt;
  o.checkpoint_final_epoch = false;  // one checkpoint: the end of epoch 0
  const auto break_it = [ckpt] {
    std::filesystem::remove_all(ckpt);
    testing::WriteAll(ckpt, "a file\n");
  };
  RecordingEnv env;
  env.on_begin = break_it;
  auto r = RunTrainerWithEnv(o, RunMode::kTrain, &env);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Losses(env), Losses(plain));
  const std::vector<std::string> want = {
      "setup", "trained 0", "eval 0 train", "eval 0 test", "begin 5", "failed 5",
      "end 0", "trained 1", "eval 1 train", "eval 1 test", "end 1",   "finish"};
  EXPECT_EQ(env.events, want);
  ASSERT_EQ(env.failures.size(), 1u);
  EXPECT_THAT(env.failures[0], HasSubstr(ckpt));

  o.checkpoint_every_steps = 2;  // steps 2, 4 (+ the epoch end at 5): three failures in a row
  std::filesystem::remove_all(ckpt);
  RecordingEnv failing;
  failing.on_begin = break_it;
  auto f = RunTrainerWithEnv(o, RunMode::kTrain, &failing);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()),
              HasSubstr("3 checkpoints in a row failed (each tried 3 times); the last: "));
  EXPECT_EQ(failing.failures.size(), 2u);
}

// A cluster job's checkpoints go under its checkpoint.dir (checkpoint_root): a symbolic link on
// the way — planted before the run, or swapped in while it trains — is refused by name, and
// nothing is written or pruned in the directory it points at.
TEST_F(TrainerEnvTest, ACheckpointIsNeverWrittenOrPrunedThroughASymbolicLink) {
  const std::string root = dir_->Sub("link_root");
  const std::string victim = dir_->Sub("link_victim");
  ASSERT_TRUE(MakeDirs(root).ok());
  ASSERT_TRUE(MakeDirs(victim + "/step-000000000001").ok());
  testing::WriteAll(victim + "/step-000000000001/manifest.json", "{}\n");
  TrainerOptions o = Options();
  o.checkpoint_root = root;
  o.save_checkpoint = root + "/job-1";
  o.checkpoint_keep = 1;
  o.checkpoint_final_epoch = false;
  ASSERT_EQ(::symlink(victim.c_str(), (root + "/job-1").c_str()), 0);
  RecordingEnv planted;
  auto r = RunTrainerWithEnv(o, RunMode::kTrain, &planted);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr(root + "/job-1 is a symbolic link: sift never follows one under " + root));
  // Swapped in at each checkpoint (both epoch ends): the saves fail (reported), training goes on.
  ASSERT_EQ(::unlink((root + "/job-1").c_str()), 0);
  RecordingEnv swapped;
  swapped.on_begin = [&] {
    std::filesystem::remove_all(root + "/job-1");
    ASSERT_EQ(::symlink(victim.c_str(), (root + "/job-1").c_str()), 0);
  };
  ASSERT_TRUE(RunTrainerWithEnv(o, RunMode::kTrain, &swapped).ok());
  ASSERT_EQ(swapped.failures.size(), 2u);
  for (const std::string& f : swapped.failures) EXPECT_THAT(f, HasSubstr("is a symbolic link"));
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(victim)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"step-000000000001"});
  EXPECT_EQ(testing::ReadAll(victim + "/step-000000000001/manifest.json"), "{}\n");
}

std::vector<double> LossesOf(const RecordingEnv& env) {
  std::vector<double> out;
  for (const StepReport& r : env.steps) out.push_back(r.losses.total);
  return out;
}

// Runs `o` uninterrupted, then checkpointed after step 7 (epoch 1, 2 steps into it) and stopped,
// then resumed inside its epoch from `ckpt`: the resumed steps must equal the uninterrupted
// run's bit for bit. Returns the uninterrupted run's steps.
std::vector<StepReport> ExpectMidEpochResumeMatches(TrainerOptions o, const std::string& ckpt) {
  RecordingEnv full;
  EXPECT_TRUE(RunTrainerWithEnv(o, RunMode::kTrain, &full).ok());
  const std::vector<double> want = LossesOf(full);
  EXPECT_EQ(want.size(), 10u);
  if (want.size() != 10u) return full.steps;
  o.save_checkpoint = ckpt;
  o.checkpoint_every_steps = 7;
  o.checkpoint_every_epoch = false;
  RecordingEnv first;
  first.abort_after = 8;
  auto r1 = RunTrainerWithEnv(o, RunMode::kTrain, &first);
  EXPECT_EQ(r1.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(LossesOf(first), std::vector<double>(want.begin(), want.begin() + 8));
  o.save_checkpoint.clear();
  o.load_checkpoint = ckpt;
  o.resume_within_epoch = true;
  RecordingEnv second;
  auto r2 = RunTrainerWithEnv(o, RunMode::kTrain, &second);
  EXPECT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(LossesOf(second), std::vector<double>(want.begin() + 7, want.end()))
      << "the resumed steps equal the uninterrupted run's, bit for bit";
  EXPECT_EQ(second.steps.size(), 3u);
  for (size_t i = 0; i < second.steps.size() && 7 + i < full.steps.size(); ++i) {
    EXPECT_EQ(second.steps[i].lr, full.steps[7 + i].lr) << "step " << 7 + i;
  }
  return full.steps;
}

TEST_F(TrainerEnvTest, ScheduledLearningRateFollowsTheFormulaAndResumesOnSchedule) {
  TrainerOptions o = Options();
  o.lr = 0.02f;
  o.lr_schedule = {LrScheduleKind::kCosine, /*warmup_steps=*/3, /*final_fraction=*/0.1};
  const std::vector<StepReport> steps =
      ExpectMidEpochResumeMatches(o, dir_->Sub("ckpt_mid_cosine"));
  ASSERT_EQ(steps.size(), 10u);
  // T = 2 epochs x 5 steps: warm-up 1/3, 2/3, 1, then 0.1 + 0.45 (1 + cos(pi (s - 3) / 7)).
  for (int s = 0; s < 10; ++s) {
    const double factor = s < 3 ? (s + 1) / 3.0 : 0.1 + 0.45 * (1 + std::cos(M_PI * (s - 3) / 7));
    EXPECT_NEAR(steps[s].lr, 0.02 * factor, 1e-8) << "step " << s;
  }
  // Both optimizers see it: the run departs from the constant-rate run after its first step.
  TrainerOptions plain = Options();
  plain.lr = 0.02f;
  RecordingEnv constant;
  ASSERT_TRUE(RunTrainerWithEnv(plain, RunMode::kTrain, &constant).ok());
  ASSERT_EQ(constant.steps.size(), 10u);
  EXPECT_EQ(constant.steps[0].losses.total, steps[0].losses.total);
  EXPECT_NE(constant.steps[1].losses.total, steps[1].losses.total);
  for (const StepReport& r : constant.steps) EXPECT_FLOAT_EQ(r.lr, 0.02f);
  // A warm-up-free constant schedule is no schedule, bit for bit.
  plain.lr_schedule.final_fraction = 0.5;
  RecordingEnv same;
  ASSERT_TRUE(RunTrainerWithEnv(plain, RunMode::kTrain, &same).ok());
  EXPECT_EQ(Losses(same), Losses(constant));
}

// The push carries the factor too: after one step at warm-up factor 1/4 (lr 0.01, warm-up 4),
// the dense parameters AND the embedding rows are those of one step at lr 0.0025 (0.01f / 4 is
// exactly 0.0025f), so the second step's loss is the same bit for bit — and not that of lr 0.01.
TEST_F(TrainerEnvTest, TheFirstWarmUpStepIsAStepAtTheScaledRateInBothOptimizers) {
  TrainerOptions o = Options();
  o.epochs = 1;
  o.max_steps_per_epoch = 2;
  RecordingEnv plain, warm, quarter;
  ASSERT_TRUE(RunTrainerWithEnv(o, RunMode::kTrain, &plain).ok());
  TrainerOptions w = o;
  w.lr_schedule.warmup_steps = 4;
  ASSERT_TRUE(RunTrainerWithEnv(w, RunMode::kTrain, &warm).ok());
  TrainerOptions q = o;
  q.lr = 0.0025f;
  ASSERT_EQ(q.lr, 0.01f * 0.25f);
  ASSERT_TRUE(RunTrainerWithEnv(q, RunMode::kTrain, &quarter).ok());
  ASSERT_EQ(warm.steps.size(), 2u);
  ASSERT_EQ(quarter.steps.size(), 2u);
  ASSERT_EQ(plain.steps.size(), 2u);
  EXPECT_EQ(warm.steps[1].losses.total, quarter.steps[1].losses.total);
  EXPECT_NE(warm.steps[1].losses.total, plain.steps[1].losses.total);
}

TEST_F(TrainerEnvTest, MidEpochCheckpointResumesInsideItsEpoch) {
  TrainerOptions o = Options();
  RecordingEnv full;
  ASSERT_TRUE(RunTrainerWithEnv(o, RunMode::kTrain, &full).ok());
  const std::vector<double> want = Losses(full);
  ASSERT_EQ(want.size(), 10u);

  // Checkpoint after step 7 (epoch 1, 2 steps into it), stop right after it.
  o.save_checkpoint = dir_->Sub("ckpt_mid");
  o.checkpoint_every_steps = 7;
  o.checkpoint_every_epoch = false;
  RecordingEnv first;
  first.abort_after = 8;
  auto r1 = RunTrainerWithEnv(o, RunMode::kTrain, &first);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Losses(first), std::vector<double>(want.begin(), want.begin() + 8));

  o.save_checkpoint.clear();
  o.load_checkpoint = dir_->Sub("ckpt_mid");
  o.resume_within_epoch = true;
  RecordingEnv second;
  auto r2 = RunTrainerWithEnv(o, RunMode::kTrain, &second);
  ASSERT_TRUE(r2.ok()) << r2.status();
  ASSERT_EQ(second.steps.size(), 3u);
  EXPECT_EQ(second.steps[0].epoch, 1);
  EXPECT_EQ(second.steps[0].step, 2);
  EXPECT_EQ(second.steps[0].global_step, 7);
  EXPECT_EQ(Losses(second), std::vector<double>(want.begin() + 7, want.end()))
      << "the resumed steps equal the uninterrupted run's, bit for bit";

  // Without resume_within_epoch (sift train) the checkpoint resumes at its epoch's start.
  o.resume_within_epoch = false;
  RecordingEnv third;
  ASSERT_TRUE(RunTrainerWithEnv(o, RunMode::kTrain, &third).ok());
  EXPECT_EQ(third.steps.size(), 5u);
}

TEST_F(TrainerEnvTest, StalenessOneTrainsTheSameSteps) {
  TrainerOptions o = Options();
  RecordingEnv sync;
  ASSERT_TRUE(RunTrainerWithEnv(o, RunMode::kTrain, &sync).ok());
  o.staleness = 1;
  RecordingEnv stale;
  auto r = RunTrainerWithEnv(o, RunMode::kTrain, &stale);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(stale.steps.size(), sync.steps.size());
  for (const StepReport& s : stale.steps) EXPECT_TRUE(std::isfinite(s.losses.total));
  // Step 0 sees the initial rows either way.
  EXPECT_EQ(stale.steps[0].losses.total, sync.steps[0].losses.total);
  EXPECT_EQ(stale.events, sync.events);
}

TEST_F(TrainerEnvTest, StartEpochAtAStepGivesTheEpochsRemainingBatches) {
  auto ds = data::Dataset::Open(dir_->Sub("ds"));
  ASSERT_TRUE(ds.ok());
  data::BatchLoaderOptions lo;
  lo.batch_size = 16;
  lo.history = {12, 4, false};
  lo.seed = 4;
  lo.threads = 2;
  auto loader = data::BatchLoader::Create(&(*ds)->samples(), lo);
  ASSERT_TRUE(loader.ok());
  std::vector<uint64_t> all;
  (*loader)->StartEpoch(2);
  while (const data::Batch* b = (*loader)->Next()) all.push_back(data::BatchChecksum(*b));
  ASSERT_GT(all.size(), 4u);
  (*loader)->StartEpoch(2, 3);
  std::vector<uint64_t> rest;
  while (const data::Batch* b = (*loader)->Next()) rest.push_back(data::BatchChecksum(*b));
  EXPECT_EQ(rest, std::vector<uint64_t>(all.begin() + 3, all.end()));
  (*loader)->StartEpoch(2, static_cast<int64_t>(all.size()) + 5);
  EXPECT_EQ((*loader)->Next(), nullptr);
}

TEST(ScaleSparseGradientsTest, ScalesByOneOverWorld) {
  std::vector<float> g = {1.0f, -3.0f, 0.25f};
  ScaleSparseGradients(1, 1.0f, absl::MakeSpan(g));
  EXPECT_EQ(g, (std::vector<float>{1.0f, -3.0f, 0.25f}));
  ScaleSparseGradients(2, 1.0f, absl::MakeSpan(g));
  EXPECT_EQ(g, (std::vector<float>{0.5f, -1.5f, 0.125f}));
  ScaleSparseGradients(4, 1.0f, absl::MakeSpan(g));
  EXPECT_EQ(g, (std::vector<float>{0.125f, -0.375f, 0.03125f}));
}

// fp16: the loss scale's inverse rides along in the same pass (exact for powers of two).
TEST(ScaleSparseGradientsTest, AlsoUnscalesTheLossScale) {
  std::vector<float> g = {32768.0f, -98304.0f, 8192.0f};
  ScaleSparseGradients(1, 0x1p-15f, absl::MakeSpan(g));
  EXPECT_EQ(g, (std::vector<float>{1.0f, -3.0f, 0.25f}));
  g = {32768.0f, -98304.0f, 8192.0f};
  ScaleSparseGradients(4, 0x1p-15f, absl::MakeSpan(g));
  EXPECT_EQ(g, (std::vector<float>{0.25f, -0.75f, 0.0625f}));
}

}  // namespace
}  // namespace sift::worker
