// Fuzz target: the header of sift's binary data files (common/data/binary_file.h BinaryFile::Open,
// SectionReader) and the samples file built on it (samples_file.h SamplesFile::Open).
//
// Input: one mode byte, then the file. Mode bits 0-2 are the header fields repaired before the
// file is read (FixBinaryHeader: payload size, payload CRC, header CRC), so mutations get past the
// checksums to the checks behind them; bit 3 asks Open to verify the payload CRC; bit 4 reads the
// file as a samples file (magic SIFTSMPL), else as a generic container whose header counts are
// then walked as section sizes (the readers of events.bin, users.bin, checkpoints and snapshots
// take them from the header the same way). Invariants: every error is DATA_LOSS or
// INVALID_ARGUMENT naming the file; an opened file's sections and records lie inside it (ASan
// checks the reads).
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "common/data/binary_file.h"
#include "common/data/samples_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void CheckError(const sift::Status& s, const std::string& path) {
  sift::fuzz::Note("error", s);
  FUZZ_CHECK(
      s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kInvalidArgument,
      s.ToString());
  FUZZ_CHECK(absl::StartsWith(s.message(), path), s.ToString());
}

// Reads every byte of [p, p + n) (so ASan sees a read beyond the mapping).
uint8_t Touch(const uint8_t* p, uint64_t n) {
  uint8_t x = 0;
  for (uint64_t i = 0; i < n; ++i) x ^= p[i];
  return x;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  std::string file(in.Rest());
  sift::fuzz::FixBinaryHeader(&file, mode & sift::fuzz::kFixAll);
  const bool verify = mode & 8;
  const auto& scratch = sift::fuzz::ScratchDir::Get();
  volatile uint8_t sink = 0;

  if (mode & 16) {
    const std::string path = scratch.File("train.samples.bin");
    sift::fuzz::WriteFile(path, file);
    auto f = sift::data::SamplesFile::Open(path, verify);
    if (!f.ok()) return CheckError(f.status(), path), 0;
    const int64_t R = (*f)->shape().record_ints();
    FUZZ_CHECK((*f)->size() >= 0, "record count");
    FUZZ_CHECK(static_cast<uint64_t>((*f)->size()) * R * 4 + 64 <= file.size(), "records fit");
    if ((*f)->size() > 0) {
      sink = sink ^ Touch(reinterpret_cast<const uint8_t*>((*f)->record(0)), R * 4);
      sink = sink ^ Touch(reinterpret_cast<const uint8_t*>((*f)->record((*f)->size() - 1)), R * 4);
    }
    const sift::Status v = (*f)->Verify();
    if (!v.ok()) CheckError(v, path);
    return 0;
  }

  const std::string path = scratch.File("events.bin");
  sift::fuzz::WriteFile(path, file);
  std::string magic = file.size() >= 8 ? file.substr(0, 8) : std::string("SIFTEVNT");
  auto f = sift::data::BinaryFile::Open(path, magic, verify);
  if (!f.ok()) return CheckError(f.status(), path), 0;
  FUZZ_CHECK(f->header().payload_size + sift::data::kHeaderSize == file.size(), "payload size");
  // Sections as the readers take them: counts[0] x counts[1] int32, then counts[0] int64, then
  // counts[2] bytes, each 64-byte aligned.
  const auto& c = f->header().counts;
  sift::data::SectionReader r(*f);
  auto a = r.NextArray(c[0], sizeof(int32_t), c[1]);
  if (!a.ok()) return CheckError(a.status(), path), 0;
  if (c[0] * c[1] > 0) sink = sink ^ Touch(*a, c[0] * c[1] * sizeof(int32_t));
  auto b = r.NextArray(c[0], sizeof(int64_t));
  if (!b.ok()) return CheckError(b.status(), path), 0;
  if (c[0] > 0) sink = sink ^ Touch(*b, c[0] * sizeof(int64_t));
  auto d = r.Next(c[2]);
  if (!d.ok()) return CheckError(d.status(), path), 0;
  sink = sink ^ Touch(*d, c[2]);
  return 0;
}
