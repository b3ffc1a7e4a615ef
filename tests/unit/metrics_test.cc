#include "common/metrics.h"

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

// Parses a text exposition into {"name{labels}" -> value}, keys exactly as serialized.
std::map<std::string, double> ParseExposition(const std::string& text) {
  std::map<std::string, double> series;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, absl::string_view::npos) << line;
    if (space == absl::string_view::npos) continue;
    double value = 0;
    const std::string number(line.substr(space + 1));
    EXPECT_TRUE(absl::SimpleAtod(number, &value) || number == "+Inf" || number == "NaN") << line;
    EXPECT_EQ(series.count(std::string(line.substr(0, space))), 0u) << "duplicate series " << line;
    series[std::string(line.substr(0, space))] = value;
  }
  return series;
}

// The label part of a grpc series for service "sift.Emb", shard 0: labels sorted by name, except
// that the serializer appends a histogram bucket's `le` last.
std::string GrpcLabels(const std::string& method, const std::string& code = "",
                       const std::string& le = "") {
  std::string labels = code.empty() ? "" : absl::StrCat("grpc_code=\"", code, "\",");
  absl::StrAppend(&labels, "grpc_method=\"", method,
                  "\",grpc_service=\"sift.Emb\",grpc_type=\"unary\",shard=\"0\"");
  if (!le.empty()) absl::StrAppend(&labels, ",le=\"", le, "\"");
  return absl::StrCat("{", labels, "}");
}

double ValueOf(const std::map<std::string, double>& series, const std::string& key) {
  auto it = series.find(key);
  EXPECT_NE(it, series.end()) << "no series " << key;
  return it == series.end() ? -1 : it->second;
}

TEST(MetricsTest, ExponentialBuckets) {
  const std::vector<double> b = ExponentialBuckets(0.5, 4.0, 4);
  EXPECT_EQ(b, (std::vector<double>{0.5, 2.0, 8.0, 32.0}));
  EXPECT_EQ(ExponentialBuckets(0.0001, 2.0, 1), std::vector<double>{0.0001});
}

TEST(MetricsDeathTest, ExponentialBucketsRejectsBadArguments) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(ExponentialBuckets(0.0, 2.0, 3), "start > 0");
  EXPECT_DEATH(ExponentialBuckets(1.0, 1.0, 3), "factor > 1");
  EXPECT_DEATH(ExponentialBuckets(1.0, 2.0, 0), "count >= 1");
}

