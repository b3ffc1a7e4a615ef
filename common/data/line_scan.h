// Reading line-oriented input files (gzip or plain), parsed on a thread pool and consumed in file
// order, with bad lines counted and the first few kept for the report; plus the string interning
// and id assignment the importers share (`sift data amazon`, `sift data events`).
//
// Nothing here depends on the thread count: lines are parsed in parallel but consumed in order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/thread_pool.h"

namespace sift::data {

// The category of an item that has none (docs/data.md).
inline constexpr char kNoCategory[] = "no_category";

// How many bad lines per file are kept for the report.
inline constexpr int kMaxReportedBadLines = 5;

struct BadLine {
  int64_t line = 0;  // 1-based
  std::string what;
};

struct FileReport {
  std::string path;
  int64_t lines = 0;         // lines read, empty ones included
  int64_t empty_lines = 0;   // skipped
  int64_t header_lines = 0;  // a table's header (not data)
  int64_t bad_lines = 0;
  std::vector<BadLine> first_bad;  // the first kMaxReportedBadLines

  int64_t good_lines() const { return lines - header_lines - empty_lines - bad_lines; }
  // "path:line: what", one per reported bad line.
  std::vector<std::string> BadLineMessages() const;
};

// How ScanFile reads: lines go to the parser threads in runs of ~chunk_bytes; `progress` is called
// now and then (phase name, lines read so far in that phase); optional.
struct ScanOptions {
  size_t chunk_bytes = size_t{1} << 20;
  std::function<void(absl::string_view phase, int64_t lines)> progress;
};

// Reads '\n'-terminated lines from a gzip or plain file (detected by content), streaming. A '\r'
// before the '\n' is dropped; no other character ends a line. A line longer than kMaxLineBytes is
// returned truncated with `overlong` set (the caller reports it as bad). Not thread-safe.
class LineReader {
 public:
  static constexpr size_t kMaxLineBytes = size_t{64} << 20;

  static StatusOr<std::unique_ptr<LineReader>> Open(const std::string& path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Sets *line to the next line (valid until the next call) and returns true, or returns false at
  // the end of the file. A read error (e.g. a truncated gzip stream) is an error naming the file
  // and the line.
  StatusOr<bool> Next(absl::string_view* line, bool* overlong);
  int64_t line_number() const { return line_number_; }  // of the last line returned

 private:
  LineReader() = default;
  Status Fill();

  std::string path_;
  void* gz_ = nullptr;  // gzFile
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  std::string carry_;
  int64_t line_number_ = 0;
};

// Fails with INVALID_ARGUMENT naming the file, the counts and the first bad line when more than
// `max_fraction` of the file's non-empty lines are bad.
Status CheckBadFraction(const FileReport& r, double max_fraction);

// A stable 64-bit hash of a string (the pass-1 user key; see the header).
inline uint64_t StringHash(absl::string_view s) {
  uint64_t h = Mix64(s.size());
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = HashCombine(h, w);
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = HashCombine(h, w);
  }
  return h;
}

// Interns strings into dense local indices (first-seen order).
class Interner {
 public:
  uint32_t Intern(const char* s) { return Intern(absl::string_view(s)); }
  uint32_t Intern(absl::string_view s) {
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    return Intern(std::string(s));
  }
  uint32_t Intern(std::string&& s) {
    auto [it, inserted] = index_.try_emplace(s, static_cast<uint32_t>(names_.size()));
    if (inserted) names_.push_back(std::move(s));
    return it->second;
  }
  // Index of `s`, or -1.
  int64_t Find(absl::string_view s) const {
    auto it = index_.find(s);
    return it == index_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  }
  size_t size() const { return names_.size(); }
  const std::string& name(uint32_t i) const { return names_[i]; }

 private:
  absl::flat_hash_map<std::string, uint32_t> index_;
  std::vector<std::string> names_;
};

// Ids 1..K for the marked entries of `names`, in ascending byte order of the names; 0 for the
// unmarked ones. Returns K.
inline int64_t AssignSortedIds(const Interner& names, const std::vector<bool>& used,
                               std::vector<int32_t>* ids) {
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < names.size(); ++i) {
    if (used[i]) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return names.name(a) < names.name(b); });
  ids->assign(names.size(), 0);
  for (size_t r = 0; r < order.size(); ++r) (*ids)[order[r]] = static_cast<int32_t>(r + 1);
  return static_cast<int64_t>(order.size());
}

