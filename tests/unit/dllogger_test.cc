// DLLogger: exact DLLL / stdout line formats (the reference dllogger's json.dumps and print
// output), NaN handling, the reader round trip and its file:line errors. Fake clock only.
#include "common/dllogger.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

// 2026-11-29 14:12:09 UTC = 1795961529 (calendar.timegm).
constexpr int64_t kStartMicros = 1795961529123456;

struct Harness {
  int64_t now = kStartMicros;
  CaptureLineSink* json = nullptr;
  CaptureLineSink* out = nullptr;
  std::unique_ptr<DLLogger> logger;

  Harness() {
    auto j = std::make_unique<CaptureLineSink>();
    auto o = std::make_unique<CaptureLineSink>();
    json = j.get();
    out = o.get();
    logger = std::make_unique<DLLogger>(
        std::move(j), std::move(o), [this] { return now; }, DLLoggerOptions{.utc = true});
  }
};

nlohmann::ordered_json ParseDlll(const std::string& line) {
  EXPECT_EQ(line.substr(0, 5), "DLLL ");
  return nlohmann::ordered_json::parse(line.substr(5));
}

TEST(PyFormatTest, FloatReprMatchesPython) {
  // Expected strings are Python 3 repr() of the same doubles.
  EXPECT_EQ(FormatPyFloat(2.25), "2.25");
  EXPECT_EQ(FormatPyFloat(5.0), "5.0");
  EXPECT_EQ(FormatPyFloat(0.0), "0.0");
  EXPECT_EQ(FormatPyFloat(-2.5), "-2.5");
  EXPECT_EQ(FormatPyFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatPyFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatPyFloat(1e-5), "1e-05");
  EXPECT_EQ(FormatPyFloat(1.5e-7), "1.5e-07");
  EXPECT_EQ(FormatPyFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatPyFloat(1e16), "1e+16");
  EXPECT_EQ(FormatPyFloat(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(FormatPyFloat(12345.678), "12345.678");
  EXPECT_EQ(FormatPyFloat(1795961529.123456), "1795961529.123456");
  EXPECT_EQ(FormatPyFloat(std::nan("")), "nan");
  EXPECT_EQ(FormatPyFloat(-HUGE_VAL), "-inf");
}

TEST(PyFormatTest, TupleAndDatetime) {
  EXPECT_EQ(FormatPyTuple({0, 5}), "(0, 5)");
  EXPECT_EQ(FormatPyTuple({2}), "(2,)");
  EXPECT_EQ(FormatPyTuple({}), "()");
  EXPECT_EQ(FormatPyDatetime(kStartMicros, /*utc=*/true), "2026-11-29 14:12:09.123456");
  // Python's str(datetime) drops a zero fraction.
  EXPECT_EQ(FormatPyDatetime(1795961529000000, true), "2026-11-29 14:12:09");
  EXPECT_EQ(FormatPyDatetime(1795961529000007, true), "2026-11-29 14:12:09.000007");
}

TEST(DLLoggerTest, MetadataLinesMatchReference) {
  Harness h;
  ASSERT_TRUE(h.logger->WriteReferenceMetadata().ok());
  ASSERT_EQ(h.json->lines().size(), 5u);
  EXPECT_TRUE(h.out->lines().empty());  // the reference prints nothing for metadata
  // Byte-exact against Python: "DLLL " + json.dumps(dict(timestamp=..., elapsedtime=...,
  // datetime=..., type="METADATA", metric=..., metadata={"unit": None})).
  EXPECT_EQ(h.json->lines()[0],
            "DLLL {\"timestamp\": \"1795961529.123456\", \"elapsedtime\": \"0.0\", \"datetime\": "
            "\"2026-11-29 14:12:09.123456\", \"type\": \"METADATA\", \"metric\": \"test_auc\", "
            "\"metadata\": {\"unit\": null}}");
  const std::vector<std::pair<std::string, nlohmann::ordered_json>> expected = {
      {"test_auc", nullptr},
      {"latency_p90", "ms"},
      {"train_loss", nullptr},
      {"time_to_train", "s"},
      {"throughput", "samples/s"}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto j = ParseDlll(h.json->lines()[i]);
    EXPECT_EQ(j["type"], "METADATA");
    EXPECT_EQ(j["metric"], expected[i].first);
    EXPECT_EQ(j["metadata"]["unit"], expected[i].second);
  }
}

TEST(DLLoggerTest, LogLineKeysTypesAndSteps) {
  Harness h;
  h.now += 2500000;  // 2.5 s later
  ASSERT_TRUE(h.logger->Log({0, 5}, {{"total_loss", 0.5}, {"samples/s", 1234.5}}).ok());
  h.now += 500000;
  ASSERT_TRUE(h.logger->Log({2}, {{"throughput", 1e6}}).ok());
  ASSERT_TRUE(h.logger->Log({}, {{"time_to_train", 3.0}}).ok());
  ASSERT_EQ(h.json->lines().size(), 3u);
  EXPECT_EQ(h.json->lines()[0],
            "DLLL {\"timestamp\": \"1795961531.623456\", \"datetime\": \"2026-11-29 "
            "14:12:11.623456\", \"elapsedtime\": \"2.5\", \"type\": \"LOG\", \"step\": [0, 5], "
            "\"data\": {\"total_loss\": 0.5, \"samples/s\": 1234.5}}");
  const std::vector<std::vector<int64_t>> steps = {{0, 5}, {2}, {}};
  for (size_t i = 0; i < 3; ++i) {
    const auto j = ParseDlll(h.json->lines()[i]);
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"timestamp", "datetime", "elapsedtime", "type",
                                              "step", "data"}));
    EXPECT_TRUE(j["timestamp"].is_string());
    EXPECT_TRUE(j["datetime"].is_string());
    EXPECT_TRUE(j["elapsedtime"].is_string());
    EXPECT_EQ(j["type"], "LOG");
    ASSERT_TRUE(j["step"].is_array());
    EXPECT_EQ(j["step"].get<std::vector<int64_t>>(), steps[i]);
    EXPECT_TRUE(j["data"].is_object());
  }
  EXPECT_EQ(ParseDlll(h.json->lines()[1])["elapsedtime"], "3.0");
  EXPECT_EQ(ParseDlll(h.json->lines()[1])["data"]["throughput"].get<double>(), 1e6);
}

