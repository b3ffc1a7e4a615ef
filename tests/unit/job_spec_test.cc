#include "common/job_spec.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The example of issue 5, with concrete values.
constexpr char kIssueExample[] = R"(dataset: /data/amazon            # a sift dataset
model: {type: dien, embedding_dim: 16}
training: {epochs: 3, batch_size: 131072, lr: 0.01, optimizer: adam, sparse_optimizer: adam,
           staleness: 1, seed: 1, order: shuffled}
cluster: {servers: 2, workers: 2, backend: cpu}
checkpoint: {dir: /ckpt/job1, every_steps: 0, every_epoch: true}
results_dir: /results/job1
)";

// The error message of parsing `yaml` as "job.yaml"; fails the test when it parses.
std::string ErrorOf(const std::string& yaml) {
  StatusOr<JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  EXPECT_FALSE(spec.ok()) << yaml;
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  return std::string(spec.status().message());
}

TEST(JobSpecTest, IssueExampleParses) {
  StatusOr<JobSpec> spec = ParseJobSpec(kIssueExample, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  JobSpec expected;
  expected.dataset = "/data/amazon";
  expected.model.type = "dien";
  expected.checkpoint.dir = "/ckpt/job1";
  expected.results_dir = "/results/job1";
  EXPECT_EQ(*spec, expected);
  EXPECT_EQ(spec->model.type, "dien");
  EXPECT_EQ(spec->training.batch_size, 131072);
  EXPECT_DOUBLE_EQ(spec->training.lr, 0.01);
  EXPECT_EQ(spec->cluster.servers, 2);
  EXPECT_TRUE(spec->checkpoint.every_epoch);
}

TEST(JobSpecTest, DefaultsWithOnlyDataset) {
  StatusOr<JobSpec> spec = ParseJobSpec("dataset: d\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const JobSpec& s = *spec;
  EXPECT_EQ(s.name, "");
  EXPECT_EQ(s.dataset, "d");
  EXPECT_EQ(s.results_dir, "");
  EXPECT_EQ(s.model.type, "sim");
  EXPECT_EQ(s.model.embedding_dim, 16);
  EXPECT_EQ(s.model.long_seq_length, 90);
  EXPECT_EQ(s.model.short_seq_length, 10);
  EXPECT_EQ(s.model.top_k, 50);
  EXPECT_EQ(s.model.gru_hidden, 0);
  EXPECT_THAT(s.model.stage_one_mlp_dims, ElementsAre(200));
  EXPECT_THAT(s.model.stage_two_mlp_dims, ElementsAre(200, 80));
  EXPECT_THAT(s.model.aux_mlp_dims, ElementsAre(100, 50));
  EXPECT_THAT(s.model.attention_mlp_dims, ElementsAre(80, 40));
  EXPECT_EQ(s.training.epochs, 3);
  EXPECT_EQ(s.training.batch_size, 131072);
  EXPECT_EQ(s.training.eval_batch_size, 0);
  EXPECT_DOUBLE_EQ(s.training.lr, 0.01);
  EXPECT_EQ(s.training.optimizer, "adam");
  EXPECT_EQ(s.training.sparse_optimizer, "adam");
  EXPECT_EQ(s.training.staleness, 1);
  EXPECT_EQ(s.training.seed, 1u);
  EXPECT_EQ(s.training.order, "shuffled");
  EXPECT_EQ(s.training.train_eval_samples, 262144);
  EXPECT_EQ(s.training.max_steps_per_epoch, 0);
  EXPECT_EQ(s.cluster.servers, 2);
  EXPECT_EQ(s.cluster.workers, 2);
  EXPECT_EQ(s.cluster.backend, "cpu");
  EXPECT_TRUE(s.cluster.deterministic);
  EXPECT_EQ(s.cluster.threads_per_worker, 0);
  EXPECT_EQ(s.checkpoint.dir, "");
  EXPECT_EQ(s.checkpoint.every_steps, 0);
  EXPECT_TRUE(s.checkpoint.every_epoch);
  JobSpec expected;
  expected.dataset = "d";
  EXPECT_EQ(s, expected);
}

TEST(JobSpecTest, EmptySectionsMeanDefaults) {
  StatusOr<JobSpec> spec =
      ParseJobSpec("dataset: d\nmodel:\ntraining: {}\ncluster:\ncheckpoint:\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  JobSpec expected;
  expected.dataset = "d";
  EXPECT_EQ(*spec, expected);
}

TEST(JobSpecTest, BlockStyleEveryField) {
  const std::string yaml = R"(name: nightly
dataset: /data/x
model:
  type: sim
  embedding_dim: 8
  long_seq_length: 50
  short_seq_length: 5
  top_k: 20
  gru_hidden: 32
  stage_one_mlp_dims: [64]
  stage_two_mlp_dims:
    - 64
    - 32
  aux_mlp_dims: [16, 8]
  attention_mlp_dims: [16]
training:
  epochs: 1
  batch_size: 4096
  eval_batch_size: 8192
  lr: 1e-3
  lr_schedule: cosine
  lr_warmup_steps: 100
  lr_final_fraction: 0.05
  weight_decay: 0.05
  sparse_l2: 0.001
  optimizer: adam
  sparse_optimizer: adagrad
  staleness: 0
  seed: 18446744073709551615
  order: reference
  train_eval_samples: 0
  max_steps_per_epoch: 100
cluster:
  servers: 3
  workers: 4
  backend: cuda
  precision: fp16
  deterministic: false
  collectives: nccl
  threads_per_worker: 8
checkpoint:
  dir: /ckpt
  every_steps: 500
  every_epoch: false
results_dir: /res
)";
  StatusOr<JobSpec> spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "nightly");
  EXPECT_EQ(spec->model.gru_hidden, 32);
  EXPECT_THAT(spec->model.stage_two_mlp_dims, ElementsAre(64, 32));
  EXPECT_THAT(spec->model.attention_mlp_dims, ElementsAre(16));
  EXPECT_DOUBLE_EQ(spec->training.lr, 1e-3);
  EXPECT_EQ(spec->training.lr_schedule, "cosine");
  EXPECT_EQ(spec->training.lr_warmup_steps, 100);
  EXPECT_DOUBLE_EQ(spec->training.lr_final_fraction, 0.05);
  EXPECT_DOUBLE_EQ(spec->training.weight_decay, 0.05);
  EXPECT_DOUBLE_EQ(spec->training.sparse_l2, 0.001);
  EXPECT_EQ(spec->training.sparse_optimizer, "adagrad");
  EXPECT_EQ(spec->training.seed, 18446744073709551615ull);
  EXPECT_EQ(spec->training.order, "reference");
  EXPECT_EQ(spec->training.max_steps_per_epoch, 100);
  EXPECT_EQ(spec->cluster.backend, "cuda");
  EXPECT_EQ(spec->cluster.precision, "fp16");
  EXPECT_FALSE(spec->cluster.deterministic);
  EXPECT_EQ(spec->cluster.collectives, "nccl");
  EXPECT_EQ(spec->cluster.threads_per_worker, 8);
  EXPECT_EQ(spec->checkpoint.every_steps, 500);
  EXPECT_FALSE(spec->checkpoint.every_epoch);
  EXPECT_EQ(spec->results_dir, "/res");
}

void ExpectRoundTrip(const JobSpec& spec) {
  const std::string yaml = JobSpecToYaml(spec);
  StatusOr<JobSpec> back = ParseJobSpec(yaml, "canonical.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, spec) << yaml;
  // Canonical: a second trip gives the same text.
  EXPECT_EQ(JobSpecToYaml(*back), yaml);
}

TEST(JobSpecTest, RoundTripThroughCanonicalYaml) {
  JobSpec defaults;
  defaults.dataset = "d";
  ExpectRoundTrip(defaults);

  StatusOr<JobSpec> example = ParseJobSpec(kIssueExample, "job.yaml");
  ASSERT_TRUE(example.ok()) << example.status();
  ExpectRoundTrip(*example);

  JobSpec odd;
  odd.name = "a \"quoted\": name # not a comment\tafter a tab, caf\xc3\xa9";
  odd.dataset = "/path with spaces/and: colon";
  odd.results_dir = "null";  // a string that YAML would read as null unless quoted
  odd.checkpoint.dir = "123";
  odd.checkpoint.every_steps = 7;
  odd.checkpoint.every_epoch = false;
  odd.checkpoint.resume_from = "/ckpt/job-3";
  odd.checkpoint.keep = 1000;
  odd.tables["item_feat_0"].capacity = int64_t{1} << 48;
  odd.tables["user_feat_1"].capacity = 0;
  odd.model.type = "din";
  odd.model.short_seq_length = 1;
  odd.model.stage_one_mlp_dims = {1, 2, 3, 4};
  odd.training.lr = 0.1 + 0.2;  // needs 17 significant digits
  odd.training.seed = 18446744073709551615ull;
  odd.training.batch_size = JobSpecLimits::kMaxBatchSize;
  odd.training.sparse_optimizer = "sgd";
  odd.training.order = "reference";
  odd.cluster.backend = "cuda";
  odd.cluster.precision = "tf32";
  odd.cluster.deterministic = false;
  odd.cluster.collectives = "gloo";
  odd.cluster.workers = 16;
  ExpectRoundTrip(odd);

  JobSpec tiny_lr = defaults;
  tiny_lr.training.lr = 3e-7;
  ExpectRoundTrip(tiny_lr);
}

TEST(JobSpecTest, CanonicalYamlListsEveryField) {
  JobSpec spec;
  spec.dataset = "d";
  const std::string yaml = JobSpecToYaml(spec);
  for (const char* key : {"name:",
                          "dataset:",
                          "model:",
                          "type: sim",
                          "embedding_dim: 16",
                          "long_seq_length: 90",
                          "short_seq_length: 10",
                          "top_k: 50",
                          "gru_hidden: 0",
                          "stage_one_mlp_dims: [200]",
                          "stage_two_mlp_dims: [200, 80]",
                          "aux_mlp_dims: [100, 50]",
                          "attention_mlp_dims: [80, 40]",
                          "epochs: 3",
                          "batch_size: 131072",
                          "eval_batch_size: 0",
                          "lr: 0.01",
                          "weight_decay: 0",
                          "sparse_l2: 0",
                          "optimizer: adam",
                          "sparse_optimizer: adam",
                          "staleness: 1",
                          "seed: 1",
                          "order: shuffled",
                          "train_eval_samples: 262144",
                          "max_steps_per_epoch: 0",
                          "servers: 2",
                          "workers: 2",
                          "backend: cpu",
                          "precision: auto",
                          "deterministic: true",
                          "collectives: auto",
                          "threads_per_worker: 0",
                          "dir: \"\"",
                          "every_steps: 0",
                          "every_epoch: true",
                          "keep: 3",
                          "resume_from: \"\"",
                          "results_dir: \"\""}) {
    EXPECT_THAT(yaml, HasSubstr(key)) << yaml;
  }
}

TEST(JobSpecTest, ModelSelectionFieldsRoundTripAndNeedAValidationSplit) {
  auto spec = ParseJobSpec(
      "dataset: d\ntraining:\n  validation_fraction: 0.05\n  keep_best: validation_auc\n"
      "  patience: 2\n",
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training.validation_fraction, 0.05);
  EXPECT_EQ(spec->training.keep_best, "validation_auc");
  EXPECT_EQ(spec->training.patience, 2);
  auto again = ParseJobSpec(JobSpecToYaml(*spec), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->training, spec->training);
  // Unused, they are left out of the canonical text (sift report's run keys stay as they were).
  auto plain = ParseJobSpec("dataset: d\n", "job.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(JobSpecToYaml(*plain), Not(HasSubstr("validation_fraction")));
  EXPECT_THAT(JobSpecToYaml(*plain), Not(HasSubstr("patience")));
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  keep_best: validation_auc\n"),
            "job.yaml:3: training.keep_best: chooses by the validation AUC: it needs "
            "training.validation_fraction > 0");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  epochs: 4\n  patience: 1\n"),
            "job.yaml:4: training.patience: chooses by the validation AUC: it needs "
            "training.validation_fraction > 0");
  EXPECT_THAT(ErrorOf("dataset: d\ntraining:\n  validation_fraction: 0.6\n"),
              StartsWith("job.yaml:3: training.validation_fraction: must be a number in [0, 0.5]"));
  EXPECT_THAT(ErrorOf("dataset: d\ntraining:\n  keep_best: best\n"),
              StartsWith("job.yaml:3: training.keep_best: "));
}

TEST(JobSpecTest, ARecipeFillsTheFieldsTheSpecLeavesOut) {
  auto sift = ParseJobSpec("dataset: d\ntraining:\n  recipe: sift\n", "job.yaml");
  ASSERT_TRUE(sift.ok()) << sift.status();
  const Recipe r = *FindRecipe("sift");
  EXPECT_EQ(sift->training.sparse_l2, r.sparse_l2);
  EXPECT_EQ(sift->model.dropout, r.dropout);
  EXPECT_EQ(sift->training.validation_fraction, r.validation_fraction);
  EXPECT_EQ(sift->training.keep_best, r.keep_best);
  EXPECT_EQ(sift->training.patience, r.patience);
  EXPECT_EQ(sift->training.lr, r.lr);
  EXPECT_EQ(sift->training.lr_schedule, r.lr_schedule);
  EXPECT_EQ(r.lr_schedule, "cosine");
  // Explicit fields win; no validation split means nothing to choose by.
  auto mixed = ParseJobSpec(
      "dataset: d\nmodel: {dropout: 0}\ntraining:\n  recipe: sift\n  sparse_l2: 0.5\n"
      "  validation_fraction: 0\n  lr_schedule: constant\n",
      "job.yaml");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->training.sparse_l2, 0.5);
  EXPECT_EQ(mixed->model.dropout, 0);
  EXPECT_EQ(mixed->training.keep_best, "last");
  EXPECT_EQ(mixed->training.patience, 0);
  EXPECT_EQ(mixed->training.lr_schedule, "constant");  // explicit, and kept by the text below
  EXPECT_EQ(mixed->training.lr, r.lr);
  // The canonical text parses back to the same spec, whatever the recipe.
  for (const auto* spec : {&*sift, &*mixed}) {
    auto again = ParseJobSpec(JobSpecToYaml(*spec), "again.yaml");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->training, spec->training);
    EXPECT_EQ(again->model, spec->model);
  }
  // The reference recipe is today's defaults.
  auto reference = ParseJobSpec("dataset: d\ntraining: {recipe: reference}\n", "job.yaml");
  ASSERT_TRUE(reference.ok());
  EXPECT_EQ(reference->training.sparse_l2, 0);
  EXPECT_EQ(reference->model.dropout, 0);
  EXPECT_EQ(reference->training.validation_fraction, 0);
  EXPECT_THAT(ErrorOf("dataset: d\ntraining: {recipe: best}\n"),
              StartsWith("job.yaml:2: training.recipe: "));
}

