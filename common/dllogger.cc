#include "common/dllogger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "nlohmann/json.hpp"

namespace sift {

int64_t SystemWallClockMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- Formatting ----

std::string FormatPyFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, e.g. "-1.2345e+03" or "1e-05".
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  // Python's repr switches to exponent notation when exponent < -4 or >= 16.
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    absl::StrAppend(&out, absl::StrFormat("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent)));
    return out;
  }
  if (exponent < 0) {
    return absl::StrCat(sign, "0.", std::string(static_cast<size_t>(-exponent - 1), '0'), digits);
  }
  const size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {
    return absl::StrCat(sign, digits, std::string(int_len - digits.size(), '0'), ".0");
  }
  return absl::StrCat(sign, digits.substr(0, int_len), ".", digits.substr(int_len));
}

std::string FormatPyTuple(const DllStep& step) {
  if (step.empty()) return "()";
  if (step.size() == 1) return absl::StrCat("(", step[0], ",)");
  return absl::StrCat("(", absl::StrJoin(step, ", "), ")");
}

namespace {

void SplitMicros(int64_t unix_micros, int64_t* seconds, int64_t* micros) {
  *seconds = unix_micros / 1000000;
  *micros = unix_micros % 1000000;
  if (*micros < 0) {  // floor division for times before 1970
    *micros += 1000000;
    *seconds -= 1;
  }
}

std::string JsonStepArray(const DllStep& step) {
  return absl::StrCat("[", absl::StrJoin(step, ", "), "]");
}

// A value as json.dumps writes a float, except non-finite values, which become strings.
std::string JsonNumber(double v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  return FormatPyFloat(v);
}

std::string JsonDataObject(const DllMetrics& data) {
  std::string out = "{";
  for (size_t i = 0; i < data.size(); ++i) {
    if (i > 0) out += ", ";
    absl::StrAppend(&out, JsonQuote(data[i].first), ": ", JsonNumber(data[i].second));
  }
  out += "}";
  return out;
}

}  // namespace

std::string FormatPyDatetime(int64_t unix_micros, bool utc) {
  int64_t seconds, micros;
  SplitMicros(unix_micros, &seconds, &micros);
  const time_t t = static_cast<time_t>(seconds);
  struct tm tm {};
  if (utc) {
    gmtime_r(&t, &tm);
  } else {
    localtime_r(&t, &tm);
  }
  std::string out = absl::StrFormat("%04d-%02d-%02d %02d:%02d:%02d", tm.tm_year + 1900,
                                    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (micros != 0) absl::StrAppend(&out, absl::StrFormat(".%06d", micros));
  return out;
}

std::string JsonQuote(absl::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
}

// ---- Sinks ----

StatusOr<std::unique_ptr<FileLineSink>> FileLineSink::Open(const std::string& path, bool truncate) {
  // O_NOFOLLOW: a log file that is a symbolic link is refused (ELOOP), never appended through.
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (truncate ? O_TRUNC : O_APPEND);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot open log file: ", std::strerror(errno)));
  }
  return std::unique_ptr<FileLineSink>(new FileLineSink(path, fd));
}

FileLineSink::~FileLineSink() { ::close(fd_); }

Status FileLineSink::WriteLine(absl::string_view line) {
  const std::string buf = absl::StrCat(line, "\n");
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::write(fd_, buf.data() + done, buf.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

Status StdoutLineSink::WriteLine(absl::string_view line) {
  const std::string buf = absl::StrCat(line, "\n");
  if (std::fwrite(buf.data(), 1, buf.size(), stdout) != buf.size() || std::fflush(stdout) != 0) {
    return absl::DataLossError("stdout: write failed");
  }
  return absl::OkStatus();
}

// ---- Logger ----

DLLogger::DLLogger(std::unique_ptr<LineSink> json_sink, std::unique_ptr<LineSink> stdout_sink,
                   DllWallClock clock, DLLoggerOptions options)
    : json_sink_(std::move(json_sink)),
      stdout_sink_(std::move(stdout_sink)),
      clock_(clock ? std::move(clock) : DllWallClock(SystemWallClockMicros)),
      options_(options),
      start_micros_(clock_()) {}

DLLogger::Now DLLogger::NowLocked() {
  const int64_t now = clock_();
  int64_t seconds, micros;
  SplitMicros(now, &seconds, &micros);
  Now out;
  // Python: datetime.timestamp() = mktime(...) + microsecond / 1e6.
  out.timestamp = FormatPyFloat(static_cast<double>(seconds) + static_cast<double>(micros) / 1e6);
  out.datetime = FormatPyDatetime(now, options_.utc);
  out.elapsed = FormatPyFloat(static_cast<double>(now - start_micros_) / 1e6);
  return out;
}

Status DLLogger::Metadata(absl::string_view metric, std::optional<std::string> unit) {
  absl::MutexLock lock(&mu_);
  bool found = false;
  for (auto& [name, u] : units_) {
    if (name == metric) {
      u = unit;
      found = true;
    }
  }
  if (!found) units_.emplace_back(std::string(metric), unit);
  if (json_sink_ == nullptr) return absl::OkStatus();
  const Now now = NowLocked();
  const std::string line = absl::StrCat(
      "DLLL {\"timestamp\": ", JsonQuote(now.timestamp),
      ", \"elapsedtime\": ", JsonQuote(now.elapsed), ", \"datetime\": ", JsonQuote(now.datetime),
      ", \"type\": \"METADATA\", \"metric\": ", JsonQuote(metric),
      ", \"metadata\": {\"unit\": ", unit.has_value() ? JsonQuote(*unit) : std::string("null"),
      "}}");
  return json_sink_->WriteLine(line);
}

Status DLLogger::WriteReferenceMetadata() {
  SIFT_RETURN_IF_ERROR(Metadata("test_auc", std::nullopt));
  SIFT_RETURN_IF_ERROR(Metadata("latency_p90", "ms"));
  SIFT_RETURN_IF_ERROR(Metadata("train_loss", std::nullopt));
  SIFT_RETURN_IF_ERROR(Metadata("time_to_train", "s"));
  return Metadata("throughput", "samples/s");
}

Status DLLogger::Log(const DllStep& step, const DllMetrics& data) {
  absl::MutexLock lock(&mu_);
  const Now now = NowLocked();
  Status first = absl::OkStatus();
  if (json_sink_ != nullptr) {
    const std::string line = absl::StrCat("DLLL {\"timestamp\": ", JsonQuote(now.timestamp),
                                          ", \"datetime\": ", JsonQuote(now.datetime),
                                          ", \"elapsedtime\": ", JsonQuote(now.elapsed),
                                          ", \"type\": \"LOG\", \"step\": ", JsonStepArray(step),
                                          ", \"data\": ", JsonDataObject(data), "}");
    first.Update(json_sink_->WriteLine(line));
  }
  if (stdout_sink_ != nullptr) {
    std::vector<std::string> parts;
    parts.reserve(data.size());
    for (const auto& [metric, value] : data) {
      std::string unit;  // no metadata: "" (the reference's default)
      for (const auto& [name, u] : units_) {
        if (name == metric) unit = u.has_value() ? *u : "None";
      }
      parts.push_back(absl::StrCat(metric, " : ", FormatPyFloat(value), " ", unit));
    }
    first.Update(stdout_sink_->WriteLine(absl::StrCat(
        "DLL ", now.datetime, " - ", FormatPyTuple(step), " ", absl::StrJoin(parts, " "))));
  }
  return first;
}

StatusOr<std::unique_ptr<DLLogger>> OpenReferenceDLLogger(const std::string& path, bool with_stdout,
                                                          DllWallClock clock,
                                                          DLLoggerOptions options) {
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<FileLineSink> file, FileLineSink::Open(path));
  std::unique_ptr<LineSink> out;
  if (with_stdout) out = std::make_unique<StdoutLineSink>();
  auto logger =
      std::make_unique<DLLogger>(std::move(file), std::move(out), std::move(clock), options);
  SIFT_RETURN_IF_ERROR(logger->WriteReferenceMetadata());
  return logger;
}

// ---- Reader ----

namespace {

using OJson = nlohmann::ordered_json;

StatusOr<std::string> GetString(const OJson& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) return absl::InvalidArgumentError(absl::StrCat("missing key \"", key, "\""));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("key \"", key, "\" is not a string"));
  }
  return it->get<std::string>();
}

