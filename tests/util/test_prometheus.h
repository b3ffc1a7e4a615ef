// TestPrometheus: a real Prometheus server (Debian's `prometheus`) for tests, on loopback, scraping
// the given /metrics targets through a file_sd file every second (rule files evaluated every
// second too), with its HTTP query API. Killed on destruction. Tests must skip themselves when
// Available() is false. One thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/util/test_util.h"

namespace sift::testing {

class TestPrometheus {
 public:
  static bool Available();
  // Writes the targets file and prometheus.yml under `dir`/`name`*, starts the server on a free
  // port (retried on another one if that was taken meanwhile) and waits until it is ready
  // (ADD_FAILURE otherwise).
  TestPrometheus(const TempDir& dir, const std::string& name,
                 const std::vector<std::string>& targets,
                 const std::vector<std::string>& rule_files = {});

  // The outcome of one instant query (/api/v1/query): its series, how many with a finite value,
  // the first value (NaN if none), or the error.
  struct Answer {
    bool ok = false;
    std::string error;
    int series = 0;
    int finite = 0;
    double first = 0;
    std::string body;
  };
  Answer Query(const std::string& promql) const;
  // Every metric name Prometheus holds (/api/v1/label/__name__/values), one per line.
  std::string MetricNames() const;
  int port() const { return port_; }
  std::string Err() const;

 private:
  std::unique_ptr<BackgroundProcess> process_;
  int port_ = -1;
};

// Calls `done` every 100 ms until it returns true, at most `timeout_s`; returns its last answer.
// For bounded polls: no assertion on how long anything takes.
bool WaitUntil(const std::function<bool()>& done, double timeout_s = 120);

}  // namespace sift::testing