TEST(JobSpecTest, UnknownKeysAreErrors) {
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  epochs: 2\n  bach_size: 10\n"),
            "job.yaml:4: training.bach_size: unknown key (did you mean 'batch_size'?); known "
            "keys: epochs, batch_size, eval_batch_size, lr, lr_schedule, lr_warmup_steps, "
            "lr_final_fraction, weight_decay, sparse_l2, optimizer, "
            "sparse_optimizer, "
            "staleness, sparse_update, seed, order, train_eval_samples, max_steps_per_epoch, "
            "recipe, validation_fraction, keep_best, patience");
  EXPECT_THAT(ErrorOf("datset: d\n"),
              StartsWith("job.yaml:1: datset: unknown key (did you mean 'dataset'?); known keys: "
                         "name, dataset, model,"));
  EXPECT_THAT(ErrorOf("dataset: d\nmodel: {type: sim, colour: red}\n"),
              StartsWith("job.yaml:2: model.colour: unknown key; known keys: type,"));
  EXPECT_THAT(ErrorOf("dataset: d\ncluster:\n  workers: 1\n  gpus: 1\n"),
              StartsWith("job.yaml:4: cluster.gpus: unknown key;"));
  EXPECT_THAT(ErrorOf("dataset: d\ncheckpoint:\n  every_epochs: true\n"),
              StartsWith("job.yaml:3: checkpoint.every_epochs: unknown key (did you mean "
                         "'every_epoch'?)"));
}

