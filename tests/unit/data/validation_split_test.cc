// HeldOutSamples against a naive re-derivation of its rule (common/data/validation_split.h): the
// validation split of a timeline is the last training pair of each validation user that owns at
// least two; training keeps everything else in base order; rows are the base's rows; the carve is
// a pure function of (fraction, seed); stored samples carve whole users; bad fractions are refused.
#include "common/data/validation_split.h"

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/loader.h"
#include "gtest/gtest.h"
#include "tests/unit/data/dataset_fixture.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using sift::testing::RandomTimeline;
using sift::testing::TempDir;

class ValidationSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = RandomTimeline(/*seed=*/3, /*users=*/300, /*items=*/500, /*cats=*/11, /*min_len=*/2,
                        /*max_len=*/40);
    ASSERT_TRUE(
        WriteTimelineDataset(dir_.path(), t_, {300}, {500, 11}, /*negative_seed=*/9, YAML::Node())
            .ok());
    auto ds = Dataset::Open(dir_.path());
    ASSERT_TRUE(ds.ok()) << ds.status();
    ds_ = std::move(ds).value();
  }
  const SampleSource* base() const { return &ds_->samples(); }

  TimelineData t_;
  TempDir dir_;
  std::unique_ptr<Dataset> ds_;
};

// Every array of row 0 of a one-row batch, for comparing two materialisations.
std::vector<int64_t> Row(const SampleSource& s, Split split, int64_t index) {
  Batch b;
  b.Allocate(1, s.num_user_features(), s.num_item_features(), HistoryOptions{12, 4, true});
  s.Materialize(split, index, 0, &b);
  b.size = 1;
  return {static_cast<int64_t>(BatchChecksum(b)), b.index[0], static_cast<int64_t>(b.label[0])};
}

TEST_F(ValidationSplitTest, TheLastTrainingPairOfEachValidationUserIsHeldOut) {
  const double f = 0.25;
  auto h = HeldOutSamples::Create(base(), f, /*seed=*/7);
  ASSERT_TRUE(h.ok()) << h.status();
  // The naive rule: walk the users in order; a user of length L owns L - 2 pairs.
  std::vector<int64_t> want_validation;
  int64_t pair = 0, users = 0;
  for (int64_t u = 0; u < t_.num_users(); ++u) {
    const int64_t pairs = static_cast<int64_t>(t_.user_offsets[u + 1] - t_.user_offsets[u]) - 2;
    if (pairs >= 2 && IsValidationUser(u, f, 7)) {
      want_validation.push_back(2 * (pair + pairs - 1));
      want_validation.push_back(2 * (pair + pairs - 1) + 1);
      ++users;
    }
    pair += pairs;
  }
  const int64_t n = base()->NumSamples(Split::kTrain);
  ASSERT_EQ((*h)->NumSamples(Split::kValidation), static_cast<int64_t>(want_validation.size()));
  EXPECT_EQ((*h)->validation_users(), users);
  // About f of the 300 users (each is one Bernoulli(f) draw; 6 standard deviations either side).
  EXPECT_NEAR(static_cast<double>(users), 300 * f, 6 * std::sqrt(300 * f * (1 - f)));
  EXPECT_EQ((*h)->NumSamples(Split::kTrain), n - static_cast<int64_t>(want_validation.size()));
  EXPECT_EQ((*h)->NumSamples(Split::kTest), base()->NumSamples(Split::kTest));
  std::vector<int64_t> got_validation;
  for (int64_t i = 0; i < (*h)->NumSamples(Split::kValidation); ++i) {
    got_validation.push_back((*h)->BaseIndex(Split::kValidation, i));
  }
  EXPECT_EQ(got_validation, want_validation);
  // Training: the rest of the base's training indices, in base order.
  const std::set<int64_t> held(want_validation.begin(), want_validation.end());
  std::vector<int64_t> want_train;
  for (int64_t i = 0; i < n; ++i) {
    if (!held.count(i)) want_train.push_back(i);
  }
  std::vector<int64_t> got_train;
  for (int64_t k = 0; k < (*h)->NumSamples(Split::kTrain); ++k) {
    got_train.push_back((*h)->BaseIndex(Split::kTrain, k));
  }
  EXPECT_EQ(got_train, want_train);
  // Rows and users are the base's: the same history, target, negatives, label and index.
  for (int64_t i = 0; i < (*h)->NumSamples(Split::kValidation); i += 3) {
    EXPECT_EQ(Row(**h, Split::kValidation, i), Row(*base(), Split::kTrain, want_validation[i]));
    EXPECT_EQ((*h)->UserOf(Split::kValidation, i),
              base()->UserOf(Split::kTrain, want_validation[i]));
  }
  for (int64_t k = 0; k < (*h)->NumSamples(Split::kTrain); k += 17) {
    EXPECT_EQ(Row(**h, Split::kTrain, k), Row(*base(), Split::kTrain, want_train[k]));
  }
  for (int64_t k = 0; k < (*h)->NumSamples(Split::kTest); k += 29) {
    EXPECT_EQ(Row(**h, Split::kTest, k), Row(*base(), Split::kTest, k));
  }
  // The dataset's own sources have no validation split.
  EXPECT_EQ(base()->NumSamples(Split::kValidation), 0);
}

