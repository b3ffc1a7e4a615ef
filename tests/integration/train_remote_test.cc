// `sift train --embedding-servers` against real `sift embedding-server` processes on loopback:
// the loss curve and AUCs equal the in-process table's bit for bit (k = 0, same seed); a
// checkpoint taken with 2 servers resumes on 3 servers (the snapshot is re-sharded) and continues
// exactly like an uninterrupted run; the servers' /metrics pass promtool; `sift health` probes;
// SIGTERM drains and exits 0; bad server flags are clear errors.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/dllogger.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/embedding_servers.h"
#include "tests/util/test_util.h"
#include "tests/util/tiny_dataset_suite.h"

namespace sift {
namespace {

using sift::testing::HttpGet;
using sift::testing::RunSift;
using sift::testing::SiftProcess;
using sift::testing::TempDir;
using sift::testing::WaitForFile;
using ::testing::HasSubstr;

using Cluster = sift::testing::EmbeddingServers;

class TrainRemoteTest : public sift::testing::TinyDatasetSuite<3> {
 protected:
  // A short run: batch 512, 6 steps per epoch, 2 threads.
  static std::vector<std::string> Args(int epochs, const std::string& results) {
    return {"train",
            "--dataset",
            Tiny(),
            "--model",
            "sim",
            "--epochs",
            std::to_string(epochs),
            "--batch-size",
            "512",
            "--max-steps-per-epoch",
            "6",
            "--train-eval-samples",
            "2048",
            "--threads",
            "2",
            "--seed",
            "7",
            "--progress",
            "off",
            "--results-dir",
            dir_->Sub(results)};
  }
  static std::vector<std::string> With(std::vector<std::string> args,
                                       const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  // Every DLLL record's metrics, in order, as text: equal text = equal loss curve and AUCs.
  static std::vector<std::string> Curve(const std::string& results) {
    std::vector<std::string> out;
    auto records = ReadDllLogFile(dir_->Sub(results) + "/log.json");
    EXPECT_TRUE(records.ok()) << records.status();
    if (!records.ok()) return out;
    for (const DllRecord& r : *records) {
      if (r.type != DllRecord::Type::kLog) continue;
      std::string line = absl::StrCat(FormatPyTuple(r.step), ":");
      for (const auto& [k, v] : r.data) {
        if (k == "samples/s" || k == "time" || k.find("throughput") != std::string::npos ||
            k.find("latency") != std::string::npos || k == "time_to_train") {
          continue;  // timing, not results
        }
        absl::StrAppend(&line, " ", k, "=", absl::StrFormat("%.9g", v));
      }
      out.push_back(line);
    }
    return out;
  }
};

TEST_F(TrainRemoteTest, RemoteTablesGiveTheInProcessLossCurveAndResumeOnMoreShards) {
  const std::string snapshots = dir_->Sub("snapshots");
  auto local = RunSift(Args(2, "local"));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  std::vector<std::string> expected = Curve("local");
  ASSERT_GT(expected.size(), 12u);

  Cluster two(*dir_, "two", 2, snapshots);
  auto remote = RunSift(With(Args(2, "remote"), {"--embedding-servers", two.List()}));
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  EXPECT_EQ(Curve("remote"), expected);

  // One epoch on 2 servers with a checkpoint, then resume the second epoch on 3 fresh servers.
  auto first = RunSift(With(Args(1, "first"), {"--embedding-servers", two.List(),
                                               "--save-checkpoint", dir_->Sub("ckpt")}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string manifest = testing::ReadAll(dir_->Sub("ckpt/manifest.json"));
  EXPECT_THAT(manifest, HasSubstr("\"embedding_snapshot\""));
  EXPECT_THAT(manifest, HasSubstr("shard-00001-of-00002.snap"));

  Cluster three(*dir_, "three", 3, snapshots);
  auto resumed = RunSift(With(Args(2, "resumed"), {"--embedding-servers", three.List(),
                                                   "--load-checkpoint", dir_->Sub("ckpt")}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  // The resumed run logs epoch 2 only: it must equal the uninterrupted run's epoch-2 records.
  std::vector<std::string> tail;
  auto second_epoch = [](const std::string& line) {
    return line.rfind("(1,", 0) == 0 || line.rfind("():", 0) == 0;
  };
  for (const std::string& line : expected) {
    if (second_epoch(line)) tail.push_back(line);
  }
  std::vector<std::string> got;
  for (const std::string& line : Curve("resumed")) {
    if (second_epoch(line)) got.push_back(line);
  }
  ASSERT_FALSE(tail.empty());
  EXPECT_EQ(got, tail);

  // A checkpoint of server tables cannot be loaded into in-process tables, and vice versa.
  auto wrong = RunSift(With(Args(2, "wrong"), {"--load-checkpoint", dir_->Sub("ckpt")}));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("load it with --embedding-servers"));

  // The servers' metrics show the tables and pass promtool.
  auto text = HttpGet("127.0.0.1", three.MetricsPort(0), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("sift_ps_rows{shard=\"0\",table=\"item_feat_0\"}"));
  EXPECT_THAT(*text, HasSubstr("grpc_server_handled_total"));
  if (testing::PromtoolAvailable()) {
    auto lint = testing::PromtoolCheckMetrics(*text);
    EXPECT_TRUE(lint.ok()) << lint.status();
  }

  // `sift health` (the exec probe): SERVING while up; SIGTERM drains and exits 0; then the probe
  // fails.
  auto healthy =
      RunSift({"health", three.Address(1), "--service", "sift.embedding.v1.EmbeddingService"});
  EXPECT_EQ(healthy.exit_code, 0) << healthy.err;
  EXPECT_THAT(healthy.out, HasSubstr("SERVING"));
  EXPECT_EQ(three.server(1).Stop(SIGTERM), 0);
  EXPECT_THAT(three.server(1).Out(), HasSubstr("draining"));
  auto gone = RunSift({"health", three.Address(1), "--timeout", "2"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_THAT(gone.err, HasSubstr(three.Address(1)));
}

TEST_F(TrainRemoteTest, ServerFlagErrors) {
  auto bad_shard = RunSift({"embedding-server", "--port", "0", "--shard", "2", "--num-shards", "2",
                            "--snapshot-dir", dir_->Sub("s")});
  EXPECT_EQ(bad_shard.exit_code, 2);
  EXPECT_THAT(bad_shard.err, HasSubstr("--shard 2 is out of range: --num-shards is 2"));
  auto no_dir = RunSift({"embedding-server", "--shard", "0", "--num-shards", "1"});
  EXPECT_EQ(no_dir.exit_code, 2);
  EXPECT_THAT(no_dir.err, HasSubstr("--snapshot-dir"));
  auto bad_list = RunSift(With(Args(1, "x"), {"--embedding-servers", "localhost"}));
  EXPECT_NE(bad_list.exit_code, 0);
  EXPECT_THAT(bad_list.err, HasSubstr("'localhost' is not host:port"));
}

}  // namespace
}  // namespace sift
