// Helpers of the `sift local` tests (local_test.cc, local_slow_test.cc): a small dataset, a short
// job spec, `sift local` in the background, the cluster file, and whether a pid still runs.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"

namespace sift::local_test {

// A few hundred users: a job of a few steps finishes in seconds.
inline std::string MakeSmallDataset(const testing::TempDir& dir, int users = 200) {
  const std::string out = dir.Sub("data");
  auto r = testing::RunSift({"data", "gen", "--preset", "tiny", "--seed", "1", "--users",
                             std::to_string(users), "--items", "2000", "--categories", "40",
                             "--out", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

// A job spec file: SIM on `dataset`, `epochs` epochs of `steps` steps (0 = whole epochs).
inline std::string WriteSpec(const testing::TempDir& dir, const std::string& dataset, int epochs,
                             int steps, const std::string& extra = "") {
  const std::string path = dir.Sub("job.yaml");
  testing::WriteAll(path, absl::StrCat("dataset: \"", dataset,
                                       "\"\nmodel: {type: sim}\ntraining: {epochs: ", epochs,
                                       ", batch_size: 256, staleness: 0, seed: 1, "
                                       "train_eval_samples: 512, max_steps_per_epoch: ",
                                       steps, "}\n", extra));
  return path;
}

// `sift local ARGS` in the background, its stdout and stderr in `log`.
inline Subprocess StartLocal(const std::vector<std::string>& args, const std::string& log) {
  SubprocessOptions o;
  o.argv = {SIFT_BINARY, "local"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.log_path = log;
  StatusOr<Subprocess> p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : Subprocess();
}

inline nlohmann::json ReadJson(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(testing::ReadAll(path), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path;
  return j;
}

// Whether `pid` is a live process (a zombie counts as gone).
inline bool Alive(int pid) {
  if (::kill(pid, 0) != 0) return errno != ESRCH;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

// Every child pid in a --cluster-file.
inline std::vector<int> ChildPids(const nlohmann::json& cluster) {
  std::vector<int> pids;
  for (const auto& c : cluster["children"]) pids.push_back(c["pid"].get<int>());
  return pids;
}

// The pids still alive (polling up to `timeout_s` for them to go; 0 = look once).
inline std::vector<int> Survivors(const std::vector<int>& pids, double timeout_s = 0) {
  std::vector<int> alive;
  for (double waited = 0; waited <= timeout_s; waited += 0.05) {
    alive.clear();
    for (int p : pids) {
      if (Alive(p)) alive.push_back(p);
    }
    if (alive.empty()) break;
    ::usleep(50000);
  }
  return alive;
}

// The pid of `role` `index` in a --cluster-file (-1 when absent).
inline int ChildPid(const nlohmann::json& cluster, const std::string& role, int index) {
  for (const auto& c : cluster["children"]) {
    if (c["role"] == role && c["index"] == index) return c["pid"].get<int>();
  }
  return -1;
}

}  // namespace sift::local_test
