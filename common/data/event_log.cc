#include "common/data/event_log.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/data/dataset.h"
#include "common/data/feature_spec.h"
#include "common/data/json_fields.h"
#include "common/file_util.h"

namespace sift::data {
namespace {

constexpr int64_t kMicrosPerSecond = 1000000;
constexpr size_t kMaxQuoted = 60;  // characters of a bad field quoted in a message

std::string Quote(absl::string_view s) {
  if (s.size() <= kMaxQuoted) return absl::StrCat("'", s, "'");
  return absl::StrCat("'", s.substr(0, kMaxQuoted), "...'");
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsCsvPath(absl::string_view path) {
  if (absl::EndsWith(path, ".gz")) path.remove_suffix(3);
  return absl::EndsWith(path, ".csv") || absl::EndsWith(path, ".CSV");
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// A UTF-8 byte-order mark at the start of a file is not part of its first field.
absl::string_view StripBom(absl::string_view line) {
  return absl::StartsWith(line, "\xEF\xBB\xBF") ? line.substr(3) : line;
}

// First token of a multi-valued field (the whole field without a separator).
absl::string_view FirstToken(absl::string_view field, absl::string_view separator) {
  if (separator.empty()) return field;
  const size_t at = field.find(separator);
  return at == absl::string_view::npos ? field : field.substr(0, at);
}

// ---- One text table: its format, header, and the wanted columns ----

// Per-thread scratch of TableReader::Parse.
struct ParseScratch {
  std::vector<absl::string_view> fields;
  std::string quoted;
  std::vector<JsonField> json;
};

class TableReader {
 public:
  // Reads the first line of `path` to settle the format and the column names. `flag_prefix`
  // names the flags of this table in messages ("--" or "--items-").
  static StatusOr<TableReader> Prepare(const std::string& path, const TableSyntax& syntax,
                                       std::string flag_prefix) {
    TableReader t;
    t.path_ = path;
    t.flag_prefix_ = std::move(flag_prefix);
    SIFT_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader, LineReader::Open(path));
    absl::string_view first;
    bool overlong = false, any = false;
    SIFT_ASSIGN_OR_RETURN(any, reader->Next(&first, &overlong));
    if (!any) return absl::InvalidArgumentError(absl::StrCat(path, ": the file is empty"));
    const std::string line(StripBom(first));  // a header must be line 1
    // The format from the first non-empty line.
    std::string probe = line;
    while (probe.empty() && any) {
      SIFT_ASSIGN_OR_RETURN(any, reader->Next(&first, &overlong));
      if (any) probe = std::string(first);
    }
    t.json_ = syntax.format == TableSyntax::Format::kJsonLines ||
              (syntax.format == TableSyntax::Format::kAuto && !probe.empty() && probe[0] == '{');
    if (t.json_) return t;
    t.delimiter_ = syntax.delimiter.empty() ? (IsCsvPath(path) ? "," : "\t") : syntax.delimiter;
    if (!syntax.columns.empty()) {
      t.names_ = syntax.columns;
      t.named_ = true;
    } else if (syntax.header) {
      if (line.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":1: the header line is empty (pass ", t.flag_prefix_,
                         "no-header, or name the columns with ", t.flag_prefix_, "columns)"));
      }
      std::vector<absl::string_view> fields;
      std::string scratch;
      if (Status st = SplitDelimited(line, t.delimiter_, &fields, &scratch); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":1: header: ", st.message()));
      }
      for (absl::string_view f : fields) t.names_.emplace_back(f);
      t.named_ = true;
      t.header_line_ = true;
    }
    return t;
  }

  // Registers the column `want` (the value of flag `flag`); its value is field number
  // (the return value) of Parse's output.
  StatusOr<int> Want(absl::string_view want, absl::string_view flag) {
    if (json_) {
      for (size_t k = 0; k < keys_.size(); ++k) {
        if (keys_[k] == want) return static_cast<int>(k);  // one key read for two options
      }
      keys_.emplace_back(want);
      return static_cast<int>(keys_.size()) - 1;
    }
    int index = -1;
    if (named_) {
      for (size_t i = 0; i < names_.size() && index < 0; ++i) {
        if (names_[i] == want) index = static_cast<int>(i);
      }
      // RecBole's atomic files type their header: "user_id:token".
      for (size_t i = 0; i < names_.size() && index < 0; ++i) {
        const size_t colon = names_[i].find(':');
        if (colon != std::string::npos && absl::string_view(names_[i]).substr(0, colon) == want) {
          index = static_cast<int>(i);
        }
      }
      if (index < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ": no column ", Quote(want), " (", flag, "); the ",
            header_line_ ? "header has" : "columns are", ": ", absl::StrJoin(names_, ", ")));
      }
    } else {
      int64_t v = -1;
      if (!AllDigits(want) || !absl::SimpleAtoi(want, &v) || v > 100000) {
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ": ", flag, " ", Quote(want),
            ": this file has no header, so columns are 0-based numbers (or name them with ",
            flag_prefix_, "columns a,b,c)"));
      }
      index = static_cast<int>(v);
    }
    columns_.push_back(index);
    min_fields_ = std::max(min_fields_, index + 1);
    return static_cast<int>(columns_.size()) - 1;
  }

  const std::string& path() const { return path_; }
  bool json() const { return json_; }
  bool named() const { return named_; }
  // Whether line n (1-based) is the header, not data.
  bool IsHeader(int64_t n) const { return header_line_ && n == 1; }
  size_t wanted() const { return json_ ? keys_.size() : columns_.size(); }

  // The wanted fields of one data line, in Want order; views valid until the next call with the
  // same scratch. The error says what is wrong (without the file or line).
  Status Parse(absl::string_view line, ParseScratch* s, std::vector<absl::string_view>* out) const {
    out->clear();
    if (json_) {
      SIFT_RETURN_IF_ERROR(PickJsonFields(line, keys_, &s->json));
      for (size_t k = 0; k < keys_.size(); ++k) {
        const JsonField& f = s->json[k];
        using Kind = JsonField::Kind;
        if (f.kind == Kind::kAbsent) {
          return absl::InvalidArgumentError(absl::StrCat("missing key ", Quote(keys_[k])));
        }
        if (f.kind == Kind::kNull || f.kind == Kind::kObject || f.kind == Kind::kArray ||
            f.kind == Kind::kBinary) {
          return absl::InvalidArgumentError(
              absl::StrCat(Quote(keys_[k]), " holds ", JsonKindName(f.kind)));
        }
        out->emplace_back(f.text);
      }
      return Status();
    }
    SIFT_RETURN_IF_ERROR(SplitDelimited(line, delimiter_, &s->fields, &s->quoted));
    if (static_cast<int>(s->fields.size()) < min_fields_) {
      return absl::InvalidArgumentError(absl::StrCat(s->fields.size(), " field",
                                                     s->fields.size() == 1 ? "" : "s",
                                                     ", expected at least ", min_fields_));
    }
    for (int c : columns_) out->push_back(s->fields[c]);
    return Status();
  }

 private:
  std::string path_, flag_prefix_, delimiter_;
  bool json_ = false, named_ = false, header_line_ = false;
  std::vector<std::string> names_;  // delimited: column names (header or --columns)
  std::vector<int> columns_;        // delimited: wanted field indices
  std::vector<std::string> keys_;   // JSON: wanted keys
  int min_fields_ = 0;
};

