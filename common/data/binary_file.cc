#include "common/data/binary_file.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "common/crc32c.h"

namespace sift::data {
namespace {

void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void PutU64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t GetU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::array<uint8_t, kHeaderSize> EncodeHeader(const BinaryHeader& h) {
  std::array<uint8_t, kHeaderSize> b{};
  std::memcpy(b.data(), h.magic.data(), 8);
  PutU32(b.data() + 8, h.version);
  PutU32(b.data() + 12, kHeaderSize);
  PutU64(b.data() + 16, h.payload_size);
  PutU32(b.data() + 24, h.payload_crc);
  for (int i = 0; i < 3; ++i) PutU64(b.data() + 32 + 8 * i, h.counts[i]);
  PutU32(b.data() + 60, Crc32c(b.data(), 60));
  return b;
}

}  // namespace

Status BinaryFileWriter::Begin(const std::string& path, absl::string_view magic,
                               std::array<uint64_t, 3> counts) {
  if (magic.size() != 8) return absl::InternalError("binary file magic must be 8 bytes");
  header_ = BinaryHeader{};
  header_.magic = std::string(magic);
  header_.counts = counts;
  crc_ = 0;
  payload_ = 0;
  SIFT_RETURN_IF_ERROR(out_.Open(path));
  auto placeholder = EncodeHeader(header_);
  return out_.Append(placeholder.data(), placeholder.size());
}

Status BinaryFileWriter::Section(const void* data, uint64_t n) {
  static const uint8_t kZeros[kSectionAlignment] = {};
  uint64_t pad = AlignUp(payload_) - payload_;
  if (pad > 0) {
    SIFT_RETURN_IF_ERROR(out_.Append(kZeros, pad));
    crc_ = Crc32cExtend(crc_, kZeros, pad);
    payload_ += pad;
  }
  if (n > 0) {
    SIFT_RETURN_IF_ERROR(out_.Append(data, n));
    crc_ = Crc32cExtend(crc_, data, n);
    payload_ += n;
  }
  return absl::OkStatus();
}

Status BinaryFileWriter::Append(const void* data, uint64_t n) {
  if (n == 0) return absl::OkStatus();
  SIFT_RETURN_IF_ERROR(out_.Append(data, n));
  crc_ = Crc32cExtend(crc_, data, n);
  payload_ += n;
  return absl::OkStatus();
}

Status BinaryFileWriter::Finish() {
  header_.payload_size = payload_;
  header_.payload_crc = crc_;
  auto bytes = EncodeHeader(header_);
  SIFT_RETURN_IF_ERROR(out_.WriteAt(0, bytes.data(), bytes.size()));
  return out_.Commit();
}

StatusOr<BinaryFile> BinaryFile::Open(const std::string& path, absl::string_view magic,
                                      bool verify) {
  BinaryFile f;
  SIFT_ASSIGN_OR_RETURN(f.file_, MappedFile::Open(path));
  const uint8_t* p = f.file_.data();
  if (f.file_.size() < kHeaderSize) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", f.file_.size(),
                                            " bytes, shorter than the 64-byte header"));
  }
  std::string got_magic(reinterpret_cast<const char*>(p), 8);
  if (got_magic != magic) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad magic: expected \"", magic,
                                                   "\", found \"", absl::CEscape(got_magic),
                                                   "\" (not a sift file of this kind)"));
  }
  if (GetU32(p + 60) != Crc32c(p, 60)) {
    return absl::DataLossError(absl::StrCat(path, ": header checksum mismatch (corrupt header)"));
  }
  BinaryHeader& h = f.header_;
  h.magic = got_magic;
  h.version = GetU32(p + 8);
  if (h.version != kBinaryFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported format version ", h.version,
                                                   " (this sift reads version ",
                                                   kBinaryFormatVersion, ")"));
  }
  if (GetU32(p + 12) != kHeaderSize) {
    return absl::DataLossError(absl::StrCat(path, ": bad header size ", GetU32(p + 12)));
  }
  h.payload_size = GetU64(p + 16);
  h.payload_crc = GetU32(p + 24);
  for (int i = 0; i < 3; ++i) h.counts[i] = GetU64(p + 32 + 8 * i);
  uint64_t expected = kHeaderSize + h.payload_size;
  if (f.file_.size() != expected) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", f.file_.size() < expected ? "truncated" : "trailing bytes",
                     ": file has ", f.file_.size(), " bytes, header says ", expected));
  }
  if (verify) SIFT_RETURN_IF_ERROR(f.VerifyPayload());
  return f;
}

Status BinaryFile::VerifyPayload() const {
  uint32_t crc = Crc32c(payload(), header_.payload_size);
  if (crc != header_.payload_crc) {
    return absl::DataLossError(absl::StrCat(path(), ": payload checksum mismatch (stored ",
                                            absl::Hex(header_.payload_crc), ", computed ",
                                            absl::Hex(crc), "): the file is corrupt"));
  }
  return absl::OkStatus();
}

StatusOr<const uint8_t*> SectionReader::NextArray(uint64_t count, uint64_t elem_size,
                                                  uint64_t per_row) {
  uint64_t elems = 0, bytes = 0;
  if (__builtin_mul_overflow(count, per_row, &elems) ||
      __builtin_mul_overflow(elems, elem_size, &bytes)) {
    return absl::DataLossError(absl::StrCat(file_->path(), ": header counts (", count, " x ",
                                            per_row, ") overflow: the header is corrupt"));
  }
  return Next(bytes);
}

StatusOr<const uint8_t*> SectionReader::Next(uint64_t bytes) {
  uint64_t start = AlignUp(offset_);
  if (start + bytes > file_->header().payload_size || start + bytes < start) {
    return absl::DataLossError(absl::StrCat(file_->path(), ": payload too short for its counts (",
                                            "need ", start + bytes, " bytes, have ",
                                            file_->header().payload_size, ")"));
  }
  offset_ = start + bytes;
  return file_->payload() + start;
}

}  // namespace sift::data