TEST(JobSpecTest, WrongTypes) {
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  epochs: 2\n  batch_size: abc\n"),
            "job.yaml:4: training.batch_size: must be an integer in [1, 16777216], got 'abc'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  epochs: 2.5\n"),
            "job.yaml:3: training.epochs: must be an integer in [1, 100000], got '2.5'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  lr: fast\n"),
            "job.yaml:3: training.lr: must be a number in [1e-30, 1000], got 'fast'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  seed: [1]\n"),
            "job.yaml:3: training.seed: must be an integer in [0, 18446744073709551615], got a "
            "list");
  EXPECT_EQ(ErrorOf("dataset: d\ncheckpoint:\n  every_epoch: maybe\n"),
            "job.yaml:3: checkpoint.every_epoch: must be true or false, got 'maybe'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  backend: cuda\n  deterministic: sometimes\n"),
            "job.yaml:4: cluster.deterministic: must be true or false, got 'sometimes'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster: {deterministic: 0}\n"),
            "job.yaml:2: cluster.deterministic: must be true or false, got '0'");
  EXPECT_EQ(ErrorOf("dataset: [a, b]\n"),
            "job.yaml:1: dataset: must be a string (\"\" for none), got a list");
  EXPECT_EQ(ErrorOf("dataset: d\nresults_dir:\n"),
            "job.yaml:2: results_dir: must be a string (\"\" for none), got an empty value");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel: sim\n"),
            "job.yaml:2: model: expected a mapping with keys type, embedding_dim, "
            "long_seq_length, short_seq_length, top_k, gsu, time_embedding, gsu_time, gru_hidden, "
            "stage_one_mlp_dims, "
            "stage_two_mlp_dims, aux_mlp_dims, attention_mlp_dims, dropout, got 'sim'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  epochs:\n"),
            "job.yaml:3: training.epochs: must be an integer in [1, 100000], got an empty "
            "value");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  servers: {n: 1}\n"),
            "job.yaml:3: cluster.servers: must be an integer in [1, 4096], got a mapping");
}

