// The Amazon import end to end: fixture files (plain and gzip) written here, imported with
// ImportAmazon and `sift data amazon`, checked through Dataset::Open against an independent
// in-test model of model-spec 7.3–7.5.
#include "common/data/amazon.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/data/dataset.h"
#include "common/file_util.h"
#include "common/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using ::sift::testing::ReadAll;
using ::sift::testing::RunSift;
using ::sift::testing::TempDir;
using ::sift::testing::WriteAll;
using ::testing::HasSubstr;

constexpr int64_t kDay = 86400;
constexpr int64_t kT0 = 1300000000;

void WriteGz(const std::string& path, const std::string& data) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  ASSERT_EQ(gzwrite(gz, data.data(), static_cast<unsigned>(data.size())),
            static_cast<int>(data.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

std::string ReviewJson(const std::string& user, const std::string& asin, int64_t time) {
  // Other fields as in the real files; the text holds U+2028 and U+0085, which must not split.
  return absl::StrCat(R"({"reviewerID": ")", user, R"(", "asin": ")", asin,
                      R"(", "reviewerName": "R. \"Reader\"", "helpful": [0, 0], )",
                      R"("reviewText": "Great\u2028read)", "\xe2\x80\xa8",
                      "still \xc2\x85 one line",
                      R"(", "overall": 5.0, "summary": "ok", "unixReviewTime": )", time,
                      R"(, "reviewTime": "05 5, 2014"})");
}

struct Review {
  std::string user, asin;
  int64_t time;
};

// The fixture: reviews and metadata as lines, with what the import must find.
struct Fixture {
  std::vector<std::string> review_lines, meta_lines;
  std::vector<Review> valid;              // every valid review row
  std::vector<int64_t> bad_review_lines;  // 1-based
  std::vector<int64_t> bad_meta_lines;
  std::map<std::string, std::string> category;  // asin -> expected category string
  int64_t empty_review_lines = 0;
};

