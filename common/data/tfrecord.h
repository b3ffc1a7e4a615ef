// TFRecord framing (docs/model-spec.md 6.1): each record is an 8-byte little-endian payload
// length, the masked CRC32C of those 8 bytes, the payload, and the masked CRC32C of the payload.
//
// TfRecordWriter streams records into a file committed atomically; TfRecordReader walks a
// memory-mapped file record by record, verifying both CRCs, and reports a bad length CRC, a bad
// data CRC or a truncated record with the file name, the 0-based record number and the byte
// offset. Neither class is thread-safe; payload views stay valid while the reader lives.
#pragma once

#include <cstdint>
#include <string>

#include "common/file_util.h"
#include "common/status.h"

namespace sift::data {

// Bytes of framing around each payload: 8 (length) + 4 (length CRC) + 4 (data CRC).
inline constexpr size_t kTfRecordOverhead = 16;

// Appends one framed record holding `payload` to `*out`. A pure function: the same payload always
// gives the same bytes.
void AppendTfRecord(absl::string_view payload, std::string* out);

class TfRecordWriter {
 public:
  Status Open(const std::string& path);
  // Appends one record.
  Status Write(absl::string_view payload);
  // Appends bytes already framed with AppendTfRecord (`records` of them, for the count).
  Status WriteFramed(absl::string_view framed, int64_t records);
  // fsync + rename over the final path. Without it the file is never created.
  Status Commit();
  int64_t records() const { return records_; }
  uint64_t bytes() const { return out_.size(); }
  const std::string& path() const { return out_.path(); }

 private:
  AtomicFileWriter out_;
  int64_t records_ = 0;
};

class TfRecordReader {
 public:
  static StatusOr<TfRecordReader> Open(const std::string& path);

  // Reads the next record into `*payload`. Returns true on a record, false at a clean end of
  // file, or a DATA_LOSS error naming the file, the record number and its byte offset.
  StatusOr<bool> Next(absl::string_view* payload);

  // 0-based number of the record the next Next() reads (= records read so far).
  int64_t record_index() const { return index_; }
  // Byte offset of the next record.
  uint64_t offset() const { return offset_; }
  uint64_t file_size() const { return file_.size(); }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  uint64_t offset_ = 0;
  int64_t index_ = 0;
};

}  // namespace sift::data
