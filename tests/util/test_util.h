// Helpers shared by tests: temporary directories, running the `sift` binary, reading files.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace sift::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the built `sift` binary with `args` (no shell), capturing stdout and stderr.
RunResult RunSift(const std::vector<std::string>& args);

// Whole-file helpers for tests (abort the test on I/O errors).
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& data);

// HTTP GET of http://host:port/path over a plain socket (HTTP/1.0, Connection: close, 10 s
// socket timeouts). Returns the body; UNAVAILABLE when the connection fails, INTERNAL for a
// malformed reply, FAILED_PRECONDITION (with the status line) for a status other than 200.
StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path);

// Whether `promtool` (Prometheus' linter) is on PATH.
bool PromtoolAvailable();
// Runs `promtool check metrics` with `exposition` on stdin. Returns its output (stdout and
// stderr) when it exits 0, else an error whose message holds the exit code and the output.
StatusOr<std::string> PromtoolCheckMetrics(const std::string& exposition);

}  // namespace sift::testing
