// The container of sift's binary data files (events.bin, users.bin, <split>.samples.bin).
//
// Layout (little-endian): a 64-byte header, then the payload, whose sections each start on a
// 64-byte boundary so that int32/int64 arrays can be used in place from a memory mapping.
//
//   offset  size  field
//        0     8  magic (file kind, e.g. "SIFTEVNT")
//        8     4  format version (kBinaryFormatVersion)
//       12     4  header size (64)
//       16     8  payload size in bytes
//       24     4  CRC32C of the payload
//       28     4  reserved (0)
//       32    24  three file-specific counts (uint64)
//       56     4  reserved (0)
//       60     4  CRC32C of bytes 0..59
//
// Opening checks magic, version, header CRC and that the file size is exactly header + payload
// (a truncated or extended file is rejected); the payload CRC is checked only when asked to
// (`sift data inspect --verify`), because it means reading every byte.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/file_util.h"
#include "common/status.h"

namespace sift::data {

inline constexpr uint32_t kBinaryFormatVersion = 1;
inline constexpr size_t kHeaderSize = 64;
inline constexpr size_t kSectionAlignment = 64;

struct BinaryHeader {
  std::string magic;  // exactly 8 characters
  uint32_t version = kBinaryFormatVersion;
  uint64_t payload_size = 0;
  uint32_t payload_crc = 0;
  std::array<uint64_t, 3> counts{};
};

// Rounds `n` up to the section alignment.
constexpr uint64_t AlignUp(uint64_t n) {
  return (n + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment;
}

// Writes a binary file section by section: Begin(), Section()..., Finish() (atomic commit).
class BinaryFileWriter {
 public:
  Status Begin(const std::string& path, absl::string_view magic, std::array<uint64_t, 3> counts);
  // Appends `n` bytes as the next section (aligned to 64 bytes).
  Status Section(const void* data, uint64_t n);
  // Appends `n` more bytes to the current section (no alignment): for streamed records.
  Status Append(const void* data, uint64_t n);
  // Replaces the counts given to Begin() (e.g. a record count known only at the end).
  void SetCounts(std::array<uint64_t, 3> counts) { header_.counts = counts; }
  Status Finish();

 private:
  AtomicFileWriter out_;
  BinaryHeader header_;
  uint32_t crc_ = 0;
  uint64_t payload_ = 0;
};

// An opened, header-checked binary file. The payload pointer stays valid while this lives.
class BinaryFile {
 public:
  // Fails with DATA_LOSS / INVALID_ARGUMENT naming `path` on a bad magic, version, header CRC,
  // size mismatch (truncation) and, when `verify` is set, payload CRC.
  static StatusOr<BinaryFile> Open(const std::string& path, absl::string_view magic, bool verify);

  const BinaryHeader& header() const { return header_; }
  const uint8_t* payload() const { return file_.data() + kHeaderSize; }
  const std::string& path() const { return file_.path(); }
  // Recomputes the payload CRC and compares it with the header's.
  Status VerifyPayload() const;

 private:
  MappedFile file_;
  BinaryHeader header_;
};

// Cursor over the sections of a payload, checking bounds as it goes.
class SectionReader {
 public:
  SectionReader(const BinaryFile& f) : file_(&f), offset_(0) {}
  // Returns a pointer to the next section of `bytes` bytes, or DATA_LOSS if the payload is short.
  StatusOr<const uint8_t*> Next(uint64_t bytes);
  // The next section of `count` elements of `elem_size` bytes, each factor taken from a file
  // header (untrusted): a product that overflows 64 bits is DATA_LOSS, not a wrapped size.
  StatusOr<const uint8_t*> NextArray(uint64_t count, uint64_t elem_size, uint64_t per_row = 1);

 private:
  const BinaryFile* file_;
  uint64_t offset_;
};

}  // namespace sift::data
