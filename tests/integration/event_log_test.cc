// The event-log import (`sift data events`, common/data/event_log.h) end to end: hand-written files
// in every supported syntax, imported with ImportEventLog and the CLI, checked through
// Dataset::Open (ids, tokens, order, splits, labelled samples) against the rule written out here.
#include "common/data/event_log.h"

#include <sys/stat.h>
#include <zlib.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/data/amazon.h"
#include "common/data/batch.h"
#include "common/data/dataset.h"
#include "common/data/heuristics.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using ::sift::testing::ReadAll;
using ::sift::testing::RunSift;
using ::sift::testing::TempDir;
using ::sift::testing::WriteAll;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kT0 = 1700000000;

// One user's timeline as (item token, category token, timestamp), oldest first.
struct Ev {
  std::string item, category;
  int64_t time;
  bool operator==(const Ev& o) const {
    return item == o.item && category == o.category && time == o.time;
  }
};
std::ostream& operator<<(std::ostream& os, const Ev& e) {
  return os << "(" << e.item << ", " << e.category << ", " << e.time << ")";
}

std::vector<Ev> UserEvents(const Dataset& ds, const std::string& user) {
  const Vocab* v = ds.vocab();
  EXPECT_NE(v, nullptr);
  const int64_t id = v->Lookup(0, user);
  EXPECT_GT(id, 0) << user;
  if (id == 0) return {};
  const Timeline& t = *ds.timeline();
  std::vector<Ev> out;
  for (uint64_t e = t.user_begin(id - 1); e < t.user_end(id - 1); ++e) {
    out.push_back(Ev{std::string(v->token(1, t.event(e)[0])),
                     std::string(v->token(2, t.event(e)[1])), t.timestamps()[e]});
  }
  return out;
}

std::vector<std::string> Tokens(const Dataset& ds, int table) {
  std::vector<std::string> out;
  for (int64_t id = 1; id <= ds.vocab()->size(table); ++id) {
    out.emplace_back(ds.vocab()->token(table, id));
  }
  return out;
}

// n rows of `user` at kT0 + step * k, items "i<k % m>" with category column "c<k % 3>".
std::string Rows(const std::string& user, int n, int m = 7, int64_t step = 60) {
  std::string s;
  for (int k = 0; k < n; ++k) {
    absl::StrAppend(&s, user, ",i", k % m, ",c", k % 3, ",", kT0 + step * k, "\n");
  }
  return s;
}

EventLogOptions Options(const TempDir& tmp, const std::string& events) {
  EventLogOptions o;
  o.events_paths = {events};
  o.out_dir = tmp.Sub("ds");
  o.user_column = "user";
  o.item_column = "item";
  o.time_column = "ts";
  o.category_column = "cat";
  o.threads = 2;
  o.scan.chunk_bytes = 64;  // many chunks even for small files: the order must not depend on it
  return o;
}

std::unique_ptr<Dataset> OpenOk(const std::string& dir) {
  auto ds = Dataset::Open(dir, /*verify=*/true);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? std::move(ds).value() : nullptr;
}

