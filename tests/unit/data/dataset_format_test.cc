// The on-disk formats: round trips, and every kind of corrupt, truncated or mismatched input
// gives an error naming the file and the problem (never a crash, never a silent wrong answer).
#include <cstring>
#include <filesystem>
#include <string>

#include "common/crc32c.h"
#include "common/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/data/dataset_fixture.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using sift::testing::RandomTimeline;
using sift::testing::ReadAll;
using sift::testing::TempDir;
using sift::testing::WriteAll;
using ::testing::AllOf;
using ::testing::HasSubstr;

class DatasetFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    timeline_ = RandomTimeline(11, 25, 300, 7, 2, 40);
    YAML::Node meta;
    meta["note"] = "fixture";
    ASSERT_TRUE(WriteTimelineDataset(dir_.path(), timeline_, {25}, {300, 7}, 5, meta).ok());
  }
  std::string Path(const char* name) const { return dir_.Sub(name); }
  // Rewrites a file after applying `edit` to its bytes.
  template <typename Fn>
  void Edit(const char* name, Fn edit) {
    std::string bytes = ReadAll(Path(name));
    edit(bytes);
    WriteAll(Path(name), bytes);
  }
  std::string OpenError(bool verify = false) {
    auto ds = Dataset::Open(dir_.path(), verify);
    EXPECT_FALSE(ds.ok());
    return ds.ok() ? "" : std::string(ds.status().message());
  }

  TempDir dir_;
  TimelineData timeline_;
};

TEST_F(DatasetFormatTest, RoundTrip) {
  auto ds = Dataset::Open(dir_.path(), /*verify=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Timeline* t = (*ds)->timeline();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->num_users(), 25);
  EXPECT_EQ(t->num_events(), timeline_.num_events());
  EXPECT_TRUE(t->has_timestamps());
  for (int64_t e = 0; e < t->num_events(); ++e) {
    ASSERT_EQ(t->event(e)[0], timeline_.events[2 * e]);
    ASSERT_EQ(t->event(e)[1], timeline_.events[2 * e + 1]);
    ASSERT_EQ(t->timestamps()[e], timeline_.timestamps[e]);
  }
  for (int64_t u = 0; u < 25; ++u) EXPECT_EQ(t->user_features(u)[0], u + 1);
  EXPECT_EQ((*ds)->negative_seed(), 5u);
  EXPECT_EQ((*ds)->spec().metadata["note"].as<std::string>(), "fixture");
  EXPECT_EQ((*ds)->spec().TableCardinalities(), (std::vector<int64_t>{25, 300, 7}));
  EXPECT_EQ((*ds)->spec().HistoryLength(), 100);
  EXPECT_EQ((*ds)->source_type(), kSourceTimeline);
}

TEST_F(DatasetFormatTest, FeatureSpecIsReferenceSchema) {
  std::string yaml = ReadAll(Path(kFeatureSpecFile));
  for (const char* key : {"channel_spec:", "feature_spec:", "metadata:", "source_spec:",
                          "item_feat_0_pos:", "item_feat_1_neg:", "user_feat_0:",
                          "dimensions: [100]", "type: sift_timeline", "negative_seed: 5"}) {
    EXPECT_THAT(yaml, HasSubstr(key));
  }
  // Top-level keys sorted like yaml.dump.
  EXPECT_LT(yaml.find("channel_spec:"), yaml.find("feature_spec:"));
  EXPECT_LT(yaml.find("feature_spec:"), yaml.find("metadata:"));
  EXPECT_LT(yaml.find("metadata:"), yaml.find("source_spec:"));
}

// tests/fuzz dataset: metadata.sift given as a scalar ended the process (yaml-cpp's operator[] on
// a scalar throws); it is the missing-seed error. (A scalar metadata is the spec parser's error.)
TEST_F(DatasetFormatTest, AScalarMetadataIsAnError) {
  for (const auto& [replacement, error] :
       {std::pair<const char*, const char*>{"metadata:\n  sift: 1\n",
                                            "metadata.sift.negative_seed is missing"},
        {"metadata: 1\n", "metadata: expected a mapping"}}) {
    SCOPED_TRACE(replacement);
    std::string yaml = ReadAll(Path(kFeatureSpecFile));
    const size_t start = yaml.find("metadata:");
    const size_t end = yaml.find("source_spec:");
    ASSERT_NE(start, std::string::npos);
    ASSERT_NE(end, std::string::npos);
    yaml.replace(start, end - start, replacement);
    WriteAll(Path(kFeatureSpecFile), yaml);
    EXPECT_THAT(OpenError(), HasSubstr(error));
  }
}

TEST_F(DatasetFormatTest, BadMagic) {
  Edit(kEventsFile, [](std::string& b) { std::memcpy(b.data(), "GARBAGE!", 8); });
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("bad magic")));
}

TEST_F(DatasetFormatTest, CorruptHeader) {
  Edit(kUsersFile, [](std::string& b) { b[33] ^= 0x40; });  // a count byte
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kUsersFile)), HasSubstr("header checksum")));
}

TEST_F(DatasetFormatTest, Truncated) {
  Edit(kEventsFile, [](std::string& b) { b.resize(b.size() - 10); });
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("truncated")));
  Edit(kEventsFile, [](std::string& b) { b.resize(20); });
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("truncated")));
}

TEST_F(DatasetFormatTest, TrailingBytes) {
  Edit(kUsersFile, [](std::string& b) { b += "xyz"; });
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kUsersFile)), HasSubstr("trailing bytes")));
}

TEST_F(DatasetFormatTest, CorruptPayloadCaughtByVerify) {
  // Two different ids swapped: every id stays valid, the checksum no longer matches.
  Edit(kEventsFile, [](std::string& b) {
    size_t j = 72;  // the same feature of a later event (2 features: 8 bytes per event)
    while (j + 4 <= b.size() && std::memcmp(b.data() + 64, b.data() + j, 4) == 0) j += 8;
    ASSERT_LT(j + 4, b.size());
    for (int k = 0; k < 4; ++k) std::swap(b[64 + k], b[j + k]);
  });
  // The fast open checks headers, sizes and ids, not checksums...
  EXPECT_TRUE(Dataset::Open(dir_.path(), false).ok());
  // ...the full verification reads every byte.
  EXPECT_THAT(OpenError(/*verify=*/true),
              AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("payload checksum mismatch")));
  auto ds = Dataset::Open(dir_.path(), false);
  ASSERT_TRUE(ds.ok());
  EXPECT_FALSE((*ds)->Verify().ok());
}