TEST(JobSpecTest, OutOfRangeValues) {
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {epochs: 0}\n"),
            "job.yaml:2: training.epochs: must be an integer in [1, 100000], got '0'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {batch_size: -5}\n"),
            "job.yaml:2: training.batch_size: must be an integer in [1, 16777216], got '-5'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: 0}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got '0'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: -0.1}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got '-0.1'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: inf}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got 'inf'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: nan}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got 'nan'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: 0x10}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got '0x10'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: 1e999}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got '1e999'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {staleness: -1}\n"),
            "job.yaml:2: training.staleness: must be an integer in [0, 1024], got '-1'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {seed: -1}\n"),
            "job.yaml:2: training.seed: must be an integer in [0, 18446744073709551615], got "
            "'-1'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster: {servers: 0}\n"),
            "job.yaml:2: cluster.servers: must be an integer in [1, 4096], got '0'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  workers: 0\n"),
            "job.yaml:3: cluster.workers: must be an integer in [1, 4096], got '0'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  workers: 99999999999\n"),
            "job.yaml:3: cluster.workers: must be an integer in [1, 4096], got "
            "'99999999999'");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  embedding_dim: 0\n"),
            "job.yaml:3: model.embedding_dim: must be an integer in [1, 65536], got '0'");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  gru_hidden: -1\n"),
            "job.yaml:3: model.gru_hidden: must be an integer in [0, 65536], got '-1'");
  EXPECT_EQ(
      ErrorOf("dataset: d\ncheckpoint:\n  dir: /c\n  every_steps: -3\n"),
      "job.yaml:4: checkpoint.every_steps: must be an integer in [0, 1099511627776], got '-3'");
}

