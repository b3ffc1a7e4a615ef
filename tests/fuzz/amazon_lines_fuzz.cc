// Fuzz target: the Amazon importer's input files (common/data/amazon.h): LineReader over a plain
// or gzip file, and every line through both ParseReviewLine (JSON) and ParseMetaLine (Python
// literal).
//
// Input: one mode byte, then the file. Mode bit 0: the file is gzip-compressed here first (so the
// reader's zlib path sees valid streams; mutated raw bytes also reach it, since gzip is detected
// by content), bit 1 then cuts the compressed stream short. Invariants: lines hold no '\n' and are
// numbered 1, 2, ...; errors are values with a message (DATA_LOSS from the reader,
// INVALID_ARGUMENT from the line parsers); a category is only set with has_category.
#include <zlib.h>

#include <cstdint>
#include <string>

#include "common/data/amazon.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::string Gzip(absl::string_view text) {
  z_stream z{};
  FUZZ_CHECK(
      deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
      "deflateInit2");
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  const uint8_t cut = in.Byte();
  std::string file(in.Rest());
  if (mode & 1) {
    const std::string gz = Gzip(file);
    const size_t drop = (mode & 2) ? std::min<size_t>(gz.size(), 1 + cut) : 0;
    file.assign(gz, 0, gz.size() - drop);
  }
  const auto& scratch = sift::fuzz::ScratchDir::Get();
  const std::string path = scratch.File("reviews.json");
  sift::fuzz::WriteFile(path, file);

  auto reader = sift::data::LineReader::Open(path);
  FUZZ_CHECK(reader.ok(), reader.status().ToString());
  int64_t lines = 0;
  while (true) {
    absl::string_view line;
    bool overlong = false;
    auto more = (*reader)->Next(&line, &overlong);
    if (!more.ok()) {
      FUZZ_CHECK(more.status().code() == absl::StatusCode::kDataLoss, more.status().ToString());
      break;
    }
    if (!*more) break;
    ++lines;
    FUZZ_CHECK((*reader)->line_number() == lines, "line numbers count the lines");
    FUZZ_CHECK(line.find('\n') == absl::string_view::npos, "a line holds no newline");
    FUZZ_CHECK(!overlong, "no line of a fuzz input is 64 MiB long");

    sift::data::ReviewRow review;
    const sift::Status r = sift::data::ParseReviewLine(line, &review);
    if (!r.ok()) {
      FUZZ_CHECK(r.code() == absl::StatusCode::kInvalidArgument && !r.message().empty(),
                 r.ToString());
    }
    sift::data::MetaRow meta;
    const sift::Status m = sift::data::ParseMetaLine(line, &meta);
    sift::fuzz::Note("review", r);
    sift::fuzz::Note("meta", m);
    if (!m.ok()) {
      FUZZ_CHECK(m.code() == absl::StatusCode::kInvalidArgument && !m.message().empty(),
                 m.ToString());
    } else {
      FUZZ_CHECK(meta.has_category || meta.category.empty(), "a category without has_category");
    }
  }
  return 0;
}