TEST_F(DatasetFormatTest, EveryOpenChecksIdsAgainstCardinality) {
  // A well-formed file (valid checksums) holding an id beyond the table (issue 16 row 8: it
  // trained to COMPLETED): every open reads every id, and names the file, the event and the
  // feature.
  Edit(kEventsFile, [](std::string& b) {
    int32_t bad = 999999;
    std::memcpy(b.data() + 64 + 4 * 5, &bad, 4);  // event 2, category
    uint32_t crc = Crc32c(b.data() + 64, b.size() - 64);
    std::memcpy(b.data() + 24, &crc, 4);
    uint32_t hcrc = Crc32c(b.data(), 60);
    std::memcpy(b.data() + 60, &hcrc, 4);
  });
  for (bool verify : {false, true}) {
    EXPECT_THAT(OpenError(verify), AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("event 2"),
                                         HasSubstr("item_feat_1_trgt id 999999 outside [1, 7]")));
  }
}

TEST_F(DatasetFormatTest, ASpecWhoseCardinalityIsBelowTheDataIsRefusedAtOpen) {
  Edit(kFeatureSpecFile, [](std::string& b) {
    // Every feature of the item table (target, histories) says 1; the data's ids go to 300.
    ASSERT_NE(b.find("cardinality: 300"), std::string::npos) << b;
    for (size_t at; (at = b.find("cardinality: 300")) != std::string::npos;) {
      b.replace(at, 16, "cardinality: 1");
    }
  });
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("outside [1, 1]")));
}

TEST_F(DatasetFormatTest, UnsupportedVersion) {
  Edit(kEventsFile, [](std::string& b) {
    uint32_t v = 7;
    std::memcpy(b.data() + 8, &v, 4);
    uint32_t crc = Crc32c(b.data(), 60);
    std::memcpy(b.data() + 60, &crc, 4);
  });
  EXPECT_THAT(OpenError(),
              AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("unsupported format version 7")));
}

TEST_F(DatasetFormatTest, FilesFromDifferentDatasets) {
  TempDir other;
  TimelineData t = RandomTimeline(12, 5, 300, 7, 3, 3);
  ASSERT_TRUE(WriteTimelineDataset(other.path(), t, {5}, {300, 7}, 5, YAML::Node()).ok());
  std::filesystem::copy_file(other.Sub(kEventsFile), Path(kEventsFile),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_THAT(OpenError(), HasSubstr("different datasets"));
}

TEST_F(DatasetFormatTest, CorruptOffsetsRejectedNotDereferenced) {
  // Make a user's offsets decrease, with a valid header so only the semantic check can catch it.
  Edit(kUsersFile, [](std::string& b) {
    uint64_t big = 1u << 30;
    std::memcpy(b.data() + 64 + 8 * 3, &big, 8);
    uint32_t crc = Crc32c(b.data() + 64, b.size() - 64);
    std::memcpy(b.data() + 24, &crc, 4);
    uint32_t hcrc = Crc32c(b.data(), 60);
    std::memcpy(b.data() + 60, &hcrc, 4);
  });
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kUsersFile)), HasSubstr("user")));
}