// Issue 16: every numeric field has a range a cluster can run, named by the spec's field
// (rows 9, 10, 12: train_eval_samples 2^63-1 trained to a NaN loss; 100,000 servers blocked the
// queue; lr 1e300 failed on the worker naming --lr).
TEST(JobSpecTest, RangesAClusterCanRun) {
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {train_eval_samples: 9223372036854775807}\n"),
            "job.yaml:2: training.train_eval_samples: must be an integer in [0, 1099511627776], "
            "got '9223372036854775807'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster: {servers: 100000, workers: 100000}\n"),
            "job.yaml:2: cluster.servers: must be an integer in [1, 4096], got '100000'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: 1e300}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got '1e300'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr: 1e-300}\n"),
            "job.yaml:2: training.lr: must be a number in [1e-30, 1000], got '1e-300'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster: {threads_per_worker: 100000}\n"),
            "job.yaml:2: cluster.threads_per_worker: must be an integer in [0, 4096], got "
            "'100000'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {batch_size: 16777217}\n"),
            "job.yaml:2: training.batch_size: must be an integer in [1, 16777216], got "
            "'16777217'");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel: {long_seq_length: 1048577}\n"),
            "job.yaml:2: model.long_seq_length: must be an integer in [1, 1048576], got "
            "'1048577'");
  EXPECT_EQ(ErrorOf("dataset: d\ncheckpoint: {keep: 0}\n"),
            "job.yaml:2: checkpoint.keep: must be an integer in [1, 1000], got '0'");
  // The bounds themselves are accepted.
  StatusOr<JobSpec> edge = ParseJobSpec(
      "dataset: d\ntraining: {train_eval_samples: 1099511627776, lr: 1000, epochs: 100000}\n"
      "cluster: {servers: 4096, workers: 4096}\n",
      "job.yaml");
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ(edge->training.train_eval_samples, int64_t{1} << 40);
}

// tables.<name>.capacity (issue 16: 10 million new ids took a server from 205 MB to 2.4 GB).
TEST(JobSpecTest, TableCapacities) {
  StatusOr<JobSpec> spec = ParseJobSpec(
      "dataset: d\ntables:\n  item_feat_0: {capacity: 1000000}\n  user_feat_0:\n    capacity: 7\n",
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->tables.size(), 2u);
  EXPECT_EQ(spec->tables.at("item_feat_0").capacity, 1000000);
  EXPECT_EQ(spec->tables.at("user_feat_0").capacity, 7);
  EXPECT_TRUE(ParseJobSpec("dataset: d\ntables:\n", "job.yaml")->tables.empty());
  EXPECT_EQ(ErrorOf("dataset: d\ntables:\n  item_feat_0: {capacity: -1}\n"),
            "job.yaml:3: tables.item_feat_0.capacity: must be an integer in [0, 281474976710656], "
            "got '-1'");
  EXPECT_EQ(ErrorOf("dataset: d\ntables:\n  item_feat_0: {capacty: 5}\n"),
            "job.yaml:3: tables.item_feat_0.capacty: unknown key (did you mean 'capacity'?); "
            "known keys: capacity");
  EXPECT_EQ(ErrorOf("dataset: d\ntables:\n  item feat: {capacity: 5}\n"),
            "job.yaml:3: tables: table names are [A-Za-z0-9_]{1,64} (user_feat_0, item_feat_1, "
            "...), got 'item feat'");
  EXPECT_EQ(
      ErrorOf("dataset: d\ntables: [1, 2]\n"),
      "job.yaml:2: tables: expected a mapping of table names to {capacity: ROWS}, got a list");
  EXPECT_THAT(ErrorOf("dataset: d\ntables:\n  a: {capacity: 1}\n  a: {capacity: 2}\n"),
              StartsWith("job.yaml:4: tables.a: duplicate key"));
}

