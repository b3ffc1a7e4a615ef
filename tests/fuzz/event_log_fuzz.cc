// Fuzz target: the event-log import (common/data/event_log.h) on arbitrary files: the delimited
// splitter and the timestamp parser on every line, then the whole import.
//
// Input: a mode byte (bits 0-1: the time format; bit 2: JSON lines instead of CSV; bit 3: a
// header-less file read by index; bit 4: an items file, the same bytes, keyed by the item column),
// then the file. Invariants: the pieces return values, never crash; a failed import is
// INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE with a message; a successful one opens,
// with its checksums verified, and holds the users and events its report says.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/data/dataset.h"
#include "common/data/event_log.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sift::data;
  sift::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  const std::string file(in.Rest());
  const TimeFormat formats[] = {TimeFormat::kSeconds, TimeFormat::kMillis, TimeFormat::kMicros,
                                TimeFormat::kIso8601};
  const TimeFormat format = formats[mode & 3];

  std::vector<absl::string_view> fields;
  std::string scratch;
  for (absl::string_view line : absl::StrSplit(file, '\n')) {
    const auto st = SplitDelimited(line, ",", &fields, &scratch);
    if (st.ok()) {
      FUZZ_CHECK(!fields.empty(), "a split line has at least one field");
      for (absl::string_view f : fields) {
        int64_t us = 0;
        const auto t = ParseTimestamp(f, format, &us);
        FUZZ_CHECK(t.ok() || !t.message().empty(), "a timestamp error says what");
      }
    } else {
      FUZZ_CHECK(st.code() == absl::StatusCode::kInvalidArgument, st.ToString());
    }
  }

  const auto& dir = sift::fuzz::ScratchDir::Get();
  const std::string path = dir.File((mode & 4) ? "events.jsonl" : "events.csv");
  sift::fuzz::WriteFile(path, file);
  EventLogOptions o;
  o.events_paths = {path};
  o.out_dir = dir.File("ds");
  o.time_format = format;
  o.min_user_events = 3;
  o.max_bad_fraction = 0.5;
  o.threads = 1;
  o.events.format = (mode & 4) ? TableSyntax::Format::kJsonLines : TableSyntax::Format::kDelimited;
  if (mode & 8) {
    o.events.header = false;
    o.user_column = "0";
    o.item_column = "1";
    o.time_column = "2";
  } else {
    o.user_column = "u";
    o.item_column = "i";
    o.time_column = "t";
  }
  if (mode & 16) {
    o.items_path = path;
    o.items.format = o.events.format;
    o.items.header = o.events.header;
    o.items_key = o.item_column;
    o.items_category = o.user_column;
  }
  const auto report = ImportEventLog(o);
  if (!report.ok()) {
    const auto c = report.status().code();
    FUZZ_CHECK(c == absl::StatusCode::kInvalidArgument ||
                   c == absl::StatusCode::kFailedPrecondition || c == absl::StatusCode::kOutOfRange,
               report.status().ToString());
    FUZZ_CHECK(!report.status().message().empty(), "an error says what");
    return 0;
  }
  auto ds = Dataset::Open(o.out_dir, /*verify=*/true);
  FUZZ_CHECK(ds.ok(), ds.status().ToString());
  FUZZ_CHECK((*ds)->timeline()->num_users() == report->users, "users as reported");
  FUZZ_CHECK((*ds)->timeline()->num_events() == report->events_kept, "events as reported");
  FUZZ_CHECK((*ds)->vocab() != nullptr && (*ds)->vocab()->size(0) == report->users, "tokens");
  return 0;
}
