// Fuzz target: the Python-literal parser of the Amazon metadata lines (common/data/py_literal.h
// ParsePyLiteral, ParsePyDictFields).
//
// Input: one line of text. Invariants: errors are INVALID_ARGUMENT starting "column N:" with N
// within the line (+1 for the end); the two entry points agree: ParsePyDictFields accepts exactly
// the texts ParsePyLiteral reads as a dict display that starts with '{' (but for integers beyond
// int64 in values it does not build), and returns the same values for the keys asked for.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/data/py_literal.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using sift::data::PyValue;

bool Same(const PyValue& a, const PyValue& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case PyValue::Kind::kNone:
      return true;
    case PyValue::Kind::kBool:
      return a.bool_value == b.bool_value;
    case PyValue::Kind::kInt:
      return a.int_value == b.int_value;
    case PyValue::Kind::kFloat:
      return a.float_value == b.float_value ||
             (std::isnan(a.float_value) && std::isnan(b.float_value));
    case PyValue::Kind::kString:
    case PyValue::Kind::kBytes:
      return a.str == b.str;
    case PyValue::Kind::kList:
    case PyValue::Kind::kTuple:
    case PyValue::Kind::kSet:
      if (a.items.size() != b.items.size()) return false;
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (!Same(a.items[i], b.items[i])) return false;
      }
      return true;
    case PyValue::Kind::kDict:
      if (a.entries.size() != b.entries.size()) return false;
      for (size_t i = 0; i < a.entries.size(); ++i) {
        if (!Same(a.entries[i].first, b.entries[i].first) ||
            !Same(a.entries[i].second, b.entries[i].second)) {
          return false;
        }
      }
      return true;
  }
  return false;
}

// "column N: ..." with 1 <= N <= size + 1.
void CheckError(const sift::Status& s, size_t size) {
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
  const absl::string_view m = s.message();
  FUZZ_CHECK(absl::StartsWith(m, "column "), s.ToString());
  const size_t colon = m.find(':');
  FUZZ_CHECK(colon != absl::string_view::npos, s.ToString());
  uint64_t column = 0;
  FUZZ_CHECK(absl::SimpleAtoi(m.substr(7, colon - 7), &column), s.ToString());
  FUZZ_CHECK(column >= 1 && column <= size + 1, s.ToString());
}

// The first character that is not whitespace or in a comment, or 0.
char FirstToken(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      return c;
    }
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  static const std::vector<std::string> kKeys = {"asin", "categories", "title", ""};
  auto whole = sift::data::ParsePyLiteral(text);
  auto fields = sift::data::ParsePyDictFields(text, kKeys);
  sift::fuzz::Note("literal", whole.status());
  sift::fuzz::Note("dict fields", fields.status());
  if (!whole.ok()) CheckError(whole.status(), size);
  if (!fields.ok()) CheckError(fields.status(), size);
  // The one error that depends on what is built, not on the syntax (py_literal.h: integers
  // beyond int64 only in a materialised value): ParsePyDictFields does not build the values of
  // other keys, so there it may accept what ParsePyLiteral refuses.
  const bool materialisation_limit =
      !whole.ok() && absl::StrContains(whole.status().message(), "integer out of the int64 range");
  if (fields.ok() && !materialisation_limit) {
    FUZZ_CHECK(whole.ok(), "ParsePyDictFields accepted what ParsePyLiteral rejects: " +
                               whole.status().ToString());
    FUZZ_CHECK(whole->is_dict(), "ParsePyDictFields accepted a non-dict");
    for (const std::string& k : kKeys) {
      const PyValue* a = whole->Find(k);
      const PyValue* b = fields->Find(k);
      FUZZ_CHECK((a == nullptr) == (b == nullptr), "key '" + k + "' found by one parser only");
      if (a != nullptr) FUZZ_CHECK(Same(*a, *b), "key '" + k + "' differs");
    }
  } else if (whole.ok() && whole->is_dict() && FirstToken(text) == '{') {
    FUZZ_CHECK(false, "ParsePyDictFields rejects a dict display: " + fields.status().ToString());
  }
  return 0;
}
