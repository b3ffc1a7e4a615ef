#include "tests/util/test_prometheus.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sift::testing {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";

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

}  // namespace

bool TestPrometheus::Available() { return ::access(kPrometheus, X_OK) == 0; }

TestPrometheus::TestPrometheus(const TempDir& dir, const std::string& name,
                               const std::vector<std::string>& targets,
                               const std::vector<std::string>& rule_files) {
  nlohmann::json sd = nlohmann::json::array();
  sd.push_back({{"targets", targets}, {"labels", {{"cluster", "test"}}}});
  const std::string targets_file = dir.Sub(name + "-targets.json");
  WriteAll(targets_file, sd.dump());
  std::string config = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n";
  if (!rule_files.empty()) {
    absl::StrAppend(&config, "rule_files:\n");
    for (const std::string& f : rule_files) absl::StrAppend(&config, "  - '", f, "'\n");
  }
  absl::StrAppend(&config,
                  "scrape_configs:\n  - job_name: sift\n    file_sd_configs:\n      - files: ['",
                  targets_file, "']\n        refresh_interval: 1s\n");
  const std::string config_file = dir.Sub(name + "-prometheus.yml");
  WriteAll(config_file, config);
  // The free port may be taken before Prometheus binds it: then it exits, and we try another.
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = FreePort();
    if (port_ <= 0) continue;
    process_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{kPrometheus, absl::StrCat("--config.file=", config_file),
                                 absl::StrCat("--storage.tsdb.path=", dir.Sub(name + "-tsdb")),
                                 absl::StrCat("--web.listen-address=127.0.0.1:", port_),
                                 "--log.level=warn"},
        dir.Sub(absl::StrCat(name, "-prometheus-", attempt)));
    bool exited = false;
    const bool ready = WaitUntil(
        [&] {
          if (process_->WaitExit(0) != -1) exited = true;
          return exited || HttpGet("127.0.0.1", port_, "/-/ready").ok();
        },
        60);
    if (ready && !exited) return;
    if (!exited) break;  // running but never ready: report below
  }
  ADD_FAILURE() << "prometheus did not become ready: " << (process_ ? Err() : "no free port");
}

TestPrometheus::Answer TestPrometheus::Query(const std::string& promql) const {
  Answer a;
  a.first = std::numeric_limits<double>::quiet_NaN();
  auto r = HttpGet("127.0.0.1", port_, "/api/v1/query?query=" + UrlEncode(promql));
  if (!r.ok()) {
    a.error = std::string(r.status().message());
    return a;
  }
  a.body = *r;
  auto js = nlohmann::json::parse(*r, nullptr, /*allow_exceptions=*/false);
  if (js.is_discarded() || js.value("status", "") != "success") {
    a.error = "not a success: " + *r;
    return a;
  }
  a.ok = true;
  const auto& data = js["data"];
  if (data.value("resultType", "") != "vector") return a;
  for (const auto& s : data["result"]) {
    const double v = std::strtod(s["value"][1].get<std::string>().c_str(), nullptr);
    if (a.series++ == 0) a.first = v;
    if (std::isfinite(v)) ++a.finite;
  }
  return a;
}

std::string TestPrometheus::MetricNames() const {
  auto names = HttpGet("127.0.0.1", port_, "/api/v1/label/__name__/values");
  EXPECT_TRUE(names.ok()) << names.status();
  if (!names.ok()) return "";
  const auto js = nlohmann::json::parse(*names, nullptr, /*allow_exceptions=*/false);
  std::string list;
  if (js.is_discarded()) return list;
  for (const auto& n : js["data"]) absl::StrAppend(&list, n.get<std::string>(), "\n");
  return list;
}

std::string TestPrometheus::Err() const { return process_ ? process_->Err() : ""; }

bool WaitUntil(const std::function<bool()>& done, double timeout_s) {
  for (double waited = 0; waited < timeout_s; waited += 0.1) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

}  // namespace sift::testing
