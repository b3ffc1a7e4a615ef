// A job's checkpoint directory (worker/checkpoint.h): step-<N>/ per checkpoint, the newest
// complete ones listed, a job directory resolved to its newest checkpoint, and retention; and
// manifest numbers of the wrong kind.
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "worker/checkpoint.h"

namespace sift::worker {
namespace {

using ::sift::testing::TempDir;
using ::testing::ElementsAre;

// A step directory with a manifest (complete) or without (a failed save's leftovers).
void MakeStep(const std::string& job_dir, int64_t step, bool complete) {
  const std::string dir = CheckpointStepDir(job_dir, step);
  ASSERT_TRUE(MakeDirs(dir).ok());
  sift::testing::WriteAll(JoinPath(dir, complete ? "manifest.json" : "dense-1.bin.tmp.1"), "{}");
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CheckpointDirsTest, StepDirectoriesSortByStep) {
  EXPECT_EQ(CheckpointStepDir("/c/job", 9), "/c/job/step-000000000009");
  EXPECT_EQ(CheckpointStepDir("/c/job/", 1234567890123), "/c/job/step-1234567890123");
  TempDir dir;
  const std::string job = dir.Sub("job");
  EXPECT_TRUE(ListStepCheckpoints(job).empty()) << "a missing job dir has none";
  MakeStep(job, 10, true);
  MakeStep(job, 9, true);
  MakeStep(job, 11, false);
  ASSERT_TRUE(MakeDirs(JoinPath(job, "step-x1")).ok());
  sift::testing::WriteAll(JoinPath(job, "step-x1/manifest.json"), "{}");
  const auto steps = ListStepCheckpoints(job);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0], std::make_pair(int64_t{10}, CheckpointStepDir(job, 10)));
  EXPECT_EQ(steps[1].first, 9);
}

TEST(CheckpointDirsTest, AJobDirectoryResolvesToItsNewestCompleteCheckpoint) {
  TempDir dir;
  const std::string job = dir.Sub("job");
  EXPECT_EQ(ResolveCheckpointDir(job), job) << "nothing there: unchanged";
  MakeStep(job, 3, true);
  MakeStep(job, 7, false);
  EXPECT_EQ(ResolveCheckpointDir(job), CheckpointStepDir(job, 3));
  EXPECT_EQ(ResolveCheckpointDir(CheckpointStepDir(job, 3)), CheckpointStepDir(job, 3));
  // A checkpoint directory of sift train (the manifest in it) is itself.
  const std::string flat = dir.Sub("flat");
  ASSERT_TRUE(MakeDirs(flat).ok());
  sift::testing::WriteAll(JoinPath(flat, "manifest.json"), "{}");
  EXPECT_EQ(ResolveCheckpointDir(flat), flat);
}

TEST(CheckpointDirsTest, PruningKeepsTheNewestCompleteOnesUpToTheCommittedStep) {
  TempDir dir;
  const std::string job = dir.Sub("job");
  for (int64_t s : {2, 4, 6, 8}) MakeStep(job, s, true);
  MakeStep(job, 5, false);  // a failed save
  MakeStep(job, 12, true);  // a later generation's, never committed
  sift::testing::WriteAll(JoinPath(job, "notes.txt"), "kept");
  ASSERT_TRUE(PruneStepCheckpoints(job, /*committed_step=*/8, /*keep=*/2).ok());
  EXPECT_THAT(Entries(job), ElementsAre("notes.txt", "step-000000000006", "step-000000000008",
                                        "step-000000000012"));
  // keep 1: only the committed one (and the later one) stays.
  ASSERT_TRUE(PruneStepCheckpoints(job, 8, 1).ok());
  EXPECT_THAT(Entries(job), ElementsAre("notes.txt", "step-000000000008", "step-000000000012"));
  // A missing job dir is nothing to do.
  EXPECT_TRUE(PruneStepCheckpoints(dir.Sub("none"), 8, 1).ok());
}

TEST(CheckpointDirsTest, PruningSparesTheKeptModelsCheckpointBesideTheNewest) {
  TempDir dir;
  const std::string job = dir.Sub("job");
  for (int64_t s : {2, 4, 6, 8}) MakeStep(job, s, true);
  // keep_best: step 4 holds the best epoch's model; keep 1 still keeps the newest too.
  ASSERT_TRUE(PruneStepCheckpoints(job, /*committed_step=*/8, /*keep=*/1, /*protect=*/4).ok());
  EXPECT_THAT(Entries(job), ElementsAre("step-000000000004", "step-000000000008"));
  // The protected one is not counted in `keep`.
  MakeStep(job, 10, true);
  ASSERT_TRUE(PruneStepCheckpoints(job, 10, 2, 4).ok());
  EXPECT_THAT(Entries(job),
              ElementsAre("step-000000000004", "step-000000000008", "step-000000000010"));
}

// tests/fuzz checkpoint_manifest: `"version": 4.4e34` made nlohmann's get<int> undefined
// behaviour (a float beyond int); every number of a manifest is checked before it is converted.
TEST(CheckpointDirsTest, ManifestNumbersOfTheWrongKindAreDataLoss) {
  TempDir dir;
  const auto load = [&](const std::string& manifest) {
    sift::testing::WriteAll(dir.Sub("manifest.json"), manifest);
    CheckpointState state;
    return LoadCheckpoint(dir.path(), "m", 0, &state, nullptr);
  };
  Status s = load(R"({"format": "sift-checkpoint", "version": 4.44444e34})");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("version 1 manifest"));
  const std::string head =
      R"({"format": "sift-checkpoint", "version": 1, "model": "m", "files": [], )";
  for (const std::string& field :
       {std::string(R"("epochs_done": 1e30, "global_step": 1, "adam_t": 1, "seed": 1})"),
        std::string(R"("epochs_done": 1, "global_step": -1e300, "adam_t": 1, "seed": 1})"),
        std::string(R"("epochs_done": 1, "global_step": 1, "adam_t": "7", "seed": 1})"),
        std::string(R"("epochs_done": 1, "global_step": 1, "adam_t": 1, "seed": -3})"),
        std::string(R"("epochs_done": 1, "global_step": 1, "adam_t": 1, "seed": 1,
                       "loss_scaler": {"scale": 1e300, "good_steps": 0}})")}) {
    SCOPED_TRACE(field);
    s = load(head + field);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(": field '")) << s;
  }
}

}  // namespace
}  // namespace sift::worker