Fixture MakeFixture() {
  Fixture f;
  // Users kept: uA (exactly 20 rows), uB (22, with a duplicate review and same-day ties),
  // uE (21, CRLF line endings). Dropped: uC (19 valid rows + 1 bad one), uD (1 row).
  const std::vector<std::string> pool = {"i1",     "i2",    "i3",    "i9",    "i10",   "multi",
                                         "nometa", "nocat", "kids1", "kids2", "dance", "dance_sp"};
  std::vector<Review> rows;
  for (int k = 0; k < 20; ++k) rows.push_back({"uA", pool[k % pool.size()], kT0 + (19 - k) * kDay});
  for (int k = 0; k < 18; ++k) rows.push_back({"uB", pool[(k * 5) % pool.size()], kT0 + k * kDay});
  rows.push_back({"uB", "i1", kT0 + 30 * kDay});  // duplicate review: kept twice
  rows.push_back({"uB", "i1", kT0 + 30 * kDay});
  rows.push_back({"uB", "i9", kT0 + 31 * kDay});  // tie: "i10" < "i9" as strings
  rows.push_back({"uB", "i10", kT0 + 31 * kDay});
  for (int k = 0; k < 21; ++k) rows.push_back({"uE", pool[(k * 7 + 3) % pool.size()], kT0 - k});
  for (int k = 0; k < 19; ++k) {
    rows.push_back({"uC", k % 2 ? "c_only1" : (k % 3 ? "c_only2" : "i1"), kT0 + k});
  }
  rows.push_back({"uD", "c_only2", kT0});
  // Shuffle with a fixed seed so that users interleave in the file.
  Rng rng(7);
  for (size_t i = rows.size() - 1; i > 0; --i) std::swap(rows[i], rows[rng.Below(i + 1)]);

  const std::vector<std::string> bad_reviews = {
      R"({"reviewerID": "uC", "asin": "i2", "unixReviewTime": "1300000000"})",  // wrong type
      R"({"reviewerID": "uC", "asin": "i2", "unixReviewTime": 13)",             // bad JSON
      R"({"reviewerID": "uC", "asin": "i3"})",                                  // missing field
      R"({"reviewerID": 17, "asin": "i3", "unixReviewTime": 1300000000})",      // wrong type
      R"(["uA", "i1", 1300000000])",                                            // not an object
  };
  size_t next_bad = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i % 17 == 5 && next_bad < bad_reviews.size()) {
      f.review_lines.push_back(bad_reviews[next_bad++]);
      f.bad_review_lines.push_back(static_cast<int64_t>(f.review_lines.size()));
    }
    if (i % 23 == 11) {
      f.review_lines.push_back("");
      ++f.empty_review_lines;
    }
    std::string line = ReviewJson(rows[i].user, rows[i].asin, rows[i].time);
    if (rows[i].user == "uE") line += "\r";
    f.review_lines.push_back(line);
    f.valid.push_back(rows[i]);
  }
  while (next_bad < bad_reviews.size()) {
    f.review_lines.push_back(bad_reviews[next_bad++]);
    f.bad_review_lines.push_back(static_cast<int64_t>(f.review_lines.size()));
  }

  auto meta = [&](const std::string& asin, const std::string& categories) {
    f.meta_lines.push_back(
        absl::StrCat("{'asin': '", asin, "', 'title': \"It's a title\", ",
                     "'price': 3.17, 'related': {'also_bought': ['x1', 'x2']}, ",
                     "'salesRank': {'Books': 211836}, 'categories': ", categories, "}"));
  };
  auto bad_meta = [&](const std::string& line) {
    f.meta_lines.push_back(line);
    f.bad_meta_lines.push_back(static_cast<int64_t>(f.meta_lines.size()));
  };
  meta("i1", "[['Books', 'Fiction']]");
  meta("i2", "[['Books', 'Literature', 'Fiction']]");
  bad_meta("{'asin': 'i3', 'categories': [['Books', 'History']");  // unterminated
  meta("i3", "[['Books', 'Fiction']]");
  meta("i9", "[['Books', 'Fiction']]");
  f.meta_lines.push_back("");
  meta("i10", "[['Books', 'History']]");
  meta("multi", "[['Books', 'Fiction', 'Mystery'], ['Books', 'Kindle', 'Thriller']]");
  meta("nocat", "[]");
  meta("kids1", R"([['Books', 'Children\'s Books']])");
  meta("kids2", R"([["Books", "Children's Books"]])");
  meta("dance", "[['Sports & Outdoors', 'Other Sports', 'Dance']]");
  meta("dance_sp", "[['Sports & Outdoors', 'Dance ']]");            // no trimming: another category
  bad_meta("{'asin': 'i1', 'categories': [['Books', 'Poetry']]}");  // duplicate asin
  bad_meta("{'title': 'no asin', 'categories': [['Books']]}");      // missing field
  bad_meta("{'asin': 'i2x', 'categories': 'Books'}");               // wrong type
  meta("c_only1", "[['Books', 'OnlyDropped']]");  // reviewed by dropped users only
  meta("unreviewed", "[['Books', 'Gardening']]");
  f.meta_lines.push_back("{'asin': 'tuple_paths', 'categories': (('Books', 'Fiction'),)}");

  f.category = {{"i1", "Fiction"},
                {"i2", "Fiction"},
                {"i3", "Fiction"},
                {"i9", "Fiction"},
                {"i10", "History"},
                {"multi", "Mystery"},
                {"nometa", kNoCategory},
                {"nocat", kNoCategory},
                {"kids1", "Children's Books"},
                {"kids2", "Children's Books"},
                {"dance", "Dance"},
                {"dance_sp", "Dance "}};
  return f;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) absl::StrAppend(&s, l, "\n");
  return s;
}

