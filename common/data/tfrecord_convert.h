// Conversion between sift datasets and the reference's TFRecord layout (docs/model-spec.md
// 6.1-6.4, docs/data.md 4).
//
// ExportTfrecord writes <out>/feature_spec.yaml (source type tfrecord),
// <out>/train/part_*.tfrecord, <out>/test/part_*.tfrecord and, when prebatching leaves a partial
// group, <split>/remainder.tfrecord (listed last). Rows are the split's samples in index order,
// every history with all T slots, negatives included. The bytes depend only on the dataset and the
// options, not on the thread count. ImportTfrecord reads such a directory (verifying framing and
// every Example) into an explicit-samples sift dataset. Both are blocking calls that use their own
// thread pool; every file is written atomically. Errors name the file, the record and the feature.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/samples_file.h"
#include "common/status.h"

namespace sift::data {

inline constexpr char kRemainderFile[] = "remainder.tfrecord";

struct TfrecordExportOptions {
  int64_t prebatch = 0;  // P: consecutive samples per Example; 0 = one sample per Example
  int train_parts = 8;
  int test_parts = 4;
  int threads = 0;  // <= 0: every available CPU
};

struct TfrecordImportOptions {
  int threads = 0;  // <= 0: every available CPU
};

struct TfrecordFileStats {
  std::string path;  // as written or read
  int64_t records = 0;
  int64_t samples = 0;
  uint64_t bytes = 0;
};

struct TfrecordConvertStats {
  std::vector<TfrecordFileStats> files;  // TFRecord files written (export) or read (import)
  int64_t train_samples = 0;
  int64_t test_samples = 0;
  int64_t records = 0;
};

// Sizes of `parts` contiguous, nearly equal chunks of `n` records: the first n mod parts chunks
// get one extra. REQUIRES: parts >= 1, n >= 0.
std::vector<int64_t> PartSizes(int64_t n, int parts);

// Writes the reference layout for `dataset` into `out_dir` (created if needed).
// REQUIRES: out_dir is not the dataset's own directory (checked).
StatusOr<TfrecordConvertStats> ExportTfrecord(const Dataset& dataset, const std::string& out_dir,
                                              const TfrecordExportOptions& options);

// Reads the reference TFRecord directory `src_dir` and writes an explicit-samples dataset
// (train.samples.bin, test.samples.bin, feature_spec.yaml) into `out_dir`. The prebatch size is
// inferred per record; record order is preserved (files in listed order, records in file order).
StatusOr<TfrecordConvertStats> ImportTfrecord(const std::string& src_dir,
                                              const std::string& out_dir,
                                              const TfrecordImportOptions& options);

// ---- Building blocks, exposed for tests and the fuzz targets. ----

// Decodes serialized tf.train.Examples of one feature_spec's layout into samples-file records
// (samples_file.h: shape().record_ints() int32 values per sample), with every check of
// ImportTfrecord: unparsable bytes, an unknown, missing or wrongly-typed feature, inconsistent
// list lengths, an id below 0 or beyond its cardinality, a label not 0/1, a history with a hole.
// Immutable after Create; thread-safe.
class TfExampleDecoder {
 public:
  // INVALID_ARGUMENT naming `spec_path` when the layout cannot be imported (history length
  // outside [1, 2^20], history features of different lengths). REQUIRES: spec passed Validate.
  static StatusOr<TfExampleDecoder> Create(const FeatureSpec& spec, const std::string& spec_path);

  // Appends the samples of the Example in `payload` to `*records`. INVALID_ARGUMENT of the form
  // "<file>: record <record> (byte offset <offset>): <what>" (what names the feature and the
  // sample); `*records` may then hold a partial record.
  Status Decode(absl::string_view payload, const std::string& file, int64_t record, uint64_t offset,
                std::vector<int32_t>* records) const;

  SampleRecordShape shape() const;

  struct Context;  // the column layout (tfrecord_convert.cc)

 private:
  explicit TfExampleDecoder(std::shared_ptr<const Context> context) : ctx_(std::move(context)) {}
  std::shared_ptr<const Context> ctx_;
};

}  // namespace sift::data