TEST(DLLoggerTest, StdoutLinesUseTupleTextAndUnits) {
  Harness h;
  ASSERT_TRUE(h.logger->WriteReferenceMetadata().ok());
  ASSERT_TRUE(h.logger->Log({0, 5}, {{"total_loss", 0.5}, {"samples/s", 100.0}}).ok());
  ASSERT_TRUE(h.logger->Log({2}, {{"throughput", 250.0}, {"latency_p90", 1.5}}).ok());
  ASSERT_TRUE(h.logger->Log({}, {{"test_auc", 0.8125}, {"time_to_train", 3.0}}).ok());
  ASSERT_EQ(h.out->lines().size(), 3u);
  // The reference's "{} : {} {}".format(metric, value, unit): no metadata -> unit "" (trailing
  // space), unit None -> "None".
  EXPECT_EQ(h.out->lines()[0],
            "DLL 2026-11-29 14:12:09.123456 - (0, 5) total_loss : 0.5  samples/s : 100.0 ");
  EXPECT_EQ(h.out->lines()[1],
            "DLL 2026-11-29 14:12:09.123456 - (2,) throughput : 250.0 samples/s latency_p90 : 1.5 "
            "ms");
  EXPECT_EQ(h.out->lines()[2],
            "DLL 2026-11-29 14:12:09.123456 - () test_auc : 0.8125 None time_to_train : 3.0 s");
}

TEST(DLLoggerTest, NonFiniteValuesStayValidJson) {
  Harness h;
  ASSERT_TRUE(
      h.logger->Log({1}, {{"a", std::nan("")}, {"b", HUGE_VAL}, {"c", -HUGE_VAL}, {"d", 1.0}})
          .ok());
  const std::string& line = h.json->lines()[0];
  EXPECT_THAT(line,
              HasSubstr("\"data\": {\"a\": \"NaN\", \"b\": \"Infinity\", \"c\": \"-Infinity\", "
                        "\"d\": 1.0}"));
  const auto j = ParseDlll(line);  // throws (fails the test) if not valid JSON
  EXPECT_EQ(j["data"]["a"], "NaN");
  EXPECT_EQ(h.out->lines()[0],
            "DLL 2026-11-29 14:12:09.123456 - (1,) a : nan  b : inf  c : -inf  d : 1.0 ");
}

TEST(DLLoggerTest, JsonStringsAreEscaped) {
  Harness h;
  ASSERT_TRUE(h.logger->Log({}, {{"we\"ird\\name\n\xc3\xa9", 1.0}}).ok());
  EXPECT_THAT(h.json->lines()[0], HasSubstr("{\"we\\\"ird\\\\name\\n\\u00e9\": 1.0}"));
  EXPECT_EQ(ParseDlll(h.json->lines()[0])["data"].begin().key(), "we\"ird\\name\n\xc3\xa9");
}