TEST(MetricsTest, GrpcServerMetricsExposeStartedHandledAndLatency) {
  prometheus::Registry registry;
  GrpcServerMetrics grpc(registry, "sift.Emb", {"Pull", "Push"}, {{"shard", "0"}});
  EXPECT_EQ(grpc.num_methods(), 2);
  EXPECT_EQ(grpc.MethodIndex("Push"), 1);
  EXPECT_EQ(grpc.MethodIndex("Stats"), -1);

  // Before any call: started 0, handled OK 0, no other codes.
  auto before = ParseExposition(SerializeMetrics(registry));
  EXPECT_EQ(ValueOf(before, "grpc_server_started_total" + GrpcLabels("Pull")), 0);
  EXPECT_EQ(ValueOf(before, "grpc_server_handled_total" + GrpcLabels("Push", "OK")), 0);
  EXPECT_EQ(before.count("grpc_server_handled_total" + GrpcLabels("Pull", "INVALID_ARGUMENT")), 0u);

  for (int i = 0; i < 3; ++i) grpc.Started(0);
  grpc.Handled(0, 0, 0.002);
  grpc.Handled(0, 0, 0.003);
  grpc.Handled(0, 3, 0.5);  // INVALID_ARGUMENT
  grpc.Started(1);
  grpc.Handled(1, 14, 20.0);         // UNAVAILABLE, beyond the last finite bucket
  grpc.Handled(1, 99, 0.001);        // not a gRPC code: counted as UNKNOWN
  grpc.Handled(1, 0, std::nan(""));  // recorded as 0 s: the sum stays a number

  const std::string text = SerializeMetrics(registry);
  auto s = ParseExposition(text);
  EXPECT_EQ(ValueOf(s, "grpc_server_started_total" + GrpcLabels("Pull")), 3);
  EXPECT_EQ(ValueOf(s, "grpc_server_started_total" + GrpcLabels("Push")), 1);
  EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels("Pull", "OK")), 2);
  EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels("Pull", "INVALID_ARGUMENT")), 1);
  EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels("Push", "OK")), 1);
  EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels("Push", "UNAVAILABLE")), 1);
  EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels("Push", "UNKNOWN")), 1);
  // Histogram: buckets 0.0001 * 2^k, cumulative.
  const std::string h = "grpc_server_handling_seconds";
  EXPECT_EQ(ValueOf(s, h + "_count" + GrpcLabels("Pull")), 3);
  EXPECT_DOUBLE_EQ(ValueOf(s, h + "_sum" + GrpcLabels("Pull")), 0.505);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Pull", "", "0.0016")), 0);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Pull", "", "0.0032")), 2);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Pull", "", "0.4096")), 2);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Pull", "", "0.8192")), 3);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Pull", "", "13.1072")), 3);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Push", "", "0.0001")), 1);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Push", "", "13.1072")), 2);
  EXPECT_EQ(ValueOf(s, h + "_bucket" + GrpcLabels("Push", "", "+Inf")), 3);
  EXPECT_DOUBLE_EQ(ValueOf(s, h + "_sum" + GrpcLabels("Push")), 20.001);
  EXPECT_THAT(text, HasSubstr("# TYPE grpc_server_handling_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("# TYPE grpc_server_handled_total counter"));
  EXPECT_EQ(GrpcServerMetrics::CodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(GrpcServerMetrics::CodeName(-1), "UNKNOWN");
}

TEST(MetricsTest, TwoShardsShareOneRegistry) {
  prometheus::Registry registry;
  GrpcServerMetrics shard0(registry, "sift.Emb", {"Pull"}, {{"shard", "0"}});
  GrpcServerMetrics shard1(registry, "sift.Emb", {"Pull"}, {{"shard", "1"}});
  shard0.Handled(0, 0, 0.01);
  shard1.Handled(0, 0, 0.01);
  shard1.Handled(0, 0, 0.01);
  auto s = ParseExposition(SerializeMetrics(registry));
  EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels("Pull", "OK")), 1);
  EXPECT_EQ(ValueOf(s,
                    "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Pull\",grpc_service="
                    "\"sift.Emb\",grpc_type=\"unary\",shard=\"1\"}"),
            2);
}

TEST(MetricsTest, ConcurrentHandledCountsExactly) {
  prometheus::Registry registry;
  GrpcServerMetrics grpc(registry, "sift.Emb", {"Pull", "Push"}, {{"shard", "0"}});
  constexpr int kThreads = 8, kCalls = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&grpc, t] {
      for (int i = 0; i < kCalls; ++i) {
        grpc.Started(i % 2);
        grpc.Handled(i % 2, (t + i) % GrpcServerMetrics::kNumCodes, 0.001);
      }
    });
  }
  for (auto& th : threads) th.join();
  // Expected counts per (method, code), computed the same way single-threaded.
  std::map<std::pair<int, int>, int> want;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kCalls; ++i) ++want[{i % 2, (t + i) % GrpcServerMetrics::kNumCodes}];
  }
  auto s = ParseExposition(SerializeMetrics(registry));
  const char* methods[] = {"Pull", "Push"};
  double total = 0;
  for (const auto& [key, count] : want) {
    const std::string code(GrpcServerMetrics::CodeName(key.second));
    EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels(methods[key.first], code)), count)
        << methods[key.first] << " " << code;
    total += count;
  }
  EXPECT_EQ(total, kThreads * kCalls);
  EXPECT_EQ(ValueOf(s, "grpc_server_started_total" + GrpcLabels("Pull")), kThreads * kCalls / 2);
  EXPECT_EQ(ValueOf(s, "grpc_server_handling_seconds_count" + GrpcLabels("Push")),
            kThreads * kCalls / 2);
}

