// The pure parts of the cluster worker: a job spec and assignment become the trainer options of
// one rank (per-rank batch = batch / W, servers, checkpoints, threads override, clear errors for
// a missing backend or a batch smaller than W); evaluation predictions become ReportEval chunks
// that cover every score once, at batch boundaries, with the loss sums of their batches.
#include "worker/distributed_worker.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace sift::worker {
namespace {

namespace cpb = ::sift::coordinator::v1;
using ::testing::HasSubstr;

JobSpec Spec() {
  auto spec = ParseJobSpec(R"(
dataset: /data/tiny
model: {type: dien, embedding_dim: 8, short_seq_length: 5, long_seq_length: 20}
training: {epochs: 2, batch_size: 1000, eval_batch_size: 300, lr: 0.002, weight_decay: 0.25, sparse_l2: 0.5,
           staleness: 1, lr_schedule: linear, lr_warmup_steps: 5, lr_final_fraction: 0.25,
           seed: 7, order: reference, sparse_optimizer: adagrad, train_eval_samples: 4096,
           max_steps_per_epoch: 9}
cluster: {servers: 2, workers: 4, threads_per_worker: 3, deterministic: false}
checkpoint: {dir: /ckpt, every_steps: 50, every_epoch: false}
results_dir: /results
)",
                           "job.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

cpb::Assignment Assignment(int rank, int world) {
  cpb::Assignment a;
  a.set_job_id("job-3");
  a.set_generation(2);
  a.set_rank(rank);
  a.set_world_size(world);
  a.add_servers("127.0.0.1:5001");
  a.add_servers("127.0.0.1:5002");
  a.set_resume_checkpoint("/ckpt");
  a.set_kv_prefix("job-3/g2");
  return a;
}

TEST(TrainerOptionsForAssignmentTest, MapsTheSpecOntoOneRank) {
  auto o = TrainerOptionsForAssignment(Spec(), Assignment(1, 4), -1);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->dataset, "/data/tiny");
  EXPECT_EQ(o->model.type, ModelType::kDien);
  EXPECT_EQ(o->model.embedding_dim, 8);
  EXPECT_EQ(o->model.short_len, 5);
  EXPECT_EQ(o->model.long_len, 20);
  EXPECT_EQ(o->batch_size, 250);
  EXPECT_EQ(o->eval_batch_size, 75);
  EXPECT_EQ(o->epochs, 2);
  EXPECT_FLOAT_EQ(o->lr, 0.002f);
  EXPECT_FLOAT_EQ(o->weight_decay, 0.25f);
  EXPECT_EQ(o->lr_schedule.kind, LrScheduleKind::kLinear);
  EXPECT_EQ(o->lr_schedule.warmup_steps, 5);
  EXPECT_EQ(o->lr_schedule.final_fraction, 0.25);
  EXPECT_FLOAT_EQ(o->sparse_l2, 0.5f);
  EXPECT_EQ(o->staleness, 1);
  EXPECT_EQ(o->seed, 7u);
  EXPECT_EQ(o->order, data::SampleOrder::kReference);
  EXPECT_EQ(o->sparse_optimizer, "adagrad");
  EXPECT_EQ(o->train_eval_samples, 4096);
  EXPECT_EQ(o->max_steps_per_epoch, 9);
  EXPECT_EQ(o->threads, 3);
  EXPECT_FALSE(o->deterministic);
  EXPECT_EQ(o->embedding_servers, (std::vector<std::string>{"127.0.0.1:5001", "127.0.0.1:5002"}));
  EXPECT_EQ(o->save_checkpoint, "/ckpt/job-3");  // each job its own directory
  EXPECT_EQ(o->load_checkpoint, "/ckpt");
  EXPECT_EQ(o->checkpoint_every_steps, 50);
  EXPECT_FALSE(o->checkpoint_every_epoch);
  EXPECT_FALSE(o->checkpoint_final_epoch);
  EXPECT_TRUE(o->resume_within_epoch);
  EXPECT_TRUE(o->results_dir.empty()) << "the coordinator writes the job's log";

  auto one = TrainerOptionsForAssignment(Spec(), Assignment(0, 1), 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->batch_size, 1000) << "world 1: the whole batch";
  EXPECT_EQ(one->threads, 0) << "--threads overrides threads_per_worker";
  JobSpec defaults = Spec();
  defaults.cluster.deterministic = true;
  auto det = TrainerOptionsForAssignment(defaults, Assignment(0, 1), 0);
  ASSERT_TRUE(det.ok());
  EXPECT_TRUE(det->deterministic);
}

TEST(TrainerOptionsForAssignmentTest, ClearErrors) {
  JobSpec spec = Spec();
  spec.training.batch_size = 3;
  auto o = TrainerOptionsForAssignment(spec, Assignment(0, 4), -1);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("training.batch_size"));

