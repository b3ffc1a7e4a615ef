// ParseReportMatrix: the cross product, runs, the base job, and every bad input named by its
// line and key before any run starts.
#include "common/report_matrix.h"

#include <string>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

StatusOr<ReportMatrix> Parse(const std::string& text) {
  return ParseReportMatrix(text, "report.yaml", "/base");
}

std::string ErrorOf(const std::string& text) {
  StatusOr<ReportMatrix> m = Parse(text);
  EXPECT_FALSE(m.ok()) << text;
  return m.ok() ? "" : std::string(m.status().message());
}

TEST(ReportMatrixTest, CrossProductInAxisOrderWithTheBaseJob) {
  StatusOr<ReportMatrix> m = Parse(
      "name: example\n"
      "dataset: data/tiny\n"
      "job:\n"
      "  training: {epochs: 2, batch_size: 512, staleness: 0}\n"
      "  model: {embedding_dim: 8}\n"
      "matrix:\n"
      "  precision: [fp32, bf16]\n"
      "  model: [sim, din]\n"
      "  workers: [1, 2]\n"
      "runs: {seeds: [3, 5]}\n"
      "benchmarks:\n"
      "  train: {steps: 9}\n"
      "  inference: {batch_sizes: [64, 128], steps: 7}\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "example");
  // kReportAxes order, not the file's: model, precision, workers.
  EXPECT_EQ(m->axes, (std::vector<std::string>{"model", "precision", "workers"}));
  ASSERT_EQ(m->configs.size(), 8u);
  EXPECT_EQ(m->configs[0].label, "model=sim precision=fp32 workers=1");
  EXPECT_EQ(m->configs[1].label, "model=sim precision=fp32 workers=2");
  EXPECT_EQ(m->configs[7].label, "model=din precision=bf16 workers=2");
  const JobSpec& s = m->configs[7].spec;
  EXPECT_EQ(s.model.type, "din");
  EXPECT_EQ(s.cluster.precision, "bf16");
  EXPECT_EQ(s.cluster.workers, 2);
  EXPECT_EQ(s.training.epochs, 2);
  EXPECT_EQ(s.training.batch_size, 512);
  EXPECT_EQ(s.model.embedding_dim, 8);
  EXPECT_EQ(s.dataset, "/base/data/tiny");
  EXPECT_EQ(m->inference_batch_sizes, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(m->inference_steps, 7);
  EXPECT_EQ(m->train_benchmark_steps, 9);
  const std::vector<ReportRun> runs = m->Runs();
  ASSERT_EQ(runs.size(), 16u);
  EXPECT_EQ(runs[0].seed, 3u);
  EXPECT_EQ(runs[1].seed, 5u);
  EXPECT_EQ(runs[1].spec.training.seed, 5u);
  EXPECT_EQ(runs[15].config, 7);
}

TEST(ReportMatrixTest, TheRecipeKnobsAreAxesCheckedByTheJobSpec) {
  StatusOr<ReportMatrix> m =
      Parse("dataset: /d\nmatrix:\n  sparse_l2: [0, 1]\n  weight_decay: [0.1]\n  lr: [0.01]\n");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->configs.size(), 2u);
  EXPECT_EQ(m->configs[1].label, "lr=0.01 sparse_l2=1 weight_decay=0.1");
  EXPECT_DOUBLE_EQ(m->configs[1].spec.training.sparse_l2, 1.0);
  EXPECT_DOUBLE_EQ(m->configs[1].spec.training.weight_decay, 0.1);
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  sparse_l2: [-1]\n"),
              HasSubstr("configuration 1 (sparse_l2=-1): training.sparse_l2"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  lr: [fast]\n"),
              HasSubstr("report.yaml:3: matrix.lr: \"fast\" is not a number"));
  // recipe sets every field it controls; a later axis (dropout) overrides its value.
  StatusOr<ReportMatrix> r =
      Parse("dataset: /d\nmatrix:\n  recipe: [reference, sift]\n  dropout: [0, 0.2]\n");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->configs.size(), 4u);
  EXPECT_EQ(r->configs[3].label, "recipe=sift dropout=0.2");
  EXPECT_EQ(r->configs[3].spec.training.sparse_l2, FindRecipe("sift")->sparse_l2);
  EXPECT_EQ(r->configs[3].spec.training.keep_best, "validation_auc");
  EXPECT_DOUBLE_EQ(r->configs[3].spec.model.dropout, 0.2);
  EXPECT_EQ(r->configs[1].spec.training.sparse_l2, 0);
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  recipe: [best]\n"),
              HasSubstr("report.yaml:3: matrix.recipe: unknown recipe 'best'"));
}

