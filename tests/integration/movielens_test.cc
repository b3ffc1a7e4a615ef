// MovieLens-100K from RecBole's PyPI wheel (docs/own-data.md): fetched by
// scripts/fetch-movielens.sh into a directory kept between test runs (the data is never committed),
// imported as `make data-movielens` does, checked against the dataset's published counts, and
// trained: a model must beat every parameter-free heuristic. Skipped, with the reason, when the
// wheel cannot be fetched (no route to PyPI).
#include <sys/wait.h>
#include <cstdio>

#include <cstdlib>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/data/dataset.h"
#include "common/data/event_log.h"
#include "common/data/heuristics.h"
#include "common/file_util.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using ::sift::testing::ReadAll;
using ::sift::testing::RunSift;
using ::sift::testing::TempDir;

// The raw files, fetched once per build directory; empty with *why set when they cannot be.
std::string FetchRaw(std::string* why) {
  const std::string raw = "movielens-raw";  // under the tests' working directory (the build)
  if (PathExists(raw + "/ml-100k.inter") && PathExists(raw + "/ml-100k.item")) return raw;
  const std::string log = "movielens-fetch.log";
  const std::string cmd = absl::StrCat("bash ", SIFT_SOURCE_DIR, "/scripts/fetch-movielens.sh ",
                                       raw, " > ", log, " 2>&1");
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    *why = absl::StrCat("cannot fetch MovieLens-100K (", cmd, " exited ", WEXITSTATUS(rc),
                        "): ", ReadAll(log));
    return "";
  }
  return raw;
}

EventLogOptions MovieLens(const std::string& raw, const std::string& out) {
  EventLogOptions o;
  o.events_paths = {raw + "/ml-100k.inter"};
  o.items_path = raw + "/ml-100k.item";
  o.items_key = "item_id";
  o.items_category = "class";
  o.category_separator = " ";
  o.test_events = 10;
  o.out_dir = out;
  return o;
}

// The last "test_auc" of a DLLL log.
double LastTestAuc(const std::string& log) {
  static const std::regex re("\"test_auc\": ([0-9.eE+-]+)");
  double auc = -1;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    auc = std::stod((*it)[1]);
  }
  return auc;
}

TEST(MovieLens100K, ImportsToItsPublishedCountsAndATrainedModelBeatsEveryHeuristic) {
  std::string why;
  const std::string raw = FetchRaw(&why);
  if (raw.empty()) GTEST_SKIP() << why;
  TempDir tmp;

  // All ratings: 943 users, 1,682 items, 19 first genres, 100,000 events; leave-last-10-out.
  auto all = ImportEventLog(MovieLens(raw, tmp.Sub("ml-100k")));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->users, 943);
  EXPECT_EQ(all->items_kept, 1682);
  EXPECT_EQ(all->categories, 19);
  EXPECT_EQ(all->events_kept, 100000);
  EXPECT_EQ(all->items_without_category, 0);
  auto ds = Dataset::Open(tmp.Sub("ml-100k"), /*verify=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // Train: 2 x (100,000 - 943 x 11) pairs; test: 2 x 943 x 10 (9,430 positives).
  EXPECT_EQ((*ds)->samples().NumSamples(Split::kTrain), 179254);
  EXPECT_EQ((*ds)->samples().NumSamples(Split::kTest), 18860);

  // Ratings >= 4: users with at least 20 of them.
  EventLogOptions r4 = MovieLens(raw, tmp.Sub("ml-100k-r4"));
  r4.min_value_column = "rating";
  r4.min_value = 4;
  auto liked = ImportEventLog(r4);
  ASSERT_TRUE(liked.ok()) << liked.status();
  EXPECT_EQ(liked->rows_below_value, 44625);
  EXPECT_EQ(liked->users, 703);
  EXPECT_EQ(liked->items_kept, 1439);
  EXPECT_EQ(liked->categories, 18);
  EXPECT_EQ(liked->events_kept, 52244);
  EXPECT_EQ(liked->train_samples, 89022);
  EXPECT_EQ(liked->test_samples, 14060);

  // One epoch of DIN (the quickest model) beats the best heuristic on the test split.
  auto h = ComputeHeuristicAucs(**ds, nullptr);
  ASSERT_TRUE(h.ok()) << h.status();
  double best = 0;
  for (double auc : h->auc) best = std::max(best, auc);
  const auto run =
      RunSift({"train", "--dataset", tmp.Sub("ml-100k"), "--model", "din", "--epochs", "1",
               "--batch-size", "1024", "--seed", "1", "--results-dir", tmp.Sub("results")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const double auc = LastTestAuc(ReadAll(tmp.Sub("results/log.json")));
  EXPECT_GT(auc, best) << "best heuristic " << best;
  std::printf("ML-100K: DIN, 1 epoch: test AUC %.4f; best heuristic %.4f\n", auc, best);
}

}  // namespace
}  // namespace sift::data