// Runs ScanFile over a table, skipping its header line.
template <typename Result, typename ParseRow, typename Consume>
Status ScanTable(const TableReader& table, absl::string_view phase, const ScanOptions& scan,
                 ThreadPool* pool, FileReport* report, const ParseRow& parse_row,
                 const Consume& consume) {
  auto parse = [&table, &parse_row](absl::string_view line, int64_t n, Result* r) -> Status {
    if (table.IsHeader(n)) return Status();
    thread_local ParseScratch scratch;
    thread_local std::vector<absl::string_view> fields;
    const absl::string_view text = n == 1 ? StripBom(line) : line;
    if (text.empty()) return Status();  // a byte-order mark alone
    SIFT_RETURN_IF_ERROR(table.Parse(text, &scratch, &fields));
    return parse_row(fields, n, r);
  };
  SIFT_RETURN_IF_ERROR(ScanFile<Result>(table.path(), phase, scan, pool, report, parse, consume));
  if (table.IsHeader(1) && report->lines > 0) report->header_lines = 1;
  return Status();
}

// ---- The events and samples rows, parsed on the pool ----

// Rows of one chunk: the token fields packed in `text` (lengths in `len`, `fields_per_row` per
// row), the time keys and the labels.
struct RowChunk {
  std::string text;
  std::vector<uint32_t> len;
  std::vector<int64_t> time;
  std::vector<int8_t> label;
  std::vector<int64_t> line;  // samples only: for messages
  int64_t below_value = 0;
};

struct RowFields {
  int user = -1, item = -1, time = -1, category = -1, value = -1, label = -1;
};

