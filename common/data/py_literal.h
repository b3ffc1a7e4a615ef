// A strict parser for Python literals — the format of the Amazon metadata lines (one
// `str(dict)` per line, model-spec 7.1) — as Python 3's ast.literal_eval reads them: strings
// ('..', "..", prefixes u/r/b, escapes \' \" \\ \n \t \xNN \uNNNN \UNNNNNNNN \ooo, adjacent
// literals concatenated), integers (decimal, 0x/0o/0b, '_' separators, one sign), floats, True,
// False, None, lists, tuples, dicts and sets, nested. Strings hold UTF-8: an escape stands for
// its code point (so '\xe9' == 'é', as in Python 3), raw bytes are copied unchanged.
// Errors are values whose message starts with "column N:" (1-based byte column of the problem).
// Not supported (an error): complex numbers, integers beyond int64 in a materialised value,
// \N{name} escapes, a sign before a parenthesised number ("-(1)"), nesting deeper than
// kMaxPyDepth. Checked against ast.literal_eval on random and mutated literals. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status.h"

namespace sift::data {

inline constexpr int kMaxPyDepth = 200;

struct PyDictEntry;

struct PyValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kList, kTuple, kSet, kDict };

  Kind kind = Kind::kNone;
  bool bool_value = false;
  int64_t int_value = 0;
  double float_value = 0;
  std::string str;                   // kString (UTF-8) and kBytes
  std::vector<PyValue> items;        // kList, kTuple, kSet (source order)
  std::vector<PyDictEntry> entries;  // kDict (source order, duplicates kept)

  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  // For a dict: the value of the last entry whose key is the string `key` (Python keeps the
  // last of duplicate keys), or null. Null for any other kind.
  const PyValue* Find(absl::string_view key) const;
};

// One `key: value` of a dict. Not a std::pair: clang with libstdc++ cannot instantiate pair's
// constructor traits for the recursive PyValue (the fuzz build, tests/fuzz/README.md).
struct PyDictEntry {
  PyDictEntry(PyValue k, PyValue v) : first(std::move(k)), second(std::move(v)) {}
  PyValue first;
  PyValue second;
};

// Name of a kind as Python spells the type ("str", "list", "NoneType", ...), for messages.
const char* PyKindName(PyValue::Kind kind);

// Parses `text`, which must hold exactly one literal (surrounding whitespace allowed).
StatusOr<PyValue> ParsePyLiteral(absl::string_view text);

// Parses `text`, which must hold exactly one dict display ('{' ... '}', whitespace and comments
// around it allowed, no enclosing parentheses), and returns a dict with only the
// entries whose key is a string in `keys`; every other value is checked for syntax (as strictly
// as ParsePyLiteral) but not built — much faster when most of a line is of no interest.
StatusOr<PyValue> ParsePyDictFields(absl::string_view text, absl::Span<const std::string> keys);

}  // namespace sift::data
