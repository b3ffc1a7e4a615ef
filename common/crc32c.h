// CRC-32C (Castagnoli), the checksum of TFRecord framing and of sift's own file formats.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time), else a
// slicing-by-8 table. Thread-safe; no state besides constant tables.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sift {

// Extends `crc` (the CRC of the bytes before, 0 for none) with `n` bytes at `data`.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// TFRecord's masked CRC: rotate right by 15 bits, then add 0xa282ead8.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace sift
