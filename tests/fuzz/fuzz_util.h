// Helpers shared by the fuzz targets (tests/fuzz/*_fuzz.cc): a cursor over the fuzzer's bytes,
// multi-part inputs, a per-process scratch directory for parsers that read files, the CRC fix-ups
// that let mutated files get past the checksums to the structural checks behind them, and
// FUZZ_CHECK for invariants. Header-only; every target is one translation unit plus this.
// Not thread-safe (fuzz targets run one input at a time).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/crc32c.h"
#include "common/data/binary_file.h"
#include "google/protobuf/stubs/logging.h"

// An invariant of the code under test: a violation is a finding (abort, so libFuzzer and the
// standalone driver both report it with the input).
#define FUZZ_CHECK(cond, what)                                                                    \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "%s:%d: fuzz invariant violated: %s: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                                    \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)

namespace sift::fuzz {

// With SIFT_FUZZ_VERBOSE set, prints what an input came to ("what: status"): for checking that
// the seeds reach the paths they are meant for.
inline void Note(absl::string_view what, const absl::Status& s) {
  static const bool verbose = std::getenv("SIFT_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(what.size()), what.data(),
                 s.ToString().c_str());
  }
}

// Silences protobuf's log lines (e.g. "invalid UTF-8 data when parsing"): the parse result is what
// the targets check, and a million log lines slow a fuzzer down. Call once, before any parse.
inline void QuietProtobuf() {
  static const bool done = (google::protobuf::SetLogHandler(nullptr), true);
  (void)done;
}

// Reads the fuzzer's bytes front to back; past the end every read yields zeros / empty.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint8_t Byte() {
    if (left_ == 0) return 0;
    --left_;
    return *p_++;
  }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(Byte()) << (8 * i);
    return v;
  }
  uint64_t U64() { return U32() | (static_cast<uint64_t>(U32()) << 32); }
  absl::string_view Bytes(size_t n) {
    n = std::min(n, left_);
    absl::string_view out(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return out;
  }
  // Up to `max` bytes, the length taken from the next two bytes.
  absl::string_view Sized(size_t max) { return Bytes(std::min<size_t>(U32() & 0xffff, max)); }
  absl::string_view Rest() { return Bytes(left_); }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

// The separator of multi-part inputs (several files, or several requests): mutations keep parts
// apart and splices move whole parts. Also in the targets' dictionaries.
inline constexpr absl::string_view kPartSeparator = "\n~~sift-fuzz-part~~\n";

// Splits `bytes` at kPartSeparator into exactly `parts` pieces (missing ones empty, extra
// separators left inside the last piece); parts == 0: as many as there are.
inline std::vector<absl::string_view> SplitParts(absl::string_view bytes, size_t parts = 0) {
  std::vector<absl::string_view> out;
  while (parts == 0 || out.size() + 1 < parts) {
    const size_t at = bytes.find(kPartSeparator);
    if (at == absl::string_view::npos) break;
    out.push_back(bytes.substr(0, at));
    bytes.remove_prefix(at + kPartSeparator.size());
  }
  out.push_back(bytes);
  while (parts != 0 && out.size() < parts) out.push_back(absl::string_view());
  return out;
}

// The inverse of SplitParts (seed corpus generators use it).
inline std::string JoinParts(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(kPartSeparator.data(), kPartSeparator.size());
    out.append(parts[i]);
  }
  return out;
}

// A directory of this process's own, emptied by Reset() before each input and removed at exit.
// Under /dev/shm when it exists (the parsers' files never touch a disk; fsync is free there).
class ScratchDir {
 public:
  static ScratchDir& Get() {
    static ScratchDir* dir = new ScratchDir();
    return *dir;
  }
  const std::string& path() const { return path_; }
  std::string File(absl::string_view name) const { return path_ + "/" + std::string(name); }
  // Removes everything inside, keeps the directory.
  void Reset() const {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(path_, ec)) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }

 private:
  ScratchDir() {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : nullptr;
    if (base == nullptr) base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    std::string templ = std::string(base) + "/sift-fuzz-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      std::perror("sift fuzz: mkdtemp");
      std::abort();
    }
    path_ = templ;
    static std::string* to_remove = &path_;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*to_remove, ec);
    });
  }
  std::string path_;
};

// Writes `bytes` to `path` (plain write: the parsers under test only read).
inline void WriteFile(const std::string& path, absl::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror(path.c_str());
    std::abort();
  }
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::abort();
  }
  std::fclose(f);
}

// What FixBinaryHeader repairs in a sift binary container (common/data/binary_file.h).
enum BinaryFix : uint8_t {
  kFixPayloadSize = 1,  // header payload size = file size - 64
  kFixPayloadCrc = 2,   // header payload CRC = CRC32C of the payload
  kFixHeaderCrc = 4,    // header CRC (applied last)
  kFixAll = 7,
};

// Applies `fixes` to the header of `file` in place; files shorter than the header are left as
// they are (the parser must reject them).
inline void FixBinaryHeader(std::string* file, uint8_t fixes) {
  if (file->size() < data::kHeaderSize) return;
  char* p = file->data();
  const uint64_t payload = file->size() - data::kHeaderSize;
  if (fixes & kFixPayloadSize) std::memcpy(p + 16, &payload, 8);
  if (fixes & kFixPayloadCrc) {
    const uint32_t crc = Crc32c(p + data::kHeaderSize, payload);
    std::memcpy(p + 24, &crc, 4);
  }
  if (fixes & kFixHeaderCrc) {
    const uint32_t crc = Crc32c(p, 60);
    std::memcpy(p + 60, &crc, 4);
  }
}

}  // namespace sift::fuzz