Status ValidateOptions(const EventLogOptions& o, int64_t min_user_events) {
  if (o.events_paths.empty()) {
    return absl::InvalidArgumentError("events: at least one events file (--events) is required");
  }
  if (o.out_dir.empty()) return absl::InvalidArgumentError("events: --out is required");
  if (o.test_events < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("events: --test-events must be at least 1, got ", o.test_events));
  }
  if (o.samples_path.empty() && min_user_events < o.test_events + 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "events: --min-user-events ", min_user_events,
        " is below --test-events + 2 = ", o.test_events + 2, ": every user needs ", o.test_events,
        " test event(s), one training target and one event of history before it"));
  }
  if (!o.samples_path.empty() && o.test_events != 1) {
    return absl::InvalidArgumentError(
        "events: --test-events applies to derived samples; with --samples the split is by time "
        "(--test-from)");
  }
  if (!o.samples_path.empty() && o.test_from.empty()) {
    return absl::InvalidArgumentError(
        "events: --samples needs --test-from TIME (samples at or after it are the test split)");
  }
  if (o.samples_path.empty() && !o.test_from.empty()) {
    return absl::InvalidArgumentError("events: --test-from applies only with --samples");
  }
  if (!o.items_path.empty()) {
    if (o.items_key.empty()) return absl::InvalidArgumentError("events: --items needs --items-key");
    if (o.items_category.empty() == o.items_category_flags.empty()) {
      return absl::InvalidArgumentError(
          "events: --items needs exactly one of --items-category and --items-category-flags");
    }
    if (!o.category_column.empty()) {
      return absl::InvalidArgumentError(
          "events: the category comes from --category or from --items, not both");
    }
  } else if (!o.items_key.empty() || !o.items_category.empty() || !o.items_category_flags.empty()) {
    return absl::InvalidArgumentError(
        "events: --items-key/--items-category(-flags) need an items file (--items)");
  }
  if (!(o.max_bad_fraction >= 0 && o.max_bad_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("events: --max-bad-fraction must be in [0, 1], got ", o.max_bad_fraction));
  }
  if (o.history < 1) return absl::InvalidArgumentError("events: --history must be positive");
  for (const std::string* d : {&o.events.delimiter, &o.items.delimiter}) {
    if (d->find('"') != std::string::npos || d->find('\n') != std::string::npos) {
      return absl::InvalidArgumentError("events: a delimiter may not contain '\"' or a newline");
    }
  }
  return Status();
}

}  // namespace

// ---- Public helpers ----

bool ParseTimeFormat(absl::string_view name, TimeFormat* out) {
  if (name == "s") {
    *out = TimeFormat::kSeconds;
  } else if (name == "ms") {
    *out = TimeFormat::kMillis;
  } else if (name == "us") {
    *out = TimeFormat::kMicros;
  } else if (name == "iso8601") {
    *out = TimeFormat::kIso8601;
  } else {
    return false;
  }
  return true;
}

Status ParseTimestamp(absl::string_view text, TimeFormat format, int64_t* micros) {
  if (format == TimeFormat::kIso8601) {
    absl::Time t;
    std::string err;
    // absl also takes "infinite-future" and surrounding spaces; the rule does not.
    const bool plain = !text.empty() && text[0] >= '0' && text[0] <= '9' &&
                       text.find_first_of(" \t") == absl::string_view::npos;
    if (!plain || !absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "time ", Quote(text), ": not ISO-8601 with an offset (e.g. 2024-03-01T12:00:00Z)"));
    }
    *micros = absl::ToUnixMicros(t);
    return Status();
  }
  absl::string_view whole = text, frac;
  if (format == TimeFormat::kSeconds) {
    const size_t dot = text.find('.');
    if (dot != absl::string_view::npos) {
      whole = text.substr(0, dot);
      frac = text.substr(dot + 1);
    }
  }
  int64_t v = 0;
  const bool negative = !whole.empty() && whole[0] == '-';
  const absl::string_view digits = negative ? whole.substr(1) : whole;
  const char* unit = format == TimeFormat::kSeconds  ? "seconds"
                     : format == TimeFormat::kMillis ? "milliseconds"
                                                     : "microseconds";
  if (!AllDigits(digits) || (!frac.empty() && (!AllDigits(frac) || frac.size() > 6)) ||
      (frac.empty() && whole.size() != text.size() && text.back() != '.') ||
      !absl::SimpleAtoi(whole, &v)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "time ", Quote(text), ": not an integer number of ", unit,
        format == TimeFormat::kSeconds ? " (a fraction of up to 6 digits is allowed)" : ""));
  }
  const int64_t scale = format == TimeFormat::kSeconds  ? kMicrosPerSecond
                        : format == TimeFormat::kMillis ? 1000
                                                        : 1;
  int64_t f = 0;
  if (!frac.empty()) {
    absl::SimpleAtoi(frac, &f);
    for (size_t k = frac.size(); k < 6; ++k) f *= 10;
    if (negative) f = -f;
  }
  int64_t out = 0;
  if (__builtin_mul_overflow(v, scale, &out) || __builtin_add_overflow(out, f, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("time ", Quote(text), ": out of range"));
  }
  *micros = out;
  return Status();
}

