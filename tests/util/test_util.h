// Helpers shared by tests: temporary directories, running the `sift` binary, reading files.
#pragma once

#include <string>
#include <vector>

#include "common/http_client.h"
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

// A program running in the background (a server), its stdout and stderr going to
// `log_prefix`.out / .err. The destructor kills it (SIGKILL) and reaps it, so a failing test
// leaves no process. argv[0] is the program's path.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv, const std::string& log_prefix);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  int pid() const { return pid_; }
  // Sends `sig` and waits for the exit; returns the exit code (128 + signal when killed).
  int Stop(int sig);
  // Waits up to `timeout_s` for the process to exit by itself; its exit code, -1 on timeout.
  int WaitExit(double timeout_s);
  std::string Out() const;
  std::string Err() const;
  // The exit code (128 + signal when killed) if it has exited, without reaping it; -1 if it runs.
  int PeekExit() const;

 private:
  int pid_ = -1;
  std::string prefix_;
};

// The built `sift` binary with `args`, in the background.
class SiftProcess : public BackgroundProcess {
 public:
  SiftProcess(const std::vector<std::string>& args, const std::string& log_prefix);
};

// Waits (polling, up to `timeout_s`) until `path` exists and is non-empty; returns its content,
// or "" on timeout.
std::string WaitForFile(const std::string& path, double timeout_s = 60);

// Whole-file helpers for tests (abort the test on I/O errors).
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& data);

// HTTP GET for tests (/metrics, Prometheus's API): common/http_client.h.
using ::sift::HttpGet;

// Whether `promtool` (Prometheus' linter) is on PATH.
bool PromtoolAvailable();
// Runs `promtool check metrics` with `exposition` on stdin. Returns its output (stdout and
// stderr) when it exits 0, else an error whose message holds the exit code and the output.
StatusOr<std::string> PromtoolCheckMetrics(const std::string& exposition);

}  // namespace sift::testing
