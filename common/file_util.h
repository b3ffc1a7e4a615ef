// File I/O with the guarantees sift relies on: writes that matter are atomic (temp file, fsync,
// rename, fsync of the directory), reads are memory-mapped, and every error names the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sift {

// Creates `dir` and its parents (like mkdir -p).
Status MakeDirs(const std::string& dir);
bool PathExists(const std::string& path);
StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes `data` to `path` atomically: readers see the old file or the whole new one.
Status WriteFileAtomic(const std::string& path, absl::string_view data);

// Streams a file to `<path>.tmp.<pid>` and renames it over `path` on Commit(). If Commit() is not
// reached (an error, an exception, a crash), the temp file is removed and `path` is untouched.
// Not thread-safe.
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status Open(const std::string& path);
  Status Append(const void* data, size_t n);
  Status Append(absl::string_view s) { return Append(s.data(), s.size()); }
  // Overwrites bytes already written (e.g. a header whose checksum is known only at the end).
  Status WriteAt(uint64_t offset, const void* data, size_t n);
  // Pads with zero bytes up to a multiple of `alignment`.
  Status PadTo(size_t alignment);
  uint64_t size() const { return size_; }
  // fsync, rename over the final path, fsync the directory.
  Status Commit();
  const std::string& path() const { return path_; }

 private:
  Status Flush();
  int fd_ = -1;
  std::string path_, tmp_path_;
  uint64_t size_ = 0;
  std::string buffer_;
};

// A read-only memory mapping of a whole file. Movable, not copyable; unmaps on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static StatusOr<MappedFile> Open(const std::string& path);
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// "dir/name", tolerating a trailing slash on dir.
std::string JoinPath(absl::string_view dir, absl::string_view name);

// ---- Paths under an operator's root (the coordinator's --results-root / --checkpoint-root) ----

// `path` made absolute (against the working directory) and lexically normal ("a/./b/" -> "a/b");
// INVALID_ARGUMENT naming `what` when it has a ".." component (before normalizing: a path that
// climbs out is refused, never silently resolved).
StatusOr<std::string> NormalizedAbsolutePath(const std::string& path, absl::string_view what);
// `path` is `root` or lies under it (both normalized, absolute), lexically.
bool PathIsUnder(const std::string& path, const std::string& root);
// Walks `path` from `root` down (REQUIRES: PathIsUnder(path, root), both normalized): every
// component below root that exists must be a directory, not a symbolic link — FAILED_PRECONDITION
// naming the first symlink ("... is a symbolic link: sift never follows one under ROOT"). With
// `create`, missing components are created (mode 0755); without, they are fine. The root itself
// is the operator's and is not checked. Nothing follows a link while it walks (lstat, mkdir).
Status CheckNoSymlinksUnder(const std::string& root, const std::string& path, bool create);

}  // namespace sift