// The expected dataset, derived from the fixture the simple way (model-spec 7.3–7.5).
struct Expected {
  std::vector<std::string> users;  // by id - 1
  std::map<std::string, int32_t> item_id, category_id;
  std::vector<std::vector<std::tuple<int64_t, std::string>>> events;  // per user (time, asin)
};

Expected Model(const Fixture& f, int64_t min_reviews) {
  std::map<std::string, std::vector<std::tuple<int64_t, std::string>>> by_user;
  for (const Review& r : f.valid) by_user[r.user].emplace_back(r.time, r.asin);
  Expected e;
  std::set<std::string> items, cats;
  for (auto& [user, evs] : by_user) {  // std::map: byte order of reviewerID
    if (static_cast<int64_t>(evs.size()) < min_reviews) continue;
    std::sort(evs.begin(), evs.end());
    e.users.push_back(user);
    e.events.push_back(evs);
    for (const auto& ev : evs) {
      items.insert(std::get<1>(ev));
      auto it = f.category.find(std::get<1>(ev));
      cats.insert(it == f.category.end() ? kNoCategory : it->second);
    }
  }
  for (const auto& i : items) e.item_id[i] = static_cast<int32_t>(e.item_id.size() + 1);
  for (const auto& c : cats) e.category_id[c] = static_cast<int32_t>(e.category_id.size() + 1);
  return e;
}

class AmazonImport : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = MakeFixture();
    reviews_gz_ = dir_.Sub("reviews.json.gz");
    reviews_plain_ = dir_.Sub("reviews.json");
    meta_plain_ = dir_.Sub("meta.json");
    meta_gz_ = dir_.Sub("meta.json.gz");
    WriteGz(reviews_gz_, Join(f_.review_lines));
    WriteAll(reviews_plain_, Join(f_.review_lines));
    WriteAll(meta_plain_, Join(f_.meta_lines));
    WriteGz(meta_gz_, Join(f_.meta_lines));
  }

  AmazonOptions Options(const std::string& reviews, const std::string& meta,
                        const std::string& out) {
    AmazonOptions o;
    o.reviews_path = reviews;
    o.meta_path = meta;
    o.out_dir = out;
    o.max_bad_fraction = 0.25;
    return o;
  }

  TempDir dir_;
  Fixture f_;
  std::string reviews_gz_, reviews_plain_, meta_plain_, meta_gz_;
};

