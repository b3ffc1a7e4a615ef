// EmbeddingServers: S real `sift embedding-server` processes (shard i of S) on loopback for
// integration tests, sharing one snapshot directory, each started with --port 0 and a port file
// (ADD_FAILURE when one writes none). Killed and reaped on destruction (SiftProcess).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/util/test_util.h"

namespace sift::testing {

class EmbeddingServers {
 public:
  EmbeddingServers(const TempDir& dir, const std::string& name, int shards,
                   const std::string& snapshots);
  // "host:port,host:port,..." in shard order (the --embedding-servers flag).
  std::string List() const;
  const std::vector<std::string>& addresses() const { return addresses_; }
  const std::string& Address(int i) const { return addresses_[i]; }
  int MetricsPort(int i) const { return metrics_ports_[i]; }
  SiftProcess& server(int i) { return *servers_[i]; }

 private:
  std::vector<std::unique_ptr<SiftProcess>> servers_;
  std::vector<std::string> addresses_;
  std::vector<int> metrics_ports_;
};

}  // namespace sift::testing
