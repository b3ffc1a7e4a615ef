#include "tests/util/embedding_servers.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace sift::testing {

EmbeddingServers::EmbeddingServers(const TempDir& dir, const std::string& name, int shards,
                                   const std::string& snapshots) {
  for (int i = 0; i < shards; ++i) {
    const std::string port_file = dir.Sub(absl::StrCat(name, "_port", i));
    servers_.push_back(std::make_unique<SiftProcess>(
        std::vector<std::string>{"embedding-server", "--port", "0", "--bind", "127.0.0.1",
                                 "--shard", std::to_string(i), "--num-shards",
                                 std::to_string(shards), "--snapshot-dir", snapshots, "--threads",
                                 "1", "--port-file", port_file},
        dir.Sub(absl::StrCat(name, "_server", i))));
    const std::string ports = WaitForFile(port_file);
    std::vector<std::string> parts =
        absl::StrSplit(ports, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    EXPECT_EQ(parts.size(), 2u) << "server " << i << " wrote no port file";
    int port = 0, metrics = 0;
    if (parts.size() == 2) {
      EXPECT_TRUE(absl::SimpleAtoi(parts[0], &port));
      EXPECT_TRUE(absl::SimpleAtoi(parts[1], &metrics));
    }
    addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    metrics_ports_.push_back(metrics);
  }
}

std::string EmbeddingServers::List() const { return absl::StrJoin(addresses_, ","); }

}  // namespace sift::testing
