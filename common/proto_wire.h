// Protobuf wire-format writing helpers for the hand-encoded hot paths of the embedding server and
// its client (Pull replies and Pull/Push requests written straight into gRPC buffers). They write
// exactly what protobuf writes for proto3 fields: fields in number order, defaults (0, empty)
// omitted. Field numbers must be < 16, so a tag is one byte. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sift::wire {

// Wire types.
inline constexpr uint8_t kVarint = 0;
inline constexpr uint8_t kFixed64 = 1;
inline constexpr uint8_t kLengthDelimited = 2;
inline constexpr uint8_t kFixed32 = 5;
// The one-byte tag of field `number` (< 16) with `wire_type`.
constexpr uint8_t Tag(uint32_t number, uint8_t wire_type) {
  return static_cast<uint8_t>((number << 3) | wire_type);
}

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
inline char* PutVarint(char* p, uint64_t v) {
  for (; v >= 0x80; v >>= 7) *p++ = static_cast<char>(v | 0x80);
  *p++ = static_cast<char>(v);
  return p;
}
// A varint field (one-byte tag) as protobuf writes it: omitted when 0 (proto3).
inline size_t VarintFieldSize(uint64_t v) { return v == 0 ? 0 : 1 + VarintSize(v); }
inline char* PutVarintField(char* p, uint8_t tag, uint64_t v) {
  if (v == 0) return p;
  *p++ = static_cast<char>(tag);
  return PutVarint(p, v);
}
// A length-delimited field of `len` bytes (omitted when empty unless `always`).
inline size_t LenFieldSize(size_t len, bool always = false) {
  return len == 0 && !always ? 0 : 1 + VarintSize(len) + len;
}
inline char* PutLenHeader(char* p, uint8_t tag, size_t len) {
  *p++ = static_cast<char>(tag);
  return PutVarint(p, len);
}

}  // namespace sift::wire
