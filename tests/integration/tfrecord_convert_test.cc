// TFRecord compatibility (docs/data.md 4, model-spec 6.1-6.4): the exported layout read back with
// the protobuf library (wire compatibility), byte-identical output for any thread count, the round
// trip timeline -> TFRecord -> explicit samples giving identical batches, and every bad input of
// the import rejected with one line naming the file, the record and the problem.
#include "common/data/tfrecord_convert.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/tfrecord.h"
#include "common/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using sift::testing::ReadAll;
using sift::testing::RunResult;
using sift::testing::RunSift;
using sift::testing::TempDir;
using sift::testing::WriteAll;
using ::testing::HasSubstr;

constexpr int64_t kUsers = 40;
constexpr int64_t kItems = 500;
constexpr int64_t kCategories = 20;
constexpr int64_t kT = 100;
constexpr uint64_t kTimelineSeed = 20260401;
constexpr uint64_t kNegativeSeed = 77;

const std::vector<std::string> kColumns = {
    "label",           "user_feat_0",     "item_feat_0_trgt", "item_feat_1_trgt",
    "item_feat_0_pos", "item_feat_1_pos", "item_feat_0_neg",  "item_feat_1_neg"};

// Users with 2..40 events, and every 8th user with 101..140 (histories truncated to 100).
TimelineData MakeTimeline() {
  Rng rng(kTimelineSeed);
  TimelineData t;
  t.user_offsets.push_back(0);
  for (int64_t u = 0; u < kUsers; ++u) {
    const int64_t len = u % 8 == 5 ? 101 + static_cast<int64_t>(rng.Below(40))
                        : u == 0   ? 2
                                   : 2 + static_cast<int64_t>(rng.Below(39));
    for (int64_t i = 0; i < len; ++i) {
      const int32_t item = 1 + static_cast<int32_t>(rng.Below(kItems));
      t.events.push_back(item);
      t.events.push_back(1 + (item - 1) % static_cast<int32_t>(kCategories));
      t.timestamps.push_back(1000 * u + i);
    }
    t.user_offsets.push_back(t.user_offsets.back() + static_cast<uint64_t>(len));
    t.user_features.push_back(static_cast<int32_t>(u + 1));
  }
  return t;
}

std::vector<std::string> ReadPayloads(const std::string& path) {
  std::vector<std::string> out;
  auto reader = TfRecordReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  absl::string_view payload;
  for (;;) {
    auto more = reader->Next(&payload);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) return out;
    out.emplace_back(payload);
  }
}

std::vector<tf::Example> ReadExamples(const std::string& path) {
  std::vector<tf::Example> out;
  for (const std::string& p : ReadPayloads(path)) {
    out.emplace_back();
    EXPECT_TRUE(out.back().ParseFromString(p)) << path;
  }
  return out;
}

void WritePayloads(const std::string& path, const std::vector<std::string>& payloads) {
  TfRecordWriter w;
  ASSERT_TRUE(w.Open(path).ok());
  for (const auto& p : payloads) ASSERT_TRUE(w.Write(p).ok());
  ASSERT_TRUE(w.Commit().ok());
}

const tf::Int64List& Ints(const tf::Example& e, const std::string& name) {
  return e.features().feature().at(name).int64_list();
}

// The dataset shared by every test: written once.
class TfrecordConvertTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    YAML::Node meta;
    meta["note"] = "tfrecord test";
    ASSERT_TRUE(WriteTimelineDataset(Src(), MakeTimeline(), {kUsers}, {kItems, kCategories},
                                     kNegativeSeed, meta)
                    .ok());
    auto ds = Dataset::Open(Src());
    ASSERT_TRUE(ds.ok()) << ds.status();
    dataset_ = ds->release();
  }
  static void TearDownTestSuite() {
    delete dataset_;
    delete dir_;
  }
  static std::string Src() { return dir_->Sub("timeline"); }
  static int64_t N(Split s) { return dataset_->samples().NumSamples(s); }

  static TfrecordConvertStats Export(const std::string& out, int64_t prebatch, int threads = 2) {
    TfrecordExportOptions o;
    o.prebatch = prebatch;
    o.threads = threads;
    auto stats = ExportTfrecord(*dataset_, out, o);
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? *stats : TfrecordConvertStats{};
  }

  static TempDir* dir_;
  static Dataset* dataset_;
};

