// sift data events: any interaction log (CSV, TSV, any delimiter, JSON lines; gzip or plain) into
// a timeline dataset with its tokens kept (common/data/event_log.h; docs/own-data.md). Prints the
// bad lines found (stderr) and a summary.
#include <cstdio>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/bad_lines.h"
#include "cli/commands.h"
#include "common/data/event_log.h"

namespace sift::cli {
namespace {

struct EventsFlags {
  data::EventLogOptions options;
  std::string format = "auto", items_format = "auto", time_format = "s";
  std::string columns, items_columns, items_flags, min_value;
  bool no_header = false, items_no_header = false;
};

// "\t" (two characters, as a shell passes it) means a tab.
std::string Unescape(const std::string& d) { return d == "\\t" ? "\t" : d; }

std::vector<std::string> SplitList(const std::string& s) {
  if (s.empty()) return {};
  return absl::StrSplit(s, ',');
}

Status Syntax(const std::string& format, const std::string& delimiter, const std::string& columns,
              bool no_header, data::TableSyntax* out) {
  out->format = format == "jsonl"       ? data::TableSyntax::Format::kJsonLines
                : format == "delimited" ? data::TableSyntax::Format::kDelimited
                                        : data::TableSyntax::Format::kAuto;
  out->delimiter = Unescape(delimiter);
  out->columns = SplitList(columns);
  out->header = !no_header && out->columns.empty();
  return absl::OkStatus();
}

Status RunDataEvents(EventsFlags f) {
  data::EventLogOptions& o = f.options;
  SIFT_RETURN_IF_ERROR(Syntax(f.format, o.events.delimiter, f.columns, f.no_header, &o.events));
  SIFT_RETURN_IF_ERROR(
      Syntax(f.items_format, o.items.delimiter, f.items_columns, f.items_no_header, &o.items));
  o.items_category_flags = SplitList(f.items_flags);
  data::ParseTimeFormat(f.time_format, &o.time_format);  // checked by the flag
  if (!f.min_value.empty()) {
    const size_t eq = f.min_value.rfind('=');
    if (eq == std::string::npos || eq == 0 ||
        !absl::SimpleAtod(f.min_value.substr(eq + 1), &o.min_value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--min-value ", f.min_value, ": expected COLUMN=NUMBER, e.g. rating=4"));
    }
    o.min_value_column = f.min_value.substr(0, eq);
  }
  o.scan.progress = [](absl::string_view phase, int64_t lines) {
    std::fprintf(stderr, "%.*s: %lld lines\n", static_cast<int>(phase.size()), phase.data(),
                 static_cast<long long>(lines));
  };
  SIFT_ASSIGN_OR_RETURN(const data::EventLogReport r, data::ImportEventLog(o));
  int64_t lines = 0;
  for (const data::FileReport& e : r.events) {
    PrintBadLines(e);
    lines += e.lines;
  }
  PrintBadLines(r.items);
  PrintBadLines(r.samples);
  std::printf("wrote %s\n", o.out_dir.c_str());
  for (const data::FileReport& e : r.events) {
    std::printf("events %s: %lld lines (%lld header), %lld bad, %lld empty\n", e.path.c_str(),
                static_cast<long long>(e.lines), static_cast<long long>(e.header_lines),
                static_cast<long long>(e.bad_lines), static_cast<long long>(e.empty_lines));
  }
  std::printf("rows: %lld valid from %lld users", static_cast<long long>(r.rows),
              static_cast<long long>(r.users_read));
  if (!o.min_value_column.empty()) {
    std::printf(", %lld below %s >= %g", static_cast<long long>(r.rows_below_value),
                o.min_value_column.c_str(), o.min_value);
  }
  std::printf("\n");
  if (!o.items_path.empty()) {
    std::printf("items file %s: %lld lines, %lld bad; kept items without a category: %lld ('%s')\n",
                r.items.path.c_str(), static_cast<long long>(r.items.lines),
                static_cast<long long>(r.items.bad_lines),
                static_cast<long long>(r.items_without_category), data::kNoCategory);
  }
  std::printf("kept: users %lld, items %lld, categories %lld, events %lld\n",
              static_cast<long long>(r.users), static_cast<long long>(r.items_kept),
              static_cast<long long>(r.categories), static_cast<long long>(r.events_kept));
  if (!o.samples_path.empty()) {
    std::printf(
        "samples %s: %lld lines, %lld bad, %lld dropped with their users (--min-user-events); "
        "train %lld (before %s), test %lld; %lld with no earlier event\n",
        r.samples.path.c_str(), static_cast<long long>(r.samples.lines),
        static_cast<long long>(r.samples.bad_lines), static_cast<long long>(r.samples_dropped),
        static_cast<long long>(r.train_samples), o.test_from.c_str(),
        static_cast<long long>(r.test_samples), static_cast<long long>(r.samples_without_history));
  } else {
    std::printf("samples: train %lld, test %lld (the last %lld event(s) of each user)\n",
                static_cast<long long>(r.train_samples), static_cast<long long>(r.test_samples),
                static_cast<long long>(o.test_events));
  }
  std::printf("took %.1f s (%.0f events/s)\n", r.seconds,
              r.seconds > 0 ? static_cast<double>(r.rows) / r.seconds : 0.0);
  return absl::OkStatus();
}

}  // namespace

void AddDataEvents(CLI::App* data, Action* action) {
  auto f = std::make_shared<EventsFlags>();
  data::EventLogOptions& o = f->options;
  CLI::App* cmd = data->add_subcommand(
      "events",
      "Import an interaction log (CSV, TSV, JSON lines; gzip or plain) as a timeline dataset");
  cmd->add_option("--events", o.events_paths,
                  "Events file(s), read in the order given: one interaction per row")
      ->required()
      ->take_all();
  cmd->add_option("--out", o.out_dir, "Output dataset directory")->required();
  cmd->add_option("--format", f->format,
                  "auto: JSON lines when the first non-empty line starts with '{', else delimited")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "delimited", "jsonl"}));
  cmd->add_option("--delimiter", o.events.delimiter,
                  "Field separator, any string ('\\t' = tab); default ',' for *.csv[.gz], tab "
                  "otherwise. Fields may be double-quoted");
  cmd->add_option(
      "--columns", f->columns,
      "Names of a header-less file's columns, comma-separated (the first line is data)");
  cmd->add_flag("--no-header", f->no_header, "The first line is data; columns are 0-based numbers");
  cmd->add_option("--user", o.user_column, "User column (a header name, or NAME of NAME:TYPE)")
      ->capture_default_str();
  cmd->add_option("--item", o.item_column, "Item column")->capture_default_str();
  cmd->add_option("--time", o.time_column, "Time column")->capture_default_str();
  cmd->add_option(
         "--time-format", f->time_format,
         "s (integer seconds, a fraction allowed), ms, us, or iso8601 (with an offset or Z)")
      ->capture_default_str()
      ->check(CLI::IsMember({"s", "ms", "us", "iso8601"}));
  cmd->add_option("--category", o.category_column,
                  "Category column of the events (else --items, else no_category)");
  cmd->add_option("--category-separator", o.category_separator,
                  "A multi-valued category field yields its first token (split on this string)");
  cmd->add_option("--items", o.items_path, "Items file: item -> category");
  cmd->add_option("--items-key", o.items_key, "Item column of the items file");
  cmd->add_option("--items-category", o.items_category, "Category column of the items file");
  cmd->add_option("--items-category-flags", f->items_flags,
                  "Instead of --items-category: 0/1 columns, comma-separated; the category is the "
                  "name of the first set one (MovieLens-100K's genres)");
  cmd->add_option("--items-format", f->items_format, "As --format, for the items file")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "delimited", "jsonl"}));
  cmd->add_option("--items-delimiter", o.items.delimiter, "As --delimiter, for the items file");
  cmd->add_option("--items-columns", f->items_columns, "As --columns, for the items file");
  cmd->add_flag("--items-no-header", f->items_no_header, "As --no-header, for the items file");
  cmd->add_option("--min-value", f->min_value,
                  "COLUMN=V: keep only rows whose COLUMN is a number >= V (e.g. rating=4)");
  cmd->add_option("--min-user-events", o.min_user_events,
                  "Keep users with at least this many rows (default 20; 0 with --samples)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--test-events", o.test_events,
                  "Leave-last-K-out: each user's last K events are the test targets")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--samples", o.samples_path,
                  "Labelled impressions (user, item, time, label; the events' syntax and columns): "
                  "the samples, each with the user's events strictly before it as history");
  cmd->add_option("--label", o.label_column, "Label column (0/1) of --samples")
      ->capture_default_str();
  cmd->add_option("--test-from", o.test_from,
                  "With --samples: samples at or after this time (in --time-format) are the test "
                  "split");
  cmd->add_option("--max-bad-fraction", o.max_bad_fraction,
                  "Fail when more than this fraction of a file's non-empty lines is bad")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", o.negative_seed, "Negative-sampling seed of the dataset")
      ->capture_default_str();
  cmd->add_option("--history", o.history,
                  "History length declared in feature_spec.yaml (training's max_history decides)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--threads", o.threads,
                  "Parser threads (0 = all CPUs); the output does not depend on it")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([f, action] { *action = [f] { return RunDataEvents(*f); }; });
}

}  // namespace sift::cli
