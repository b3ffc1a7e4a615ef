// The Grafana dashboard against real data: a real Prometheus (Debian's `prometheus`, loopback,
// scrape and rule evaluation every second, deploy/prometheus/rules.yml loaded) scrapes a whole
// local cluster (coordinator, 2 embedding servers, 2 workers) while a job trains. The dashboard's
// queries come from deploy/grafana/dashboards/sift.json, substituted by the same checker `make
// test` runs (tests/deploy/grafana_check.py --emit-queries: $job_id -> the job, $rank -> .* as
// "All", $__rate_interval -> 1m); every main query must return at least one series with a finite
// value through /api/v1/query. Then every metric name the dashboard uses must be among the names
// this Prometheus scraped (the checker again, with --exported-names). Skipped when prometheus is
// missing. Polls with generous bounds; no assertion on how long anything takes.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_cluster.h"
#include "tests/util/test_prometheus.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using sift::testing::RunSift;
using sift::testing::TempDir;
using sift::testing::TestCluster;
using sift::testing::TestClusterOptions;
using sift::testing::TestJob;
using sift::testing::TestPrometheus;
using sift::testing::WaitUntil;

// Panels left out of the "main" queries, each because it has data only after a failure:
// - "gRPC errors by code" selects grpc_server_handled_total{grpc_code!="OK"}, and a healthy run
//   may make no failing RPC at all (the "gRPC error ratio" panel, which is main, shows 0 then).
// Every other panel (job state, epoch, AUC, loss, throughput, step time and phases, Pull/Push
// latency, rows/memory/keys per table, members, generation and recoveries — 0 is a value —,
// versions, and the variables' label_values selectors) must have data during a healthy job.
const std::set<std::string> kNeedFailure = {"gRPC errors by code"};