TEST(MetricsTest, GrpcServerMetricsCreateRejectsBadArguments) {
  prometheus::Registry registry;
  auto expect_invalid = [&](std::string service, std::vector<std::string> methods,
                            std::map<std::string, std::string> labels, const std::string& part) {
    auto m = GrpcServerMetrics::Create(registry, service, methods, labels);
    ASSERT_FALSE(m.ok()) << part;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(part));
  };
  expect_invalid("", {"Pull"}, {}, "empty service");
  expect_invalid("svc", {}, {}, "no methods");
  expect_invalid("svc", {"Pull", "Pull"}, {}, "duplicate method name 'Pull'");
  expect_invalid("svc", {"Pull"}, {{"job", "x"}}, "'job'");
  expect_invalid("svc", {"Pull"}, {{"instance", "x"}}, "'instance'");
  expect_invalid("svc", {"Pull"}, {{"grpc_code", "x"}}, "'grpc_code'");
  expect_invalid("svc", {"Pull"}, {{"bad-name", "x"}}, "'bad-name'");
  auto ok = GrpcServerMetrics::Create(registry, "svc", {"Pull"}, {{"shard", "3"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  (*ok)->Handled(0, 0, 0.1);
  EXPECT_THAT(SerializeMetrics(registry), HasSubstr("shard=\"3\""));

  // A family of the same name but another type already in the registry.
  prometheus::Registry clash;
  prometheus::BuildGauge().Name("grpc_server_handled_total").Register(clash);
  auto m = GrpcServerMetrics::Create(clash, "svc", {"Pull"});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("different type"));
}

TEST(MetricsDeathTest, MethodIndexOutOfRangeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  prometheus::Registry registry;
  GrpcServerMetrics grpc(registry, "sift.Emb", {"Pull"});
  EXPECT_DEATH(grpc.Started(1), "method index 1 outside 0..0");
  EXPECT_DEATH(grpc.Handled(-1, 0, 0.1), "method index -1");
}

TEST(MetricsTest, CallbackCollectableComputesValuesAtCollectTime) {
  std::atomic<int> calls{0};
  auto rows = CallbackCollectable::Create("sift_embedding_rows", "Rows per table.",
                                          CallbackCollectable::Type::kGauge, [&calls] {
                                            const int n = ++calls;
                                            return std::vector<CallbackCollectable::Sample>{
                                                {{{"table", "0"}}, 10.0 * n},
                                                {{{"table", "1"}, {"shard", "2"}}, 5.5},
                                                {{{"job", "x"}}, 1.0},  // reserved label: left out
                                            };
                                          });
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::vector<prometheus::MetricFamily> first = (*rows)->Collect();
  std::vector<prometheus::MetricFamily> second = (*rows)->Collect();
  ASSERT_EQ(second.size(), 1u);
  const prometheus::MetricFamily& f = second[0];
  EXPECT_EQ(f.name, "sift_embedding_rows");
  EXPECT_EQ(f.type, prometheus::MetricType::Gauge);
  ASSERT_EQ(f.metric.size(), 2u);
  EXPECT_EQ(f.metric[0].gauge.value, 20.0);  // computed on the second call
  ASSERT_EQ(f.metric[1].label.size(), 2u);
  EXPECT_EQ(f.metric[1].label[0].name, "shard");  // sorted by label name
  EXPECT_EQ(f.metric[1].label[1].value, "1");
  EXPECT_EQ(calls.load(), 2);

  auto pushed = CallbackCollectable::Create(
      "sift_push_keys_total", "Keys pushed.", CallbackCollectable::Type::kCounter, [] {
        return std::vector<CallbackCollectable::Sample>{{{}, 42.0}};
      });
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  auto c = (*pushed)->Collect();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].type, prometheus::MetricType::Counter);
  ASSERT_EQ(c[0].metric.size(), 1u);
  EXPECT_EQ(c[0].metric[0].counter.value, 42.0);
}

TEST(MetricsTest, CallbackCollectableRejectsBadDefinitions) {
  auto none = [] { return std::vector<CallbackCollectable::Sample>{}; };
  for (std::string name : {"9starts_with_digit", "has-dash", "has space", ""}) {
    auto c = CallbackCollectable::Create(name, "h", CallbackCollectable::Type::kGauge, none);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("'" + name + "'"));
  }
  auto counter =
      CallbackCollectable::Create("sift_pushes", "h", CallbackCollectable::Type::kCounter, none);
  EXPECT_EQ(counter.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(counter.status().message()), HasSubstr("_total"));
  auto empty = CallbackCollectable::Create("sift_x", "h", CallbackCollectable::Type::kGauge,
                                           CallbackCollectable::Callback());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsTest, BuildInfo) {
  prometheus::Registry registry;
  AddBuildInfo(registry, "0.1.0");
  auto s = ParseExposition(SerializeMetrics(registry));
  EXPECT_EQ(ValueOf(s, "sift_build_info{version=\"0.1.0\"}"), 1);
  EXPECT_TRUE(IsUsableLabelName("table"));
  EXPECT_FALSE(IsUsableLabelName("le"));
  EXPECT_FALSE(IsUsableLabelName("__name__"));
}

