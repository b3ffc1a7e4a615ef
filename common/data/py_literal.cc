#include "common/data/py_literal.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"

namespace sift::data {
namespace {

using Kind = PyValue::Kind;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
int DigitValue(char c, int radix) {
  const int v = HexValue(c);
  return v >= 0 && v < radix ? v : -1;
}

// Appends code point `cp` (<= 0x10FFFF) in UTF-8; surrogates get their 3-byte form, as Python's
// "surrogatepass" writes them, so that every distinct Python string stays distinct.
void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Printable(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7F) return absl::StrFormat("'%c'", c);
  return absl::StrFormat("byte 0x%02x", u);
}

// What the parser learnt about a value, also when it did not build it: its kind, and the kind
// that makes it unhashable (kNone when hashable; a list/dict/set, or a tuple holding one).
struct Shape {
  Kind kind = Kind::kNone;
  Kind unhashable = Kind::kNone;
};

// Recursive-descent parser over one line. Methods return false after recording the first error
// in status_ (bools keep the hot path free of Status objects). A null `out` means "check the
// syntax only, build nothing".
class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  Status status() const { return status_; }

  // Parses the whole text as one value; a bare "a, b" at the top level is a tuple, as in eval.
  bool Whole(PyValue* out) {
    SkipSpace();
    Shape shape;
    if (!Value(out, 0, &shape)) return false;
    SkipSpace();
    if (!Peek(',')) return End();
    ++pos_;
    SkipSpace();
    if (out) {
      PyValue first = std::move(*out);
      *out = PyValue();
      out->kind = Kind::kTuple;
      out->items.push_back(std::move(first));
    }
    Kind culprit = Kind::kNone;
    while (!AtEnd()) {
      if (!Element(out, 0, false, &culprit)) return false;
      SkipSpace();
      if (AtEnd()) break;
      if (!Peek(',')) {
        return Fail(pos_,
                    absl::StrCat("expected ',' or the end of a tuple, got ", Printable(s_[pos_])));
      }
      ++pos_;
      SkipSpace();
    }
    return true;
  }

  // Parses the whole text as a dict, keeping only the entries keyed by a string in `keys`.
  bool DictFields(absl::Span<const std::string> keys, PyValue* out) {
    SkipSpace();
    if (!Peek('{')) return Fail(pos_, "expected a dict literal ('{')");
    ++pos_;
    out->kind = Kind::kDict;
    SkipSpace();
    while (!Peek('}')) {
      const size_t key_pos = pos_;
      PyValue key;
      Shape key_shape;
      if (!Value(&key, 1, &key_shape)) return false;
      if (key_shape.unhashable != Kind::kNone) return Unhashable(key_pos, key_shape.unhashable);
      SkipSpace();
      if (!Peek(':')) {
        return Fail(pos_, "expected ':' after a dict key");
      }
      ++pos_;
      SkipSpace();
      bool wanted = false;
      if (key.kind == Kind::kString) {
        for (const std::string& k : keys) wanted = wanted || k == key.str;
      }
      PyValue value;
      Shape value_shape;
      if (!Value(wanted ? &value : nullptr, 1, &value_shape)) return false;
      if (wanted) out->entries.emplace_back(std::move(key), std::move(value));
      if (!AfterElement('}', "dict")) return false;
    }
    ++pos_;
    return End();
  }

