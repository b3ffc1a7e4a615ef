// `sift data gen` end to end: the small preset lands on the figures of docs/data.md 5.3 (read back
// from the written metadata and dataset), the same seed gives byte-identical files whatever the
// thread count, another seed differs, and bad options are clear errors.
#include <algorithm>
#include <vector>

#include "common/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using sift::testing::ReadAll;
using sift::testing::RunSift;
using sift::testing::TempDir;
using ::testing::HasSubstr;

TEST(DataGen, SmallPresetMatchesTheReferenceFigures) {
  TempDir tmp;
  const std::string dir = tmp.Sub("small");
  auto r = RunSift({"data", "gen", "--preset", "small", "--seed", "1", "--out", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("oracle"));
  EXPECT_THAT(r.out, HasSubstr("test 40000"));

  auto ds = data::Dataset::Open(dir, /*verify=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const YAML::Node meta = (*ds)->spec().metadata;
  EXPECT_EQ(meta["source"].as<std::string>(), "synthetic");
  EXPECT_EQ(meta["synthetic"]["preset"].as<std::string>(), "small");
  EXPECT_NEAR(meta["oracle_test_auc"].as<double>(), 0.904, 0.006);
  const YAML::Node h = meta["heuristic_test_auc"];
  EXPECT_NEAR(h["frac_short10"].as<double>(), 0.831, 0.006);
  EXPECT_NEAR(h["frac_all100"].as<double>(), 0.860, 0.006);
  EXPECT_NEAR(h["smooth_recency"].as<double>(), 0.878, 0.006);
  EXPECT_NEAR(h["pop_item"].as<double>(), 0.50, 0.01);
  EXPECT_GT(meta["oracle_strong_test_auc"].as<double>(), meta["oracle_test_auc"].as<double>());
  for (const char* k : {"pop_cat", "frac_long90", "smooth_all100", "smooth_short10"}) {
    ASSERT_TRUE(h[k]) << k;
  }

  const data::Timeline& tl = *(*ds)->timeline();
  ASSERT_EQ(tl.num_users(), 20000);
  std::vector<int64_t> len(tl.num_users());
  for (int64_t u = 0; u < tl.num_users(); ++u) len[u] = tl.user_length(u);
  std::sort(len.begin(), len.end());
  const double mean = static_cast<double>(tl.num_events()) / 20000.0;
  EXPECT_NEAR(mean, 56.3, 2.0);
  EXPECT_EQ(len.front(), 20);
  EXPECT_EQ(len[len.size() / 2], 32);
  EXPECT_LE(len.back(), 1000);
  EXPECT_NEAR(static_cast<double>(tl.num_events()), 1.12e6, 0.04e6);
  EXPECT_NEAR(static_cast<double>((*ds)->samples().NumSamples(data::Split::kTrain)), 2.16e6,
              0.08e6);
  EXPECT_EQ((*ds)->samples().NumSamples(data::Split::kTest), 40000);
}

TEST(DataGen, SameSeedSameBytesAnyThreadCount) {
  TempDir tmp;
  const std::vector<std::string> files = {"events.bin", "users.bin", "feature_spec.yaml"};
  auto gen = [&](const std::string& name, const std::string& seed, const std::string& threads) {
    auto r = RunSift({"data", "gen", "--preset", "tiny", "--seed", seed, "--threads", threads,
                      "--out", tmp.Sub(name)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  };
  gen("a", "7", "1");
  gen("b", "7", "2");
  gen("c", "8", "2");
  for (const auto& f : files) {
    EXPECT_EQ(ReadAll(tmp.Sub("a/" + f)), ReadAll(tmp.Sub("b/" + f))) << f;
  }
  EXPECT_NE(ReadAll(tmp.Sub("a/events.bin")), ReadAll(tmp.Sub("c/events.bin")));
  EXPECT_NE(ReadAll(tmp.Sub("a/feature_spec.yaml")), ReadAll(tmp.Sub("c/feature_spec.yaml")));
}

TEST(DataGen, LongTailAndOverrides) {
  TempDir tmp;
  auto r = RunSift({"data", "gen", "--preset", "tiny", "--long-tail", "--users", "3000", "--out",
                    tmp.Sub("lt")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto ds = data::Dataset::Open(tmp.Sub("lt"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  const data::Timeline& tl = *(*ds)->timeline();
  EXPECT_EQ(tl.num_users(), 3000);
  int64_t longest = 0;
  for (int64_t u = 0; u < tl.num_users(); ++u) longest = std::max(longest, tl.user_length(u));
  EXPECT_GT(longest, 2000);  // lifelong sequences
  const YAML::Node s = (*ds)->spec().metadata["synthetic"];
  EXPECT_TRUE(s["long_tail"].as<bool>());
  EXPECT_EQ(s["len_cap"].as<int64_t>(), 20000);
  EXPECT_EQ(s["users"].as<int64_t>(), 3000);

  r = RunSift({"data", "gen", "--preset", "tiny", "--max-events", "30", "--out", tmp.Sub("cap")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ds = data::Dataset::Open(tmp.Sub("cap"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  for (int64_t u = 0; u < (*ds)->timeline()->num_users(); ++u) {
    ASSERT_LE((*ds)->timeline()->user_length(u), 30);
  }
}

TEST(DataGen, InvalidOptionsAreClearErrors) {
  TempDir tmp;
  auto r =
      RunSift({"data", "gen", "--preset", "tiny", "--categories", "20000", "--out", tmp.Sub("x")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("categories (20000) must not exceed items (10000)"));
  r = RunSift({"data", "gen", "--preset", "tiny", "--users", "0", "--out", tmp.Sub("x")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("users must be"));
  r = RunSift({"data", "gen", "--preset", "medium"});
  EXPECT_EQ(r.exit_code, 2);
  r = RunSift({"data", "gen", "--preset", "tiny", "--max-events", "1", "--out", tmp.Sub("x")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--max-events"));
}

}  // namespace
}  // namespace sift
