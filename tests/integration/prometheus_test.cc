// Metrics end to end: a real Prometheus server (Debian's `prometheus`, loopback, file_sd targets
// written by the test) scrapes a whole local cluster (coordinator, 1 embedding server, 1 worker)
// while it runs a job; cluster samples/s is read back through Prometheus's HTTP query API, as a
// dashboard would: sum(rate(sift_worker_samples_total[1m])) and the coordinator's
// sum(rate(sift_job_samples_total[1m])), plus the job's state series; every target is up. Skipped
// when prometheus is missing.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
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

TEST(PrometheusTest, ClusterSamplesPerSecondThroughPrometheus) {
  if (!TestPrometheus::Available()) GTEST_SKIP() << "prometheus not installed";
  TempDir dir;
  auto gen = RunSift({"data", "gen", "--preset", "tiny", "--seed", "3", "--out", dir.Sub("tiny")});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;

  TestClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  co.metrics = true;
  TestCluster cluster(dir, "prom", co);
  const std::vector<std::string> targets = cluster.MetricsTargets();
  ASSERT_EQ(targets.size(), 3u) << cluster.AllErrors();

  TestPrometheus prometheus(dir, "prom", targets);
  auto query = [&](const std::string& promql) -> double {
    const TestPrometheus::Answer a = prometheus.Query(promql);
    return a.series > 0 ? a.first : -1;
  };
  // Every target is scraped before the job starts.
  ASSERT_TRUE(WaitUntil([&] { return query("sum(up)") == 3; })) << prometheus.Err();

  // A job longer than the test needs; cancelled once Prometheus shows its throughput.
  TestJob j;
  j.dataset = dir.Sub("tiny");
  j.epochs = 10;
  j.batch_size = 256;
  j.servers = 1;
  j.workers = 1;
  const std::string id = cluster.Submit(j.Yaml());
  double worker_rate = -1, job_rate = -1;
  const bool rates = WaitUntil([&] {
    worker_rate = query("sum(rate(sift_worker_samples_total[1m]))");
    job_rate = query("sum(rate(sift_job_samples_total[1m]))");
    return worker_rate > 0 && job_rate > 0;
  });
  EXPECT_TRUE(rates) << "worker " << worker_rate << ", job " << job_rate << "\n"
                     << cluster.Logs(id) << "\n"
                     << prometheus.Err();
  // The coordinator's job series are there too: state RUNNING, the generation.
  EXPECT_EQ(query(absl::StrCat("sift_job_state{job_id=\"", id, "\",state=\"RUNNING\"}")), 1);
  EXPECT_EQ(query(absl::StrCat("sift_job_generation{job_id=\"", id, "\"}")), 1);
  ASSERT_TRUE(cluster.client().CancelJob(id).ok());
  EXPECT_EQ(cluster.WaitForFinish(id, 60).state(), coordinator::pb::CANCELLED);
}

}  // namespace
}  // namespace sift
