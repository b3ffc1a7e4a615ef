// The reference's DLLogger log format (docs/model-spec.md 5.8), byte-compatible with NVIDIA
// dllogger's JSONStreamBackend and StdOutBackend, so tooling written for the reference reads ours.
// DLLogger writes each record to two optional LineSinks (a JSON-lines file, stdout); the sinks are
// owned by the logger. All DLLogger methods are thread-safe (one mutex). ParseDllLog reads a DLLL
// file back into records. Deviation: NaN/±Inf values are written as the JSON strings "NaN",
// "Infinity", "-Infinity" (the reference writes bare NaN tokens, which are not valid JSON).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"

namespace sift {

// Metric name → value, in the order they are logged (Python dicts keep insertion order).
using DllMetrics = std::vector<std::pair<std::string, double>>;
// A dllogger step: [epoch, step], [epoch] or [] (written as a JSON array / Python tuple text).
using DllStep = std::vector<int64_t>;
// Wall clock: microseconds since the Unix epoch. Injectable for deterministic tests.
using DllWallClock = std::function<int64_t()>;
int64_t SystemWallClockMicros();

// ---- Formatting pieces (pure functions, exposed for tests and tools) ----

// Python's repr(float): shortest round-trip digits, "1.0", "0.0001", "1e-05", "1e+16", "nan",
// "inf", "-inf".
std::string FormatPyFloat(double v);
// Python's str(tuple) of ints: "(0, 5)", "(2,)", "()".
std::string FormatPyTuple(const DllStep& step);
// Python's str(datetime): "2026-11-29 14:12:09.123456"; the fraction is omitted when it is zero
// (as Python does). utc=false renders local time (the reference uses datetime.now()).
std::string FormatPyDatetime(int64_t unix_micros, bool utc);
// A JSON string literal with Python json.dumps' default escaping (ensure_ascii).
std::string JsonQuote(absl::string_view s);

// ---- Sinks ----

// Receives whole lines (without the trailing newline). Implementations flush every line.
class LineSink {
 public:
  virtual ~LineSink() = default;
  virtual Status WriteLine(absl::string_view line) = 0;
};

// Appends to a file opened with O_APPEND|O_CREAT (never truncates unless truncate=true); each line
// is one write(2) of "line\n", so it is on disk-cache immediately and lines of concurrent
// appenders do not interleave mid-line.
class FileLineSink : public LineSink {
 public:
  static StatusOr<std::unique_ptr<FileLineSink>> Open(const std::string& path,
                                                      bool truncate = false);
  ~FileLineSink() override;
  Status WriteLine(absl::string_view line) override;

 private:
  FileLineSink(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Writes to the process's stdout (fwrite + fflush per line).
class StdoutLineSink : public LineSink {
 public:
  Status WriteLine(absl::string_view line) override;
};

// Keeps every line in memory (tests, tools). lines() is not synchronised with writers.
class CaptureLineSink : public LineSink {
 public:
  Status WriteLine(absl::string_view line) override {
    lines_.emplace_back(line);
    return absl::OkStatus();
  }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<std::string> lines_;
};

// ---- Logger ----

struct DLLoggerOptions {
  bool utc = false;  // render "datetime" / the stdout prefix in UTC instead of local time
};

class DLLogger {
 public:
  // Either sink may be null (that sink is skipped). clock null = SystemWallClockMicros. The start
  // time for "elapsedtime" is read from the clock here.
  DLLogger(std::unique_ptr<LineSink> json_sink, std::unique_ptr<LineSink> stdout_sink,
           DllWallClock clock = nullptr, DLLoggerOptions options = {});

  // Declares a metric's unit (nullopt = Python None). Writes a METADATA line to the JSON sink:
  //   DLLL {"timestamp": ..., "elapsedtime": ..., "datetime": ..., "type": "METADATA",
  //         "metric": "<name>", "metadata": {"unit": "<unit>" | null}}
  // Nothing goes to stdout (as the reference); the unit is used by later stdout lines.
  Status Metadata(absl::string_view metric, std::optional<std::string> unit);
  // The reference's five declarations (model-spec 5.8): test_auc None, latency_p90 "ms",
  // train_loss None, time_to_train "s", throughput "samples/s".
  Status WriteReferenceMetadata();

  // JSON sink: DLLL {"timestamp": "<unix s>", "datetime": "<str>", "elapsedtime": "<s>",
  //                  "type": "LOG", "step": [..], "data": {"m": v, ...}}
  // stdout sink: DLL <datetime> - <tuple> m : v unit m : v unit ...  (exactly the reference's
  //   "{} : {} {}" per metric joined by " ": a metric without metadata has unit "" (so a trailing
  //   space), a unit declared None prints "None").
  // Returns the first sink error (both sinks are still attempted).
  Status Log(const DllStep& step, const DllMetrics& data);

 private:
  struct Now {
    std::string timestamp, datetime, elapsed;
  };
  Now NowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<LineSink> json_sink_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<LineSink> stdout_sink_ ABSL_GUARDED_BY(mu_);
  DllWallClock clock_;
  DLLoggerOptions options_;
  int64_t start_micros_;
  std::vector<std::pair<std::string, std::optional<std::string>>> units_ ABSL_GUARDED_BY(mu_);
};

// Opens `path` (appending, parent directories are not created) plus stdout (unless
// with_stdout=false) and writes the reference metadata lines.
StatusOr<std::unique_ptr<DLLogger>> OpenReferenceDLLogger(const std::string& path,
                                                          bool with_stdout = true,
                                                          DllWallClock clock = nullptr,
                                                          DLLoggerOptions options = {});

// ---- Reader ----

struct DllRecord {
  enum class Type { kLog, kMetadata };
  Type type = Type::kLog;
  int line = 0;                                  // 1-based line number in the file
  std::string timestamp, datetime, elapsedtime;  // as written (strings)
  // kLog:
  DllStep step;
  DllMetrics data;  // "NaN"/"Infinity"/"-Infinity" strings and null read back as NaN/±Inf/NaN
  // kMetadata:
  std::string metric;
  std::optional<std::string> unit;  // nullopt when the unit is null or absent
};

// Parses DLLL text; blank lines are skipped, any other line must be "DLLL " + a JSON object of the
// shape above. Errors are INVALID_ARGUMENT "<filename>:<line>: <what>".
StatusOr<std::vector<DllRecord>> ParseDllLog(absl::string_view text, absl::string_view filename);
StatusOr<std::vector<DllRecord>> ReadDllLogFile(const std::string& path);

}  // namespace sift