Status SplitDelimited(absl::string_view line, absl::string_view delimiter,
                      std::vector<absl::string_view>* fields, std::string* scratch) {
  fields->clear();
  // Quoted fields' unquoted text goes to `scratch`, reserved up front so views stay valid.
  if (line.find('"') != absl::string_view::npos) {
    scratch->clear();
    scratch->reserve(line.size());
  }
  size_t pos = 0;
  while (true) {
    if (pos < line.size() && line[pos] == '"') {
      const size_t start = scratch->size();
      size_t i = pos + 1;
      while (true) {
        const size_t q = line.find('"', i);
        if (q == absl::string_view::npos) {
          return absl::InvalidArgumentError(
              "unterminated quoted field (a quoted field may not span lines)");
        }
        scratch->append(line.data() + i, q - i);
        if (q + 1 < line.size() && line[q + 1] == '"') {
          scratch->push_back('"');
          i = q + 2;
          continue;
        }
        i = q + 1;
        break;
      }
      fields->push_back(absl::string_view(scratch->data() + start, scratch->size() - start));
      if (i == line.size()) return Status();
      if (line.substr(i, delimiter.size()) != delimiter) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a quoted field is followed by ", Quote(line.substr(i, 10)), ", not the delimiter"));
      }
      pos = i + delimiter.size();
      continue;
    }
    const size_t at = line.find(delimiter, pos);
    if (at == absl::string_view::npos) {
      fields->push_back(line.substr(pos));
      return Status();
    }
    fields->push_back(line.substr(pos, at - pos));
    pos = at + delimiter.size();
  }
}

// ---- The import ----

