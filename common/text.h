// Text that crosses a trust boundary: UTF-8 validation and bounded, always-valid copies of
// untrusted bytes for messages (protobuf `string` fields must hold valid UTF-8, or the RPC that
// carries them fails with an empty INTERNAL error). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace sift {

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool IsValidUtf8(absl::string_view s);

// The byte offset of the first ill-formed sequence or control character (< 0x20 other than
// '\t', or 0x7f) in `s`, or npos. For names that are printed one per line.
size_t FindUnprintable(absl::string_view s);

// `s` as valid UTF-8 of at most `max_bytes` bytes: each ill-formed byte becomes U+FFFD, NUL
// becomes U+FFFD, and a text that does not fit is cut at a character boundary and ends in
// "... (N bytes cut)". `max_bytes` >= 64.
std::string SanitizeUtf8(absl::string_view s, size_t max_bytes);

}  // namespace sift
