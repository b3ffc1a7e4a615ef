#include "common/data/tfrecord.h"

#include <cstring>

#include "common/crc32c.h"

namespace sift::data {
namespace {

void PutFixed32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void PutFixed64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t GetFixed32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t GetFixed64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

void AppendTfRecord(absl::string_view payload, std::string* out) {
  char header[12];
  PutFixed64(payload.size(), header);
  PutFixed32(MaskCrc32c(Crc32c(header, 8)), header + 8);
  char footer[4];
  PutFixed32(MaskCrc32c(Crc32c(payload.data(), payload.size())), footer);
  out->append(header, sizeof(header));
  out->append(payload.data(), payload.size());
  out->append(footer, sizeof(footer));
}

Status TfRecordWriter::Open(const std::string& path) {
  records_ = 0;
  return out_.Open(path);
}

Status TfRecordWriter::Write(absl::string_view payload) {
  std::string framed;
  framed.reserve(payload.size() + kTfRecordOverhead);
  AppendTfRecord(payload, &framed);
  return WriteFramed(framed, 1);
}

Status TfRecordWriter::WriteFramed(absl::string_view framed, int64_t records) {
  records_ += records;
  return out_.Append(framed);
}

Status TfRecordWriter::Commit() { return out_.Commit(); }

StatusOr<TfRecordReader> TfRecordReader::Open(const std::string& path) {
  TfRecordReader r;
  SIFT_ASSIGN_OR_RETURN(r.file_, MappedFile::Open(path));
  return r;
}

StatusOr<bool> TfRecordReader::Next(absl::string_view* payload) {
  const uint64_t size = file_.size();
  if (offset_ == size) return false;
  auto error = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat(file_.path(), ": record ", index_, " at byte offset ", offset_, ": ", what));
  };
  const uint64_t left = size - offset_;
  if (left < 12) {
    return error(absl::StrCat("truncated record: the 12-byte header needs ", 12, " bytes, ", left,
                              " left in the file"));
  }
  const uint8_t* p = file_.data() + offset_;
  const uint32_t length_crc = UnmaskCrc32c(GetFixed32(p + 8));
  if (Crc32c(p, 8) != length_crc) return error("bad length CRC (corrupt record header)");
  const uint64_t length = GetFixed64(p);
  if (length > left - 12 || left - 12 - length < 4) {
    return error(absl::StrCat("truncated record: payload of ", length, " bytes plus its 4-byte CRC",
                              " needs ", length + 4, " bytes, ", left - 12, " left in the file"));
  }
  const uint8_t* data = p + 12;
  if (Crc32c(data, length) != UnmaskCrc32c(GetFixed32(data + length))) {
    return error(absl::StrCat("bad data CRC (corrupt payload of ", length, " bytes)"));
  }
  *payload = absl::string_view(reinterpret_cast<const char*>(data), length);
  offset_ += 12 + length + 4;
  ++index_;
  return true;
}

}  // namespace sift::data