StatusOr<EventLogReport> ImportEventLog(const EventLogOptions& options) {
  const auto clock0 = std::chrono::steady_clock::now();
  const bool with_samples = !options.samples_path.empty();
  const int64_t min_user_events =
      options.min_user_events >= 0 ? options.min_user_events : (with_samples ? 0 : 20);
  SIFT_RETURN_IF_ERROR(ValidateOptions(options, min_user_events));
  int64_t test_from = 0;
  if (with_samples) {
    if (Status st = ParseTimestamp(options.test_from, options.time_format, &test_from); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("events: --test-from: ", st.message()));
    }
  }
  const bool min_value = !options.min_value_column.empty();
  const bool row_category = !options.category_column.empty();
  EventLogReport report;

  // Every table's header first: a missing column fails before any long pass.
  std::vector<TableReader> event_tables;
  std::vector<RowFields> event_fields;
  auto prepare_rows = [&](const std::string& path, bool samples,
                          std::vector<TableReader>* tables) -> StatusOr<RowFields> {
    SIFT_ASSIGN_OR_RETURN(TableReader t, TableReader::Prepare(path, options.events, "--"));
    RowFields f;
    SIFT_ASSIGN_OR_RETURN(f.user, t.Want(options.user_column, "--user"));
    SIFT_ASSIGN_OR_RETURN(f.item, t.Want(options.item_column, "--item"));
    SIFT_ASSIGN_OR_RETURN(f.time, t.Want(options.time_column, "--time"));
    if (row_category) {
      SIFT_ASSIGN_OR_RETURN(f.category, t.Want(options.category_column, "--category"));
    }
    if (samples) {
      SIFT_ASSIGN_OR_RETURN(f.label, t.Want(options.label_column, "--label"));
    } else if (min_value) {
      SIFT_ASSIGN_OR_RETURN(f.value, t.Want(options.min_value_column, "--min-value"));
    }
    tables->push_back(std::move(t));
    return f;
  };
  for (const std::string& path : options.events_paths) {
    SIFT_ASSIGN_OR_RETURN(RowFields f, prepare_rows(path, false, &event_tables));
    event_fields.push_back(f);
  }
  RowFields sample_fields;
  std::vector<TableReader> sample_table;
  if (with_samples) {
    SIFT_ASSIGN_OR_RETURN(sample_fields, prepare_rows(options.samples_path, true, &sample_table));
  }
  std::unique_ptr<TableReader> items_table;
  int items_key = -1, items_category = -1;
  std::vector<int> items_flags;
  if (!options.items_path.empty()) {
    SIFT_ASSIGN_OR_RETURN(TableReader t,
                          TableReader::Prepare(options.items_path, options.items, "--items-"));
    items_table = std::make_unique<TableReader>(std::move(t));
    SIFT_ASSIGN_OR_RETURN(items_key, items_table->Want(options.items_key, "--items-key"));
    if (!options.items_category.empty()) {
      SIFT_ASSIGN_OR_RETURN(items_category,
                            items_table->Want(options.items_category, "--items-category"));
    }
    for (const std::string& flag : options.items_category_flags) {
      SIFT_ASSIGN_OR_RETURN(int k, items_table->Want(flag, "--items-category-flags"));
      items_flags.push_back(k);
    }
  }
  SIFT_RETURN_IF_ERROR(MakeDirs(options.out_dir));

  const int threads = options.threads > 0 ? options.threads : AvailableCpus();
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);

  // 1. Rows (events and samples): tokens interned on the caller's thread, in file order.
  Interner users, items, categories;
  const int tokens_per_row = row_category ? 3 : 2;
  struct Rows {  // structure of arrays; index = input order
    std::vector<uint32_t> user, item, category;
    std::vector<int64_t> time;
    std::vector<int8_t> label;
    std::vector<int64_t> line;
  };
  Rows ev, smp;
  auto parse_rows = [&](const RowFields& f, bool samples) {
    return [&, f, samples](const std::vector<absl::string_view>& fields, int64_t n,
                           RowChunk* out) -> Status {
      const char* names[3] = {"user", "item", "category"};
      const int idx[3] = {f.user, f.item, f.category};
      for (int k = 0; k < tokens_per_row; ++k) {
        if (fields[idx[k]].empty())
          return absl::InvalidArgumentError(absl::StrCat("empty ", names[k]));
      }
      int64_t t = 0;
      SIFT_RETURN_IF_ERROR(ParseTimestamp(fields[f.time], options.time_format, &t));
      int8_t label = 0;
      if (samples) {
        const absl::string_view l = fields[f.label];
        if (l != "0" && l != "1" && l != "true" && l != "false") {
          return absl::InvalidArgumentError(absl::StrCat("label ", Quote(l), ": expected 0 or 1"));
        }
        label = (l == "1" || l == "true") ? 1 : 0;
      } else if (min_value) {
        double v = 0;
        if (!absl::SimpleAtod(fields[f.value], &v)) {
          return absl::InvalidArgumentError(absl::StrCat(options.min_value_column, " ",
                                                         Quote(fields[f.value]), ": not a number"));
        }
        if (!(v >= options.min_value)) {
          ++out->below_value;
          return Status();
        }
      }
      for (int k = 0; k < tokens_per_row; ++k) {
        absl::string_view tok = fields[idx[k]];
        if (k == 2) tok = FirstToken(tok, options.category_separator);
        out->text.append(tok.data(), tok.size());
        out->len.push_back(static_cast<uint32_t>(tok.size()));
      }
      out->time.push_back(t);
      if (samples) {
        out->label.push_back(label);
        out->line.push_back(n);
      }
      return Status();
    };
  };
  auto keep_rows = [&](Rows* rows) {
    return [&, rows](RowChunk&& c, std::vector<BadLine>*) -> Status {
      size_t pos = 0;
      const size_t n = c.time.size();
      if (rows->time.size() + n > std::numeric_limits<uint32_t>::max()) {
        return absl::OutOfRangeError("events: more than 4 billion rows");
      }
      for (size_t r = 0; r < n; ++r) {
        const uint32_t* len = c.len.data() + r * tokens_per_row;
        const absl::string_view text(c.text);
        rows->user.push_back(users.Intern(text.substr(pos, len[0])));
        pos += len[0];
        rows->item.push_back(items.Intern(text.substr(pos, len[1])));
        pos += len[1];
        if (row_category) {
          rows->category.push_back(categories.Intern(text.substr(pos, len[2])));
          pos += len[2];
        }
        rows->time.push_back(c.time[r]);
      }
      rows->label.insert(rows->label.end(), c.label.begin(), c.label.end());
      rows->line.insert(rows->line.end(), c.line.begin(), c.line.end());
      report.rows_below_value += c.below_value;
      return Status();
    };
  };
  for (size_t k = 0; k < event_tables.size(); ++k) {
    FileReport fr;
    SIFT_RETURN_IF_ERROR(ScanTable<RowChunk>(event_tables[k], "events", options.scan, pool.get(),
                                             &fr, parse_rows(event_fields[k], false),
                                             keep_rows(&ev)));
    SIFT_RETURN_IF_ERROR(CheckBadFraction(fr, options.max_bad_fraction));
    report.events.push_back(std::move(fr));
  }
  report.rows = static_cast<int64_t>(ev.time.size()) + report.rows_below_value;
  if (with_samples) {
    SIFT_RETURN_IF_ERROR(ScanTable<RowChunk>(sample_table[0], "samples", options.scan, pool.get(),
                                             &report.samples, parse_rows(sample_fields, true),
                                             keep_rows(&smp)));
    SIFT_RETURN_IF_ERROR(CheckBadFraction(report.samples, options.max_bad_fraction));
  }
  // 2. Users: at least min_user_events kept rows (and, with samples, a sample).
  std::vector<int64_t> user_rows(users.size(), 0);
  for (uint32_t u : ev.user) ++user_rows[u];
  report.users_read =
      std::count_if(user_rows.begin(), user_rows.end(), [](int64_t n) { return n > 0; });
  std::vector<bool> user_kept(users.size(), false);
  if (with_samples) {
    for (uint32_t u : smp.user) user_kept[u] = user_rows[u] >= min_user_events;
  } else {
    for (size_t u = 0; u < users.size(); ++u) user_kept[u] = user_rows[u] >= min_user_events;
  }
  std::vector<bool> item_used(items.size(), false);
  for (size_t r = 0; r < ev.user.size(); ++r) {
    if (user_kept[ev.user[r]]) item_used[ev.item[r]] = true;
  }
  for (size_t r = 0; r < smp.user.size(); ++r) {
    if (user_kept[smp.user[r]]) item_used[smp.item[r]] = true;
  }

  // 3. Categories: per row (events column), per item (items file), or none.
  constexpr int32_t kAbsent = -1;
  std::vector<int32_t> item_category;  // local category index per local item (items file)
  if (items_table) {
    item_category.assign(items.size(), kAbsent);
    using Keys = std::vector<std::pair<int64_t, std::pair<std::string, std::string>>>;
    const bool flags = !items_flags.empty();
    auto parse = [&](const std::vector<absl::string_view>& fields, int64_t n, Keys* out) -> Status {
      if (fields[items_key].empty()) return absl::InvalidArgumentError("empty key");
      std::string category;
      if (flags) {
        for (size_t k = 0; k < items_flags.size(); ++k) {
          const absl::string_view v = fields[items_flags[k]];
          if (v == "1") {
            category = options.items_category_flags[k];
            break;
          }
          if (v != "0") {
            return absl::InvalidArgumentError(absl::StrCat(options.items_category_flags[k], " ",
                                                           Quote(v), ": a flag must be 0 or 1"));
          }
        }
      } else {
        category = std::string(FirstToken(fields[items_category], options.category_separator));
      }
      out->emplace_back(n, std::make_pair(std::string(fields[items_key]), std::move(category)));
      return Status();
    };
    absl::flat_hash_map<std::string, int64_t> first_line;
    Status duplicate;
    auto categorise = [&](Keys&& keys, std::vector<BadLine>*) -> Status {
      for (auto& [n, kv] : keys) {
        auto [it, inserted] = first_line.try_emplace(kv.first, n);
        if (!inserted) {
          return absl::InvalidArgumentError(
              absl::StrCat(options.items_path, ": lines ", it->second, " and ", n,
                           " both describe item ", Quote(kv.first), " (", options.items_key,
                           "): an items file needs one line per item"));
        }
        const int64_t item = items.Find(kv.first);
        if (item >= 0 && item_used[item] && !kv.second.empty()) {
          item_category[item] = static_cast<int32_t>(categories.Intern(std::move(kv.second)));
        }
      }
      return Status();
    };
    SIFT_RETURN_IF_ERROR(ScanTable<Keys>(*items_table, "items", options.scan, pool.get(),
                                         &report.items, parse, categorise));
    SIFT_RETURN_IF_ERROR(CheckBadFraction(report.items, options.max_bad_fraction));
  }
  // no_category: items without one (items file) or every item (no category source); for a
  // category column, rows always have one (empty fields are bad rows).
  const uint32_t no_category = categories.Intern(std::string(kNoCategory));
  if (!row_category) {
    if (item_category.empty()) item_category.assign(items.size(), kAbsent);
    for (size_t i = 0; i < items.size(); ++i) {
      if (item_used[i] && item_category[i] == kAbsent) {
        if (items_table) ++report.items_without_category;
        item_category[i] = static_cast<int32_t>(no_category);
      }
    }
  }
  auto category_of = [&](const Rows& rows, size_t r) -> uint32_t {
    return row_category ? rows.category[r] : static_cast<uint32_t>(item_category[rows.item[r]]);
  };
  std::vector<bool> category_used(categories.size(), false);
  for (const Rows* rows : {&ev, &smp}) {
    for (size_t r = 0; r < rows->user.size(); ++r) {
      if (user_kept[rows->user[r]]) category_used[category_of(*rows, r)] = true;
    }
  }

  // 4. Ids in byte order of the tokens.
  std::vector<int32_t> user_id, item_id, category_id;
  report.users = AssignSortedIds(users, user_kept, &user_id);
  report.items_kept = AssignSortedIds(items, item_used, &item_id);
  report.categories = AssignSortedIds(categories, category_used, &category_id);
  if (report.users == 0) {
    return absl::FailedPreconditionError(
        with_samples ? absl::StrCat(options.samples_path, ": no sample's user has at least ",
                                    min_user_events, " events (", smp.user.size(), " samples read)")
                     : absl::StrCat("events: no user has at least ", min_user_events, " rows (",
                                    report.rows - report.rows_below_value, " rows",
                                    min_value ? " at or above the value filter" : "", " from ",
                                    report.users_read, " users)"));
  }
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;
  if (report.users > kMaxId || report.items_kept > kMaxId) {
    return absl::OutOfRangeError("events: more users or items than int32 ids can hold");
  }

  // 5. Timeline: kept rows grouped by user id (counting sort keeps input order), then a stable
  // sort by time within each user.
  const size_t U = static_cast<size_t>(report.users);
  std::vector<uint64_t> offsets(U + 1, 0);
  for (size_t r = 0; r < ev.user.size(); ++r) {
    if (user_kept[ev.user[r]]) ++offsets[user_id[ev.user[r]]];  // ids are 1-based
  }
  for (size_t u = 1; u <= U; ++u) offsets[u] += offsets[u - 1];
  const uint64_t E = offsets[U];
  std::vector<uint32_t> order(E);
  {
    std::vector<uint64_t> next(offsets.begin(), offsets.end() - 1);
    for (size_t r = 0; r < ev.user.size(); ++r) {
      if (user_kept[ev.user[r]]) order[next[user_id[ev.user[r]] - 1]++] = static_cast<uint32_t>(r);
    }
  }
  auto by_time = [&ev](uint32_t a, uint32_t b) { return ev.time[a] < ev.time[b]; };
  for (size_t u = 0; u < U; ++u) {
    std::stable_sort(order.begin() + offsets[u], order.begin() + offsets[u + 1], by_time);
  }
  TimelineData t;
  t.num_item_features = 2;
  t.num_user_features = 1;
  t.events.resize(2 * E);
  t.timestamps.resize(E);
  std::vector<int64_t> sorted_keys;  // full-precision times in timeline order (samples' cutoffs)
  if (with_samples) sorted_keys.resize(E);
  for (uint64_t e = 0; e < E; ++e) {
    const uint32_t r = order[e];
    t.events[2 * e] = item_id[ev.item[r]];
    t.events[2 * e + 1] = category_id[category_of(ev, r)];
    t.timestamps[e] = FloorDiv(ev.time[r], kMicrosPerSecond);
    if (with_samples) sorted_keys[e] = ev.time[r];
  }
  order = {};
  t.user_offsets = std::move(offsets);
  t.user_features.resize(U);
  for (size_t u = 0; u < U; ++u) t.user_features[u] = static_cast<int32_t>(u + 1);
  report.events_kept = static_cast<int64_t>(E);

  // 6. Samples: derived (leave-last-K-out), or stored with their cutoffs.
  ImpressionData train_imp, test_imp;
  if (with_samples) {
    std::vector<uint32_t> kept;
    for (size_t r = 0; r < smp.user.size(); ++r) {
      if (user_kept[smp.user[r]]) kept.push_back(static_cast<uint32_t>(r));
    }
    report.samples_dropped = static_cast<int64_t>(smp.user.size() - kept.size());
    std::stable_sort(kept.begin(), kept.end(), [&](uint32_t a, uint32_t b) {
      const int32_t ua = user_id[smp.user[a]], ub = user_id[smp.user[b]];
      return ua != ub ? ua < ub : smp.time[a] < smp.time[b];
    });
    for (uint32_t r : kept) {
      const int64_t u = user_id[smp.user[r]] - 1;
      const auto begin = sorted_keys.begin() + static_cast<int64_t>(t.user_offsets[u]);
      const auto end = sorted_keys.begin() + static_cast<int64_t>(t.user_offsets[u + 1]);
      const int64_t cutoff = std::lower_bound(begin, end, smp.time[r]) - begin;
      ImpressionData& d = smp.time[r] >= test_from ? test_imp : train_imp;
      d.user.push_back(u);
      d.cutoff.push_back(cutoff);
      d.time.push_back(FloorDiv(smp.time[r], kMicrosPerSecond));
      d.label.push_back(smp.label[r]);
      d.target.push_back(item_id[smp.item[r]]);
      d.target.push_back(category_id[category_of(smp, r)]);
      if (cutoff == 0) ++report.samples_without_history;
    }
    report.train_samples = train_imp.size();
    report.test_samples = test_imp.size();
    if (report.train_samples == 0 || report.test_samples == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.samples_path, ": --test-from ", options.test_from, " leaves ",
                       report.train_samples, " training and ", report.test_samples,
                       " test samples: both splits need samples"));
    }
    if (E == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("events: the kept users have no events (", report.users, " users)"));
    }
  } else {
    for (size_t u = 0; u < U; ++u) {
      const int64_t L = static_cast<int64_t>(t.user_offsets[u + 1] - t.user_offsets[u]);
      report.train_samples += 2 * (L - 1 - options.test_events);
    }
    report.test_samples = 2 * static_cast<int64_t>(U) * options.test_events;
  }
  ev = Rows();
  smp = Rows();

  // 7. Vocabularies and the dataset.
  const FeatureSpec names = FeatureSpec::Reference(
      {report.users}, {report.items_kept, report.categories}, options.history);
  std::vector<VocabTable> vocab(3);
  vocab[0].name = names.channel_spec.at(kUserChannel)[0];
  vocab[1].name = names.channel_spec.at(kTargetChannel)[0];
  vocab[2].name = names.channel_spec.at(kTargetChannel)[1];
  auto fill = [](const Interner& in, const std::vector<int32_t>& ids, int64_t n,
                 std::vector<std::string>* out) {
    out->resize(static_cast<size_t>(n));
    for (size_t i = 0; i < in.size(); ++i) {
      if (ids[i] > 0) (*out)[ids[i] - 1] = in.name(static_cast<uint32_t>(i));
    }
  };
  fill(users, user_id, report.users, &vocab[0].tokens);
  fill(items, item_id, report.items_kept, &vocab[1].tokens);
  fill(categories, category_id, report.categories, &vocab[2].tokens);

  YAML::Node meta;
  meta["source"] = "events";
  YAML::Node m = meta["events"];
  for (const std::string& p : options.events_paths) m["files"].push_back(BaseName(p));
  if (items_table) m["items_file"] = BaseName(options.items_path);
  if (with_samples) {
    m["samples_file"] = BaseName(options.samples_path);
    m["test_from"] = options.test_from;
    m["samples_without_history"] = report.samples_without_history;
  }
  m["time_format"] = options.time_format == TimeFormat::kSeconds  ? "s"
                     : options.time_format == TimeFormat::kMillis ? "ms"
                     : options.time_format == TimeFormat::kMicros ? "us"
                                                                  : "iso8601";
  m["category"] = row_category  ? absl::StrCat("column ", options.category_column)
                  : items_table ? absl::StrCat("items file")
                                : std::string("none (no_category)");
  if (min_value) {
    m["min_value"] = absl::StrCat(options.min_value_column, ">=", options.min_value);
    m["rows_below_value"] = report.rows_below_value;
  }
  m["min_user_events"] = min_user_events;
  if (!with_samples) m["test_events"] = options.test_events;
  m["rows"] = report.rows;
  m["users_read"] = report.users_read;
  m["users"] = report.users;
  m["items"] = report.items_kept;
  m["categories"] = report.categories;
  m["events"] = report.events_kept;
  m["items_without_category"] = report.items_without_category;
  m["id_order"] = "ids from 1 in ascending byte order of the tokens";
  m["event_order"] = "per user, ascending time at full precision; ties keep the input order";
  TimelineDatasetExtras extras;
  extras.test_events = with_samples ? 1 : options.test_events;
  extras.vocab = &vocab;
  if (with_samples) {
    extras.train_impressions = &train_imp;
    extras.test_impressions = &test_imp;
  }
  SIFT_RETURN_IF_ERROR(WriteTimelineDataset(options.out_dir, t, {report.users},
                                            {report.items_kept, report.categories},
                                            options.negative_seed, meta, options.history, extras));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock0).count();
  return report;
}

}  // namespace sift::data
