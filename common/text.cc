#include "common/text.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace sift {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at s[i], or 0 when it is ill-formed
// (Unicode 15, table 3-7).
size_t SequenceLength(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t FindUnprintable(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (n == 0 || (n == 1 && ((c < 0x20 && c != '\t') || c == 0x7f))) return i;
    i += n;
  }
  return absl::string_view::npos;
}

std::string SanitizeUtf8(absl::string_view s, size_t max_bytes) {
  max_bytes = std::max<size_t>(max_bytes, 64);
  // Room for the longest possible tail, so the result never exceeds max_bytes.
  const size_t budget = max_bytes - 40;
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = SequenceLength(s, i);
    const bool bad = n == 0 || s[i] == '\0';
    const size_t add = bad ? 3 : n;
    if (out.size() + add > budget && s.size() - i > 0) {
      // Does the rest fit whole (the common case of a short text)? Only when it is all clean.
      if (out.size() + (s.size() - i) <= max_bytes && IsValidUtf8(s.substr(i)) &&
          s.substr(i).find('\0') == absl::string_view::npos) {
        out.append(s.data() + i, s.size() - i);
        return out;
      }
      absl::StrAppend(&out, "... (", s.size() - i, " bytes cut)");
      return out;
    }
    if (bad) {
      out += kReplacement;
      i += 1;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace sift