TEST(JobSpecTest, TheSecurityBlockIsTheSubmittersAndNeverTravels) {
  StatusOr<JobSpec> spec = ParseJobSpec(
      "dataset: d\nsecurity: {tls_dir: pki/client, token_file: ~/.sift-token}\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->security.tls_dir, "pki/client");
  EXPECT_EQ(spec->security.token_file, "~/.sift-token");
  // Not in the canonical spec the coordinator stores.
  EXPECT_EQ(JobSpecToYaml(*spec).find("security"), std::string::npos);
  EXPECT_THAT(ErrorOf("dataset: d\nsecurity: {tokens_file: t}\n"),
              StartsWith("job.yaml:2: security.tokens_file: unknown key"));
}

// Row 4: a 50 MB job name was stored; names and paths are bounded, UTF-8, printable.
TEST(JobSpecTest, StringsAreBoundedPrintableUtf8) {
  EXPECT_EQ(ErrorOf(absl::StrCat("dataset: d\nname: ", std::string(257, 'a'), "\n")),
            "job.yaml:2: name: must be at most 256 bytes, got 257");
  EXPECT_EQ(ErrorOf(absl::StrCat("dataset: ", std::string(4097, 'p'), "\n")),
            "job.yaml:1: dataset: must be at most 4096 bytes, got 4097");
  EXPECT_EQ(ErrorOf("dataset: d\nname: \"a\\tb\\nc\"\n"),
            "job.yaml:2: name: must be UTF-8 text without control characters; byte 3 is not");
  EXPECT_EQ(ErrorOf("dataset: \"d\\0\"\n"),
            "job.yaml:1: dataset: must be UTF-8 text without control characters; byte 1 is not");
  ASSERT_TRUE(ParseJobSpec("dataset: d\nname: \"caf\xc3\xa9 run\"\n", "job.yaml").ok());
  const std::string big(JobSpecLimits::kMaxSpecBytes + 1, '#');
  StatusOr<JobSpec> s = ParseJobSpec(big, "job.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("at most 1048576 are accepted"));
}

// Found by tests/fuzz (findings/job_spec): yaml-cpp's LoadAll never returned on ",", and the
// coordinator's request thread with it. Now a clear error, at once.
TEST(JobSpecTest, AnEndlessDocumentStreamIsAnError) {
  for (const char* text : {",", ",\n,", ", ,\n"}) {
    EXPECT_THAT(ErrorOf(text), HasSubstr("not YAML the parser can read")) << text;
  }
}

TEST(JobSpecTest, MlpDims) {
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  stage_two_mlp_dims: []\n"),
            "job.yaml:3: model.stage_two_mlp_dims: must be a non-empty list of integers >= 1, "
            "e.g. [200, 80]; got a list");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  aux_mlp_dims: 100\n"),
            "job.yaml:3: model.aux_mlp_dims: must be a non-empty list of integers >= 1, e.g. "
            "[200, 80]; got '100'");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  attention_mlp_dims:\n    - 80\n    - 0\n"),
            "job.yaml:5: model.attention_mlp_dims[1]: must be an integer in [1, 65536], got "
            "'0'");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  stage_one_mlp_dims: [200, x]\n"),
            "job.yaml:3: model.stage_one_mlp_dims[1]: must be an integer in [1, 65536], got "
            "'x'");
}

TEST(JobSpecTest, Enumerations) {
  EXPECT_EQ(ErrorOf("dataset: d\nmodel: {type: SIM}\n"),
            "job.yaml:2: model.type: must be one of sim, dien, din; got 'SIM'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  optimizer: sgd\n"),
            "job.yaml:3: training.optimizer: must be one of adam; got 'sgd'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  sparse_optimizer: rmsprop\n"),
            "job.yaml:3: training.sparse_optimizer: must be one of adam, adagrad, sgd; got "
            "'rmsprop'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  order: random\n"),
            "job.yaml:3: training.order: must be one of shuffled, reference; got 'random'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  backend: tpu\n"),
            "job.yaml:3: cluster.backend: must be one of cpu, cuda; got 'tpu'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  backend: cuda\n  precision: fp8\n"),
            "job.yaml:4: cluster.precision: must be one of auto, fp32, tf32, bf16, fp16; got "
            "'fp8'");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  collectives: mpi\n"),
            "job.yaml:3: cluster.collectives: must be one of auto, gloo, nccl; got 'mpi'");
}

