// sift bench cluster: a short run of both ways (a real local cluster of coordinator, 1 embedding
// server and 1 worker, and the in-process tables) on a small dataset — exit 0, both samples/s
// positive, the ratio and the phase split printed, --output json parses with the documented
// fields; bad flags exit 2 before anything starts. Numbers are not asserted (a benchmark).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

class BenchClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    dataset_ = dir_->Sub("data");
    const testing::RunResult r =
        testing::RunSift({"data", "gen", "--preset", "tiny", "--seed", "1", "--users", "200",
                          "--items", "2000", "--categories", "40", "--out", dataset_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // A run of 20 warm-up + 2 steps of batch 128 with 1 thread.
  static std::vector<std::string> ShortRun(std::vector<std::string> extra) {
    std::vector<std::string> args = {"bench",        "cluster", "--dataset", dataset_,
                                     "--batch-size", "128",     "--steps",   "2",
                                     "--threads",    "1",       "--repeats", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  static testing::TempDir* dir_;
  static std::string dataset_;
};

testing::TempDir* BenchClusterTest::dir_ = nullptr;
std::string BenchClusterTest::dataset_;

TEST_F(BenchClusterTest, TextRunPrintsBothWaysTheRatioAndThePhases) {
  const testing::RunResult r = testing::RunSift(ShortRun({}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("command:    "));
  EXPECT_THAT(r.out, HasSubstr("round 1/1, k=1: in-process "));
  EXPECT_THAT(r.out, HasSubstr("round 1/1, k=1: cluster "));
  EXPECT_THAT(r.out, HasSubstr("staleness k=1"));
  EXPECT_THAT(r.out, HasSubstr("(target >= 0.8: "));
  for (const char* phase : {"load", "dedup", "pull", "forward", "backward", "push", "step wall"}) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("\n  ", phase, " "))) << phase;
  }
}

TEST_F(BenchClusterTest, JsonRunHasBothWaysPerRoundAndTheMedianRatio) {
  const std::string file = dir_->Sub("bench.json");
  const testing::RunResult r =
      testing::RunSift(ShortRun({"--staleness", "1,0", "--output", "json", "--json", file}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "stdout is not JSON: " << r.out;
  EXPECT_EQ(j, nlohmann::json::parse(testing::ReadAll(file), nullptr, false));
  EXPECT_EQ(j["benchmark"], "cluster");
  EXPECT_EQ(j["batch_size"], 128);
  ASSERT_EQ(j["series"].size(), 2u);
  EXPECT_EQ(j["series"][0]["staleness"], 1);
  EXPECT_EQ(j["series"][1]["staleness"], 0);
  for (const nlohmann::json& s : j["series"]) {
    ASSERT_EQ(s["rounds"].size(), 1u);
    const nlohmann::json& round = s["rounds"][0];
    for (const char* way : {"in_process", "cluster"}) {
      const nlohmann::json& run = round[way];
      EXPECT_GT(run["samples_per_s"].get<double>(), 0) << way;
      EXPECT_EQ(run["steps"], 22) << way;  // 20 warm-up + 2 measured
      EXPECT_GT(run["phases_s"]["forward"].get<double>(), 0) << way;
      EXPECT_GT(run["phases_s"]["backward"].get<double>(), 0) << way;
      EXPECT_GT(run["phases_s"]["pull"].get<double>(), 0) << way;
    }
    const double ratio = round["ratio"].get<double>();
    EXPECT_DOUBLE_EQ(ratio, round["cluster"]["samples_per_s"].get<double>() /
                                round["in_process"]["samples_per_s"].get<double>());
    EXPECT_DOUBLE_EQ(s["median_ratio"].get<double>(), ratio);  // one round
    EXPECT_EQ(s["target_met"].get<bool>(), ratio >= 0.8);
  }
  // k = 0 is synchronous and deterministic: both ways train the same model.
  EXPECT_EQ(j["series"][1]["rounds"][0]["in_process"]["test_auc"],
            j["series"][1]["rounds"][0]["cluster"]["test_auc"]);
  // The progress lines went to stderr.
  EXPECT_THAT(r.err, HasSubstr("k=0: cluster "));
}

// --compare-sparse-update: 2 workers and 2 servers, the step job and the per_rank job in every
// round, their ratio, and the Push bytes per step the servers received for each.
TEST_F(BenchClusterTest, SparseUpdateComparisonHasBothJobsTheRatioAndPushBytes) {
  const testing::RunResult r =
      testing::RunSift(ShortRun({"--staleness", "0", "--workers", "2", "--servers", "2",
                                 "--compare-sparse-update", "--output", "json"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "stdout is not JSON: " << r.out;
  EXPECT_EQ(j["workers"], 2);
  EXPECT_EQ(j["servers"], 2);
  const nlohmann::json& s = j["series"][0];
  const nlohmann::json& round = s["rounds"][0];
  for (const char* way : {"cluster", "cluster_per_rank"}) {
    EXPECT_EQ(round[way]["steps"], 22) << way;
    EXPECT_GT(round[way]["samples_per_s"].get<double>(), 0) << way;
    // Keys (8 B) and 16 fp32 gradients per row of every table, for 64 samples per rank.
    EXPECT_GT(round[way]["push_bytes_per_step"].get<double>(), 1000) << way;
  }
  EXPECT_DOUBLE_EQ(round["sparse_ratio"].get<double>(),
                   round["cluster"]["samples_per_s"].get<double>() /
                       round["cluster_per_rank"]["samples_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(s["median_sparse_ratio"].get<double>(), round["sparse_ratio"].get<double>());
  EXPECT_THAT(r.err, HasSubstr("k=0: per_rank "));
}

TEST_F(BenchClusterTest, TooFewBatchesPerEpochIsAClearError) {
  const testing::RunResult r =
      testing::RunSift({"bench", "cluster", "--dataset", dataset_, "--batch-size", "2048",
                        "--steps", "100", "--threads", "1", "--repeats", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("fewer than the 20 warm-up + 100 measured steps"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("starting the cluster")));  // found before
}

TEST_F(BenchClusterTest, BadFlagsExit2) {
  const std::vector<std::vector<std::string>> bad = {
      {"bench", "cluster"},  // --dataset is required
      {"bench", "cluster", "--dataset", dir_->Sub("missing")},
      {"bench", "cluster", "--dataset", dataset_, "--repeats", "0"},
      {"bench", "cluster", "--dataset", dataset_, "--steps", "0"},
      {"bench", "cluster", "--dataset", dataset_, "--staleness", "-1"},
      {"bench", "cluster", "--dataset", dataset_, "--model", "xyz"},
      {"bench", "cluster", "--dataset", dataset_, "--output", "yaml"},
      {"bench", "cluster", "--dataset", dataset_, "--no-such-flag"},
      {"bench", "cluster", "--dataset", dataset_, "--workers", "3"},  // 128 is not a multiple
      {"bench", "cluster", "--dataset", dataset_, "--compare-sparse-update"},  // one worker
  };
  for (const std::vector<std::string>& args : bad) {
    const testing::RunResult r = testing::RunSift(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << "\n" << r.out << r.err;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("starting the cluster"))) << args.back();
  }
}

}  // namespace
}  // namespace sift
