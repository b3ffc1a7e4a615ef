// Explicit samples: `<split>.samples.bin`, for datasets whose samples cannot be derived from a
// timeline (e.g. imported from the reference's TFRecords, whose negatives are stored).
//
//   magic "SIFTSMPL", counts {N, T, F | UF << 32}
//   one section of N fixed-size int32 records, each
//     label, hist_len, user[UF], target[F], pos[F][T], neg[F][T]
//   histories left-padded: the valid slots are the last hist_len of each [T] row.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/data/binary_file.h"
#include "common/status.h"

namespace sift::data {

struct SampleRecordShape {
  int64_t history = 100;  // T
  int item_features = 2;  // F
  int user_features = 1;  // UF
  int64_t record_ints() const { return 2 + user_features + item_features * (1 + 2 * history); }
};

// Streams records into a samples file; Finish() commits it atomically.
class SamplesFileWriter {
 public:
  Status Begin(const std::string& path, const SampleRecordShape& shape);
  // `record` holds shape.record_ints() values in the layout above.
  Status Add(const int32_t* record);
  Status Finish();
  int64_t count() const { return count_; }

 private:
  BinaryFileWriter out_;
  SampleRecordShape shape_;
  int64_t count_ = 0;
};

// A memory-mapped samples file. Thread-safe (immutable after Open).
class SamplesFile {
 public:
  static StatusOr<std::unique_ptr<SamplesFile>> Open(const std::string& path, bool verify);
  int64_t size() const { return size_; }
  const SampleRecordShape& shape() const { return shape_; }
  const int32_t* record(int64_t i) const { return records_ + i * shape_.record_ints(); }
  // Payload checksum plus a scan of every record's label and hist_len.
  Status Verify() const;

 private:
  SamplesFile() = default;
  BinaryFile file_;
  SampleRecordShape shape_;
  int64_t size_ = 0;
  const int32_t* records_ = nullptr;
};

}  // namespace sift::data
