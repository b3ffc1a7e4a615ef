// Picking named top-level fields out of one JSON object per line (the importers' JSON lines:
// `sift data amazon`'s reviews, `sift data events`). A SAX pass: nothing but the wanted values is
// kept, however large the rest of the object is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace sift::data {

struct JsonField {
  enum class Kind {
    kAbsent,
    kNull,
    kBool,
    kInteger,
    kUnsigned,
    kFloat,
    kString,
    kBinary,
    kObject,
    kArray
  };
  Kind kind = Kind::kAbsent;
  // The value as text for scalars: a string's content, a number as written (integers in decimal),
  // "true"/"false".
  std::string text;
  int64_t integer = 0;          // kInteger
  uint64_t unsigned_value = 0;  // kUnsigned
};

// "a string", "an integer", "an object", ... (for messages).
const char* JsonKindName(JsonField::Kind kind);

// Sets (*fields)[k] to the value of top-level key keys[k] of the object on `line` (the last one
// when a key repeats; kAbsent when missing). INVALID_ARGUMENT for invalid JSON or a top-level value
// that is not an object, the message saying what (without the file or line).
Status PickJsonFields(absl::string_view line, const std::vector<std::string>& keys,
                      std::vector<JsonField>* fields);

}  // namespace sift::data
