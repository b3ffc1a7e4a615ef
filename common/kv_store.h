// Rendezvous key-value store: the small shared table through which distributed workers exchange
// addresses (Gloo's connectFullMesh, NCCL unique ids). Values are opaque bytes; keys are any
// non-empty strings. KvStore is the interface; FileKvStore keeps one file per key in a shared
// directory (tests, single-machine runs); a coordinator-backed implementation comes later.
// Implementations are thread-safe. Keys are never deleted: use a fresh prefix per job/generation.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/status.h"

namespace sift {

class KvStore {
 public:
  virtual ~KvStore();

  // Publishes `value` under `key` (last write wins). Readers see the old value or the whole new
  // one, never a partial value. INVALID_ARGUMENT for an empty key.
  virtual Status Set(absl::string_view key, absl::string_view value) = 0;

  // Blocks until `key` is set, then returns its value. DEADLINE_EXCEEDED when it is not set
  // within `timeout` (absl::InfiniteDuration() waits forever).
  virtual StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;

  // Blocks until every key in `keys` is set. DEADLINE_EXCEEDED (naming the missing keys) when
  // they are not all set within `timeout`.
  virtual Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) = 0;
};

// One file per key in `dir`; the file name is the key escaped (bytes outside [A-Za-z0-9_-] as
// %XX), so keys with '/', '.', spaces or binary bytes are safe. Set writes a hidden temp file and
// renames it over the key's file (atomic on one file system). Get/Wait poll every few ms.
// Several processes (or threads) may share one directory.
class FileKvStore : public KvStore {
 public:
  // Creates `dir` (and parents) when missing.
  static StatusOr<std::unique_ptr<FileKvStore>> Open(const std::string& dir);

  Status Set(absl::string_view key, absl::string_view value) override;
  StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;

  const std::string& dir() const { return dir_; }
  // The file name that holds `key` (exposed for tests). INVALID_ARGUMENT for an empty key or one
  // whose escaped name exceeds the 255-byte file-name limit.
  static StatusOr<std::string> FileNameForKey(absl::string_view key);

 private:
  explicit FileKvStore(std::string dir) : dir_(std::move(dir)) {}
  // The content of the key file at `path`; NOT_FOUND when the key is not (yet) set.
  StatusOr<std::string> TryRead(const std::string& path) const;

  std::string dir_;
};

}  // namespace sift