TEST(DLLoggerTest, FileRoundTripAppendsAndReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.Sub("log.json");
  int64_t now = kStartMicros;
  {
    auto logger = OpenReferenceDLLogger(
        path, /*with_stdout=*/false, [&] { return now; }, DLLoggerOptions{.utc = true});
    ASSERT_TRUE(logger.ok()) << logger.status();
    now += 1000;
    ASSERT_TRUE((*logger)->Log({0, 1}, {{"total_loss", 0.25}, {"samples/s", std::nan("")}}).ok());
  }
  {
    // A second logger appends; the first logger's lines stay.
    auto sink = FileLineSink::Open(path);
    ASSERT_TRUE(sink.ok()) << sink.status();
    DLLogger second(
        std::move(*sink), nullptr, [&] { return now; }, DLLoggerOptions{.utc = true});
    ASSERT_TRUE(second.Log({}, {{"test_auc", 0.75}, {"x", -HUGE_VAL}}).ok());
  }
  auto records = ReadDllLogFile(path);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 7u);
  const DllRecord& md = (*records)[1];
  EXPECT_EQ(md.type, DllRecord::Type::kMetadata);
  EXPECT_EQ(md.metric, "latency_p90");
  EXPECT_EQ(md.unit, std::optional<std::string>("ms"));
  EXPECT_EQ((*records)[0].unit, std::nullopt);
  const DllRecord& a = (*records)[5];
  EXPECT_EQ(a.type, DllRecord::Type::kLog);
  EXPECT_EQ(a.line, 6);
  EXPECT_EQ(a.step, (DllStep{0, 1}));
  EXPECT_EQ(a.elapsedtime, "0.001");
  EXPECT_EQ(a.datetime, "2026-11-29 14:12:09.124456");
  ASSERT_EQ(a.data.size(), 2u);
  EXPECT_EQ(a.data[0].first, "total_loss");
  EXPECT_EQ(a.data[0].second, 0.25);
  EXPECT_EQ(a.data[1].first, "samples/s");
  EXPECT_TRUE(std::isnan(a.data[1].second));
  const DllRecord& b = (*records)[6];
  EXPECT_TRUE(b.step.empty());
  EXPECT_EQ(b.data[0], (std::pair<std::string, double>("test_auc", 0.75)));
  EXPECT_EQ(b.data[1].second, -HUGE_VAL);
}

TEST(DllReaderTest, ErrorsNameFileAndLine) {
  const std::string good =
      "DLLL {\"timestamp\": \"1.0\", \"datetime\": \"d\", \"elapsedtime\": \"0.0\", \"type\": "
      "\"LOG\", \"step\": [1], \"data\": {\"x\": 1.5}}";
  auto ok = ParseDllLog(good + "\n\n" + good + "\n", "f.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].line, 3);

  struct Case {
    std::string line, what;
  };
  const std::vector<Case> cases = {
      {"DLLL {\"timestamp\": ", "invalid JSON"},
      {"INFO something", "does not start with \"DLLL \""},
      {"DLLL [1, 2]", "not an object"},
      {"DLLL {\"datetime\": \"d\", \"elapsedtime\": \"0\", \"type\": \"LOG\"}", "\"timestamp\""},
      {"DLLL {\"timestamp\": 1.0, \"datetime\": \"d\", \"elapsedtime\": \"0\", \"type\": \"LOG\"}",
       "not a string"},
      {"DLLL {\"timestamp\": \"1\", \"datetime\": \"d\", \"elapsedtime\": \"0\", \"type\": \"X\"}",
       "unknown type"},
      {"DLLL {\"timestamp\": \"1\", \"datetime\": \"d\", \"elapsedtime\": \"0\", \"type\": "
       "\"LOG\", \"step\": [1.5], \"data\": {}}",
       "not an integer"},
      {"DLLL {\"timestamp\": \"1\", \"datetime\": \"d\", \"elapsedtime\": \"0\", \"type\": "
       "\"LOG\", \"step\": [], \"data\": {\"x\": \"abc\"}}",
       "data \"x\" is not a number"},
      {"DLLL {\"timestamp\": \"1\", \"datetime\": \"d\", \"elapsedtime\": \"0\", \"type\": "
       "\"METADATA\", \"metric\": \"m\"}",
       "metadata"},
  };
  for (const Case& c : cases) {
    auto r = ParseDllLog(good + "\n" + c.line + "\n", "dir/log.json");
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("dir/log.json:2: ")) << c.line;
    EXPECT_THAT(r.status().message(), HasSubstr(c.what)) << c.line;
  }
}

TEST(DllReaderTest, MissingFileAndUnopenableSinkAreErrors) {
  testing::TempDir dir;
  EXPECT_FALSE(ReadDllLogFile(dir.Sub("absent.json")).ok());
  auto sink = FileLineSink::Open(dir.Sub("no/such/dir/log.json"));
  ASSERT_FALSE(sink.ok());
  EXPECT_THAT(sink.status().message(), HasSubstr("no/such/dir/log.json"));
}

}  // namespace
}  // namespace sift