TEST_F(DatasetFormatTest, OverflowingCountsWithValidChecksumsAreRejected) {
  // A crafted header: an event count whose byte size wraps 64 bits, with a correct header CRC.
  Edit(kEventsFile, [](std::string& b) {
    uint64_t huge = (uint64_t{1} << 62) + 1;
    std::memcpy(b.data() + 32, &huge, 8);
    uint32_t hcrc = Crc32c(b.data(), 60);
    std::memcpy(b.data() + 60, &hcrc, 4);
  });
  EXPECT_THAT(OpenError(), HasSubstr(Path(kEventsFile)));
  SetUp();
  Edit(kUsersFile, [](std::string& b) {
    uint64_t all_ones = ~uint64_t{0};
    std::memcpy(b.data() + 32, &all_ones, 8);
    uint32_t hcrc = Crc32c(b.data(), 60);
    std::memcpy(b.data() + 60, &hcrc, 4);
  });
  EXPECT_THAT(OpenError(), HasSubstr(Path(kUsersFile)));
}

TEST_F(DatasetFormatTest, MissingFiles) {
  std::filesystem::remove(Path(kEventsFile));
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kEventsFile)), HasSubstr("cannot open")));
  TempDir empty;
  auto ds = Dataset::Open(empty.path());
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("not a dataset directory"));
}

TEST_F(DatasetFormatTest, YamlErrorsNameFileAndLine) {
  std::string good = ReadAll(Path(kFeatureSpecFile));
  WriteAll(Path(kFeatureSpecFile), good + "oops: [unclosed\n");
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(Path(kFeatureSpecFile) + ":"), HasSubstr("YAML")));

  WriteAll(Path(kFeatureSpecFile), good + "surprise: 1\n");
  EXPECT_THAT(OpenError(), HasSubstr("unknown top-level key 'surprise'"));

  std::string bad_dtype = good;
  bad_dtype.replace(bad_dtype.find("dtype: int64"), 12, "dtype: complex");
  WriteAll(Path(kFeatureSpecFile), bad_dtype);
  EXPECT_THAT(OpenError(), HasSubstr("unsupported dtype 'complex'"));

  std::string no_card = good;
  size_t p = no_card.find("cardinality: 300");
  no_card.replace(p, 16, "cardinality: abc");
  WriteAll(Path(kFeatureSpecFile), no_card);
  EXPECT_THAT(OpenError(), AllOf(HasSubstr(":"), HasSubstr("cardinality: expected an integer")));

  std::string unknown_feature = good;
  p = unknown_feature.find("[item_feat_0_pos");
  unknown_feature.replace(p, 16, "[item_feat_9_pos");
  WriteAll(Path(kFeatureSpecFile), unknown_feature);
  EXPECT_THAT(OpenError(), HasSubstr("'item_feat_9_pos' is not described"));
}

TEST_F(DatasetFormatTest, ReferenceTfrecordDirectoryGetsAHint) {
  std::string yaml = ReadAll(Path(kFeatureSpecFile));
  for (size_t p; (p = yaml.find("type: sift_timeline")) != std::string::npos;)
    yaml.replace(p, 19, "type: tfrecord");
  WriteAll(Path(kFeatureSpecFile), yaml);
  EXPECT_THAT(OpenError(), HasSubstr("--from tfrecord"));
}

TEST(SamplesFile, RecordCountThatWrapsTheSizeIsRejected) {
  // 2^62 + 1 records of 29 int32 would wrap to the size of one record: without the overflow
  // check the file would open claiming 2^62 + 1 samples and reads would run off the mapping.
  TempDir d;
  SampleRecordShape shape{/*history=*/6, /*item_features=*/2, /*user_features=*/1};
  ASSERT_EQ(shape.record_ints(), 29);
  SamplesFileWriter w;
  ASSERT_TRUE(w.Begin(d.Sub("s.bin"), shape).ok());
  std::vector<int32_t> rec(29, 0);
  rec[0] = 1;
  ASSERT_TRUE(w.Add(rec.data()).ok());
  ASSERT_TRUE(w.Finish().ok());
  ASSERT_TRUE(SamplesFile::Open(d.Sub("s.bin"), true).ok());
  std::string b = ReadAll(d.Sub("s.bin"));
  uint64_t wrapping = (uint64_t{1} << 62) + 1;
  std::memcpy(b.data() + 32, &wrapping, 8);
  uint32_t hcrc = Crc32c(b.data(), 60);
  std::memcpy(b.data() + 60, &hcrc, 4);
  WriteAll(d.Sub("s.bin"), b);
  auto f = SamplesFile::Open(d.Sub("s.bin"), false);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()),
              AllOf(HasSubstr(d.Sub("s.bin")), HasSubstr("overflow")));
}

