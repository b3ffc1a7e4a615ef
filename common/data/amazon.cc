#include "common/data/amazon.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "common/data/dataset.h"
#include "common/data/json_fields.h"
#include "common/data/py_literal.h"
#include "common/hash.h"
#include "common/thread_pool.h"

namespace sift::data {
namespace {

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// ---- Metadata ----

const std::vector<std::string>& MetaKeys() {
  static const std::vector<std::string>* keys = new std::vector<std::string>{"asin", "categories"};
  return *keys;
}

bool IsSequence(const PyValue& v) {
  return v.kind == PyValue::Kind::kList || v.kind == PyValue::Kind::kTuple;
}

Status ValidateOptions(const AmazonOptions& o) {
  if (o.reviews_path.empty() || o.meta_path.empty() || o.out_dir.empty()) {
    return absl::InvalidArgumentError(
        "amazon: the reviews file, the meta file and the output "
        "directory are all required");
  }
  if (o.min_reviews < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("amazon: min_reviews must be at least 2 (a test target needs a history), got ",
                     o.min_reviews));
  }
  if (!(o.max_bad_fraction >= 0 && o.max_bad_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("amazon: max_bad_fraction must be in [0, 1], got ", o.max_bad_fraction));
  }
  if (o.chunk_bytes < 1) return absl::InvalidArgumentError("amazon: chunk_bytes must be positive");
  if (o.history < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("amazon: history must be positive, got ", o.history));
  }
  return Status();
}

struct KeptRow {
  uint32_t user, item;  // local indices
  int64_t time;
};

}  // namespace

// ---- Line parsers ----

Status ParseReviewLine(absl::string_view line, ReviewRow* row) {
  static const std::vector<std::string>* keys =
      new std::vector<std::string>{"reviewerID", "asin", "unixReviewTime"};
  thread_local std::vector<JsonField> fields;
  SIFT_RETURN_IF_ERROR(PickJsonFields(line, *keys, &fields));
  for (size_t f = 0; f < keys->size(); ++f) {
    const JsonField& v = fields[f];
    const bool time = f == 2;
    if (v.kind == JsonField::Kind::kAbsent) {
      return absl::InvalidArgumentError(absl::StrCat("missing field '", (*keys)[f], "'"));
    }
    const char* got = JsonKindName(v.kind);
    if (time && v.kind == JsonField::Kind::kUnsigned &&
        v.unsigned_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      got = "an integer beyond int64";
    } else if (time ? (v.kind == JsonField::Kind::kInteger || v.kind == JsonField::Kind::kUnsigned)
                    : v.kind == JsonField::Kind::kString) {
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrCat((*keys)[f], ": expected ", time ? "an integer" : "a string", ", got ", got));
  }
  row->user = std::move(fields[0].text);
  row->item = std::move(fields[1].text);
  row->time = fields[2].kind == JsonField::Kind::kInteger
                  ? fields[2].integer
                  : static_cast<int64_t>(fields[2].unsigned_value);
  return Status();
}

Status ParseMetaLine(absl::string_view line, MetaRow* row) {
  StatusOr<PyValue> v = ParsePyDictFields(line, MetaKeys());
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a Python literal dict: ", v.status().message()));
  }
  const PyValue* asin = v->Find("asin");
  if (asin == nullptr) return absl::InvalidArgumentError("missing field 'asin'");
  if (!asin->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("asin: expected a str, got ", PyKindName(asin->kind)));
  }
  row->asin = asin->str;
  row->category.clear();
  row->has_category = false;
  const PyValue* cats = v->Find("categories");
  if (cats == nullptr) return Status();  // no category path
  if (!IsSequence(*cats)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "categories: expected a list of category paths, got ", PyKindName(cats->kind)));
  }
  // Like the reference, only categories[0][-1] is read: later paths are not looked at.
  if (cats->items.empty()) return Status();
  const PyValue& first = cats->items[0];
  if (!IsSequence(first)) {
    return absl::InvalidArgumentError(
        absl::StrCat("categories[0]: expected a list, got ", PyKindName(first.kind)));
  }
  if (first.items.empty()) return Status();  // [[]]: no category (the reference would crash)
  const PyValue& last = first.items.back();
  if (!last.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("categories[0][", first.items.size() - 1,
                                                   "]: expected a str, got ",
                                                   PyKindName(last.kind)));
  }
  row->category = last.str;
  row->has_category = true;
  return Status();
}

// ---- The import ----

