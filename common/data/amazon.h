// The Amazon reviews import (docs/data.md section 4, model-spec 7.1–7.5): reviews (JSON lines)
// plus metadata (Python-literal lines), gzip or plain, into a sift timeline dataset.
//
// Pipeline, streaming; memory ~ 20-35 B per distinct reviewer (pass-1 counts) + ~40-70 B per
// metadata line (the duplicate-asin check) + the kept reviews and their vocabularies:
//   1. reviews, pass 1: count rows per user (by a 64-bit hash of reviewerID);
//   2. reviews, pass 2: keep the rows of users with >= min_reviews rows (exact counts are
//      re-checked on the strings, so a hash collision cannot keep a user);
//   3. metadata: category of every kept item = categories[0][-1] (exact string); "no_category"
//      when the item is absent from the metadata or its categories list (or first path) is empty;
//   4. ids from 1 (0 = padding), assigned in byte-wise ascending order of reviewerID (users),
//      asin (items) and category string (categories); per user, events in ascending
//      (unixReviewTime, asin) order; written with WriteTimelineDataset (F = 2: item id, category
//      id; one user feature: user id; timestamps = unixReviewTime; cardinalities {U}, {I, C}).
// Bad lines (unparsable, missing or wrongly-typed field, duplicate asin in the metadata: the
// first occurrence wins) are counted and the first few reported; more than max_bad_fraction of a
// file's non-empty lines is an error. Empty lines are skipped. Lines are parsed on `threads`
// threads and consumed in file order, so nothing depends on the thread count. Calls are
// independent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/data/line_scan.h"
#include "common/status.h"

namespace sift::data {

struct AmazonOptions {
  std::string reviews_path;
  std::string meta_path;
  std::string out_dir;
  int64_t min_reviews = 20;        // keep users with at least this many review rows (>= 2)
  double max_bad_fraction = 0.01;  // per file, of the non-empty lines; in [0, 1]
  uint64_t negative_seed = 12345;
  int64_t history = 100;  // history length declared in feature_spec.yaml
  int threads = 0;        // parser threads; 0 = all available CPUs, 1 = all on the caller
  size_t chunk_bytes = size_t{1} << 20;  // lines go to the parser threads in runs of ~this size
  // Called now and then while reading (phase name, lines read so far in that phase); optional.
  std::function<void(absl::string_view phase, int64_t lines)> progress;
};

struct AmazonReport {
  FileReport reviews, meta;
  int64_t reviews_read = 0;  // valid review rows
  int64_t users_read = 0;    // distinct users among them (by hash; exact up to collisions)
  int64_t users = 0, items = 0, categories = 0;
  int64_t reviews_kept = 0;            // events written
  int64_t items_without_meta = 0;      // kept items absent from the metadata
  int64_t items_without_category = 0;  // kept items in the metadata without a category path
  double seconds = 0;
};

// Runs the whole import and writes the dataset to options.out_dir.
StatusOr<AmazonReport> ImportAmazon(const AmazonOptions& options);

// ---- Building blocks, exposed for tests. ----

struct ReviewRow {
  std::string user, item;
  int64_t time = 0;
};
// Parses one reviews line. The error says what is wrong (without the file or line).
Status ParseReviewLine(absl::string_view line, ReviewRow* row);

struct MetaRow {
  std::string asin;
  std::string category;  // categories[0][-1], or "" when there is no category path
  bool has_category = false;
};
Status ParseMetaLine(absl::string_view line, MetaRow* row);

}  // namespace sift::data