TEST(JobSpecTest, MissingOrEmptyDataset) {
  EXPECT_EQ(ErrorOf("model: {type: din}\n"),
            "job.yaml:1: dataset: required key missing (the path of a sift dataset)");
  EXPECT_EQ(ErrorOf("name: x\ndataset: \"\"\n"),
            "job.yaml:2: dataset: must not be empty (a sift dataset path)");
}

TEST(JobSpecTest, CrossFieldChecks) {
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  type: dien\n  short_seq_length: 1\n"),
            "job.yaml:4: model.short_seq_length: must be >= 2 for model type dien, got 1");
  EXPECT_TRUE(ParseJobSpec("dataset: d\nmodel: {type: din, short_seq_length: 1}\n", "j").ok());
  EXPECT_EQ(ErrorOf("dataset: d\ncheckpoint:\n  every_steps: 100\n"),
            "job.yaml:3: checkpoint.every_steps: checkpoints every N steps need checkpoint.dir");
  // tf32, fp16 and NCCL need the cuda backend; the cpu backend takes fp32 and bf16.
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  backend: cpu\n  precision: fp16\n"),
            "job.yaml:4: cluster.precision: 'fp16' needs cluster.backend: cuda (the cpu backend "
            "computes in fp32 or bf16)");
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  backend: cpu\n  precision: tf32\n"),
            "job.yaml:4: cluster.precision: 'tf32' needs cluster.backend: cuda (the cpu backend "
            "computes in fp32 or bf16)");
  EXPECT_TRUE(ParseJobSpec("dataset: d\ncluster: {backend: cpu, precision: fp32}\n", "j").ok());
  EXPECT_TRUE(ParseJobSpec("dataset: d\ncluster: {backend: cpu, precision: bf16}\n", "j").ok());
  EXPECT_TRUE(ParseJobSpec("dataset: d\ncluster: {backend: cuda, precision: bf16}\n", "j").ok());
  // Atomic sums are a cuda option; on cpu `deterministic: false` is accepted and changes nothing
  // (the host backends are always deterministic), so a spec moves between backends unchanged.
  for (const char* backend : {"cpu", "cuda"}) {
    StatusOr<JobSpec> s = ParseJobSpec(
        absl::StrCat("dataset: d\ncluster: {backend: ", backend, ", deterministic: false}\n"), "j");
    ASSERT_TRUE(s.ok()) << backend << ": " << s.status();
    EXPECT_FALSE(s->cluster.deterministic) << backend;
  }
  // Decoupled weight decay scales the dense parameters by 1 - lr x weight_decay: it must stay > 0.
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  lr: 0.5\n  weight_decay: 2\n"),
            "job.yaml:4: training.weight_decay: lr x weight_decay must be < 1 (each step scales "
            "the dense parameters by 1 - lr x weight_decay), got 1");
  EXPECT_TRUE(ParseJobSpec("dataset: d\ntraining: {lr: 0.01, weight_decay: 0.1}\n", "j").ok());
  EXPECT_THAT(ErrorOf("dataset: d\ntraining: {lr_schedule: step}\n"),
              StartsWith("job.yaml:2: training.lr_schedule: "));
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {lr_final_fraction: 2}\n"),
            "job.yaml:2: training.lr_final_fraction: must be a number in [0, 1], got '2'");
  EXPECT_EQ(ErrorOf("dataset: d\ntraining: {weight_decay: -0.1}\n"),
            "job.yaml:2: training.weight_decay: must be a number in [0, 1000], got '-0.1'");
  // Hard search: SIM only, top_k <= the window; emitted only when not the default (report keys).
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  type: din\n  gsu: hard\n"),
            "job.yaml:4: model.gsu: hard is SIM's search unit; model type din has none");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  gsu: hard\n  long_seq_length: 40\n  top_k: 50\n"),
            "job.yaml:5: model.top_k: hard search retrieves at most the long_seq_length = 40 "
            "events searched, got 50");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  type: dien\n  time_embedding: true\n"),
            "job.yaml:4: model.time_embedding: is in SIM's search unit; model type dien has none");
  {
    StatusOr<JobSpec> s = ParseJobSpec("dataset: d\nmodel: {time_embedding: true}\n", "j");
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->model.time_embedding);
    auto back = ParseJobSpec(JobSpecToYaml(*s), "j");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->model, s->model);
  }
  // The GSU's time term: the soft search with the time embedding only; round-trips.
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  gsu_time: true\n"),
            "job.yaml:3: model.gsu_time: is the soft search's time term: it needs model.type "
            "sim, model.gsu soft and model.time_embedding true (got sim, soft, false)");
  EXPECT_EQ(ErrorOf("dataset: d\nmodel:\n  gsu: hard\n  time_embedding: true\n  gsu_time: true\n"),
            "job.yaml:5: model.gsu_time: is the soft search's time term: it needs model.type "
            "sim, model.gsu soft and model.time_embedding true (got sim, hard, true)");
  {
    StatusOr<JobSpec> s =
        ParseJobSpec("dataset: d\nmodel: {time_embedding: true, gsu_time: true}\n", "j");
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->model.gsu_time);
    auto back = ParseJobSpec(JobSpecToYaml(*s), "j");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->model, s->model);
  }
  EXPECT_EQ(ErrorOf("dataset: d\nmodel: {gsu: medium}\n"),
            "job.yaml:2: model.gsu: must be one of soft, hard; got 'medium'");
  {
    StatusOr<JobSpec> s =
        ParseJobSpec("dataset: d\nmodel: {gsu: hard, long_seq_length: 10000}\n", "j");
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->model.gsu, "hard");
    EXPECT_NE(JobSpecToYaml(*s).find("gsu: hard"), std::string::npos);
    auto back = ParseJobSpec(JobSpecToYaml(*s), "j");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->model, s->model);
    JobSpec plain;
    plain.dataset = "d";
    EXPECT_EQ(JobSpecToYaml(plain).find("gsu"), std::string::npos);
  }
  EXPECT_EQ(ErrorOf("dataset: d\ncluster:\n  collectives: nccl\n"),
            "job.yaml:3: cluster.collectives: nccl needs cluster.backend: cuda (NCCL reduces GPU "
            "buffers)");
}