StatusOr<double> MetricValue(const std::string& name, const OJson& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return std::nan("");
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "NaN") return std::nan("");
    if (s == "Infinity") return HUGE_VAL;
    if (s == "-Infinity") return -HUGE_VAL;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("data \"", name, "\" is not a number (", v.dump(), ")"));
}

StatusOr<DllRecord> ParseRecord(absl::string_view line) {
  constexpr absl::string_view kPrefix = "DLLL ";
  if (line.substr(0, kPrefix.size()) != kPrefix) {
    return absl::InvalidArgumentError("line does not start with \"DLLL \"");
  }
  OJson obj;
  try {
    obj = OJson::parse(line.substr(kPrefix.size()));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!obj.is_object()) return absl::InvalidArgumentError("JSON value is not an object");
  DllRecord rec;
  SIFT_ASSIGN_OR_RETURN(rec.timestamp, GetString(obj, "timestamp"));
  SIFT_ASSIGN_OR_RETURN(rec.datetime, GetString(obj, "datetime"));
  SIFT_ASSIGN_OR_RETURN(rec.elapsedtime, GetString(obj, "elapsedtime"));
  SIFT_ASSIGN_OR_RETURN(const std::string type, GetString(obj, "type"));
  if (type == "METADATA") {
    rec.type = DllRecord::Type::kMetadata;
    SIFT_ASSIGN_OR_RETURN(rec.metric, GetString(obj, "metric"));
    const auto md = obj.find("metadata");
    if (md == obj.end() || !md->is_object()) {
      return absl::InvalidArgumentError("METADATA record without a \"metadata\" object");
    }
    const auto unit = md->find("unit");
    if (unit != md->end() && !unit->is_null()) {
      if (!unit->is_string()) return absl::InvalidArgumentError("metadata unit is not a string");
      rec.unit = unit->get<std::string>();
    }
    return rec;
  }
  if (type != "LOG") {
    return absl::InvalidArgumentError(absl::StrCat("unknown type \"", type, "\""));
  }
  const auto step = obj.find("step");
  if (step == obj.end() || !step->is_array()) {
    return absl::InvalidArgumentError("\"step\" is missing or not an array");
  }
  for (const auto& s : *step) {
    if (!s.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step element ", s.dump(), " is not an integer"));
    }
    rec.step.push_back(s.get<int64_t>());
  }
  const auto data = obj.find("data");
  if (data == obj.end() || !data->is_object()) {
    return absl::InvalidArgumentError("\"data\" is missing or not an object");
  }
  for (const auto& [name, value] : data->items()) {
    SIFT_ASSIGN_OR_RETURN(const double v, MetricValue(name, value));
    rec.data.emplace_back(name, v);
  }
  return rec;
}

}  // namespace

StatusOr<std::vector<DllRecord>> ParseDllLog(absl::string_view text, absl::string_view filename) {
  std::vector<DllRecord> out;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == absl::string_view::npos) continue;
    StatusOr<DllRecord> rec = ParseRecord(line);
    if (!rec.ok()) return Annotate(rec.status(), absl::StrCat(filename, ":", line_no));
    rec->line = line_no;
    out.push_back(*std::move(rec));
  }
  return out;
}

StatusOr<std::vector<DllRecord>> ReadDllLogFile(const std::string& path) {
  SIFT_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  return ParseDllLog(text, path);
}

}  // namespace sift
