// `sift data inspect` end to end: on a generated dataset (stored bounds), on an imported one
// (heuristics computed on the spot), and with --verify on a corrupted file.
#include <fstream>

#include "common/data/feature_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"
#include "tests/util/tiny_dataset_suite.h"

namespace sift {
namespace {

using sift::testing::ReadAll;
using sift::testing::RunSift;
using sift::testing::TempDir;
using sift::testing::WriteAll;
using ::testing::HasSubstr;

class DataInspectTest : public sift::testing::TinyDatasetSuite<3> {
 protected:
};

TEST_F(DataInspectTest, JsonHasTheDocumentedKeys) {
  auto r = RunSift({"data", "inspect", Tiny(), "--json", "--verify"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["users"], 2000);
  EXPECT_GT(j["events"].get<int64_t>(), 2000 * 20);
  EXPECT_EQ(j["test_samples"], 4000);
  // train = 2 * sum(L - 2) = 2 * (events - 2 * users)
  EXPECT_EQ(j["train_samples"].get<int64_t>(), 2 * (j["events"].get<int64_t>() - 2 * 2000));
  for (const char* k :
       {"oracle_test_auc", "frac_short10", "frac_all100", "smooth_recency", "pop_item"}) {
    ASSERT_TRUE(j[k].is_number()) << k;
    EXPECT_GT(j[k].get<double>(), 0.3) << k;
    EXPECT_LT(j[k].get<double>(), 1.0) << k;
  }
  EXPECT_GT(j["oracle_test_auc"].get<double>(), j["smooth_recency"].get<double>());
  EXPECT_EQ(j["cardinalities"]["item_feat_0_trgt"], 10000);
  EXPECT_EQ(j["cardinalities"]["item_feat_1_trgt"], 100);
  EXPECT_EQ(j["events_per_user"]["min"], 20);
  EXPECT_EQ(j["test_history_length"]["min"], 19);
  EXPECT_EQ(j["train_history_length"]["min"], 1);
  EXPECT_LE(j["train_history_length"]["max"], 100);
  EXPECT_TRUE(j["verified"].get<bool>());
  EXPECT_FALSE(j["heuristics_computed"].get<bool>());
}

TEST_F(DataInspectTest, TextSummary) {
  auto r = RunSift({"data", "inspect", Tiny()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s :
       {"users", "2000", "train samples", "oracle test AUC", "smooth_recency", "events per user"}) {
    EXPECT_THAT(r.out, HasSubstr(s));
  }
}

TEST_F(DataInspectTest, ImportedDatasetGetsHeuristicsComputed) {
  TempDir work;
  ASSERT_EQ(
      RunSift({"data", "convert", Tiny(), "--to", "tfrecord", "--out", work.Sub("tf")}).exit_code,
      0);
  // As the reference writes it: no metadata (our export carries the source's bounds along).
  auto spec = data::FeatureSpec::Load(work.Sub("tf/feature_spec.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->metadata = YAML::Node(YAML::NodeType::Map);
  ASSERT_TRUE(spec->Save(work.Sub("tf/feature_spec.yaml")).ok());
  ASSERT_EQ(
      RunSift({"data", "convert", work.Sub("tf"), "--from", "tfrecord", "--out", work.Sub("imp")})
          .exit_code,
      0);
  auto orig = nlohmann::json::parse(RunSift({"data", "inspect", Tiny(), "--json"}).out);
  auto r = RunSift({"data", "inspect", work.Sub("imp"), "--json", "--verify"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source_type"], "sift_samples");
  EXPECT_EQ(j["users"], 2000);
  EXPECT_TRUE(j["events"].is_null());
  EXPECT_EQ(j["train_samples"], orig["train_samples"]);
  EXPECT_EQ(j["test_samples"], orig["test_samples"]);
  EXPECT_EQ(j["test_history_length"], orig["test_history_length"]);
  EXPECT_EQ(j["train_history_length"], orig["train_history_length"]);
  EXPECT_TRUE(j["heuristics_computed"].get<bool>());
  EXPECT_TRUE(j["oracle_test_auc"].is_null());
  // The history heuristics see the same samples, so they agree exactly with the stored ones;
  // popularity comes from a different count (train positives), so pop_item only roughly.
  for (const char* k : {"frac_short10", "frac_all100"}) {
    EXPECT_DOUBLE_EQ(j[k].get<double>(), orig[k].get<double>()) << k;
  }
  EXPECT_NEAR(j["smooth_recency"].get<double>(), orig["smooth_recency"].get<double>(), 0.01);
  EXPECT_NEAR(j["pop_item"].get<double>(), orig["pop_item"].get<double>(), 0.05);
}

TEST_F(DataInspectTest, VerifyCatchesCorruption) {
  TempDir work;
  std::string copy = work.Sub("copy");
  ASSERT_EQ(RunSift({"data", "gen", "--preset", "tiny", "--seed", "3", "--out", copy}).exit_code,
            0);
  std::string ev = ReadAll(copy + "/events.bin");
  ev[ev.size() / 2] ^= 0x10;
  WriteAll(copy + "/events.bin", ev);
  EXPECT_EQ(RunSift({"data", "inspect", copy}).exit_code, 0);  // headers and sizes are fine
  auto r = RunSift({"data", "inspect", copy, "--verify"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("events.bin: payload checksum mismatch"));
}

// Each kind of damage, through the command a user runs: exit 1, one line, the file and the fault.
struct Damage {
  const char* name;
  const char* file;
  void (*apply)(std::string* bytes);
  const char* expected;
};
void PrintTo(const Damage& d, std::ostream* os) { *os << d.name; }

class DataInspectDamageTest : public DataInspectTest,
                              public ::testing::WithParamInterface<Damage> {};

TEST_P(DataInspectDamageTest, OneLineNamingFileAndFault) {
  const Damage& d = GetParam();
  TempDir work;
  std::string copy = work.Sub("copy");
  ASSERT_EQ(RunSift({"data", "gen", "--preset", "tiny", "--seed", "3", "--out", copy}).exit_code,
            0);
  std::string bytes = ReadAll(copy + "/" + d.file);
  d.apply(&bytes);
  WriteAll(copy + "/" + d.file, bytes);
  auto r = RunSift({"data", "inspect", copy, "--verify"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(copy + "/" + d.file));
  EXPECT_THAT(r.err, HasSubstr(d.expected));
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, DataInspectDamageTest,
    ::testing::Values(
        Damage{"BadMagic", "users.bin", [](std::string* b) { (*b)[0] = 'X'; }, "bad magic"},
        Damage{"Truncated", "events.bin", [](std::string* b) { b->resize(b->size() - 100); },
               "truncated"},
        Damage{"HeaderFlip", "events.bin", [](std::string* b) { (*b)[40] ^= 1; },
               "header checksum"},
        Damage{"PayloadFlip", "users.bin", [](std::string* b) { (*b)[100] ^= 1; },
               "payload checksum mismatch"},
        Damage{"YamlSyntax", "feature_spec.yaml", [](std::string* b) { *b += "x: [\n"; },
               "YAML syntax error"},
        Damage{"OddHeuristicKey", "feature_spec.yaml",
               [](std::string* b) {
                 const std::string key = "  heuristic_test_auc:\n";
                 b->insert(b->find(key) + key.size(), "    ? [a, b]\n    : 0.5\n");
               },
               "metadata.heuristic_test_auc"},
        Damage{"HugeHistory", "feature_spec.yaml",
               [](std::string* b) {
                 b->replace(b->find("dimensions: [100]"), 17, "dimensions: [100000000000]");
               },
               "dimensions"},
        Damage{"UnknownDtype", "feature_spec.yaml",
               [](std::string* b) { b->replace(b->find("dtype: int64"), 12, "dtype: int65"); },
               "unsupported dtype 'int65'"}),
    [](const ::testing::TestParamInfo<Damage>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace sift