  spec = Spec();
  spec.cluster.backend = "cuda";
  o = TrainerOptionsForAssignment(spec, Assignment(0, 4), -1);
  const std::vector<std::string> backends = kernels::AvailableBackendNames();
  if (std::find(backends.begin(), backends.end(), "cuda") == backends.end()) {
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status().message()), HasSubstr("cluster.backend: 'cuda'"));
  } else {
    EXPECT_TRUE(o.ok()) << o.status();
  }

  o = TrainerOptionsForAssignment(Spec(), Assignment(4, 4), -1);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  cpb::Assignment none = Assignment(0, 1);
  none.clear_servers();
  o = TrainerOptionsForAssignment(Spec(), none, -1);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("no embedding servers"));
}

EvalPredictions Predictions(const std::vector<int64_t>& batches) {
  EvalPredictions p;
  for (size_t b = 0; b < batches.size(); ++b) {
    for (int64_t i = 0; i < batches[b]; ++i) {
      p.scores.push_back(static_cast<float>(p.scores.size()));
      p.labels.push_back(static_cast<float>(i % 2));
    }
    p.batch_rows.push_back(batches[b]);
    p.batch_loss_sums.push_back(0.5 * static_cast<double>(b + 1));
    p.loss_sum += p.batch_loss_sums.back();
  }
  return p;
}

TEST(EvalChunksTest, CoverEveryScoreOnceAtBatchBoundaries) {
  const EvalPredictions p = Predictions({4, 4, 3, 10, 2});
  const auto chunks = EvalChunks(p, 8);
  std::vector<float> scores, labels;
  double loss = 0;
  std::vector<int> sizes;
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].last(), i + 1 == chunks.size());
    EXPECT_LE(chunks[i].scores_size(), 8);
    EXPECT_EQ(chunks[i].scores_size(), chunks[i].labels_size());
    scores.insert(scores.end(), chunks[i].scores().begin(), chunks[i].scores().end());
    labels.insert(labels.end(), chunks[i].labels().begin(), chunks[i].labels().end());
    loss += chunks[i].loss_sum();
    sizes.push_back(chunks[i].scores_size());
  }
  EXPECT_EQ(scores, p.scores);
  EXPECT_EQ(labels, p.labels);
  EXPECT_DOUBLE_EQ(loss, p.loss_sum);
  // [4 4] [3] [8 of the 10] [2 of the 10, 2]: the big batch's loss goes with its last part.
  EXPECT_EQ(sizes, (std::vector<int>{8, 3, 8, 4}));
  EXPECT_DOUBLE_EQ(chunks[0].loss_sum(), 0.5 + 1.0);
  EXPECT_DOUBLE_EQ(chunks[2].loss_sum(), 0);
  EXPECT_DOUBLE_EQ(chunks[3].loss_sum(), 2.0 + 2.5);
}

TEST(EvalChunksTest, AnEmptyShareIsOneEmptyLastChunk) {
  const auto chunks = EvalChunks(EvalPredictions(), 8);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_TRUE(chunks[0].last());
  EXPECT_EQ(chunks[0].scores_size(), 0);
  const auto exact = EvalChunks(Predictions({8}), 8);
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_TRUE(exact[0].last());
}

}  // namespace
}  // namespace sift::worker