TEST(EventLogTest, TiesKeepFileOrderAndUsersUnderTheMinimumLeaveNoToken) {
  TempDir tmp;
  // u1: 22 rows; the first three listed share one second and are out of item order; the fourth,
  // earlier, moves before them; the 18 rows listed after them are older still. "short" has 19 rows:
  // dropped, and its only item
  // ("only_short") must not get an id.
  std::string csv = "user,item,cat,ts\n";
  for (int k = 0; k < 19; ++k) absl::StrAppend(&csv, "short,only_short,cx,", kT0 + k, "\n");
  absl::StrAppend(&csv, "u1,z,c1,", kT0 + 5000, "\n");
  absl::StrAppend(&csv, "u1,b,c1,", kT0 + 5000, "\n");
  absl::StrAppend(&csv, "u1,a,c1,", kT0 + 5000, "\n");
  absl::StrAppend(&csv, "u1,early,c2,", kT0 + 4000, "\n");
  csv += Rows("u1", 18);
  WriteAll(tmp.Sub("e.csv"), csv);
  auto r = ImportEventLog(Options(tmp, tmp.Sub("e.csv")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->users, 1);
  EXPECT_EQ(r->users_read, 2);
  auto ds = OpenOk(tmp.Sub("ds"));
  ASSERT_NE(ds, nullptr);
  EXPECT_THAT(Tokens(*ds, 0), ElementsAre("u1"));
  for (const std::string& item : Tokens(*ds, 1)) EXPECT_NE(item, "only_short");
  EXPECT_THAT(Tokens(*ds, 2), ElementsAre("c0", "c1", "c2"));  // byte order; no "cx"
  const std::vector<Ev> ev = UserEvents(*ds, "u1");
  ASSERT_EQ(ev.size(), 22u);
  EXPECT_EQ(ev[18], (Ev{"early", "c2", kT0 + 4000}));
  EXPECT_EQ(ev[19], (Ev{"z", "c1", kT0 + 5000}));
  EXPECT_EQ(ev[20], (Ev{"b", "c1", kT0 + 5000}));
  EXPECT_EQ(ev[21], (Ev{"a", "c1", kT0 + 5000}));
  EXPECT_EQ(ev[0], (Ev{"i0", "c0", kT0}));
  // Ids follow the byte order of the tokens.
  const std::vector<std::string> items = Tokens(*ds, 1);
  EXPECT_TRUE(std::is_sorted(items.begin(), items.end()));
}

TEST(EventLogTest, LeaveLastKOutCountsAndTargetsForKOneAndTen) {
  TempDir tmp;
  WriteAll(tmp.Sub("e.csv"), "user,item,cat,ts\n" + Rows("a", 25) + Rows("b", 40) + Rows("c", 22));
  for (int64_t K : {1, 10}) {
    SCOPED_TRACE(K);
    EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
    o.test_events = K;
    auto r = ImportEventLog(o);
    ASSERT_TRUE(r.ok()) << r.status();
    auto ds = OpenOk(o.out_dir);
    ASSERT_NE(ds, nullptr);
    EXPECT_EQ(ds->test_events(), K);
    const int64_t lengths[] = {25, 40, 22};
    int64_t train = 0;
    for (int64_t L : lengths) train += 2 * (L - 1 - K);
    EXPECT_EQ(ds->samples().NumSamples(Split::kTrain), train);
    EXPECT_EQ(ds->samples().NumSamples(Split::kTest), 2 * 3 * K);
    EXPECT_EQ(r->train_samples, train);
    EXPECT_EQ(r->test_samples, 2 * 3 * K);
    const auto& src = dynamic_cast<const TimelineSamples&>(ds->samples());
    // Test targets: the last K events of each user, in order, each with its label-0 twin.
    for (int64_t u = 0; u < 3; ++u) {
      for (int64_t q = 0; q < K; ++q) {
        for (int twin = 0; twin < 2; ++twin) {
          int64_t user = -1, pos = -1;
          src.Locate(Split::kTest, 2 * (u * K + q) + twin, &user, &pos);
          EXPECT_EQ(user, u);
          EXPECT_EQ(pos, lengths[u] - K + q);
        }
      }
    }
    // Training targets stop right before the first test target.
    std::vector<int64_t> last_train(3, -1);
    for (int64_t i = 0; i < src.NumSamples(Split::kTrain); i += 2) {
      int64_t user = -1, pos = -1;
      src.Locate(Split::kTrain, i, &user, &pos);
      EXPECT_GE(pos, 1);
      last_train[user] = std::max(last_train[user], pos);
    }
    for (int64_t u = 0; u < 3; ++u) EXPECT_EQ(last_train[u], lengths[u] - K - 1);
  }
}

TEST(EventLogTest, EveryTimeFormatOrdersAtFullPrecision) {
  TempDir tmp;
  struct Case {
    TimeFormat format;
    std::vector<std::string> times;  // listed in file order; expected order: by value
    std::vector<int64_t> seconds;    // stored, in file order
  };
  const std::vector<Case> cases = {
      {TimeFormat::kSeconds,
       {"1700000000.5", "1700000000.25", "1700000001"},
       {1700000000, 1700000000, 1700000001}},
      {TimeFormat::kMillis,
       {"1700000000500", "1700000000250", "1700000001000"},
       {1700000000, 1700000000, 1700000001}},
      {TimeFormat::kMicros,
       {"1700000000000500", "1700000000000250", "1700000001000000"},
       {1700000000, 1700000000, 1700000001}},
      {TimeFormat::kIso8601,
       {"2023-11-14T22:13:20.5Z", "2023-11-14T23:13:20.25+01:00", "2023-11-14T22:13:21Z"},
       {1700000000, 1700000000, 1700000001}},
  };
  for (const Case& c : cases) {
    std::string csv = "user,item,cat,ts\n";
    // 20 filler rows long before, then the three rows under test.
    for (int k = 0; k < 20; ++k) {
      std::string t;
      switch (c.format) {
        case TimeFormat::kSeconds:
          t = absl::StrCat(1600000000 + k);
          break;
        case TimeFormat::kMillis:
          t = absl::StrCat(1600000000 + k, "000");
          break;
        case TimeFormat::kMicros:
          t = absl::StrCat(1600000000 + k, "000000");
          break;
        case TimeFormat::kIso8601:
          t = absl::StrCat("2020-09-13T12:26:", 10 + k, "Z");
          break;
      }
      absl::StrAppend(&csv, "u,f", k, ",c,", t, "\n");
    }
    absl::StrAppend(&csv, "u,first_listed,c,", c.times[0], "\n");
    absl::StrAppend(&csv, "u,second_listed,c,", c.times[1], "\n");
    absl::StrAppend(&csv, "u,third_listed,c,", c.times[2], "\n");
    WriteAll(tmp.Sub("e.csv"), csv);
    EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
    o.time_format = c.format;
    auto r = ImportEventLog(o);
    ASSERT_TRUE(r.ok()) << r.status();
    auto ds = OpenOk(o.out_dir);
    ASSERT_NE(ds, nullptr);
    const std::vector<Ev> ev = UserEvents(*ds, "u");
    ASSERT_EQ(ev.size(), 23u);
    // .25 before .5 although listed after it: the order uses the sub-second part.
    EXPECT_EQ(ev[20], (Ev{"second_listed", "c", c.seconds[1]}));
    EXPECT_EQ(ev[21], (Ev{"first_listed", "c", c.seconds[0]}));
    EXPECT_EQ(ev[22], (Ev{"third_listed", "c", c.seconds[2]}));
  }
}

TEST(EventLogTest, ParseTimestampRejectsWhatItCannotRead) {
  int64_t us = 0;
  EXPECT_TRUE(ParseTimestamp("-5", TimeFormat::kSeconds, &us).ok());
  EXPECT_EQ(us, -5000000);
  EXPECT_TRUE(ParseTimestamp("874965758.0", TimeFormat::kSeconds, &us).ok());
  EXPECT_EQ(us, int64_t{874965758} * 1000000);
  for (const char* bad : {"", "12a", "1e9", "1.1234567", " 12", "0x10", "99999999999999999999"}) {
    EXPECT_FALSE(ParseTimestamp(bad, TimeFormat::kSeconds, &us).ok()) << bad;
  }
  EXPECT_FALSE(ParseTimestamp("1.5", TimeFormat::kMillis, &us).ok());
  EXPECT_FALSE(ParseTimestamp("2024-03-01 12:00:00", TimeFormat::kIso8601, &us).ok());
  EXPECT_FALSE(ParseTimestamp("2024-03-01T12:00:00", TimeFormat::kIso8601, &us).ok());  // no zone
  EXPECT_TRUE(ParseTimestamp("2024-03-01T12:00:00Z", TimeFormat::kIso8601, &us).ok());
  EXPECT_EQ(us, int64_t{1709294400} * 1000000);
}

TEST(EventLogTest, SplitDelimitedHonoursQuotesAndMultiCharacterDelimiters) {
  std::vector<absl::string_view> f;
  std::string scratch;
  const std::string line = R"x(1,"American President, The (1995)",Comedy|Drama)x";
  ASSERT_TRUE(SplitDelimited(line, ",", &f, &scratch).ok());
  EXPECT_THAT(f, ElementsAre("1", "American President, The (1995)", "Comedy|Drama"));
  const std::string quoted = R"(2,"Say ""Hi""",)";
  ASSERT_TRUE(SplitDelimited(quoted, ",", &f, &scratch).ok());
  EXPECT_THAT(f, ElementsAre("2", R"(Say "Hi")", ""));
  ASSERT_TRUE(SplitDelimited("1::Toy Story (1995)::Animation|Comedy", "::", &f, &scratch).ok());
  EXPECT_THAT(f, ElementsAre("1", "Toy Story (1995)", "Animation|Comedy"));
  EXPECT_THAT(SplitDelimited(R"(1,"open)", ",", &f, &scratch).message(),
              HasSubstr("may not span lines"));
  EXPECT_FALSE(SplitDelimited(R"(1,"a"b,2)", ",", &f, &scratch).ok());
}

void WriteGz(const std::string& path, const std::string& data) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  ASSERT_EQ(gzwrite(gz, data.data(), static_cast<unsigned>(data.size())),
            static_cast<int>(data.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

TEST(EventLogTest, GzipPlainJsonLinesAndTsvGiveTheSameDataset) {
  TempDir tmp;
  const std::string rows = Rows("a", 23) + Rows("b", 21, 5, 7);
  WriteAll(tmp.Sub("e.csv"), "user,item,cat,ts\n" + rows);
  WriteGz(tmp.Sub("e.csv.gz"), "user,item,cat,ts\n" + rows);
  std::string tsv = "user\titem\tcat\tts\n", jsonl;
  for (absl::string_view line : absl::StrSplit(rows, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    absl::StrAppend(&tsv, absl::StrJoin(f, "\t"), "\n");
    // Numbers stay numbers in JSON: the time, and an item written as a JSON string.
    absl::StrAppend(&jsonl, R"({"user": ")", f[0], R"(", "item": ")", f[1], R"(", "cat": ")", f[2],
                    R"(", "ts": )", f[3], R"(, "other": [1, {"x": null}]})", "\n");
  }
  WriteAll(tmp.Sub("e.tsv"), tsv);
  WriteGz(tmp.Sub("e.jsonl.gz"), jsonl);
  std::map<std::string, std::string> bytes;
  for (const char* name : {"e.csv", "e.csv.gz", "e.tsv", "e.jsonl.gz"}) {
    EventLogOptions o = Options(tmp, tmp.Sub(name));
    o.out_dir = tmp.Sub(absl::StrCat("ds_", name));
    auto r = ImportEventLog(o);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    ASSERT_NE(OpenOk(o.out_dir), nullptr);
    for (const char* f : {kEventsFile, kUsersFile, kVocabFile}) {
      const std::string b = ReadAll(JoinPath(o.out_dir, f));
      if (bytes.count(f) == 0) bytes[f] = b;
      EXPECT_EQ(b, bytes[f]) << name << " " << f;
    }
  }
}

TEST(EventLogTest, ItemsFileFirstTokenFlagsAndNoCategory) {
  TempDir tmp;
  std::string csv = "u,it,t\n";
  const std::vector<std::string> items = {"m1", "m2", "m3", "m4"};
  for (int k = 0; k < 22; ++k) absl::StrAppend(&csv, "x,", items[k % 4], ",", kT0 + k, "\n");
  WriteAll(tmp.Sub("e.csv"), csv);
  // m1: two genres, the first wins; m3: absent from the items file; m4: empty field.
  WriteAll(tmp.Sub("items.csv"),
           "id,title,genres\nm1,\"A, B\",Drama|Comedy\nm2,C,War\nm4,D,\nzz,E,Noir\n");
  EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
  o.user_column = "u";
  o.item_column = "it";
  o.time_column = "t";
  o.category_column.clear();
  o.items_path = tmp.Sub("items.csv");
  o.items_key = "id";
  o.items_category = "genres";
  o.category_separator = "|";
  auto r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items_without_category, 2);
  auto ds = OpenOk(o.out_dir);
  ASSERT_NE(ds, nullptr);
  const std::vector<Ev> ev = UserEvents(*ds, "x");
  EXPECT_EQ(ev[0].category, "Drama");
  EXPECT_EQ(ev[1].category, "War");
  EXPECT_EQ(ev[2].category, kNoCategory);
  EXPECT_EQ(ev[3].category, kNoCategory);
  EXPECT_THAT(Tokens(*ds, 2), ElementsAre("Drama", "War", "no_category"));

  // Genre flags (MovieLens-100K's u.item): the first listed flag set to 1 names the category.
  WriteAll(tmp.Sub("u.item"), "m1|T1|0|1|1\nm2|T2|1|0|0\nm3|T3|0|0|0\nm4|T4|0|0|1\n");
  o.items_path = tmp.Sub("u.item");
  o.items.columns = {"id", "title", "unknown", "Action", "Adventure"};
  o.items.delimiter = "|";
  o.items.header = false;
  o.items_category.clear();
  o.items_category_flags = {"unknown", "Action", "Adventure"};
  r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ds = OpenOk(o.out_dir);
  ASSERT_NE(ds, nullptr);
  const std::vector<Ev> ev2 = UserEvents(*ds, "x");
  EXPECT_EQ(ev2[0].category, "Action");
  EXPECT_EQ(ev2[1].category, "unknown");
  EXPECT_EQ(ev2[2].category, kNoCategory);
  EXPECT_EQ(ev2[3].category, "Adventure");
}

TEST(EventLogTest, ValueFilterCountsRowsBeforeTheUserMinimum) {
  TempDir tmp;
  // "a" has 25 rows, 5 of them rated 2: 20 kept rows stay. "b" has 21 rows, 3 rated 1: 18, dropped.
  std::string csv = "user,item,rating,ts\n";
  for (int k = 0; k < 25; ++k)
    absl::StrAppend(&csv, "a,i", k, ",", k < 5 ? "2" : "4.5", ",", kT0 + k, "\n");
  for (int k = 0; k < 21; ++k)
    absl::StrAppend(&csv, "b,i", k, ",", k < 3 ? "1" : "5", ",", kT0 + k, "\n");
  WriteAll(tmp.Sub("e.csv"), csv);
  EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
  o.category_column.clear();
  o.min_value_column = "rating";
  o.min_value = 4;
  auto r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rows_below_value, 8);
  EXPECT_EQ(r->users, 1);
  EXPECT_EQ(r->events_kept, 20);
  auto ds = OpenOk(o.out_dir);
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(UserEvents(*ds, "a").front().item, "i5");
  EXPECT_THAT(Tokens(*ds, 2), ElementsAre(kNoCategory));
}

// ---- Labelled impressions ----

TEST(EventLogTest, ImpressionHistoriesHoldOnlyEarlierEventsAndTheSplitIsByTime) {
  TempDir tmp;
  // Behaviour of u at t = 100, 200, 300 (a click-through at 300 is also a behaviour).
  WriteAll(tmp.Sub("e.csv"),
           "user,item,cat,ts\nu,b1,c1,100\nu,b2,c2,200\nu,b3,c1,300\nv,b9,c9,50\n");
  // Samples: at 300 (same second as b3: b3 is not in its history), at 301 (b3 is), one of "w"
  // who has no behaviour at all (empty history, kept), one of "v" before its first event.
  WriteAll(tmp.Sub("s.csv"),
           "user,item,cat,ts,clicked\n"
           "u,b3,c1,300,1\n"
           "u,x1,c2,301,0\n"
           "w,x2,c2,150,1\n"
           "v,x3,c3,40,0\n"
           "u,x4,c1,500,1\n"
           "u,x5,c2,499,0\n");
  EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
  o.samples_path = tmp.Sub("s.csv");
  o.label_column = "clicked";
  o.test_from = "499";
  auto r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->train_samples, 4);
  EXPECT_EQ(r->test_samples, 2);
  EXPECT_EQ(r->samples_without_history, 2);
  auto ds = OpenOk(o.out_dir);
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->source_type(), kSourceImpressions);
  EXPECT_THAT(Tokens(*ds, 0), ElementsAre("u", "v", "w"));
  const SampleSource& src = ds->samples();
  ASSERT_EQ(src.NumSamples(Split::kTrain), 4);
  ASSERT_EQ(src.NumSamples(Split::kTest), 2);

  HistoryOptions h;
  h.max_history = 10;
  h.short_history = 5;
  Batch b;
  b.Allocate(8, src.num_user_features(), src.num_item_features(), h);
  auto item = [&](int32_t id) { return std::string(ds->vocab()->token(1, id)); };
  struct Want {
    std::string user, target;
    float label;
    std::vector<std::string> history;  // oldest first
  };
  // Samples are user-major (ids in token order), then by time.
  const std::vector<Want> train = {{"u", "b3", 1, {"b1", "b2"}},
                                   {"u", "x1", 0, {"b1", "b2", "b3"}},
                                   {"v", "x3", 0, {}},
                                   {"w", "x2", 1, {}}};
  const std::vector<Want> test = {{"u", "x5", 0, {"b1", "b2", "b3"}},
                                  {"u", "x4", 1, {"b1", "b2", "b3"}}};
  for (Split split : {Split::kTrain, Split::kTest}) {
    const auto& want = split == Split::kTrain ? train : test;
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(absl::StrCat(SplitName(split), " ", i));
      src.Materialize(split, static_cast<int64_t>(i), 0, &b);
      EXPECT_EQ(ds->vocab()->token(0, b.User(0)[0]), want[i].user);
      EXPECT_EQ(item(b.Target(0)[0]), want[i].target);
      EXPECT_EQ(b.label[0], want[i].label);
      EXPECT_EQ(b.hist_len[0], static_cast<int32_t>(want[i].history.size()));
      std::vector<std::string> hist;
      for (int j = 0; j < h.short_history; ++j) {
        const int32_t id = b.ShortHist(0, 0)[j];
        if (id > 0) hist.push_back(item(id));
      }
      EXPECT_THAT(hist, ElementsAreArray(want[i].history));
    }
  }
  // Heuristics run on stored samples too (the import's users see them in `sift data inspect`).
  auto aucs = ComputeHeuristicAucs(*ds, nullptr);
  ASSERT_TRUE(aucs.ok()) << aucs.status();
  EXPECT_EQ(aucs->samples, 2);
}

TEST(EventLogTest, ImpressionLabelsOtherThanZeroOrOneAreBadLines) {
  TempDir tmp;
  WriteAll(tmp.Sub("e.csv"), "user,item,cat,ts\nu,b1,c1,100\n");
  WriteAll(tmp.Sub("s.csv"), "user,item,cat,ts,label\nu,x,c,200,1\nu,y,c,300,2\nu,z,c,400,0\n");
  EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
  o.samples_path = tmp.Sub("s.csv");
  o.test_from = "400";
  o.max_bad_fraction = 0.5;
  auto r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->samples.bad_lines, 1);
  ASSERT_EQ(r->samples.first_bad.size(), 1u);
  EXPECT_EQ(r->samples.first_bad[0].line, 3);
  EXPECT_THAT(r->samples.first_bad[0].what, HasSubstr("label '2': expected 0 or 1"));
  o.max_bad_fraction = 0.1;
  EXPECT_THAT(ImportEventLog(o).status().message(),
              HasSubstr("s.csv: 1 of 3 non-empty lines are bad"));
}

// ---- Bad input ----

TEST(EventLogTest, BadInputIsNamed) {
  TempDir tmp;
  WriteAll(tmp.Sub("e.csv"), "user,item,cat,ts\n" + Rows("a", 25));
  EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));

  o.time_column = "timestamp";
  EXPECT_THAT(ImportEventLog(o).status().message(),
              HasSubstr("no column 'timestamp' (--time); the header has: user, item, cat, ts"));
  o.time_column = "ts";

  o.min_user_events = 5;
  o.test_events = 10;
  EXPECT_THAT(ImportEventLog(o).status().message(),
              HasSubstr("--min-user-events 5 is below --test-events + 2 = 12"));
  o.min_user_events = -1;
  o.test_events = 1;

  // An unparsable time: file:line, the field; fatal beyond the allowed fraction.
  WriteAll(tmp.Sub("bad.csv"), "user,item,cat,ts\n" + Rows("a", 25) + "a,i1,c1,yesterday\n");
  o.events_paths = {tmp.Sub("bad.csv")};
  auto st = ImportEventLog(o).status();
  EXPECT_THAT(st.message(), HasSubstr("bad.csv: 1 of 26 non-empty lines are bad"));
  EXPECT_THAT(st.message(),
              HasSubstr("line 27: time 'yesterday': not an integer number of seconds"));
  o.max_bad_fraction = 0.05;
  auto r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->events[0].bad_lines, 1);
  EXPECT_THAT(r->events[0].BadLineMessages(),
              ElementsAre(HasSubstr("bad.csv:27: time 'yesterday'")));

  // Too few fields, an empty token.
  WriteAll(tmp.Sub("short.csv"), "user,item,cat,ts\n" + Rows("a", 25) + "a,i1\n,i2,c,5\n");
  o.events_paths = {tmp.Sub("short.csv")};
  o.max_bad_fraction = 0.1;
  r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(
      r->events[0].BadLineMessages(),
      ElementsAre(HasSubstr(":27: 2 fields, expected at least 4"), HasSubstr(":28: empty user")));

  // An items file with two rows for one key names both lines.
  WriteAll(tmp.Sub("items.csv"), "id,genre\ni1,A\ni2,B\ni1,C\n");
  o.events_paths = {tmp.Sub("e.csv")};
  o.category_column.clear();
  o.items_path = tmp.Sub("items.csv");
  o.items_key = "id";
  o.items_category = "genre";
  EXPECT_THAT(ImportEventLog(o).status().message(),
              HasSubstr("items.csv: lines 2 and 4 both describe item 'i1'"));

  // A header-less file takes numbers, and says so for a name.
  o.items_path.clear();
  o.items_key.clear();
  o.items_category.clear();
  o.events.header = false;
  o.user_column = "user";
  EXPECT_THAT(ImportEventLog(o).status().message(),
              HasSubstr("this file has no header, so columns are 0-based numbers"));
}

TEST(EventLogTest, EdgesOfTheSyntax) {
  TempDir tmp;
  // JSON lines behind an empty first line and a byte-order mark, with one key read by two
  // options (the time, and the value filter on it).
  std::string jsonl = "\xEF\xBB\xBF\n";
  for (int k = 0; k < 22; ++k) {
    absl::StrAppend(&jsonl, R"({"user": "u", "item": "i)", k, R"(", "ts": )", kT0 + k, "}\n");
  }
  WriteAll(tmp.Sub("e.jsonl"), jsonl);
  EventLogOptions o = Options(tmp, tmp.Sub("e.jsonl"));
  o.category_column.clear();
  o.min_value_column = "ts";
  o.min_value = kT0 + 1;
  auto r = ImportEventLog(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->events_kept, 21);
  EXPECT_EQ(r->rows_below_value, 1);

  // A byte-order mark before a CSV header is not part of the first column's name.
  WriteAll(tmp.Sub("bom.csv"), "\xEF\xBB\xBFuser,item,cat,ts\n" + Rows("a", 22));
  o = Options(tmp, tmp.Sub("bom.csv"));
  ASSERT_TRUE(ImportEventLog(o).ok());

  // ISO-8601 without what abseil also takes: "infinite-future", surrounding spaces.
  int64_t us = 0;
  EXPECT_FALSE(ParseTimestamp("infinite-future", TimeFormat::kIso8601, &us).ok());
  EXPECT_FALSE(ParseTimestamp(" 2024-03-01T12:00:00Z", TimeFormat::kIso8601, &us).ok());

  // A pipe would be read twice (the header, then the rows): refused, named.
  const std::string fifo = tmp.Sub("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  o = Options(tmp, fifo);
  EXPECT_THAT(ImportEventLog(o).status().message(), HasSubstr("not a regular file"));

  // --test-events has no meaning for stored samples.
  o = Options(tmp, tmp.Sub("bom.csv"));
  o.samples_path = tmp.Sub("bom.csv");
  o.test_from = "0";
  o.test_events = 2;
  EXPECT_THAT(ImportEventLog(o).status().message(), HasSubstr("--test-events applies to derived"));
}

TEST(EventLogTest, AFailedImportLeavesNoDatasetThatOpens) {
  TempDir tmp;
  WriteAll(tmp.Sub("e.csv"), "user,item,cat,ts\n" + Rows("a", 25));
  EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
  ASSERT_TRUE(ImportEventLog(o).ok());
  ASSERT_NE(OpenOk(o.out_dir), nullptr);
  // The same directory, now from a file where nothing survives the filter: the old dataset is
  // gone, not half-replaced.
  WriteAll(tmp.Sub("few.csv"), "user,item,cat,ts\n" + Rows("a", 5));
  o.events_paths = {tmp.Sub("few.csv")};
  EXPECT_THAT(ImportEventLog(o).status().message(), HasSubstr("no user has at least 20 rows"));
  // A filter failure is found before anything is written; an import that fails while writing
  // (or is killed) leaves the directory without its commit point: simulate the latter.
  ASSERT_TRUE(BeginDatasetWrite(o.out_dir).ok());
  EXPECT_THAT(Dataset::Open(o.out_dir).status().message(), HasSubstr("not a dataset directory"));
}

// ---- The same events through the Amazon import ----

TEST(EventLogTest, CsvAndTheAmazonImportOfTheSameEventsAgree) {
  TempDir tmp;
  // Distinct times per user (Amazon breaks ties by asin, the event log by file order), one
  // category per item, every item in the metadata.
  std::string csv = "reviewerID,asin,unixReviewTime\n", reviews, meta, items = "asin,cat\n";
  const std::vector<std::string> users = {"A2", "A1", "B7"};
  for (size_t u = 0; u < users.size(); ++u) {
    for (int k = 0; k < 20 + static_cast<int>(u) * 3; ++k) {
      const std::string asin = absl::StrCat("X", (k * 7 + u) % 13);
      const int64_t t = kT0 + 86400 * ((k * 5) % 31) + k;
      absl::StrAppend(&csv, users[u], ",", asin, ",", t, "\n");
      absl::StrAppend(&reviews, R"({"reviewerID": ")", users[u], R"(", "asin": ")", asin,
                      R"(", "unixReviewTime": )", t, "}\n");
    }
  }
  for (int i = 0; i < 13; ++i) {
    absl::StrAppend(&meta, "{'asin': 'X", i, "', 'categories': [['Books', 'Cat", i % 4, "']]}\n");
    absl::StrAppend(&items, "X", i, ",Cat", i % 4, "\n");
  }
  WriteAll(tmp.Sub("e.csv"), csv);
  WriteAll(tmp.Sub("items.csv"), items);
  WriteAll(tmp.Sub("reviews.json"), reviews);
  WriteAll(tmp.Sub("meta.json"), meta);
  EventLogOptions o = Options(tmp, tmp.Sub("e.csv"));
  o.user_column = "reviewerID";
  o.item_column = "asin";
  o.time_column = "unixReviewTime";
  o.category_column.clear();
  o.items_path = tmp.Sub("items.csv");
  o.items_key = "asin";
  o.items_category = "cat";
  ASSERT_TRUE(ImportEventLog(o).ok());
  AmazonOptions a;
  a.reviews_path = tmp.Sub("reviews.json");
  a.meta_path = tmp.Sub("meta.json");
  a.out_dir = tmp.Sub("amazon");
  ASSERT_TRUE(ImportAmazon(a).ok());
  for (const char* f : {kEventsFile, kUsersFile}) {
    EXPECT_EQ(ReadAll(JoinPath(o.out_dir, f)), ReadAll(JoinPath(a.out_dir, f))) << f;
  }
}

// ---- The command ----

TEST(EventLogTest, CommandImportsAndInspectPrintsAUserByToken) {
  TempDir tmp;
  std::string dat;
  for (int k = 0; k < 22; ++k) absl::StrAppend(&dat, "7::", 100 + k % 5, "::4::", kT0 + k, "\n");
  WriteAll(tmp.Sub("ratings.dat"), dat);
  WriteAll(tmp.Sub("movies.dat"),
           "100::Toy Story (1995)::Animation|Children's\n101::Heat (1995)::Action|Crime\n"
           "102::A::Drama\n103::B::Drama\n104::C::Comedy\n");
  const auto r = RunSift({"data",
                          "events",
                          "--events",
                          tmp.Sub("ratings.dat"),
                          "--delimiter",
                          "::",
                          "--columns",
                          "user,movie,rating,time",
                          "--user",
                          "user",
                          "--item",
                          "movie",
                          "--time",
                          "time",
                          "--items",
                          tmp.Sub("movies.dat"),
                          "--items-delimiter",
                          "::",
                          "--items-columns",
                          "id,title,genres",
                          "--items-key",
                          "id",
                          "--items-category",
                          "genres",
                          "--category-separator",
                          "|",
                          "--test-events",
                          "3",
                          "--out",
                          tmp.Sub("ds")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kept: users 1, items 5, categories 4, events 22"));
  EXPECT_THAT(r.out, HasSubstr("samples: train 36, test 6 (the last 3 event(s) of each user)"));
  const auto i = RunSift({"data", "inspect", tmp.Sub("ds"), "--user", "7", "--limit", "4"});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_THAT(i.out, HasSubstr("user 7 (id 1): 22 events; the last 3 are test targets"));
  EXPECT_THAT(i.out, HasSubstr("22  test   101                   Action"));
  EXPECT_THAT(i.out, HasSubstr("19  train  103                   Drama"));
  const auto missing = RunSift({"data", "inspect", tmp.Sub("ds"), "--user", "8"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("no user '8'"));
  // A missing column on the command line: exit non-zero, the columns listed.
  const auto bad = RunSift({"data", "events", "--events", tmp.Sub("ratings.dat"), "--delimiter",
                            "::", "--columns", "user,movie,rating,time", "--out", tmp.Sub("x")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("no column 'user_id' (--user); the columns are: user, movie, "
                                 "rating, time"));
}

}  // namespace
}  // namespace sift::data
