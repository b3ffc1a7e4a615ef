// The raw tokens behind a dataset's ids (`vocab.bin`), written by imports that start from strings
// (`sift data events`): per table (user_id, item_id, cat_id, ...), the token of every id, so that
// `sift data inspect --user TOKEN` and a later scorer can go from the user's strings to ids and
// back. Named by feature_spec.yaml's metadata.sift.vocab; datasets without one (generated,
// TFRecord imports) have no tokens.
//
//   magic "SIFTVOCB", counts {T, total token bytes, 0}
//   sections: uint64 sizes[T + 1]      (sizes[0] = T: list 0 holds the table names; sizes[k] =
//                                       the tokens of table k - 1)
//             then per list k = 0..T:  uint64 offsets[sizes[k] + 1], char bytes[offsets.back()]
//   token of id i (1-based) of table t = bytes of list t + 1 in [offsets[i - 1], offsets[i]).
//
// Opening checks the header, the sizes and that every offset array is monotone within its bytes,
// so no later read goes out of bounds. Immutable after Open; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/data/binary_file.h"
#include "common/status.h"

namespace sift::data {

inline constexpr char kVocabFile[] = "vocab.bin";

struct VocabTable {
  std::string name;                 // the feature's name (user_id, item_id, cat_id, ...)
  std::vector<std::string> tokens;  // tokens[id - 1]
};

// Writes `path` atomically.
Status WriteVocab(const std::string& path, const std::vector<VocabTable>& tables);

class Vocab {
 public:
  static StatusOr<std::unique_ptr<Vocab>> Open(const std::string& path, bool verify);

  int num_tables() const { return static_cast<int>(lists_.size()) - 1; }
  // The table named `name`, or -1.
  int Find(absl::string_view name) const;
  absl::string_view name(int table) const { return Token(0, table + 1); }
  int64_t size(int table) const { return lists_[table + 1].size; }
  // REQUIRES: 1 <= id <= size(table).
  absl::string_view token(int table, int64_t id) const { return Token(table + 1, id); }
  // The id of `token` in `table`, or 0 when it has none (a linear scan: for lookups by hand).
  int64_t Lookup(int table, absl::string_view token) const;
  const std::string& path() const { return file_.path(); }
  Status Verify() const { return file_.VerifyPayload(); }

 private:
  struct List {
    int64_t size = 0;
    const uint64_t* offsets = nullptr;
    const char* bytes = nullptr;
  };
  Vocab() = default;
  absl::string_view Token(int list, int64_t id) const {
    const List& l = lists_[list];
    return absl::string_view(l.bytes + l.offsets[id - 1], l.offsets[id] - l.offsets[id - 1]);
  }
  BinaryFile file_;
  std::vector<List> lists_;
};

}  // namespace sift::data