 private:
  bool Fail(size_t pos, absl::string_view what) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat("column ", pos + 1, ": ", what));
    }
    return false;
  }
  bool Unhashable(size_t pos, Kind kind) {
    return Fail(
        pos, absl::StrCat("unhashable type '", PyKindName(kind), "' as a dict key or set element"));
  }
  bool AtEnd() const { return pos_ >= s_.size(); }
  bool Peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  // Skips whitespace and comments ('#' to the end of the line).
  void SkipSpace() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
        continue;
      }
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f') break;
      ++pos_;
    }
  }
  bool End() {
    SkipSpace();
    if (!AtEnd())
      return Fail(
          pos_, absl::StrCat("unexpected ", Printable(s_[pos_]), " after the end of the literal"));
    return true;
  }

  // After a container element: consumes ',' (then tolerates the closing bracket: a trailing
  // comma) or stops before `close`.
  bool AfterElement(char close, const char* container) {
    SkipSpace();
    if (Peek(',')) {
      ++pos_;
      SkipSpace();
      return true;
    }
    if (Peek(close)) return true;
    if (AtEnd()) return Fail(pos_, absl::StrCat("unterminated ", container));
    return Fail(pos_, absl::StrCat("expected ',' or '", std::string(1, close), "' in a ", container,
                                   ", got ", Printable(s_[pos_])));
  }

  // Parses one value at pos_ into `out` (null: syntax only) and describes it in *shape.
  bool Value(PyValue* out, int depth, Shape* shape) {
    if (depth > kMaxPyDepth) {
      return Fail(pos_, absl::StrCat("nesting deeper than ", kMaxPyDepth, " levels"));
    }
    if (AtEnd()) return Fail(pos_, "unexpected end of input, expected a value");
    const char c = s_[pos_];
    switch (c) {
      case '[':
        *shape = Shape{Kind::kList, Kind::kList};
        return List(out, depth);
      case '(':
        return Paren(out, depth, shape);
      case '{':
        return Brace(out, depth, shape);
      case '\'':
      case '"':
        return String(out, shape);
      case '+':
      case '-':
      case '.':
        return Number(out, shape);
      default:
        break;
    }
    if (IsDigit(c)) return Number(out, shape);
    if (IsIdentChar(c)) return Name(out, shape);
    return Fail(pos_, absl::StrCat("unexpected ", Printable(c), ", expected a value"));
  }

  // A name: True, False, None, or a string prefix followed by a quote.
  bool Name(PyValue* out, Shape* shape) {
    const size_t start = pos_;
    size_t end = pos_;
    while (end < s_.size() && IsIdentChar(s_[end])) ++end;
    const absl::string_view name = s_.substr(start, end - start);
    if (end < s_.size() && (s_[end] == '\'' || s_[end] == '"') && name.size() <= 2) {
      return String(out, shape);
    }
    pos_ = end;
    if (name == "True" || name == "False") {
      *shape = Shape{Kind::kBool};
      if (out) {
        out->kind = Kind::kBool;
        out->bool_value = name == "True";
      }
      return true;
    }
    if (name == "None") {
      *shape = Shape{Kind::kNone};
      if (out) out->kind = Kind::kNone;
      return true;
    }
    return Fail(start, absl::StrCat("unexpected name '", name,
                                    "' (only True, False and None are literals)"));
  }

  // One element of a list, tuple or set, appended to out->items. With `must_hash` an
  // unhashable element is an error; otherwise its culprit (if any) is recorded in *culprit.
  bool Element(PyValue* out, int depth, bool must_hash, Kind* culprit) {
    const size_t elem_pos = pos_;
    Shape elem;
    PyValue* child = out ? &out->items.emplace_back() : nullptr;
    if (!Value(child, depth + 1, &elem)) return false;
    if (elem.unhashable != Kind::kNone) {
      if (must_hash) return Unhashable(elem_pos, elem.unhashable);
      if (*culprit == Kind::kNone) *culprit = elem.unhashable;
    }
    return true;
  }

  // '[' elements ']'.
  bool List(PyValue* out, int depth) {
    ++pos_;
    SkipSpace();
    if (out) out->kind = Kind::kList;
    Kind ignored = Kind::kNone;
    while (!Peek(']')) {
      if (!Element(out, depth, false, &ignored)) return false;
      if (!AfterElement(']', "list")) return false;
    }
    ++pos_;
    return true;
  }

  // '(' : the empty tuple, a parenthesised value, or a tuple.
  bool Paren(PyValue* out, int depth, Shape* shape) {
    ++pos_;
    SkipSpace();
    *shape = Shape{Kind::kTuple};
    if (out) {
      out->kind = Kind::kTuple;
      out->items.clear();
    }
    if (Peek(')')) {
      ++pos_;
      return true;
    }
    Shape first;
    if (!Value(out ? &out->items.emplace_back() : nullptr, depth + 1, &first)) return false;
    SkipSpace();
    if (Peek(')')) {  // (x) is just x
      ++pos_;
      if (out) {
        PyValue inner = std::move(out->items.front());
        *out = std::move(inner);
      }
      *shape = first;
      return true;
    }
    Kind culprit = first.unhashable;
    if (!Peek(',')) {
      if (AtEnd()) return Fail(pos_, "unterminated tuple");
      return Fail(pos_, absl::StrCat("expected ',' or ')' in a tuple, got ", Printable(s_[pos_])));
    }
    ++pos_;
    SkipSpace();
    while (!Peek(')')) {
      if (!Element(out, depth, false, &culprit)) return false;
      if (!AfterElement(')', "tuple")) return false;
    }
    ++pos_;
    shape->unhashable = culprit;
    return true;
  }

  // '{' : a dict or a set.
  bool Brace(PyValue* out, int depth, Shape* shape) {
    ++pos_;
    SkipSpace();
    *shape = Shape{Kind::kDict, Kind::kDict};
    if (out) {
      out->kind = Kind::kDict;
      out->items.clear();
      out->entries.clear();
    }
    if (Peek('}')) {
      ++pos_;
      return true;
    }
    // The first element decides: a dict if ':' follows it, else a set.
    Kind ignored = Kind::kNone;
    if (!Element(out, depth, true, &ignored)) return false;
    SkipSpace();
    if (!Peek(':')) {
      *shape = Shape{Kind::kSet, Kind::kSet};
      if (out) out->kind = Kind::kSet;
      if (!AfterElement('}', "set")) return false;
      while (!Peek('}')) {
        if (!Element(out, depth, true, &ignored)) return false;
        if (!AfterElement('}', "set")) return false;
      }
      ++pos_;
      return true;
    }
    PyValue key;
    if (out) {
      key = std::move(out->items.front());
      out->items.clear();
    }
    while (true) {
      ++pos_;  // ':'
      SkipSpace();
      PyValue value;
      Shape value_shape;
      if (!Value(out ? &value : nullptr, depth + 1, &value_shape)) return false;
      if (out) out->entries.emplace_back(std::move(key), std::move(value));
      if (!AfterElement('}', "dict")) return false;
      if (Peek('}')) break;
      const size_t key_pos = pos_;
      key = PyValue();
      Shape key_shape;
      if (!Value(out ? &key : nullptr, depth + 1, &key_shape)) return false;
      if (key_shape.unhashable != Kind::kNone) return Unhashable(key_pos, key_shape.unhashable);
      SkipSpace();
      if (!Peek(':')) return Fail(pos_, "expected ':' after a dict key");
    }
    ++pos_;
    return true;
  }

  // One or more adjacent string literals (concatenated, as Python does).
  bool String(PyValue* out, Shape* shape) {
    bool first = true, bytes = false;
    std::string* dst = out ? &out->str : nullptr;
    if (dst) dst->clear();
    while (true) {
      const size_t start = pos_;
      std::string prefix;
      while (pos_ < s_.size() && s_[pos_] != '\'' && s_[pos_] != '"') {
        prefix.push_back(static_cast<char>(s_[pos_] | 0x20));  // ASCII lower case
        ++pos_;
      }
      // u'' is a plain str (Python 2 heritage); f-strings are not literals.
      if (!prefix.empty() && prefix != "u" && prefix != "r" && prefix != "b" && prefix != "br" &&
          prefix != "rb") {
        return Fail(start,
                    absl::StrCat("invalid string prefix '", s_.substr(start, pos_ - start), "'"));
      }
      const bool raw = prefix.find('r') != std::string::npos;
      const bool is_bytes = prefix.find('b') != std::string::npos;
      if (!first && is_bytes != bytes) {
        return Fail(start, "cannot mix bytes and str literals");
      }
      bytes = is_bytes;
      if (!Literal(raw, is_bytes, dst)) return false;
      first = false;
      // Adjacent literal?
      const size_t save = pos_;
      SkipSpace();
      size_t q = pos_;
      while (q < s_.size() && q - pos_ < 2 && IsIdentChar(s_[q]) && !IsDigit(s_[q])) ++q;
      if (q < s_.size() && (s_[q] == '\'' || s_[q] == '"')) continue;
      pos_ = save;
      break;
    }
    *shape = Shape{bytes ? Kind::kBytes : Kind::kString};
    if (out) out->kind = shape->kind;
    return true;
  }

  // One quoted literal at pos_ (the opening quote), after its prefix.
  bool Literal(bool raw, bool bytes, std::string* dst) {
    const size_t open = pos_;
    const char q = s_[pos_];
    const bool triple = pos_ + 2 < s_.size() && s_[pos_ + 1] == q && s_[pos_ + 2] == q;
    pos_ += triple ? 3 : 1;
    while (true) {
      // Copy the run of ordinary characters at once.
      size_t run = pos_;
      while (run < s_.size()) {
        const char c = s_[run];
        if (c == q || c == '\\' || c == '\n' || (bytes && static_cast<unsigned char>(c) >= 0x80)) {
          break;
        }
        ++run;
      }
      if (dst) dst->append(s_.data() + pos_, run - pos_);
      pos_ = run;
      if (AtEnd()) return Fail(open, "unterminated string");
      const char c = s_[pos_];
      if (c == q) {
        if (!triple) {
          ++pos_;
          return true;
        }
        if (pos_ + 2 < s_.size() && s_[pos_ + 1] == q && s_[pos_ + 2] == q) {
          pos_ += 3;
          return true;
        }
        if (dst) dst->push_back(c);
        ++pos_;
      } else if (c == '\n') {
        if (!triple) return Fail(open, "unterminated string (end of line)");
        if (dst) dst->push_back(c);
        ++pos_;
      } else if (c != '\\') {
        return Fail(pos_, "bytes literals may hold only ASCII characters");
      } else if (raw) {  // a backslash is kept, and protects the next character
        if (pos_ + 1 >= s_.size()) return Fail(open, "unterminated string");
        if (dst) dst->append(s_.data() + pos_, 2);
        pos_ += 2;
      } else if (!Escape(bytes, dst)) {
        return false;
      }
    }
  }

  // A backslash escape at pos_ in a non-raw literal.
  bool Escape(bool bytes, std::string* dst) {
    const size_t at = pos_;
    if (pos_ + 1 >= s_.size()) return Fail(at, "unterminated string (backslash at the end)");
    const char e = s_[pos_ + 1];
    pos_ += 2;
    char simple = 0;
    switch (e) {
      case '\n':
        return true;  // line continuation
      case '\\':
      case '\'':
      case '"':
        simple = e;
        break;
      case 'a':
        simple = '\a';
        break;
      case 'b':
        simple = '\b';
        break;
      case 'f':
        simple = '\f';
        break;
      case 'n':
        simple = '\n';
        break;
      case 'r':
        simple = '\r';
        break;
      case 't':
        simple = '\t';
        break;
      case 'v':
        simple = '\v';
        break;
      default:
        break;
    }
    if (simple) {
      if (dst) dst->push_back(simple);
      return true;
    }
    if (e >= '0' && e <= '7') {
      uint32_t v = static_cast<uint32_t>(e - '0');
      for (int i = 0; i < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i) {
        v = v * 8 + static_cast<uint32_t>(s_[pos_++] - '0');
      }
      if (bytes && v > 0xFF) return Fail(at, "octal escape out of the byte range");
      return Emit(v, bytes, dst);
    }
    int digits = 0;
    if (e == 'x') digits = 2;
    if (!bytes && e == 'u') digits = 4;
    if (!bytes && e == 'U') digits = 8;
    if (digits) {
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const int h = pos_ < s_.size() ? HexValue(s_[pos_]) : -1;
        if (h < 0) {
          return Fail(at, absl::StrCat("truncated \\", std::string(1, e), " escape (expected ",
                                       digits, " hex digits)"));
        }
        v = v * 16 + static_cast<uint32_t>(h);
        ++pos_;
      }
      if (v > 0x10FFFF) return Fail(at, "escape beyond the Unicode range");
      return Emit(v, bytes, dst);
    }
    if (!bytes && e == 'N') return Fail(at, "\\N{...} escapes are not supported");
    // Unknown escape: Python keeps the backslash and the character.
    if (bytes && static_cast<unsigned char>(e) >= 0x80) {
      return Fail(pos_ - 1, "bytes literals may hold only ASCII characters");
    }
    if (dst) {
      dst->push_back('\\');
      dst->push_back(e);
    }
    return true;
  }

  bool Emit(uint32_t v, bool bytes, std::string* dst) {
    if (!dst) return true;
    if (bytes) {
      dst->push_back(static_cast<char>(v));
    } else {
      AppendUtf8(v, dst);
    }
    return true;
  }

  // A number with at most one sign: int (decimal, 0x, 0o, 0b) or float.
  bool Number(PyValue* out, Shape* shape) {
    const size_t start = pos_;
    bool negative = false;
    if (Peek('+') || Peek('-')) {
      negative = s_[pos_] == '-';
      ++pos_;
      SkipSpace();
      if (AtEnd() || !(IsDigit(s_[pos_]) || s_[pos_] == '.')) {
        return Fail(start, "expected a number after the sign");
      }
    }
    const size_t num = pos_;
    if (s_[num] == '0' && num + 1 < s_.size()) {
      const char r = s_[num + 1];
      int radix = 0;
      if (r == 'x' || r == 'X') radix = 16;
      if (r == 'o' || r == 'O') radix = 8;
      if (r == 'b' || r == 'B') radix = 2;
      if (radix) {
        pos_ = num + 2;
        *shape = Shape{Kind::kInt};
        return Integer(out, start, negative, radix, pos_);
      }
    }
    // Decimal: digits [. digits] [e [sign] digits], '_' allowed between digits.
    size_t p = num;
    auto digits = [&](bool allow_empty) {
      const size_t b = p;
      while (p < s_.size() && (IsDigit(s_[p]) || s_[p] == '_')) ++p;
      return allow_empty || p > b;
    };
    digits(true);
    const size_t int_end = p;
    bool is_float = false;
    if (p < s_.size() && s_[p] == '.') {
      is_float = true;
      ++p;
      digits(true);
      if (p == num + 1) return Fail(start, "invalid number '.'");
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E') && p > num) {
      is_float = true;
      ++p;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (!digits(false)) return Fail(start, "invalid number: exponent without digits");
    }
    if (p < s_.size() && (s_[p] == 'j' || s_[p] == 'J')) {
      return Fail(start, "complex numbers are not supported");
    }
    if (p < s_.size() && IsIdentChar(s_[p])) {
      return Fail(start, absl::StrCat("invalid number (unexpected ", Printable(s_[p]), ")"));
    }
    // Underscores only between two digits.
    for (size_t i = num; i < p; ++i) {
      if (s_[i] == '_' && (i == num || i + 1 >= p || !IsDigit(s_[i - 1]) || !IsDigit(s_[i + 1]))) {
        return Fail(start, "invalid number: misplaced '_'");
      }
    }
    if (!is_float) {
      // Python 3 rejects leading zeros in non-zero decimal integers ("0123").
      if (s_[num] == '0') {
        for (size_t i = num; i < int_end; ++i) {
          if (s_[i] != '0' && s_[i] != '_') {
            return Fail(start, "leading zeros in a decimal integer are not allowed");
          }
        }
      }
      *shape = Shape{Kind::kInt};
      return Integer(out, start, negative, 10, num);
    }
    pos_ = p;
    *shape = Shape{Kind::kFloat};
    if (!out) return true;
    std::string clean;
    clean.reserve(p - num);
    for (size_t i = num; i < p; ++i) {
      if (s_[i] != '_') clean.push_back(s_[i]);
    }
    double v = 0;
    const auto r = std::from_chars(clean.data(), clean.data() + clean.size(), v);
    if (r.ec == std::errc::result_out_of_range) {
      v = FloatOverflowed(clean) ? std::numeric_limits<double>::infinity() : 0.0;
    } else if (r.ec != std::errc() || r.ptr != clean.data() + clean.size()) {
      return Fail(start, "invalid float");
    }
    out->kind = Kind::kFloat;
    out->float_value = negative ? -v : v;
    return true;
  }

  // Whether an out-of-range decimal float is too large (else too small).
  static bool FloatOverflowed(const std::string& t) {
    int64_t exp10 = 0;
    size_t i = 0;
    bool seen_nonzero = false, after_point = false;
    for (; i < t.size() && t[i] != 'e' && t[i] != 'E'; ++i) {
      if (t[i] == '.') {
        after_point = true;
      } else if (t[i] != '0' || seen_nonzero) {
        if (!seen_nonzero) seen_nonzero = true;
        if (!after_point) ++exp10;
      } else if (after_point) {
        --exp10;
      }
    }
    if (i < t.size()) {
      int64_t e = 0;
      std::from_chars(t.data() + i + 1 + (t[i + 1] == '+'), t.data() + t.size(), e);
      exp10 += e;
    }
    return exp10 > 0;
  }

  // Integer digits of `radix` from `from` (a radix prefix already skipped).
  bool Integer(PyValue* out, size_t start, bool negative, int radix, size_t from) {
    size_t p = from;
    uint64_t v = 0;
    bool overflow = false, any = false;
    char prev = radix == 10 ? '\0' : 'x';  // after 0x a '_' may come first
    for (; p < s_.size(); ++p) {
      const char c = s_[p];
      if (c == '_') {
        if (prev == '_' || prev == '\0') return Fail(start, "invalid number: misplaced '_'");
        prev = c;
        continue;
      }
      const int d = DigitValue(c, radix);
      if (d < 0) break;
      any = true;
      prev = c;
      if (v > (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(d)) /
                  static_cast<uint64_t>(radix)) {
        overflow = true;
      } else {
        v = v * static_cast<uint64_t>(radix) + static_cast<uint64_t>(d);
      }
    }
    if (!any || prev == '_') return Fail(start, "invalid number: missing or misplaced digits");
    if (p < s_.size() && (IsIdentChar(s_[p]) || s_[p] == '.')) {
      return Fail(start, absl::StrCat("invalid number (unexpected ", Printable(s_[p]), ")"));
    }
    pos_ = p;
    if (!out) return true;
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    if (overflow || v > limit) return Fail(start, "integer out of the int64 range");
    out->kind = Kind::kInt;
    out->int_value = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
    return true;
  }

  absl::string_view s_;
  size_t pos_ = 0;
  Status status_;
};

}  // namespace

const PyValue* PyValue::Find(absl::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first.kind == Kind::kString && it->first.str == key) return &it->second;
  }
  return nullptr;
}

const char* PyKindName(PyValue::Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kBytes:
      return "bytes";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kSet:
      return "set";
    case Kind::kDict:
      return "dict";
  }
  return "?";
}

StatusOr<PyValue> ParsePyLiteral(absl::string_view text) {
  Parser p(text);
  PyValue v;
  if (!p.Whole(&v)) return p.status();
  return v;
}

StatusOr<PyValue> ParsePyDictFields(absl::string_view text, absl::Span<const std::string> keys) {
  Parser p(text);
  PyValue v;
  if (!p.DictFields(keys, &v)) return p.status();
  return v;
}

}  // namespace sift::data
