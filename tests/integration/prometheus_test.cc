// Metrics end to end: a real Prometheus server (Debian's `prometheus`, loopback, file_sd targets
// written by the test) scrapes a whole local cluster (coordinator, 1 embedding server, 1 worker)
// while it runs a job; cluster samples/s is read back through Prometheus's HTTP query API, as a
// dashboard would: sum(rate(sift_worker_samples_total[1m])) and the coordinator's
// sum(rate(sift_job_samples_total[1m])), plus the job's state series; every target is up. Skipped
// when prometheus is missing.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_cluster.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using sift::testing::HttpGet;
using sift::testing::RunSift;
using sift::testing::TempDir;
using sift::testing::TestCluster;
using sift::testing::TestClusterOptions;
using sift::testing::TestJob;

// A TCP port that was free a moment ago (bound to port 0, then closed).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// Percent-encodes a PromQL query for a URL.
std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '_' || c == '-' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

TEST(PrometheusTest, ClusterSamplesPerSecondThroughPrometheus) {
  if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "prometheus not installed";
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

  // file_sd targets and the scrape config.
  nlohmann::json sd = nlohmann::json::array();
  sd.push_back({{"targets", targets}, {"labels", {{"cluster", "test"}}}});
  sift::testing::WriteAll(dir.Sub("targets.json"), sd.dump());
  sift::testing::WriteAll(
      dir.Sub("prometheus.yml"),
      absl::StrCat("global:\n  scrape_interval: 1s\n"
                   "scrape_configs:\n  - job_name: sift\n"
                   "    file_sd_configs:\n      - files: ['",
                   dir.Sub("targets.json"), "']\n        refresh_interval: 1s\n"));
  const int port = FreePort();
  ASSERT_GT(port, 0);
  sift::testing::BackgroundProcess prometheus(
      {"/usr/bin/prometheus", absl::StrCat("--config.file=", dir.Sub("prometheus.yml")),
       absl::StrCat("--storage.tsdb.path=", dir.Sub("tsdb")),
       absl::StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"},
      dir.Sub("prometheus"));

  auto query = [&](const std::string& promql) -> double {
    auto r = HttpGet("127.0.0.1", port, "/api/v1/query?query=" + UrlEncode(promql));
    if (!r.ok()) return -1;
    auto js = nlohmann::json::parse(*r, nullptr, /*allow_exceptions=*/false);
    if (js.is_discarded() || js.value("status", "") != "success") return -1;
    const auto& result = js["data"]["result"];
    if (!result.is_array() || result.empty()) return -1;
    return std::stod(result[0]["value"][1].get<std::string>());
  };
  // Bounded polls (Prometheus scrapes every second): no assertion on how long anything takes.
  auto wait_until = [&](const std::function<bool()>& done) {
    for (int i = 0; i < 1200 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return done();
  };
  // Every target is scraped before the job starts.
  ASSERT_TRUE(wait_until([&] { return query("sum(up)") == 3; })) << prometheus.Err();

  // A job longer than the test needs; cancelled once Prometheus shows its throughput.
  TestJob j;
  j.dataset = dir.Sub("tiny");
  j.epochs = 10;
  j.batch_size = 256;
  j.servers = 1;
  j.workers = 1;
  const std::string id = cluster.Submit(j.Yaml());
  double worker_rate = -1, job_rate = -1;
  const bool rates = wait_until([&] {
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
