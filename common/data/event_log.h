// The general import (`sift data events`, docs/own-data.md; the rule is docs/data-formats.md
// "Event logs"): interaction logs as delimited text (CSV, TSV, any delimiter string) or JSON lines,
// gzip or plain, into a sift timeline dataset with the raw tokens of every id kept (vocab.h).
//
// The rule, in order:
//   1. every data row of the events files (read in the order given) is one interaction: user
//      token, item token, time; tokens are raw strings (no trimming, no case folding); with a
//      value filter only rows whose value parses as a number >= V count;
//   2. category: the events' category column, or the items file's (keyed by item token), or the
//      name of the first flagged column of the items file; the first token of a multi-valued field;
//      none -> "no_category";
//   3. users with at least min_user_events kept rows stay; vocabularies (ids from 1 in ascending
//      byte order of the tokens) are built from their rows only;
//   4. per user, a stable sort by time at full precision: ties keep the input order;
//   5. leave-last-K-out (K = test_events): the dataset's split rule, stored as
//      metadata.sift.test_events; a user needs K + 2 events;
//   6. labelled samples (samples_path): each row is one sample with its label; its history is the
//      user's events strictly before its time; samples at or after test_from are the test split.
//      A user is kept when it has a sample (and min_user_events events: default 0 here).
// Bad rows (wrong field count, unparsable time or value, empty token, a label other than 0/1)
// are counted and the first few reported with file:line; more than max_bad_fraction of a file's
// non-empty lines is an error; a missing column is an error listing the header's columns; an items
// file with two rows for one key is an error naming both lines. Nothing depends on the thread
// count. Output is committed by feature_spec.yaml, written last (dataset.h): an import that fails
// or is killed leaves no directory that opens as a dataset.
//
// Memory: ~16-20 bytes per valid row (SoA: user, item, [category,] time; rows of users dropped
// later included) plus the vocabularies, then, beside them, 4 bytes per kept event (the order),
// the timeline being written (16 bytes per event) and, with samples, 8 more per event.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/data/line_scan.h"
#include "common/status.h"

namespace sift::data {

// How one text table is read.
struct TableSyntax {
  enum class Format { kAuto, kDelimited, kJsonLines };
  Format format = Format::kAuto;  // auto: JSON lines when the first non-empty line starts with '{'
  std::string delimiter;          // empty: "," for *.csv[.gz], tab otherwise
  std::vector<std::string> columns;  // names of a header-less file's columns
  bool header = true;                // false: the first line is data (implied by `columns`)
};

enum class TimeFormat { kSeconds, kMillis, kMicros, kIso8601 };
// "s", "ms", "us", "iso8601" -> format; false for anything else.
bool ParseTimeFormat(absl::string_view name, TimeFormat* out);

// A timestamp as microseconds since the epoch (the full-precision order key). Seconds may carry a
// fraction of up to 6 digits; ISO-8601 needs a date, 'T', a time and an offset or 'Z'. The error
// says what was expected (without the file or line).
Status ParseTimestamp(absl::string_view text, TimeFormat format, int64_t* micros);

// Splits one delimited line into fields. A field that starts with '"' is quoted: it ends at the
// next lone '"' (a doubled "" is one quote) and must be followed by the delimiter or the line's
// end. Fields are views into `line` or, for quoted fields with "", into `scratch`.
Status SplitDelimited(absl::string_view line, absl::string_view delimiter,
                      std::vector<absl::string_view>* fields, std::string* scratch);

struct EventLogOptions {
  std::vector<std::string> events_paths;  // read in this order
  TableSyntax events;
  std::string user_column = "user_id", item_column = "item_id", time_column = "timestamp";
  std::string category_column;     // optional
  std::string category_separator;  // optional: multi-valued category fields yield their first token
  TimeFormat time_format = TimeFormat::kSeconds;

  std::string items_path;  // optional item -> category file
  TableSyntax items;
  std::string items_key, items_category;
  std::vector<std::string> items_category_flags;  // instead of items_category

  std::string min_value_column;  // optional value filter
  double min_value = 0;

  int64_t min_user_events = -1;  // -1: 20, or 0 with samples
  int64_t test_events = 1;

  std::string samples_path;  // optional labelled impressions (same syntax as the events)
  std::string label_column = "label";
  std::string test_from;  // a time in time_format: samples at or after it are the test split

  std::string out_dir;
  double max_bad_fraction = 0.01;
  uint64_t negative_seed = 12345;
  int64_t history = 100;
  int threads = 0;  // parser threads; 0 = all CPUs, 1 = all on the caller
  ScanOptions scan;
};

struct EventLogReport {
  std::vector<FileReport> events;  // one per events file
  FileReport items, samples;
  int64_t rows = 0;              // valid event rows
  int64_t rows_below_value = 0;  // dropped by the value filter
  int64_t users_read = 0;        // distinct users among the kept-value rows
  int64_t users = 0, items_kept = 0, categories = 0, events_kept = 0;
  int64_t items_without_category = 0;           // kept items with no category (no_category)
  int64_t train_samples = 0, test_samples = 0;  // derived (pairs x 2) or stored
  int64_t samples_without_history = 0;          // stored samples with no earlier event
  int64_t samples_dropped = 0;                  // samples of users under min_user_events
  double seconds = 0;
};

StatusOr<EventLogReport> ImportEventLog(const EventLogOptions& options);

}  // namespace sift::data