TEST(ReportMatrixTest, RunsForms) {
  StatusOr<ReportMatrix> n = Parse("dataset: /d\nmatrix: {model: [din]}\nruns: 3\n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->seeds, (std::vector<uint64_t>{1, 2, 3}));
  StatusOr<ReportMatrix> r =
      Parse("dataset: /d\nmatrix: {model: [din]}\nruns: {seed: 7, repeat: 3}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<ReportRun> runs = r->Runs();
  ASSERT_EQ(runs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(runs[static_cast<size_t>(i)].seed, 7u);
    EXPECT_EQ(runs[static_cast<size_t>(i)].repeat, i);
  }
  // Repetitions are distinct runs; the same run asked twice has the same key.
  EXPECT_NE(RunCanonicalText(runs[0], "local"), RunCanonicalText(runs[1], "local"));
  EXPECT_EQ(RunCanonicalText(runs[0], "local"), RunCanonicalText(r->Runs()[0], "local"));
  EXPECT_NE(RunCanonicalText(runs[0], "local"), RunCanonicalText(runs[0], "coordinator"));
  // Where a run writes is not what it computes.
  ReportRun moved = runs[0];
  moved.spec.results_dir = "/elsewhere";
  EXPECT_EQ(RunCanonicalText(moved, "local"), RunCanonicalText(runs[0], "local"));
  EXPECT_EQ(ShortHash("a").size(), 16u);
  EXPECT_NE(ShortHash("a"), ShortHash("b"));
}

TEST(ReportMatrixTest, DatasetAxisPresetsAndAJobFileLikeSubmit) {
  StatusOr<ReportMatrix> m =
      Parse("job: {training: {epochs: 1}}\nmatrix:\n  dataset: [preset:tiny, /data/small]\n");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->configs.size(), 2u);
  EXPECT_EQ(DatasetPreset(m->configs[0].spec.dataset), "tiny");
  EXPECT_EQ(m->configs[1].spec.dataset, "/data/small");
  EXPECT_EQ(m->configs[0].spec.training.epochs, 1);
}

TEST(ReportMatrixTest, AJobFileInBlockOrFlowStyleWithPathsRelativeToTheMatrix) {
  testing::TempDir dir;
  testing::WriteAll(dir.Sub("block.yaml"),
                    "training:\n  epochs: 2\ncheckpoint:\n  resume_from: ckpt/step-9\n");
  testing::WriteAll(dir.Sub("flow.yaml"), "{training: {epochs: 4}}\n");
  for (const char* file : {"block.yaml", "flow.yaml"}) {
    StatusOr<ReportMatrix> m =
        ParseReportMatrix(absl::StrCat("dataset: data\njob: ", file, "\nmatrix: {model: [din]}\n"),
                          "report.yaml", dir.path());
    ASSERT_TRUE(m.ok()) << file << ": " << m.status();
    const JobSpec& s = m->configs[0].spec;
    EXPECT_EQ(s.dataset, dir.Sub("data"));
    EXPECT_EQ(s.training.epochs, std::string(file) == "block.yaml" ? 2 : 4);
    if (std::string(file) == "block.yaml") {
      EXPECT_EQ(s.checkpoint.resume_from, dir.Sub("ckpt/step-9"));
    }
  }
  testing::WriteAll(dir.Sub("bad.yaml"), "training:\n  epochs: 0\n");
  StatusOr<ReportMatrix> bad = ParseReportMatrix(
      "dataset: d\njob: bad.yaml\nmatrix: {model: [din]}\n", "report.yaml", dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(dir.Sub("bad.yaml") + ":2: training.epochs"));
}

TEST(ReportMatrixTest, BadInputIsNamedByLineAndKey) {
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix: {model: [sim]}\n[a]: 1\n"),
              HasSubstr("report.yaml:3: ?: unknown key"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix: {model: [sim]}\nrunz: 3\n"),
              HasSubstr("report.yaml:3: runz: unknown key"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  model: [sim]\n  modle: [din]\n"),
              HasSubstr("report.yaml:4: matrix.modle: unknown axis"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix: {}\n"), HasSubstr("matrix: empty"));
  EXPECT_THAT(ErrorOf("dataset: /d\n"), HasSubstr("matrix: missing"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  model: []\n"),
              HasSubstr("report.yaml:3: matrix.model: expected a non-empty list"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  workers: [1, two]\n"),
              HasSubstr("report.yaml:3: matrix.workers: \"two\" is not an integer"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  model: [sim, sim]\n"), HasSubstr("listed twice"));
  // A value the job spec refuses names the configuration (the row).
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  model: [sim, dinn]\n"),
              HasSubstr("configuration 2 (model=dinn): model.type"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix:\n  precision: [fp32, tf32]\n"),
              HasSubstr("configuration 2 (precision=tf32)"));
  // The cluster check: the global batch splits evenly over the workers.
  EXPECT_THAT(
      ErrorOf("dataset: /d\njob: {training: {batch_size: 5}}\nmatrix:\n  workers: [1, 2]\n"),
      HasSubstr("configuration 2 (workers=2)"));
  // The base job's own errors keep report.yaml's line numbers.
  EXPECT_THAT(ErrorOf("dataset: /d\njob:\n  training:\n    lr: -1\nmatrix: {model: [sim]}\n"),
              HasSubstr("report.yaml:4: training.lr"));
  EXPECT_THAT(ErrorOf("dataset: /d\njob: {training: {epochz: 1}}\nmatrix: {model: [sim]}\n"),
              HasSubstr("report.yaml:2: training.epochz"));
  EXPECT_THAT(ErrorOf("matrix: {model: [sim]}\n"), HasSubstr("no dataset"));
  EXPECT_THAT(ErrorOf("dataset: preset:huge\nmatrix: {model: [sim]}\n"),
              HasSubstr("unknown preset \"huge\""));
  EXPECT_THAT(ErrorOf("dataset: /d\njob: {dataset: /e}\nmatrix: {model: [sim]}\n"),
              HasSubstr("given twice"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix: {model: [sim]}\nruns: {seeds: [1, 1]}\n"),
              HasSubstr("runs.seeds: seed 1 is listed twice"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix: {model: [sim]}\nbenchmarks: {inference: {steps: 3}}\n"),
              HasSubstr("benchmarks.inference.batch_sizes: missing"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix: {model: [sim]}\nbenchmarks:\n  serve: {}\n"),
              HasSubstr("report.yaml:4: benchmarks.serve: unknown key"));
  EXPECT_THAT(ErrorOf("dataset: /d\nmatrix: {model: [sim]\n"), HasSubstr("YAML syntax error"));
}

}  // namespace
}  // namespace sift