TEST(TimelineWriter, RejectsInconsistentInput) {
  TempDir d;
  TimelineData t = RandomTimeline(1, 3, 10, 2, 5, 5);
  TimelineData short_user = t;
  short_user.user_offsets[1] = 1;  // user 0 with one event
  EXPECT_FALSE(WriteTimeline(d.path(), short_user).ok());
  TimelineData bad_ts = t;
  bad_ts.timestamps.pop_back();
  EXPECT_FALSE(WriteTimeline(d.path(), bad_ts).ok());
  TimelineData bad_end = t;
  bad_end.user_offsets.back() += 1;
  EXPECT_FALSE(WriteTimeline(d.path(), bad_end).ok());
  EXPECT_TRUE(WriteTimeline(d.path(), t).ok());
}

TEST(FeatureSpec, SaveLoadRoundTrip) {
  TempDir d;
  FeatureSpec s = FeatureSpec::Reference({5}, {50, 6}, 100);
  s.source_spec["train"] = {SourceChunk{kSourceTfrecord, {"label"}, {"train/part_0.tfrecord"}}};
  s.source_spec["test"] = {SourceChunk{kSourceTfrecord, {"label"}, {"test/part_0.tfrecord"}}};
  s.metadata["oracle_test_auc"] = 0.9;
  ASSERT_TRUE(s.Save(d.Sub("fs.yaml")).ok());
  auto r = FeatureSpec::Load(d.Sub("fs.yaml"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ToYaml(), s.ToYaml());
  EXPECT_EQ(r->num_item_features(), 2);
  EXPECT_EQ(r->num_user_features(), 1);
  EXPECT_EQ(r->SourceType("train"), "tfrecord");
  EXPECT_DOUBLE_EQ(r->metadata["oracle_test_auc"].as<double>(), 0.9);
}

TEST(FeatureSpec, ParsesTheReferenceExample) {
  // The shape the reference's converter writes (model-spec 6.4).
  const char* text = R"(channel_spec:
  label: [label]
  negative_history: [item_feat_0_neg, item_feat_1_neg]
  positive_history: [item_feat_0_pos, item_feat_1_pos]
  target_item_features: [item_feat_0_trgt, item_feat_1_trgt]
  user_features: [user_feat_0]
feature_spec:
  item_feat_0_neg: {cardinality: 1209081, dimensions: [100], dtype: int64}
  item_feat_0_pos: {cardinality: 1209081, dimensions: [100], dtype: int64}
  item_feat_0_trgt: {cardinality: 1209081, dtype: int64}
  item_feat_1_neg: {cardinality: 2330, dimensions: [100], dtype: int64}
  item_feat_1_pos: {cardinality: 2330, dimensions: [100], dtype: int64}
  item_feat_1_trgt: {cardinality: 2330, dtype: int64}
  label: {dtype: bool}
  user_feat_0: {cardinality: 105925, dtype: int64}
metadata: {}
source_spec:
  test:
  - features: [label, user_feat_0, item_feat_0_trgt, item_feat_1_trgt, item_feat_0_pos, item_feat_1_pos, item_feat_0_neg, item_feat_1_neg]
    files: [test/part_0.tfrecord, test/part_1.tfrecord, test/part_2.tfrecord, test/part_3.tfrecord]
    type: tfrecord
  train:
  - features: [label, user_feat_0, item_feat_0_trgt, item_feat_1_trgt, item_feat_0_pos, item_feat_1_pos, item_feat_0_neg, item_feat_1_neg]
    files: [train/part_0.tfrecord, train/part_1.tfrecord]
    type: tfrecord
)";
  auto s = FeatureSpec::Parse(text, "ref.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->TableCardinalities(), (std::vector<int64_t>{105925, 1209081, 2330}));
  EXPECT_EQ(s->source_spec.at("test")[0].files.size(), 4u);
  auto missing = FeatureSpec::Parse(std::string(text).replace(0, 13, "channel_specX"), "ref.yaml");
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace sift::data