namespace scan_internal {
inline constexpr int64_t kProgressEvery = int64_t{1} << 22;
// A run of whole lines, read on the calling thread and parsed on a pool thread.
template <typename Result>
struct Job {
  int64_t first_line = 0;  // number of the first line (1-based)
  int64_t lines = 0;
  std::string data;               // the lines, each followed by '\n' ('\r' already dropped)
  std::vector<int64_t> overlong;  // numbers of the lines cut at kMaxLineBytes (stored empty)
  // Filled by the pool thread:
  Result result;
  int64_t empty = 0;
  std::vector<BadLine> bad;
  Notification done;
};

// Runs parse_line on every non-empty line of the job (a non-OK status makes the line bad).
template <typename Result, typename ParseLine>
void ParseJob(const ParseLine& parse_line, Job<Result>* job) {
  size_t pos = 0, next_overlong = 0;
  for (int64_t n = job->first_line; n < job->first_line + job->lines; ++n) {
    const size_t nl = job->data.find('\n', pos);
    const absl::string_view line(job->data.data() + pos, nl - pos);
    pos = nl + 1;
    if (next_overlong < job->overlong.size() && job->overlong[next_overlong] == n) {
      ++next_overlong;
      job->bad.push_back(
          BadLine{n, absl::StrCat("line longer than ", LineReader::kMaxLineBytes >> 20, " MiB")});
    } else if (line.empty()) {
      ++job->empty;
    } else if (Status st = parse_line(line, n, &job->result); !st.ok()) {
      job->bad.push_back(BadLine{n, std::string(st.message())});
    }
  }
}

// Reads every line of `path` in chunks; `parse_line(line, number, Result*) -> Status` runs on
// `pool` (inline when null) and must be thread-safe; `consume(Result&&, std::vector<BadLine>*)
// -> Status` runs on the caller's thread in file order and may add bad lines of its own (e.g.
// duplicates, which need the lines before). Counts and the first bad lines go to *report.
template <typename Result, typename ParseLine, typename Consume>
Status ScanFile(const std::string& path, absl::string_view phase, const ScanOptions& options,
                ThreadPool* pool, FileReport* report, const ParseLine& parse_line,
                const Consume& consume) {
  *report = FileReport();
  report->path = path;
  SIFT_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader, LineReader::Open(path));
  const size_t max_in_flight = pool ? 4 * static_cast<size_t>(pool->num_threads()) : 1;
  std::deque<std::unique_ptr<Job<Result>>> in_flight;
  int64_t next_progress = kProgressEvery;

  auto finish_oldest = [&]() -> Status {
    std::unique_ptr<Job<Result>> job = std::move(in_flight.front());
    in_flight.pop_front();
    job->done.WaitForNotification();
    report->lines += job->lines;
    report->empty_lines += job->empty;
    SIFT_RETURN_IF_ERROR(consume(std::move(job->result), &job->bad));
    std::stable_sort(job->bad.begin(), job->bad.end(),
                     [](const BadLine& x, const BadLine& y) { return x.line < y.line; });
    report->bad_lines += static_cast<int64_t>(job->bad.size());
    for (BadLine& bad : job->bad) {
      if (report->first_bad.size() >= static_cast<size_t>(kMaxReportedBadLines)) break;
      report->first_bad.push_back(std::move(bad));
    }
    if (options.progress && report->lines >= next_progress) {
      options.progress(phase, report->lines);
      next_progress = (report->lines / kProgressEvery + 1) * kProgressEvery;
    }
    return Status();
  };

  auto run = [&]() -> Status {
    absl::string_view line;
    bool overlong = false, more = true;
    while (more) {
      auto job = std::make_unique<Job<Result>>();
      job->first_line = reader->line_number() + 1;
      while (job->data.size() < options.chunk_bytes) {
        SIFT_ASSIGN_OR_RETURN(more, reader->Next(&line, &overlong));
        if (!more) break;
        ++job->lines;
        if (overlong) {
          job->overlong.push_back(reader->line_number());
        } else {
          job->data.append(line.data(), line.size());
        }
        job->data.push_back('\n');
      }
      if (job->lines == 0) break;
      if (pool == nullptr) {
        ParseJob(parse_line, job.get());
        job->done.Notify();
      } else {
        Job<Result>* raw = job.get();
        pool->Schedule([raw, &parse_line] {
          ParseJob(parse_line, raw);
          raw->done.Notify();
        });
      }
      in_flight.push_back(std::move(job));
      while (in_flight.size() >= max_in_flight) SIFT_RETURN_IF_ERROR(finish_oldest());
    }
    while (!in_flight.empty()) SIFT_RETURN_IF_ERROR(finish_oldest());
    return Status();
  };
  const Status status = run();
  // On an error, jobs may still run on the pool: they reference this frame.
  for (const auto& job : in_flight) job->done.WaitForNotification();
  if (status.ok() && options.progress) options.progress(phase, report->lines);
  return status;
}

}  // namespace scan_internal

using scan_internal::ScanFile;

}  // namespace sift::data
