// sift bench ps: a short sweep against in-process loopback servers, plaintext and TLS side by
// side (--tls both: each with its own server and clients, calls alternating): exit 0, every
// pulled row equal to the in-process table's (--check) over both transports, the CPU per call
// and the bytes per call in the JSON, the comparison table with its AES-GCM bound printed; bad
// combinations are clear errors. Numbers are not asserted (a benchmark).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

TEST(BenchPsTest, TlsBothChecksEveryRowOverBothTransportsAndReportsCpuAndTheBound) {
  testing::TempDir dir;
  const std::string file = dir.Sub("ps.json");
  const testing::RunResult r = testing::RunSift(
      {"bench", "ps", "--tls", "both", "--min-keys", "256", "--max-keys", "1024", "--iters", "3",
       "--warmup", "1", "--threads", "1", "--check", "--json", file});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("cipher:   AES-128-GCM "));
  EXPECT_THAT(r.out, HasSubstr("(plaintext), 127.0.0.1:"));
  EXPECT_THAT(r.out, HasSubstr("TLS vs plaintext (remote; calls alternating"));
  const nlohmann::json j = nlohmann::json::parse(testing::ReadAll(file), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_GT(j["aes_128_gcm_bytes_per_s"].get<double>(), 0);
  // Sizes 256 and 1024; per size and op: the remote rows of both transports, then in-process.
  std::map<std::pair<std::string, int64_t>, int> remote;  // (transport, keys) -> rows
  int in_process = 0;
  for (const nlohmann::json& row : j["rows"]) {
    EXPECT_GT(row["cpu_ms"].get<double>(), 0) << row.dump();
    if (row["target"] == "in-process") {
      ++in_process;
      continue;
    }
    const int64_t keys = row["keys"].get<int64_t>();
    ++remote[{row["transport"].get<std::string>(), keys}];
    EXPECT_EQ(row["wrong"], 0) << row.dump();
    // Keys (8 bytes) and rows or gradients (dim 16, fp32) once each.
    EXPECT_EQ(row["wire_bytes"].get<double>(), static_cast<double>(keys * (8 + 16 * 4)));
  }
  EXPECT_EQ(in_process, 4);
  for (const char* transport : {"plaintext", "tls"}) {
    for (const int64_t keys : {256, 1024}) {
      EXPECT_EQ((remote[{transport, keys}]), 2) << transport << " " << keys;  // pull, push
    }
  }
}

TEST(BenchPsTest, TlsFlagsThatDoNotFitAreClearErrors) {
  testing::RunResult r =
      testing::RunSift({"bench", "ps", "--tls", "both", "--servers", "127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("for --servers pass the client's --tls-dir"));
  r = testing::RunSift({"bench", "ps", "--tls-dir", "/nonexistent"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--tls-dir is for --servers"));
  r = testing::RunSift({"bench", "ps", "--tls", "sometimes"});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace sift