StatusOr<AmazonReport> ImportAmazon(const AmazonOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  SIFT_RETURN_IF_ERROR(ValidateOptions(options));
  AmazonReport report;
  // Fail fast on a missing metadata file, before the long reviews passes.
  { SIFT_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> probe, LineReader::Open(options.meta_path)); }

  const ScanOptions scan{options.chunk_bytes, options.progress};
  const int threads = options.threads > 0 ? options.threads : AvailableCpus();
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);

  // 1. Rows per user, keyed by a hash of reviewerID.
  absl::flat_hash_map<uint64_t, uint32_t> rows_per_user;
  {
    using Hashes = std::vector<uint64_t>;
    auto parse = [](absl::string_view line, int64_t, Hashes* hashes) {
      ReviewRow row;
      SIFT_RETURN_IF_ERROR(ParseReviewLine(line, &row));
      hashes->push_back(StringHash(row.user));
      return Status();
    };
    auto count = [&](Hashes&& hashes, std::vector<BadLine>*) {
      for (const uint64_t h : hashes) {
        uint32_t& n = rows_per_user[h];
        if (n < std::numeric_limits<uint32_t>::max()) ++n;
      }
      return Status();
    };
    SIFT_RETURN_IF_ERROR(ScanFile<Hashes>(options.reviews_path, "reviews pass 1", scan, pool.get(),
                                          &report.reviews, parse, count));
  }
  SIFT_RETURN_IF_ERROR(CheckBadFraction(report.reviews, options.max_bad_fraction));
  report.reviews_read = report.reviews.good_lines();
  report.users_read = static_cast<int64_t>(rows_per_user.size());
  const uint32_t min_rows = static_cast<uint32_t>(
      std::min<int64_t>(options.min_reviews, std::numeric_limits<uint32_t>::max()));

  // 2. The rows of the users that pass the filter.
  Interner users, items;
  std::vector<KeptRow> rows;
  {
    using Rows = std::vector<ReviewRow>;
    const auto& counts = rows_per_user;  // read-only from here: safe to share between threads
    auto parse = [&counts, min_rows](absl::string_view line, int64_t, Rows* kept) {
      ReviewRow row;
      SIFT_RETURN_IF_ERROR(ParseReviewLine(line, &row));
      auto it = counts.find(StringHash(row.user));
      if (it != counts.end() && it->second >= min_rows) kept->push_back(std::move(row));
      return Status();
    };
    auto keep = [&](Rows&& kept, std::vector<BadLine>*) {
      for (ReviewRow& r : kept) {
        rows.push_back(
            KeptRow{users.Intern(std::move(r.user)), items.Intern(std::move(r.item)), r.time});
      }
      return Status();
    };
    FileReport pass2;
    SIFT_RETURN_IF_ERROR(ScanFile<Rows>(options.reviews_path, "reviews pass 2", scan, pool.get(),
                                        &pass2, parse, keep));
    if (pass2.lines != report.reviews.lines || pass2.bad_lines != report.reviews.bad_lines ||
        pass2.empty_lines != report.reviews.empty_lines) {
      return absl::DataLossError(absl::StrCat(
          options.reviews_path, ": the file changed while being read (", report.reviews.lines,
          " lines, ", report.reviews.bad_lines, " bad on the first pass; ", pass2.lines, " and ",
          pass2.bad_lines, " on the second)"));
    }
  }
  rows_per_user = {};

  // Exact counts: a user kept only through a hash collision with another user is dropped now.
  std::vector<int64_t> exact(users.size(), 0);
  for (const KeptRow& r : rows) ++exact[r.user];
  std::vector<bool> user_kept(users.size()), item_used(items.size(), false);
  for (size_t u = 0; u < users.size(); ++u) user_kept[u] = exact[u] >= options.min_reviews;
  for (const KeptRow& r : rows) {
    if (user_kept[r.user]) item_used[r.item] = true;
  }

  // 3. Categories of the kept items.
  constexpr int32_t kAbsent = -1;
  std::vector<int32_t> item_category(items.size(), kAbsent);  // local category index
  Interner categories;
  {
    using Metas = std::vector<std::pair<int64_t, MetaRow>>;
    auto parse = [](absl::string_view line, int64_t n, Metas* metas) {
      MetaRow meta;
      SIFT_RETURN_IF_ERROR(ParseMetaLine(line, &meta));
      metas->emplace_back(n, std::move(meta));
      return Status();
    };
    absl::flat_hash_map<std::string, int64_t> first_line;  // every asin of the metadata
    auto categorise = [&](Metas&& metas, std::vector<BadLine>* bad) {
      for (auto& [n, meta] : metas) {
        auto [it, inserted] = first_line.try_emplace(meta.asin, n);
        if (!inserted) {
          bad->push_back(BadLine{n, absl::StrCat("duplicate asin '", meta.asin, "' (first on line ",
                                                 it->second, ")")});
          continue;
        }
        const int64_t item = items.Find(meta.asin);
        if (item >= 0 && item_used[item]) {
          if (!meta.has_category) ++report.items_without_category;
          item_category[item] = static_cast<int32_t>(
              categories.Intern(meta.has_category ? std::move(meta.category) : kNoCategory));
        }
      }
      return Status();
    };
    SIFT_RETURN_IF_ERROR(ScanFile<Metas>(options.meta_path, "meta", scan, pool.get(), &report.meta,
                                         parse, categorise));
  }
  SIFT_RETURN_IF_ERROR(CheckBadFraction(report.meta, options.max_bad_fraction));
  for (size_t i = 0; i < items.size(); ++i) {
    if (item_used[i] && item_category[i] == kAbsent) {
      ++report.items_without_meta;
      item_category[i] = static_cast<int32_t>(categories.Intern(kNoCategory));
    }
  }

  // 4. Ids, in byte order of the names.
  std::vector<int32_t> user_id, item_id, category_id;
  std::vector<bool> category_used(categories.size(), false);
  for (size_t i = 0; i < items.size(); ++i) {
    if (item_used[i]) category_used[item_category[i]] = true;
  }
  report.users = AssignSortedIds(users, user_kept, &user_id);
  report.items = AssignSortedIds(items, item_used, &item_id);
  report.categories = AssignSortedIds(categories, category_used, &category_id);
  if (report.users == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.reviews_path, ": no user has at least ", options.min_reviews, " review rows (",
        report.reviews_read, " valid rows from ", report.users_read, " users)"));
  }
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;
  if (report.users > kMaxId || report.items > kMaxId) {
    return absl::OutOfRangeError("amazon: more users or items than int32 ids can hold");
  }

  // Events: user-major, then (time, asin) — item ids follow asin order, so they break the ties.
  struct Event {
    int32_t user, item;
    int64_t time;
  };
  std::vector<Event> events;
  events.reserve(rows.size());
  for (const KeptRow& r : rows) {
    if (user_kept[r.user]) events.push_back(Event{user_id[r.user], item_id[r.item], r.time});
  }
  rows = {};
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.user != b.user) return a.user < b.user;
    if (a.time != b.time) return a.time < b.time;
    return a.item < b.item;
  });
  // Category id by item id.
  std::vector<int32_t> category_of_item(static_cast<size_t>(report.items) + 1, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    if (item_used[i]) category_of_item[item_id[i]] = category_id[item_category[i]];
  }

  TimelineData t;
  t.num_item_features = 2;
  t.num_user_features = 1;
  t.events.reserve(events.size() * 2);
  t.timestamps.reserve(events.size());
  t.user_offsets.assign(static_cast<size_t>(report.users) + 1, 0);
  for (const Event& e : events) {
    t.events.push_back(e.item);
    t.events.push_back(category_of_item[e.item]);
    t.timestamps.push_back(e.time);
    ++t.user_offsets[e.user];  // user ids are 1-based: counts land at index id
  }
  for (size_t u = 1; u < t.user_offsets.size(); ++u) t.user_offsets[u] += t.user_offsets[u - 1];
  t.user_features.resize(static_cast<size_t>(report.users));
  for (int64_t u = 0; u < report.users; ++u) t.user_features[u] = static_cast<int32_t>(u + 1);
  report.reviews_kept = static_cast<int64_t>(events.size());
  events = {};

  YAML::Node meta;
  meta["source"] = "amazon";
  YAML::Node a = meta["amazon"];
  a["reviews_file"] = BaseName(options.reviews_path);
  a["meta_file"] = BaseName(options.meta_path);
  a["min_reviews"] = options.min_reviews;
  a["users"] = report.users;
  a["items"] = report.items;
  a["categories"] = report.categories;
  a["reviews_kept"] = report.reviews_kept;
  a["reviews_read"] = report.reviews_read;
  a["users_read"] = report.users_read;
  a["reviews_lines"] = report.reviews.lines;
  a["reviews_bad_lines"] = report.reviews.bad_lines;
  a["meta_lines"] = report.meta.lines;
  a["meta_bad_lines"] = report.meta.bad_lines;
  a["items_without_meta"] = report.items_without_meta;
  a["items_without_category"] = report.items_without_category;
  a["id_order"] =
      "ids from 1 in ascending byte order of reviewerID (users), asin (items), category string "
      "(categories)";
  a["event_order"] = "per user, ascending (unixReviewTime, asin)";
  SIFT_RETURN_IF_ERROR(WriteTimelineDataset(options.out_dir, t, {report.users},
                                            {report.items, report.categories},
                                            options.negative_seed, meta, options.history));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace sift::data