TEST_F(AmazonImport, MatchesTheReferencePreprocessing) {
  const std::string out = dir_.Sub("ds");
  StatusOr<AmazonReport> r = ImportAmazon(Options(reviews_gz_, meta_plain_, out));
  ASSERT_TRUE(r.ok()) << r.status();
  const Expected e = Model(f_, 20);
  ASSERT_EQ(e.users, (std::vector<std::string>{"uA", "uB", "uE"}));  // uC, uD dropped

  // Report.
  EXPECT_EQ(r->reviews.lines, static_cast<int64_t>(f_.review_lines.size()));
  EXPECT_EQ(r->reviews.empty_lines, f_.empty_review_lines);
  EXPECT_EQ(r->reviews.bad_lines, 5);
  ASSERT_EQ(r->reviews.first_bad.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r->reviews.first_bad[i].line, f_.bad_review_lines[i]);
  EXPECT_THAT(r->reviews.first_bad[0].what, HasSubstr("unixReviewTime: expected an integer"));
  EXPECT_THAT(r->reviews.first_bad[1].what, HasSubstr("invalid JSON"));
  EXPECT_THAT(r->reviews.first_bad[2].what, HasSubstr("missing field 'unixReviewTime'"));
  EXPECT_THAT(r->reviews.first_bad[3].what, HasSubstr("reviewerID: expected a string"));
  EXPECT_THAT(r->reviews.first_bad[4].what, HasSubstr("expected a JSON object"));
  EXPECT_THAT(r->reviews.BadLineMessages()[0],
              HasSubstr(absl::StrCat("reviews.json.gz:", f_.bad_review_lines[0], ": ")));
  EXPECT_EQ(r->meta.bad_lines, 4);
  ASSERT_EQ(r->meta.first_bad.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r->meta.first_bad[i].line, f_.bad_meta_lines[i]);
  EXPECT_THAT(r->meta.first_bad[0].what, HasSubstr("not a Python literal dict: column "));
  EXPECT_THAT(r->meta.first_bad[1].what, HasSubstr("duplicate asin 'i1' (first on line 1)"));
  EXPECT_THAT(r->meta.first_bad[2].what, HasSubstr("missing field 'asin'"));
  EXPECT_THAT(r->meta.first_bad[3].what, HasSubstr("categories: expected a list"));
  EXPECT_EQ(r->reviews_read, static_cast<int64_t>(f_.valid.size()));
  EXPECT_EQ(r->users_read, 5);
  EXPECT_EQ(r->users, 3);
  EXPECT_EQ(r->items, 12);
  EXPECT_EQ(r->categories, 7);
  EXPECT_EQ(r->reviews_kept, 20 + 22 + 21);
  EXPECT_EQ(r->items_without_meta, 1);      // nometa
  EXPECT_EQ(r->items_without_category, 1);  // nocat

  // The dataset.
  StatusOr<std::unique_ptr<Dataset>> ds = Dataset::Open(out, /*verify=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Timeline* t = (*ds)->timeline();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ((*ds)->source_type(), kSourceTimeline);
  EXPECT_EQ((*ds)->negative_seed(), 12345u);
  EXPECT_EQ((*ds)->spec().TableCardinalities(), (std::vector<int64_t>{3, 12, 7}));
  ASSERT_EQ(t->num_users(), 3);
  ASSERT_EQ(t->num_item_features(), 2);
  ASSERT_EQ(t->num_user_features(), 1);
  ASSERT_TRUE(t->has_timestamps());
  EXPECT_EQ(e.item_id.size(), 12u);
  EXPECT_EQ(e.category_id.at("Children's Books"), 1);  // byte order: upper case first
  EXPECT_EQ(e.category_id.at("Dance"), 2);
  EXPECT_EQ(e.category_id.at("Dance "), 3);
  EXPECT_EQ(e.category_id.at(kNoCategory), 7);
  EXPECT_EQ(e.item_id.count("c_only1"), 0u);
  int64_t train_pairs = 0;
  for (int64_t u = 0; u < t->num_users(); ++u) {
    SCOPED_TRACE(e.users[u]);
    EXPECT_EQ(t->user_features(u)[0], u + 1);
    const auto& evs = e.events[u];
    ASSERT_EQ(t->user_length(u), static_cast<int64_t>(evs.size()));
    for (size_t k = 0; k < evs.size(); ++k) {
      const int64_t ev = static_cast<int64_t>(t->user_begin(u) + k);
      const std::string& asin = std::get<1>(evs[k]);
      EXPECT_EQ(t->event(ev)[0], e.item_id.at(asin)) << "event " << k;
      const auto cat = f_.category.find(asin);
      EXPECT_EQ(t->event(ev)[1],
                e.category_id.at(cat == f_.category.end() ? kNoCategory : cat->second));
      EXPECT_EQ(t->timestamps()[ev], std::get<0>(evs[k]));
    }
    train_pairs += t->user_length(u) - 2;
  }
  // uB's end: the duplicate i1 twice, then the same-day tie in asin-string order (i10, i9).
  const uint64_t b_end = t->user_end(1);
  EXPECT_EQ(t->event(b_end - 4)[0], e.item_id.at("i1"));
  EXPECT_EQ(t->event(b_end - 3)[0], e.item_id.at("i1"));
  EXPECT_EQ(t->event(b_end - 2)[0], e.item_id.at("i10"));
  EXPECT_EQ(t->event(b_end - 1)[0], e.item_id.at("i9"));
  EXPECT_EQ(t->timestamps()[b_end - 2], t->timestamps()[b_end - 1]);
  // uE's rows were written newest first: the timeline is oldest first.
  for (uint64_t ev = t->user_begin(2) + 1; ev < t->user_end(2); ++ev) {
    EXPECT_LE(t->timestamps()[ev - 1], t->timestamps()[ev]);
  }

  // Samples: 2 * sum(N - 2) train, 2 * U test; the test target is the user's last event and its
  // label-0 twin has a real (item, category) pair of the dataset.
  const SampleSource& s = (*ds)->samples();
  EXPECT_EQ(s.NumSamples(Split::kTrain), 2 * train_pairs);
  EXPECT_EQ(s.NumSamples(Split::kTest), 2 * 3);
  std::set<std::pair<int32_t, int32_t>> pairs;
  for (int64_t ev = 0; ev < t->num_events(); ++ev) pairs.emplace(t->event(ev)[0], t->event(ev)[1]);
  Batch b;
  b.Allocate(6, 1, 2, HistoryOptions{});
  for (int64_t i = 0; i < 6; ++i) s.Materialize(Split::kTest, i, i, &b);
  for (int64_t u = 0; u < 3; ++u) {
    EXPECT_EQ(b.User(0)[2 * u], u + 1);
    EXPECT_EQ(b.Target(0)[2 * u], t->event(static_cast<int64_t>(t->user_end(u)) - 1)[0]);
    EXPECT_EQ(b.hist_len[2 * u], t->user_length(u) - 1);
    EXPECT_TRUE(pairs.count({b.Target(0)[2 * u + 1], b.Target(1)[2 * u + 1]}));
  }

  // Metadata.
  const YAML::Node m = (*ds)->spec().metadata;
  EXPECT_EQ(m["source"].as<std::string>(), "amazon");
  EXPECT_EQ(m["amazon"]["reviews_file"].as<std::string>(), "reviews.json.gz");
  EXPECT_EQ(m["amazon"]["meta_file"].as<std::string>(), "meta.json");
  EXPECT_EQ(m["amazon"]["users"].as<int64_t>(), 3);
  EXPECT_EQ(m["amazon"]["items"].as<int64_t>(), 12);
  EXPECT_EQ(m["amazon"]["categories"].as<int64_t>(), 7);
  EXPECT_EQ(m["amazon"]["reviews_kept"].as<int64_t>(), 63);
  EXPECT_EQ(m["amazon"]["min_reviews"].as<int64_t>(), 20);
  EXPECT_EQ(m["amazon"]["reviews_lines"].as<int64_t>(), r->reviews.lines);
  EXPECT_EQ(m["amazon"]["reviews_bad_lines"].as<int64_t>(), 5);
  EXPECT_EQ(m["amazon"]["meta_lines"].as<int64_t>(), r->meta.lines);
  EXPECT_EQ(m["amazon"]["meta_bad_lines"].as<int64_t>(), 4);
}

void ExpectSameReport(const FileReport& a, const FileReport& b) {
  EXPECT_EQ(a.lines, b.lines);
  EXPECT_EQ(a.empty_lines, b.empty_lines);
  EXPECT_EQ(a.bad_lines, b.bad_lines);
  ASSERT_EQ(a.first_bad.size(), b.first_bad.size());
  for (size_t i = 0; i < a.first_bad.size(); ++i) {
    EXPECT_EQ(a.first_bad[i].line, b.first_bad[i].line);
    EXPECT_EQ(a.first_bad[i].what, b.first_bad[i].what);
  }
}

TEST_F(AmazonImport, SameBytesForGzipPlainAndAnyThreading) {
  AmazonOptions serial = Options(reviews_gz_, meta_plain_, dir_.Sub("serial"));
  serial.threads = 1;
  StatusOr<AmazonReport> want = ImportAmazon(serial);
  ASSERT_TRUE(want.ok()) << want.status();
  struct Variant {
    std::string reviews, meta;
    int threads;
    size_t chunk_bytes;
  };
  // Tiny chunks: one or two lines per parse task, many tasks in flight, out-of-order completion.
  for (const Variant& v :
       {Variant{reviews_plain_, meta_gz_, 1, 1 << 20}, Variant{reviews_gz_, meta_plain_, 3, 300},
        Variant{reviews_plain_, meta_gz_, 5, 1}}) {
    SCOPED_TRACE(
        absl::StrCat(v.reviews, " ", v.meta, " threads ", v.threads, " chunk ", v.chunk_bytes));
    AmazonOptions o = Options(v.reviews, v.meta, dir_.Sub("variant"));
    o.threads = v.threads;
    o.chunk_bytes = v.chunk_bytes;
    StatusOr<AmazonReport> got = ImportAmazon(o);
    ASSERT_TRUE(got.ok()) << got.status();
    for (const char* file : {kEventsFile, kUsersFile}) {
      EXPECT_EQ(ReadAll(JoinPath(serial.out_dir, file)), ReadAll(JoinPath(o.out_dir, file)))
          << file;
    }
    ExpectSameReport(want->reviews, got->reviews);
    ExpectSameReport(want->meta, got->meta);
    EXPECT_EQ(want->items_without_category, got->items_without_category);
    EXPECT_EQ(want->items_without_meta, got->items_without_meta);
  }
}

TEST_F(AmazonImport, MinReviewsIsAFlag) {
  AmazonOptions o = Options(reviews_plain_, meta_plain_, dir_.Sub("low"));
  o.min_reviews = 19;  // uC (19 valid rows; its bad 20th row does not count) is kept now
  o.negative_seed = 99;
  StatusOr<AmazonReport> r = ImportAmazon(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->users, 4);
  EXPECT_EQ(r->items, 14);      // + c_only1, c_only2
  EXPECT_EQ(r->categories, 8);  // + OnlyDropped
  StatusOr<std::unique_ptr<Dataset>> ds = Dataset::Open(o.out_dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->negative_seed(), 99u);
  EXPECT_EQ((*ds)->timeline()->user_length(2), 19);  // uC is the third user
  const Expected e = Model(f_, 19);
  EXPECT_EQ(e.users, (std::vector<std::string>{"uA", "uB", "uC", "uE"}));

  o.min_reviews = 1000;
  StatusOr<AmazonReport> none = ImportAmazon(o);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no user has at least 1000"));
  o.min_reviews = 1;
  EXPECT_EQ(ImportAmazon(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(AmazonImport, TooManyBadLinesIsAnError) {
  AmazonOptions o = Options(reviews_gz_, meta_plain_, dir_.Sub("fail"));
  o.max_bad_fraction = 0.01;  // the default; the reviews file has 5 bad of ~90 lines
  StatusOr<AmazonReport> r = ImportAmazon(o);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  const int64_t non_empty = static_cast<int64_t>(f_.review_lines.size()) - f_.empty_review_lines;
  EXPECT_THAT(msg, HasSubstr(reviews_gz_));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("5 of ", non_empty, " non-empty lines are bad")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("first: line ", f_.bad_review_lines[0],
                                          ": unixReviewTime: expected an integer")));
  EXPECT_FALSE(PathExists(JoinPath(o.out_dir, kFeatureSpecFile)));
  // The metadata has its own budget: 4 bad of 18 non-empty lines.
  o.max_bad_fraction = 0.2;
  r = ImportAmazon(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(meta_plain_ + ": 4 of 18"));
}

TEST_F(AmazonImport, MissingFilesAreClearErrors) {
  StatusOr<AmazonReport> r =
      ImportAmazon(Options(dir_.Sub("nope.json.gz"), meta_plain_, dir_.Sub("x")));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nope.json.gz: cannot open"));
  r = ImportAmazon(Options(reviews_gz_, dir_.Sub("nometa.json"), dir_.Sub("x")));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nometa.json: cannot open"));
}

TEST_F(AmazonImport, TruncatedGzipIsAnError) {
  std::string gz = ReadAll(reviews_gz_);
  const std::string cut = dir_.Sub("cut.json.gz");
  WriteAll(cut, gz.substr(0, gz.size() / 2));
  StatusOr<AmazonReport> r = ImportAmazon(Options(cut, meta_plain_, dir_.Sub("x")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cut.json.gz: read error"));
}

TEST_F(AmazonImport, Cli) {
  const std::string out = dir_.Sub("cli");
  testing::RunResult r = RunSift({"data", "amazon", "--reviews", reviews_gz_, "--meta", meta_gz_,
                                  "--out", out, "--max-bad-fraction", "0.3", "--seed", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("kept: users 3 (>= 20 reviews), items 12, categories 7, reviews 63"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("samples: train ", 2 * (63 - 6), ", test 6")));
  EXPECT_THAT(r.err, HasSubstr("reviews.json.gz: 5 bad line(s) skipped"));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("reviews.json.gz:", f_.bad_review_lines[0], ": ")));
  EXPECT_THAT(r.err, HasSubstr("meta.json.gz: 4 bad line(s) skipped"));
  StatusOr<std::unique_ptr<Dataset>> ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->negative_seed(), 5u);
  EXPECT_EQ((*ds)->timeline()->num_events(), 63);

  testing::RunResult missing = RunSift(
      {"data", "amazon", "--reviews", dir_.Sub("no_such.json"), "--meta", meta_gz_, "--out", out});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("no_such.json: cannot open: No such file or directory"));
  testing::RunResult fatal =
      RunSift({"data", "amazon", "--reviews", reviews_gz_, "--meta", meta_gz_, "--out", out});
  EXPECT_EQ(fatal.exit_code, 1);
  EXPECT_THAT(fatal.err, HasSubstr("5 of"));
  testing::RunResult usage = RunSift({"data", "amazon", "--reviews", reviews_gz_});
  EXPECT_EQ(usage.exit_code, 2);
}

// ---- Building blocks ----

TEST(LineReader, SplitsOnNewlineOnly) {
  TempDir dir;
  const std::string text = std::string("a\xe2\x80\xa8") + "b\r\n\nc\rd\n\r\nlast";
  for (bool gz : {false, true}) {
    const std::string path = dir.Sub(gz ? "l.gz" : "l.txt");
    if (gz) {
      WriteGz(path, text);
    } else {
      WriteAll(path, text);
    }
    StatusOr<std::unique_ptr<LineReader>> r = LineReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::string> lines;
    absl::string_view line;
    bool overlong = true;
    while (true) {
      StatusOr<bool> more = (*r)->Next(&line, &overlong);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      EXPECT_FALSE(overlong);
      lines.emplace_back(line);
      EXPECT_EQ((*r)->line_number(), static_cast<int64_t>(lines.size()));
    }
    EXPECT_EQ(lines, (std::vector<std::string>{"a\xe2\x80\xa8"
                                               "b",
                                               "", "c\rd", "", "last"}));
  }
}

TEST(LineReader, LongLinesAcrossBuffers) {
  TempDir dir;
  std::string text;
  std::vector<std::string> want;
  for (int i = 0; i < 7; ++i) {
    want.push_back(std::string(static_cast<size_t>(300000 * i + 1), static_cast<char>('a' + i)));
    absl::StrAppend(&text, want.back(), "\n");
  }
  const std::string path = dir.Sub("long.gz");
  WriteGz(path, text);
  StatusOr<std::unique_ptr<LineReader>> r = LineReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::string_view line;
  bool overlong = false;
  for (const std::string& w : want) {
    StatusOr<bool> more = (*r)->Next(&line, &overlong);
    ASSERT_TRUE(more.ok() && *more);
    EXPECT_EQ(line, w);
  }
  StatusOr<bool> more = (*r)->Next(&line, &overlong);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
}

TEST(ReviewLine, FieldsAndErrors) {
  ReviewRow row;
  ASSERT_TRUE(ParseReviewLine(ReviewJson("U1", "0001", 1400000000), &row).ok());
  EXPECT_EQ(row.user, "U1");
  EXPECT_EQ(row.item, "0001");
  EXPECT_EQ(row.time, 1400000000);
  // The last of duplicate keys wins, as in Python's json.
  ASSERT_TRUE(
      ParseReviewLine(R"({"asin": 5, "asin": "B", "reviewerID": "u", "unixReviewTime": 1})", &row)
          .ok());
  EXPECT_EQ(row.item, "B");
  auto error = [&](const std::string& line) {
    return std::string(ParseReviewLine(line, &row).message());
  };
  EXPECT_THAT(error(R"({"reviewerID": "u", "asin": "a", "unixReviewTime": 1.5})"),
              HasSubstr("unixReviewTime: expected an integer, got a float"));
  EXPECT_THAT(error(R"({"reviewerID": "u", "asin": ["a"], "unixReviewTime": 1})"),
              HasSubstr("asin: expected a string, got an array"));
  EXPECT_THAT(error(R"({"reviewerID": "u", "asin": "a", "unixReviewTime": 1} x)"),
              HasSubstr("invalid JSON"));
  EXPECT_THAT(error(R"({"reviewerID": "u", "unixReviewTime": 1})"),
              HasSubstr("missing field 'asin'"));
  EXPECT_THAT(error("42"), HasSubstr("expected a JSON object, got an integer"));
  EXPECT_THAT(error(R"({"reviewerID": "u", "asin": "a", "unixReviewTime": 9223372036854775808})"),
              HasSubstr("beyond int64"));
}

TEST(MetaLine, CategoryIsTheLastOfTheFirstPath) {
  MetaRow m;
  ASSERT_TRUE(ParseMetaLine("{'asin': '0000031852', 'title': 'Girls Ballet Tutu Zebra Hot Pink', "
                            "'price': 3.17, 'salesRank': {'Toys & Games': 211836}, 'categories': "
                            "[['Sports & Outdoors', 'Other Sports', 'Dance']]}",
                            &m)
                  .ok());
  EXPECT_EQ(m.asin, "0000031852");
  EXPECT_TRUE(m.has_category);
  EXPECT_EQ(m.category, "Dance");
  ASSERT_TRUE(ParseMetaLine("{'asin': 'a', 'categories': [['B', ' x '], ['C']]}", &m).ok());
  EXPECT_EQ(m.category, " x ");
  ASSERT_TRUE(ParseMetaLine("{'asin': 'a'}", &m).ok());
  EXPECT_FALSE(m.has_category);
  ASSERT_TRUE(ParseMetaLine("{'asin': 'a', 'categories': [[]]}", &m).ok());
  EXPECT_FALSE(m.has_category);
  auto error = [&](const std::string& line) {
    return std::string(ParseMetaLine(line, &m).message());
  };
  EXPECT_THAT(error("{'asin': 7}"), HasSubstr("asin: expected a str, got int"));
  EXPECT_THAT(error("{'asin': 'a', 'categories': [['B', 3]]}"),
              HasSubstr("categories[0][1]: expected a str, got int"));
  // Only categories[0][-1] is read, as in the reference: the rest may be anything.
  ASSERT_TRUE(ParseMetaLine("{'asin': 'a', 'categories': [[3, 'B'], 'C', [None]]}", &m).ok());
  EXPECT_EQ(m.category, "B");
  EXPECT_THAT(error("{'asin': 'a', 'categories': ['B']}"),
              HasSubstr("categories[0]: expected a list, got str"));
  EXPECT_THAT(error("{'asin': 'a', 'categories': None}"),
              HasSubstr("categories: expected a list of category paths, got NoneType"));
  EXPECT_THAT(error("{\"asin\": \"a\", 'categories': [['B']]"),
              HasSubstr("not a Python literal dict: column 36: unterminated dict"));
}

}  // namespace
}  // namespace sift::data