TempDir* TfrecordConvertTest::dir_ = nullptr;
Dataset* TfrecordConvertTest::dataset_ = nullptr;

TEST(TfrecordPartSizes, NearlyEqualFirstOnesLarger) {
  EXPECT_EQ(PartSizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(PartSizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(PartSizes(3, 8), (std::vector<int64_t>{1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(PartSizes(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST_F(TfrecordConvertTest, DatasetCoversTruncationAndBothRemainderCases) {
  // The test data must exercise what the other tests claim to check.
  int64_t longest = 0;
  for (int64_t u = 0; u < kUsers; ++u) {
    longest = std::max(longest, dataset_->timeline()->user_length(u));
  }
  EXPECT_GT(longest, kT + 1);
  EXPECT_NE(N(Split::kTrain) % 7, 0);
  EXPECT_NE(N(Split::kTest) % 7, 0);
  EXPECT_EQ(N(Split::kTest) % 8, 0);
}

TEST_F(TfrecordConvertTest, UnbatchedLayoutMatchesTheReference) {
  TempDir out;
  const TfrecordConvertStats stats = Export(out.path(), 0);
  EXPECT_EQ(stats.train_samples, N(Split::kTrain));
  EXPECT_EQ(stats.test_samples, N(Split::kTest));
  EXPECT_EQ(stats.records, N(Split::kTrain) + N(Split::kTest));
  EXPECT_EQ(stats.files.size(), 12u);

  auto spec = FeatureSpec::Load(out.Sub("feature_spec.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  for (const char* split : {"train", "test"}) {
    ASSERT_EQ(spec->source_spec.at(split).size(), 1u);
    const SourceChunk& chunk = spec->source_spec.at(split)[0];
    EXPECT_EQ(chunk.type, "tfrecord");
    EXPECT_EQ(chunk.features, kColumns);
    const int parts = std::string(split) == "train" ? 8 : 4;
    ASSERT_EQ(chunk.files.size(), static_cast<size_t>(parts));
    for (int k = 0; k < parts; ++k) {
      EXPECT_EQ(chunk.files[k], absl::StrCat(split, "/part_", k, ".tfrecord"));
    }
    EXPECT_FALSE(std::filesystem::exists(out.Sub(absl::StrCat(split, "/remainder.tfrecord"))));
  }
  EXPECT_EQ(spec->feature_spec.at("item_feat_0_pos").dimensions, std::vector<int64_t>{kT});
  EXPECT_EQ(spec->feature_spec.at("item_feat_1_neg").cardinality, kCategories);
  EXPECT_EQ(spec->feature_spec.at("label").dtype, "bool");
  EXPECT_EQ(spec->metadata["note"].as<std::string>(), "tfrecord test");

  // Part sizes, and every record an Example of 8 int64 features of length 1 or 100.
  const Batch rows = [&] {
    Batch b;
    HistoryOptions h{static_cast<int>(kT), 10, true};
    b.Allocate(N(Split::kTrain), 1, 2, h);
    for (int64_t s = 0; s < N(Split::kTrain); ++s) {
      dataset_->samples().Materialize(Split::kTrain, s, s, &b);
    }
    return b;
  }();
  int64_t sample = 0;
  const auto sizes = PartSizes(N(Split::kTrain), 8);
  for (int k = 0; k < 8; ++k) {
    const auto examples = ReadExamples(out.Sub(absl::StrCat("train/part_", k, ".tfrecord")));
    ASSERT_EQ(static_cast<int64_t>(examples.size()), sizes[k]) << "part " << k;
    for (const tf::Example& e : examples) {
      ASSERT_EQ(e.features().feature().size(), 8u);
      for (const std::string& name : kColumns) {
        ASSERT_TRUE(e.features().feature().at(name).has_int64_list()) << name;
        const bool history = name.size() > 4 && (name.ends_with("_pos") || name.ends_with("_neg"));
        ASSERT_EQ(Ints(e, name).value_size(), history ? kT : 1) << name;
      }
      // Row order = sample index order; values = the materialised sample, 100 slots.
      EXPECT_EQ(Ints(e, "label").value(0), sample % 2 == 0 ? 1 : 0);
      EXPECT_EQ(Ints(e, "user_feat_0").value(0), rows.User(0)[sample]);
      EXPECT_EQ(Ints(e, "item_feat_1_trgt").value(0), rows.Target(1)[sample]);
      const auto& pos0 = Ints(e, "item_feat_0_pos").value();
      const auto& neg1 = Ints(e, "item_feat_1_neg").value();
      for (int j = 0; j < 90; ++j) {
        ASSERT_EQ(pos0[j], rows.LongHist(0, sample)[j]);
        ASSERT_EQ(neg1[j], rows.LongNeg(1, sample)[j]);
      }
      for (int j = 0; j < 10; ++j) {
        ASSERT_EQ(pos0[90 + j], rows.ShortHist(0, sample)[j]);
        ASSERT_EQ(neg1[90 + j], rows.ShortNeg(1, sample)[j]);
      }
      // Negative history fills every valid slot, the long ones included.
      const int32_t L = rows.hist_len[sample];
      for (int j = 0; j < kT; ++j) ASSERT_EQ(neg1[j] != 0, j >= kT - L) << "slot " << j;
      ++sample;
    }
  }
  EXPECT_EQ(sample, N(Split::kTrain));
}

// Checks one split of a prebatched export: part sizes, list lengths, remainder.
void CheckPrebatchedSplit(const std::string& out, const char* split, int parts, int64_t n,
                          int64_t P) {
  SCOPED_TRACE(absl::StrCat(split, " P=", P));
  auto spec = FeatureSpec::Load(JoinPath(out, "feature_spec.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto& files = spec->source_spec.at(split)[0].files;
  const bool remainder = n % P != 0;
  ASSERT_EQ(files.size(), static_cast<size_t>(parts + (remainder ? 1 : 0)));
  EXPECT_EQ(std::filesystem::exists(JoinPath(out, absl::StrCat(split, "/remainder.tfrecord"))),
            remainder);
  if (remainder) {
    EXPECT_EQ(files.back(), absl::StrCat(split, "/remainder.tfrecord"));
  }
  const auto sizes = PartSizes(n / P, parts);
  int64_t samples = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    const auto examples = ReadExamples(JoinPath(out, files[k]));
    const bool is_remainder = remainder && k + 1 == files.size();
    ASSERT_EQ(static_cast<int64_t>(examples.size()), is_remainder ? 1 : sizes[k]) << files[k];
    const int64_t p = is_remainder ? n % P : P;
    for (const tf::Example& e : examples) {
      ASSERT_EQ(e.features().feature().size(), 8u);
      EXPECT_EQ(Ints(e, "label").value_size(), p);
      EXPECT_EQ(Ints(e, "user_feat_0").value_size(), p);
      EXPECT_EQ(Ints(e, "item_feat_1_trgt").value_size(), p);
      EXPECT_EQ(Ints(e, "item_feat_0_pos").value_size(), p * kT);
      EXPECT_EQ(Ints(e, "item_feat_1_neg").value_size(), p * kT);
      // Consecutive samples: labels alternate 1, 0 from an even first sample.
      for (int64_t i = 0; i < p; ++i) {
        ASSERT_EQ(Ints(e, "label").value(static_cast<int>(i)), (samples + i) % 2 == 0 ? 1 : 0);
      }
      samples += p;
    }
  }
  EXPECT_EQ(samples, n);
}

TEST_F(TfrecordConvertTest, PrebatchedLayoutWithAndWithoutRemainder) {
  TempDir out;
  Export(out.path(), 7);
  CheckPrebatchedSplit(out.path(), "train", 8, N(Split::kTrain), 7);
  CheckPrebatchedSplit(out.path(), "test", 4, N(Split::kTest), 7);
  // Same directory, P = 8 divides the test split: no remainder there (and the stale one from
  // P = 7 is gone), none listed.
  Export(out.path(), 8);
  CheckPrebatchedSplit(out.path(), "train", 8, N(Split::kTrain), 8);
  CheckPrebatchedSplit(out.path(), "test", 4, N(Split::kTest), 8);
  // P larger than the split: every part empty, everything in the remainder.
  Export(out.path(), 100000);
  CheckPrebatchedSplit(out.path(), "test", 4, N(Split::kTest), 100000);
}

TEST_F(TfrecordConvertTest, RejectsBadOptions) {
  TempDir out;
  TfrecordExportOptions o;
  o.prebatch = int64_t{1} << 30;  // one Example beyond protobuf's 2 GiB limit
  auto s = ExportTfrecord(*dataset_, out.path(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("2 GiB"));
  o = TfrecordExportOptions{};
  o.train_parts = 0;
  EXPECT_FALSE(ExportTfrecord(*dataset_, out.path(), o).ok());
  EXPECT_FALSE(std::filesystem::exists(out.Sub("feature_spec.yaml")));
}

TEST_F(TfrecordConvertTest, OutputIsByteIdenticalForAnyThreadCount) {
  for (int64_t P : {0, 7}) {
    TempDir a, b;
    Export(a.path(), P, 1);
    Export(b.path(), P, 3);
    std::vector<std::string> names = {"feature_spec.yaml"};
    for (int k = 0; k < 8; ++k) names.push_back(absl::StrCat("train/part_", k, ".tfrecord"));
    for (int k = 0; k < 4; ++k) names.push_back(absl::StrCat("test/part_", k, ".tfrecord"));
    if (P) names.insert(names.end(), {"train/remainder.tfrecord", "test/remainder.tfrecord"});
    for (const auto& name : names) {
      EXPECT_EQ(ReadAll(a.Sub(name)), ReadAll(b.Sub(name))) << "P=" << P << " " << name;
    }
  }
}

void ExpectSameRows(const Batch& a, const Batch& b, const std::string& what) {
  EXPECT_EQ(a.size, b.size) << what;
  EXPECT_EQ(a.index, b.index) << what;
  EXPECT_EQ(a.label, b.label) << what;
  EXPECT_EQ(a.hist_len, b.hist_len) << what;
  EXPECT_EQ(a.user, b.user) << what;
  EXPECT_EQ(a.target, b.target) << what;
  EXPECT_EQ(a.long_hist, b.long_hist) << what;
  EXPECT_EQ(a.short_hist, b.short_hist) << what;
  EXPECT_EQ(a.short_neg, b.short_neg) << what;
  EXPECT_EQ(a.long_neg, b.long_neg) << what;
  EXPECT_EQ(a.long_mask, b.long_mask) << what;
  EXPECT_EQ(a.short_mask, b.short_mask) << what;
}

TEST_F(TfrecordConvertTest, RoundTripGivesIdenticalBatches) {
  for (int64_t P : {0, 7}) {
    TempDir tf, imported;
    Export(tf.path(), P);
    TfrecordImportOptions io;
    io.threads = 3;
    auto stats = ImportTfrecord(tf.path(), imported.path(), io);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->train_samples, N(Split::kTrain));
    EXPECT_EQ(stats->test_samples, N(Split::kTest));
    auto ds = Dataset::Open(imported.path(), /*verify=*/true);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ((*ds)->source_type(), "sift_samples");
    EXPECT_EQ((*ds)->spec().channel_spec, dataset_->spec().channel_spec);
    const SampleSource& got = (*ds)->samples();
    // Exporting the imported dataset reproduces the TFRecord directory byte for byte.
    TempDir again;
    TfrecordExportOptions eo;
    eo.prebatch = P;
    ASSERT_TRUE(ExportTfrecord(**ds, again.path(), eo).ok());
    for (const auto& f : stats->files) {
      const std::string rel = f.path.substr(tf.path().size() + 1);
      EXPECT_EQ(ReadAll(again.Sub(rel)), ReadAll(f.path)) << "P=" << P << " " << rel;
    }
    // The reference window (100 = 90 + 10) and a shorter one (re-padding keeps the newest slots
    // and their negatives, which are keyed by the distance from the target).
    for (HistoryOptions h : {HistoryOptions{100, 10, true}, HistoryOptions{40, 10, true}}) {
      for (Split split : {Split::kTrain, Split::kTest}) {
        const int64_t n = N(split);
        ASSERT_EQ(got.NumSamples(split), n);
        Batch want_rows, got_rows;
        want_rows.Allocate(n, 1, 2, h);
        got_rows.Allocate(n, 1, 2, h);
        int32_t longest = 0;
        for (int64_t s = 0; s < n; ++s) {
          dataset_->samples().Materialize(split, s, s, &want_rows);
          got.Materialize(split, s, s, &got_rows);
          ASSERT_EQ(got.UserOf(split, s), dataset_->samples().UserOf(split, s));
          longest = std::max(longest, want_rows.hist_len[s]);
        }
        want_rows.size = got_rows.size = n;
        EXPECT_EQ(longest, h.max_history);  // truncation exercised
        ExpectSameRows(want_rows, got_rows,
                       absl::StrCat("P=", P, " T=", h.max_history, " ", SplitName(split)));
      }
    }
  }
}

TEST_F(TfrecordConvertTest, CommandLineRoundTrip) {
  TempDir tf, imported;
  RunResult r = RunSift({"data", "convert", Src(), "--to", "tfrecord", "--out", tf.path(),
                         "--prebatch", "7", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("train/part_7.tfrecord"));
  EXPECT_THAT(r.out, HasSubstr("test/remainder.tfrecord"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat(N(Split::kTrain), " train + ", N(Split::kTest),
                                            " test samples")));
  r = RunSift({"data", "convert", tf.path(), "--from", "tfrecord", "--out", imported.path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("train.samples.bin"));
  auto ds = Dataset::Open(imported.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->samples().NumSamples(Split::kTrain), N(Split::kTrain));

  // Exactly one of --to / --from; never into the source itself.
  r = RunSift({"data", "convert", Src(), "--out", tf.path()});
  EXPECT_EQ(r.exit_code, 2);  // a usage error
  EXPECT_THAT(r.err, HasSubstr("one of --to tfrecord or --from tfrecord is required"));
  r = RunSift(
      {"data", "convert", Src(), "--to", "tfrecord", "--from", "tfrecord", "--out", tf.path()});
  EXPECT_NE(r.exit_code, 0);
  r = RunSift({"data", "convert", Src(), "--to", "tfrecord", "--out", Src()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("source dataset itself"));
  EXPECT_TRUE(Dataset::Open(Src()).ok());
}

// ---- Import errors -----------------------------------------------------------------------------

// Rewrites record `index` of a TFRecord file after `edit` on its Example (or its raw payload).
void EditRecord(const std::string& path, size_t index,
                const std::function<void(tf::Example*)>& edit) {
  std::vector<std::string> payloads = ReadPayloads(path);
  ASSERT_LT(index, payloads.size()) << path;
  tf::Example e;
  ASSERT_TRUE(e.ParseFromString(payloads[index]));
  edit(&e);
  payloads[index] = e.SerializeAsString();
  WritePayloads(path, payloads);
}

google::protobuf::RepeatedField<int64_t>* MutableInts(tf::Example* e, const std::string& name) {
  return (*e->mutable_features()->mutable_feature())[name].mutable_int64_list()->mutable_value();
}

struct BadInput {
  std::string name;
  std::string file;  // relative to the TFRecord directory; named in the message
  std::function<void(const std::string& file)> make;
  std::vector<std::string> expected;  // substrings of the one-line error
};
// gtest prints parameters in failure messages; the name says it all.
void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

// Index of the first record of `path` whose positive history has at least 3 and fewer than
// 100 valid slots.
size_t RecordWithShortHistory(const std::string& path) {
  const auto examples = ReadExamples(path);
  for (size_t i = 0; i < examples.size(); ++i) {
    const auto& v = Ints(examples[i], "item_feat_0_pos").value();
    const auto valid = std::count_if(v.begin(), v.end(), [](int64_t x) { return x != 0; });
    if (valid >= 3 && valid < kT) return i;
  }
  ADD_FAILURE() << "no suitable record in " << path;
  return 0;
}

std::vector<BadInput> BadInputs() {
  const std::string part0 = "train/part_0.tfrecord";
  const std::string part5 = "train/part_5.tfrecord";
  const std::string test2 = "test/part_2.tfrecord";
  std::vector<BadInput> cases;
  cases.push_back({"BadDataCrc",
                   part5,
                   [](const std::string& f) {
                     std::string b = ReadAll(f);
                     b[b.size() / 2] ^= 0x10;
                     WriteAll(f, b);
                   },
                   {"bad data CRC", "byte offset"}});
  cases.push_back({"BadLengthCrc",
                   part5,
                   [](const std::string& f) {
                     std::string b = ReadAll(f);
                     b[2] ^= 0x01;
                     WriteAll(f, b);
                   },
                   {"record 0", "bad length CRC"}});
  cases.push_back({"Truncated",
                   test2,
                   [](const std::string& f) {
                     std::string b = ReadAll(f);
                     WriteAll(f, b.substr(0, b.size() - 3));
                   },
                   {"truncated"}});
  cases.push_back({"Unparsable",
                   part0,
                   [](const std::string& f) {
                     std::vector<std::string> p = ReadPayloads(f);
                     p[1] = std::string(
                         "\x0a\x05"
                         "ab",
                         4);  // field 1 claims 5 bytes, has 2
                     WritePayloads(f, p);
                   },
                   {"record 1", "cannot parse a tf.train.Example"}});
  cases.push_back({"UnknownFeature",
                   part0,
                   [](const std::string& f) {
                     EditRecord(f, 2, [](tf::Example* e) { MutableInts(e, "bogus")->Add(1); });
                   },
                   {"record 2", "unknown feature 'bogus'"}});
  cases.push_back({"MissingFeature",
                   part0,
                   [](const std::string& f) {
                     EditRecord(f, 3, [](tf::Example* e) {
                       e->mutable_features()->mutable_feature()->erase("item_feat_1_neg");
                     });
                   },
                   {"record 3", "missing feature 'item_feat_1_neg'"}});
  cases.push_back({"FloatWhereInt64Expected",
                   part0,
                   [](const std::string& f) {
                     EditRecord(f, 0, [](tf::Example* e) {
                       (*e->mutable_features()->mutable_feature())["user_feat_0"]
                           .mutable_float_list()
                           ->add_value(1.0f);
                     });
                   },
                   {"record 0", "'user_feat_0'", "wrong dtype", "float_list"}});
  cases.push_back(
      {"BytesWhereInt64Expected",
       test2,
       [](const std::string& f) {
         EditRecord(f, 1, [](tf::Example* e) {
           (*e->mutable_features()->mutable_feature())["label"].mutable_bytes_list()->add_value(
               "1");
         });
       },
       {"record 1", "'label'", "wrong dtype", "bytes_list"}});
  cases.push_back(
      {"InconsistentLengths",
       part0,
       [](const std::string& f) {
         EditRecord(f, 1, [](tf::Example* e) { MutableInts(e, "item_feat_1_pos")->RemoveLast(); });
       },
       {"record 1", "'item_feat_1_pos'", "inconsistent list length 99"}});
  cases.push_back({"IdBeyondCardinality",
                   part0,
                   [](const std::string& f) {
                     EditRecord(f, 2, [](tf::Example* e) {
                       MutableInts(e, "item_feat_0_trgt")->Set(0, kItems + 1);
                     });
                   },
                   {"record 2", "'item_feat_0_trgt'", "id 501 beyond cardinality 500"}});
  cases.push_back({"NegativeId",
                   part0,
                   [](const std::string& f) {
                     EditRecord(f, 2, [](tf::Example* e) {
                       MutableInts(e, "item_feat_1_neg")->Set(kT - 1, -3);
                     });
                   },
                   {"record 2", "'item_feat_1_neg'", "slot 99", "negative id -3"}});
  cases.push_back({"LabelNotBinary",
                   test2,
                   [](const std::string& f) {
                     EditRecord(f, 0, [](tf::Example* e) { MutableInts(e, "label")->Set(0, 2); });
                   },
                   {"record 0", "label 2 is not 0 or 1"}});
  cases.push_back({"HistoryWithHole",
                   part0,
                   [](const std::string& f) {
                     const size_t i = RecordWithShortHistory(f);
                     EditRecord(f, i, [](tf::Example* e) {
                       MutableInts(e, "item_feat_0_pos")->Set(kT - 2, 0);
                     });
                   },
                   {"'item_feat_0_pos'", "history has a hole", "slot 98"}});
  cases.push_back(
      {"IdInPaddedSlot",
       part0,
       [](const std::string& f) {
         const size_t i = RecordWithShortHistory(f);
         EditRecord(f, i, [](tf::Example* e) { MutableInts(e, "item_feat_1_pos")->Set(0, 4); });
       },
       {"'item_feat_1_pos'", "id 4 at slot 0", "padding"}});
  cases.push_back({"ListedFileMissing",
                   "train/part_3.tfrecord",
                   [](const std::string& f) { std::filesystem::remove(f); },
                   {"does not exist", "source_spec.train.files"}});
  return cases;
}

class TfrecordImportErrorTest : public TfrecordConvertTest,
                                public ::testing::WithParamInterface<BadInput> {
 protected:
  static void SetUpTestSuite() {
    TfrecordConvertTest::SetUpTestSuite();
    good_ = new TempDir();
    Export(good_->path(), 0);
  }
  static void TearDownTestSuite() {
    delete good_;
    TfrecordConvertTest::TearDownTestSuite();
  }
  static TempDir* good_;
};
TempDir* TfrecordImportErrorTest::good_ = nullptr;

TEST_P(TfrecordImportErrorTest, OneLineNamingFileAndProblem) {
  const BadInput& c = GetParam();
  TempDir tmp;
  const std::string tf = tmp.Sub("tf");
  std::filesystem::copy(good_->path(), tf, std::filesystem::copy_options::recursive);
  c.make(JoinPath(tf, c.file));
  const std::string out = tmp.Sub("imported");
  RunResult r = RunSift({"data", "convert", tf, "--from", "tfrecord", "--out", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("sift: error: "));
  EXPECT_THAT(r.err, HasSubstr(JoinPath(tf, c.file)));
  for (const std::string& s : c.expected) EXPECT_THAT(r.err, HasSubstr(s));
  // Nothing trainable is left behind.
  EXPECT_FALSE(Dataset::Open(out).ok());
}

INSTANTIATE_TEST_SUITE_P(AllCases, TfrecordImportErrorTest, ::testing::ValuesIn(BadInputs()),
                         [](const ::testing::TestParamInfo<BadInput>& param) {
                           return param.param.name;
                         });

TEST_F(TfrecordConvertTest, ImportRejectsAnUndeclaredHistoryShape) {
  TempDir tmp;
  const std::string tf = tmp.Sub("tf");
  Export(tf, 0);
  std::string yaml = ReadAll(JoinPath(tf, "feature_spec.yaml"));
  // item_feat_1_neg declared with 50 slots while the positive history has 100.
  const std::string from = "item_feat_1_neg:\n    cardinality: 20\n    dimensions: [100]";
  ASSERT_NE(yaml.find(from), std::string::npos) << yaml;
  yaml.replace(yaml.find(from), from.size(),
               "item_feat_1_neg:\n    cardinality: 20\n    dimensions: [50]");
  WriteAll(JoinPath(tf, "feature_spec.yaml"), yaml);
  auto s = ImportTfrecord(tf, tmp.Sub("out"), {});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("feature_spec.item_feat_1_neg"));
}

// The decoder the import uses, on its own (the fuzz target's entry point, tests/fuzz/): a
// hand-built Example of history 3 decodes into the samples-file record, and an error names the
// file, the record, the byte offset and the feature.
TEST(TfExampleDecoderTest, DecodesOneSampleAndNamesWhereAnErrorIs) {
  const FeatureSpec spec = FeatureSpec::Reference({5}, {9, 4}, 3);
  auto decoder = TfExampleDecoder::Create(spec, "feature_spec.yaml");
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  EXPECT_EQ(decoder->shape().record_ints(), 2 + 1 + 2 * (1 + 2 * 3));
  tf::Example e;
  auto set = [&e](const std::string& name, std::vector<int64_t> v) {
    auto* list = (*e.mutable_features()->mutable_feature())[name].mutable_int64_list();
    list->Clear();
    for (int64_t x : v) list->add_value(x);
  };
  set("label", {1});
  set("user_feat_0", {5});
  set("item_feat_0_trgt", {9});
  set("item_feat_1_trgt", {4});
  set("item_feat_0_pos", {0, 7, 8});
  set("item_feat_1_pos", {0, 1, 2});
  set("item_feat_0_neg", {0, 3, 6});
  set("item_feat_1_neg", {0, 4, 4});
  std::vector<int32_t> records;
  ASSERT_TRUE(decoder->Decode(e.SerializeAsString(), "f.tfrecord", 0, 0, &records).ok());
  EXPECT_EQ(records, (std::vector<int32_t>{1, 2, 5, 9, 4, 0, 7, 8, 0, 1, 2, 0, 3, 6, 0, 4, 4}));

  set("item_feat_1_neg", {4, 4});  // 2 slots where one sample needs 3
  records.clear();
  const Status s = decoder->Decode(e.SerializeAsString(), "f.tfrecord", 7, 1234, &records);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("f.tfrecord: record 7 (byte offset 1234)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'item_feat_1_neg'"));
}

}  // namespace
}  // namespace sift::data
