// Fuzz target: TFRecord framing (common/data/tfrecord.h TfRecordReader).
//
// Input: one mode byte, then either the file's bytes as they are (mode bit 0 clear: the reader
// must reject any corruption with DATA_LOSS) or payloads separated by kPartSeparator that are
// framed with AppendTfRecord (bit 0 set), so mutations reach the reader past both CRCs; then bit 1
// cuts the framed file short by the next byte's value and bit 2 flips one byte of it.
// Invariants: the reader never reads past the file (ASan), offsets only grow and stay within the
// file, every payload lies inside it, and an intact framed file reads back exactly its payloads.
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/tfrecord.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using sift::fuzz::Input;
  Input in(data, size);
  const uint8_t mode = in.Byte();
  std::string file;
  std::vector<absl::string_view> payloads;
  bool intact = false;
  if (mode & 1) {
    const uint8_t cut = in.Byte();
    const uint32_t flip_at = in.U32();
    payloads = sift::fuzz::SplitParts(in.Rest());
    for (absl::string_view p : payloads) sift::data::AppendTfRecord(p, &file);
    intact = true;
    if ((mode & 2) && !file.empty()) {
      file.erase(file.size() - std::min<size_t>(file.size(), 1 + cut));
      intact = false;
    }
    if ((mode & 4) && !file.empty()) {
      file[flip_at % file.size()] ^= static_cast<char>(1u << (mode >> 5));
      intact = false;
    }
  } else {
    file = std::string(in.Rest());
  }

  const auto& scratch = sift::fuzz::ScratchDir::Get();
  const std::string path = scratch.File("part_0.tfrecord");
  sift::fuzz::WriteFile(path, file);
  auto reader = sift::data::TfRecordReader::Open(path);
  FUZZ_CHECK(reader.ok(), reader.status().ToString());
  std::vector<std::string> read;
  uint64_t last_offset = 0;
  bool clean_end = false;
  while (true) {
    absl::string_view payload;
    auto more = reader->Next(&payload);
    FUZZ_CHECK(reader->offset() >= last_offset && reader->offset() <= file.size(), "offset");
    last_offset = reader->offset();
    if (!more.ok()) {
      sift::fuzz::Note("next", more.status());
      FUZZ_CHECK(more.status().code() == absl::StatusCode::kDataLoss, more.status().ToString());
      break;
    }
    if (!*more) {
      clean_end = true;
      break;
    }
    FUZZ_CHECK(payload.size() + sift::data::kTfRecordOverhead <= file.size(), "payload size");
    read.emplace_back(payload);
  }
  FUZZ_CHECK(reader->record_index() == static_cast<int64_t>(read.size()), "record_index");
  if (clean_end) FUZZ_CHECK(reader->offset() == file.size(), "a clean end at the end");
  if (intact) {
    FUZZ_CHECK(clean_end, "an intact file reads to its end");
    FUZZ_CHECK(read.size() == payloads.size(), "every record read back");
    for (size_t i = 0; i < read.size(); ++i) FUZZ_CHECK(read[i] == payloads[i], "payload");
  }
  return 0;
}