TEST(MetricsTest, HttpScrapeServesRegistryAndCallbacksAndPassesPromtool) {
  auto registry = std::make_shared<prometheus::Registry>();
  GrpcServerMetrics grpc(*registry, "sift.Emb", {"Pull", "Push"}, {{"shard", "0"}});
  AddBuildInfo(*registry, "0.1.0");
  grpc.Started(0);
  grpc.Handled(0, 5, 0.25);  // NOT_FOUND

  auto exposer = MetricsExposer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  ASSERT_GT((*exposer)->port(), 0);
  auto rows = CallbackCollectable::Create(
      "sift_embedding_rows", "Rows per table.", CallbackCollectable::Type::kGauge, [] {
        return std::vector<CallbackCollectable::Sample>{{{{"table", "0"}}, 1234.0},
                                                        {{{"table", "1"}}, 7.0}};
      });
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_TRUE((*exposer)->AddCollectable(*rows).ok());
  EXPECT_EQ((*exposer)->AddCollectable(nullptr).code(), absl::StatusCode::kInvalidArgument);
  // The exposer keeps the registry alive (prometheus-cpp itself holds a weak_ptr only).
  registry.reset();

  auto body = testing::HttpGet("127.0.0.1", (*exposer)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  auto s = ParseExposition(*body);
  EXPECT_EQ(ValueOf(s, "grpc_server_started_total" + GrpcLabels("Pull")), 1);
  EXPECT_EQ(ValueOf(s, "grpc_server_handled_total" + GrpcLabels("Pull", "NOT_FOUND")), 1);
  EXPECT_EQ(ValueOf(s, "grpc_server_handling_seconds_bucket" + GrpcLabels("Pull", "", "0.4096")),
            1);
  EXPECT_EQ(ValueOf(s, "sift_build_info{version=\"0.1.0\"}"), 1);
  EXPECT_EQ(ValueOf(s, "sift_embedding_rows{table=\"0\"}"), 1234);
  EXPECT_EQ(ValueOf(s, "sift_embedding_rows{table=\"1\"}"), 7);
  EXPECT_THAT(*body, HasSubstr("# TYPE sift_embedding_rows gauge"));

  // A path nobody serves is an error, not an empty body.
  auto missing = testing::HttpGet("127.0.0.1", (*exposer)->port(), "/nothing-here");
  EXPECT_FALSE(missing.ok());

  if (!testing::PromtoolAvailable()) GTEST_SKIP() << "promtool not on PATH";
  auto lint = testing::PromtoolCheckMetrics(*body);
  EXPECT_TRUE(lint.ok()) << lint.status() << "\n" << *body;
}

TEST(MetricsTest, PromtoolFlagsABadExposition) {
  if (!testing::PromtoolAvailable()) GTEST_SKIP() << "promtool not on PATH";
  // A counter without the _total suffix: promtool must complain (so the check above can fail).
  auto lint =
      testing::PromtoolCheckMetrics("# HELP pushes Pushes.\n# TYPE pushes counter\npushes 3\n");
  ASSERT_FALSE(lint.ok());
  EXPECT_THAT(std::string(lint.status().message()), HasSubstr("_total"));
}

TEST(MetricsTest, StartReportsPortInUseAndBadAddresses) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = MetricsExposer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = absl::StrCat("127.0.0.1:", (*first)->port());
  auto second = MetricsExposer::Start(taken, registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(taken));
  // The first one still serves.
  EXPECT_TRUE(testing::HttpGet("127.0.0.1", (*first)->port(), "/metrics").ok());

  for (std::string bad :
       {"127.0.0.1:http", "127.0.0.1:70000", ":9464", "127.0.0.1:", "local host:0", "[::1:0", ""}) {
    auto e = MetricsExposer::Start(bad, registry);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << bad << ": " << e.status();
    EXPECT_THAT(std::string(e.status().message()), HasSubstr("'" + bad + "'"));
  }
  EXPECT_EQ(MetricsExposer::Start("127.0.0.1:0", nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sift