TEST_F(ValidationSplitTest, TheCarveIsAFunctionOfFractionAndSeedAndLoadsLikeAnySplit) {
  auto a = HeldOutSamples::Create(base(), 0.2, 1);
  auto b = HeldOutSamples::Create(base(), 0.2, 1);
  auto c = HeldOutSamples::Create(base(), 0.2, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<int64_t> va, vb, vc;
  for (int64_t i = 0; i < (*a)->NumSamples(Split::kValidation); ++i) {
    va.push_back((*a)->BaseIndex(Split::kValidation, i));
  }
  for (int64_t i = 0; i < (*b)->NumSamples(Split::kValidation); ++i) {
    vb.push_back((*b)->BaseIndex(Split::kValidation, i));
  }
  for (int64_t i = 0; i < (*c)->NumSamples(Split::kValidation); ++i) {
    vc.push_back((*c)->BaseIndex(Split::kValidation, i));
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  // A loader reads the validation split (evaluation: all of it over the ranks, partial batches).
  int64_t rows = 0;
  for (int rank = 0; rank < 2; ++rank) {
    BatchLoaderOptions lo;
    lo.split = Split::kValidation;
    lo.batch_size = 16;
    lo.history = HistoryOptions{12, 4, true};
    lo.order = SampleOrder::kReference;
    lo.rank = rank;
    lo.world = 2;
    lo.drop_remainder = false;
    lo.threads = 1;
    auto loader = BatchLoader::Create(a->get(), lo);
    ASSERT_TRUE(loader.ok()) << loader.status();
    (*loader)->StartEpoch(0);
    while (const Batch* batch = (*loader)->Next()) rows += batch->size;
  }
  EXPECT_EQ(rows, static_cast<int64_t>(va.size()));
  EXPECT_EQ(*ParseSplit("validation"), Split::kValidation);
  EXPECT_STREQ(SplitName(Split::kValidation), "validation");
}

TEST_F(ValidationSplitTest, BadFractionsAreRefusedNamingTheField) {
  for (double f : {0.0, -0.1, 0.51, std::nan("")}) {
    auto h = HeldOutSamples::Create(base(), f, 1);
    ASSERT_FALSE(h.ok()) << f;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(h.status().message()).find("validation_fraction"), std::string::npos);
  }
  // A dataset whose users own fewer than two pairs each carves nothing.
  TempDir d;
  TimelineData t = RandomTimeline(1, 5, 50, 3, /*min_len=*/3, /*max_len=*/3);
  ASSERT_TRUE(WriteTimelineDataset(d.path(), t, {5}, {50, 3}, 1, YAML::Node()).ok());
  auto ds = Dataset::Open(d.path());
  ASSERT_TRUE(ds.ok());
  auto h = HeldOutSamples::Create(&(*ds)->samples(), 0.5, 1);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(std::string(h.status().message()).find("must both be non-empty"), std::string::npos);
}

TEST(ValidationSplitExplicit, StoredSamplesCarveWholeUsers) {
  TempDir d;
  SampleRecordShape shape{/*history=*/2, /*item_features=*/1, /*user_features=*/1};
  SamplesFileWriter w;
  ASSERT_TRUE(w.Begin(d.Sub(kTrainSamplesFile), shape).ok());
  // label, hist_len, user, target[1], pos[1][2], neg[1][2]; 40 users x 3 samples, user-major.
  for (int32_t u = 1; u <= 40; ++u) {
    for (int32_t k = 0; k < 3; ++k) {
      std::vector<int32_t> rec = {k % 2, 1, u, 1 + k, 0, 2, 0, 3};
      ASSERT_EQ(static_cast<int64_t>(rec.size()), shape.record_ints());
      ASSERT_TRUE(w.Add(rec.data()).ok());
    }
  }
  ASSERT_TRUE(w.Finish().ok());
  ASSERT_TRUE(w.Begin(d.Sub(kTestSamplesFile), shape).ok());
  const std::vector<int32_t> test_rec = {1, 1, 1, 1, 0, 2, 0, 3};
  ASSERT_TRUE(w.Add(test_rec.data()).ok());
  ASSERT_TRUE(w.Finish().ok());
  FeatureSpec spec = FeatureSpec::Reference({41}, {10}, 2);
  spec.source_spec["train"] = {SourceChunk{kSourceSamples, {}, {kTrainSamplesFile}}};
  spec.source_spec["test"] = {SourceChunk{kSourceSamples, {}, {kTestSamplesFile}}};
  ASSERT_TRUE(WriteSamplesDatasetSpec(d.path(), spec, YAML::Node()).ok());
  auto ds = Dataset::Open(d.path(), true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto h = HeldOutSamples::Create(&(*ds)->samples(), 0.3, 5);
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<int64_t> want;
  int64_t users = 0;
  for (int64_t u = 0; u < 40; ++u) {
    if (!IsValidationUser(u, 0.3, 5)) continue;
    ++users;
    for (int64_t k = 0; k < 3; ++k) want.push_back(3 * u + k);
  }
  std::vector<int64_t> got;
  for (int64_t i = 0; i < (*h)->NumSamples(Split::kValidation); ++i) {
    got.push_back((*h)->BaseIndex(Split::kValidation, i));
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ((*h)->validation_users(), users);
  EXPECT_EQ((*h)->NumSamples(Split::kTrain), 120 - static_cast<int64_t>(want.size()));
}

}  // namespace
}  // namespace sift::data