TEST(JobSpecTest, MalformedYamlAndDocumentShape) {
  EXPECT_THAT(ErrorOf("dataset: d\ntraining: {epochs: 3\n"),
              StartsWith("job.yaml:3: YAML syntax error: "));
  EXPECT_THAT(ErrorOf("dataset: d\n  bad indent: [\n"), StartsWith("job.yaml:"));
  EXPECT_EQ(ErrorOf("- dataset: d\n"),
            "job.yaml:1: a job spec must be a mapping (dataset: ..., model: ..., ...), got a list");
  EXPECT_EQ(ErrorOf("just a string\n"),
            "job.yaml:1: a job spec must be a mapping (dataset: ..., model: ..., ...), got 'just "
            "a string'");
  EXPECT_EQ(ErrorOf(""),
            "job.yaml:1: the job spec is empty; expected a mapping with at least 'dataset'");
  EXPECT_EQ(ErrorOf("# only a comment\n"),
            "job.yaml:1: the job spec is empty; expected a mapping with at least 'dataset'");
  EXPECT_EQ(ErrorOf("dataset: d\n---\ndataset: e\n"),
            "job.yaml:3: more than one YAML document ('---'); a job spec is one mapping");
  EXPECT_EQ(ErrorOf("dataset: d\n[a]: 1\n"), "job.yaml:2: keys must be names, got a list");
}

TEST(JobSpecTest, DuplicateKeys) {
  EXPECT_EQ(ErrorOf("dataset: d\ntraining:\n  epochs: 2\n  lr: 0.1\n  epochs: 5\n"),
            "job.yaml:5: training.epochs: duplicate key (first given on line 3)");
  EXPECT_EQ(ErrorOf("dataset: d\nresults_dir: a\ndataset: e\n"),
            "job.yaml:3: dataset: duplicate key (first given on line 1)");
}

TEST(JobSpecTest, ReadFromDisk) {
  testing::TempDir dir;
  const std::string path = dir.Sub("job.yaml");
  testing::WriteAll(path, kIssueExample);
  StatusOr<JobSpec> spec = ReadJobSpec(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dataset, "/data/amazon");
  EXPECT_EQ(spec->model.type, "dien");

  const std::string bad = dir.Sub("bad.yaml");
  testing::WriteAll(bad, "dataset: d\ncluster:\n  workers: none\n");
  StatusOr<JobSpec> bad_spec = ReadJobSpec(bad);
  ASSERT_FALSE(bad_spec.ok());
  EXPECT_EQ(bad_spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_spec.status().message()),
              StartsWith(bad + ":3: cluster.workers: must be an integer"));

  const std::string missing = dir.Sub("nope.yaml");
  StatusOr<JobSpec> none = ReadJobSpec(missing);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(missing));
}

}  // namespace
}  // namespace sift
