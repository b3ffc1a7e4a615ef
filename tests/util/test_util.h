// Helpers shared by tests: temporary directories, running the `sift` binary, reading files.
#pragma once

#include <string>
#include <vector>

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

}  // namespace sift::testing