// Queries with one series per rank or per shard: with 2 workers and 2 embedding servers each
// must show both (panel title, refId) -> finite series expected; the others need at least 1.
int ExpectedSeries(const std::string& panel, const std::string& ref_id) {
  static const std::map<std::pair<std::string, std::string>, int> kPerRankOrShard = {
      {{"Samples/s per rank", "A"}, 2},
      {{"variable rank", "query"}, 2},
      {{"Pull latency per shard", "A"}, 2},
      {{"Pull latency per shard", "B"}, 2},
      {{"Push latency per shard", "A"}, 2},
      {{"Push latency per shard", "B"}, 2},
      {{"Train loss", "B"}, 2}};
  auto it = kPerRankOrShard.find({panel, ref_id});
  return it == kPerRankOrShard.end() ? 1 : it->second;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// Runs tests/deploy/grafana_check.py with `args` (stdout and stderr to `log`); its exit code.
int RunChecker(const std::vector<std::string>& args, const std::string& log) {
  const std::string venv = absl::StrCat(SIFT_SOURCE_DIR, "/.venv/bin/python3");
  const std::string python = ::access(venv.c_str(), X_OK) == 0 ? venv : "python3";
  std::string cmd =
      absl::StrCat(ShellQuote(python), " ",
                   ShellQuote(absl::StrCat(SIFT_SOURCE_DIR, "/tests/deploy/grafana_check.py")));
  for (const std::string& a : args) absl::StrAppend(&cmd, " ", ShellQuote(a));
  absl::StrAppend(&cmd, " >", ShellQuote(log), " 2>&1");
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

struct Query {
  std::string panel;  // title (or "variable NAME")
  std::string ref_id;
  std::string expr;
};

TEST(DashboardQueriesTest, MainQueriesReturnDataFromARealPrometheus) {
  if (!TestPrometheus::Available()) GTEST_SKIP() << "prometheus not installed";
  TempDir dir;
  auto gen = RunSift({"data", "gen", "--preset", "tiny", "--seed", "5", "--out", dir.Sub("tiny")});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;

  TestClusterOptions co;
  co.servers = 2;  // per-shard panels
  co.workers = 2;  // per-rank panels
  co.metrics = true;
  TestCluster cluster(dir, "dash", co);
  const std::vector<std::string> targets = cluster.MetricsTargets();
  ASSERT_EQ(targets.size(), 5u) << cluster.AllErrors();

  TestPrometheus prometheus(dir, "dash", targets,
                            {absl::StrCat(SIFT_SOURCE_DIR, "/deploy/prometheus/rules.yml")});
  auto query = [&](const std::string& promql) { return prometheus.Query(promql); };
  // Every target is scraped before the job starts.
  ASSERT_TRUE(WaitUntil([&] { return query("sum(up) == 5").series == 1; })) << prometheus.Err();

  // Short epochs, so that a test AUC (evaluated after each epoch) appears early; far more
  // epochs than the test needs: cancelled once every query has data.
  TestJob j;
  j.dataset = dir.Sub("tiny");
  j.epochs = 400;
  j.batch_size = 128;
  j.max_steps_per_epoch = 8;
  j.train_eval_samples = 256;
  j.servers = 2;
  j.workers = 2;
  const std::string id = cluster.Submit(j.Yaml());
  ASSERT_FALSE(id.empty());

  // The dashboard's queries for this job, substituted by the checker.
  const int emit = RunChecker(
      {"--var", "job_id=" + id, "--var", "rank=.*", "--emit-queries", dir.Sub("queries.json")},
      dir.Sub("check1.log"));
  ASSERT_EQ(emit, 0) << sift::testing::ReadAll(dir.Sub("check1.log"));
  const auto emitted = nlohmann::json::parse(sift::testing::ReadAll(dir.Sub("queries.json")));
  std::vector<Query> main_queries;
  std::set<std::string> excluded_seen;
  for (const auto& q : emitted) {
    const std::string title = q["title"].get<std::string>();
    if (kNeedFailure.count(title) != 0) {
      excluded_seen.insert(title);
      continue;
    }
    main_queries.push_back({title, q["ref_id"].get<std::string>(), q["expr"].get<std::string>()});
  }
  // The exclusions name real panels (a renamed panel cannot silently drop out of the check).
  EXPECT_EQ(excluded_seen, kNeedFailure);
  ASSERT_GE(main_queries.size(), 25u);

  std::vector<TestPrometheus::Answer> answers(main_queries.size());
  auto all_have_data = [&] {
    bool all = true;
    for (size_t i = 0; i < main_queries.size(); ++i) {
      const int expected = ExpectedSeries(main_queries[i].panel, main_queries[i].ref_id);
      if (answers[i].finite >= expected) continue;  // seen: the answer of record
      answers[i] = query(main_queries[i].expr);
      all = all && answers[i].finite >= expected;
    }
    return all;
  };
  const bool data = WaitUntil(all_have_data);
  std::vector<std::string> with_data;
  for (size_t i = 0; i < main_queries.size(); ++i) {
    const Query& q = main_queries[i];
    const TestPrometheus::Answer& a = answers[i];
    EXPECT_TRUE(a.ok) << q.panel << " " << q.ref_id << ": " << a.error;
    EXPECT_GE(a.finite, ExpectedSeries(q.panel, q.ref_id))
        << q.panel << " " << q.ref_id << ": too few series with a finite value from " << q.expr
        << "\n"
        << a.body;
    if (a.finite > 0) with_data.push_back(absl::StrCat(q.panel, "/", q.ref_id, "(", a.series, ")"));
  }
  std::printf("queries with data (%zu of %zu main): %s\n", with_data.size(), main_queries.size(),
              absl::StrJoin(with_data, ", ").c_str());
  if (!data) ADD_FAILURE() << cluster.Logs(id) << "\n" << prometheus.Err();

  // Every metric name the dashboard uses is among the names this Prometheus scraped (or a
  // recording rule of rules.yml, which the checker accepts).
  const std::string list = prometheus.MetricNames();
  ASSERT_FALSE(list.empty());
  sift::testing::WriteAll(dir.Sub("scraped_names.txt"), list);
  EXPECT_EQ(RunChecker({"--exported-names", dir.Sub("scraped_names.txt")}, dir.Sub("check2.log")),
            0)
      << sift::testing::ReadAll(dir.Sub("check2.log"));

  // The job outlasts a passing test by far; after a failed wait (120 s) it may have completed.
  const auto cancel = cluster.client().CancelJob(id);
  const auto state = cluster.WaitForFinish(id, 60).state();
  if (data) {
    EXPECT_TRUE(cancel.ok()) << cancel.status();
    EXPECT_EQ(state, coordinator::pb::CANCELLED);
  }
}

}  // namespace
}  // namespace sift
