#include "common/wire_float.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace sift {

// The wire is little-endian; values are copied with memcpy, so the host must be too.
static_assert(std::endian::native == std::endian::little,
              "sift's wire encoding assumes little-endian");

namespace {

// Branch-free selection. Plain `c ? a : b` lets GCC turn the choice into a branch and sink the
// float arithmetic of one case into it, which stops if-conversion and so vectorisation.
inline uint32_t MaskIf(bool c) { return 0u - static_cast<uint32_t>(c); }
inline uint32_t Select(uint32_t mask, uint32_t a, uint32_t b) { return (a & mask) | (b & ~mask); }

// Binary16 from binary32 bits, round-to-nearest-even, after F. Giesen's float_to_half_fast3_rtne.
// Every case is computed and one is selected.
inline uint16_t HalfFromFloatBits(uint32_t u) {
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;  // |f|
  // Normal halves (|f| >= 2^-14): rebias the exponent 127 -> 15 and round the 13 dropped mantissa
  // bits to nearest even; a carry out of the mantissa bumps the exponent, up to inf at 65520.
  const uint32_t odd = (a >> 13) & 1u;
  const uint32_t normal = (a - (112u << 23) + 0xfffu + odd) >> 13;
  // Subnormal halves (|f| < 2^-14): adding 0.5f puts units of 2^-24 in the low mantissa bits and
  // the FPU's round-to-nearest-even does the rounding (the sum is a normal float: no FTZ issue).
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + std::bit_cast<float>(126u << 23)) -
      (126u << 23);
  // |f| >= 65536 (exponent overflow) or inf: inf; NaN: the quiet NaN 0x7e00.
  const uint32_t special = Select(MaskIf(a > 0x7f800000u), 0x7e00u, 0x7c00u);
  uint32_t h = Select(MaskIf(a < (113u << 23)), subnormal, normal);
  h = Select(MaskIf(a >= (143u << 23)), special, h);
  return static_cast<uint16_t>(h | sign);
}

// Binary32 bits from binary16; exact (every half is a float). NaN payloads are kept.
inline uint32_t FloatBitsFromHalf(uint32_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  const uint32_t o = (h & 0x7fffu) << 13;  // exponent and mantissa in float position
  const uint32_t exp = o & shifted_exp;
  const uint32_t normal = o + (112u << 23);        // rebias 15 -> 127
  const uint32_t special = normal + (112u << 23);  // inf / NaN: exponent 255
  // Zero / subnormal: give the bits exponent 2^-14 and subtract 2^-14 (exact; all normal floats).
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(normal + (1u << 23)) -
                                                     std::bit_cast<float>(113u << 23));
  uint32_t bits = Select(MaskIf(exp == 0), subnormal, normal);
  bits = Select(MaskIf(exp == shifted_exp), special, bits);
  return bits | ((h & 0x8000u) << 16);
}

// Bfloat16 from binary32 bits: round-to-nearest-even on the upper half; NaN stays a quiet NaN.
inline uint16_t Bfloat16FromFloatBits(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(Select(MaskIf((u & 0x7fffffffu) > 0x7f800000u), nan, rounded));
}

inline uint32_t FloatBitsFromBfloat16(uint32_t b) { return b << 16; }

// Array loops run over fixed-size chunks through local buffers: a known trip count and no
// aliasing between `in` and `out` let GCC vectorise them even at -O2 (its "very cheap" cost
// model refuses loops that need an epilogue or alias checks). Measured on 1M floats at -O2:
// fp16 encode ~0.85 ms, decode ~0.5 ms, vs 2.2 / 1.8 ms for the plain scalar loop.
constexpr size_t kChunk = 16;

template <uint16_t (*kConvert)(uint32_t)>
void EncodeNarrow(const float* in, size_t n, char* out) {
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    uint16_t narrow[kChunk];
    for (size_t j = 0; j < kChunk; ++j) narrow[j] = kConvert(std::bit_cast<uint32_t>(in[i + j]));
    std::memcpy(out + 2 * i, narrow, sizeof(narrow));
  }
  for (; i < n; ++i) {
    const uint16_t v = kConvert(std::bit_cast<uint32_t>(in[i]));
    std::memcpy(out + 2 * i, &v, 2);
  }
}

template <uint32_t (*kConvert)(uint32_t)>
void DecodeNarrow(const char* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    uint16_t narrow[kChunk];
    std::memcpy(narrow, in + 2 * i, sizeof(narrow));
    float wide[kChunk];
    for (size_t j = 0; j < kChunk; ++j) wide[j] = std::bit_cast<float>(kConvert(narrow[j]));
    std::memcpy(out + i, wide, sizeof(wide));
  }
  for (; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, in + 2 * i, 2);
    out[i] = std::bit_cast<float>(kConvert(v));
  }
}

}  // namespace

int WireFloatBytes(WireFloat encoding) { return encoding == WireFloat::kFp32 ? 4 : 2; }

absl::string_view WireFloatName(WireFloat encoding) {
  switch (encoding) {
    case WireFloat::kFp32:
      return "fp32";
    case WireFloat::kFp16:
      return "fp16";
    case WireFloat::kBf16:
      return "bf16";
  }
  return "unknown";
}

StatusOr<WireFloat> ParseWireFloat(absl::string_view name) {
  for (WireFloat e : {WireFloat::kFp32, WireFloat::kFp16, WireFloat::kBf16}) {
    if (name == WireFloatName(e)) return e;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown float encoding '", name, "' (accepted: fp32, fp16, bf16)"));
}

StatusOr<WireFloat> WireFloatFromInt(int value) {
  if (value < 0 || value > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown float encoding ", value, " (accepted: 0 fp32, 1 fp16, 2 bf16)"));
  }
  return static_cast<WireFloat>(value);
}

uint16_t FloatToHalf(float f) { return HalfFromFloatBits(std::bit_cast<uint32_t>(f)); }
float HalfToFloat(uint16_t h) { return std::bit_cast<float>(FloatBitsFromHalf(h)); }
uint16_t FloatToBfloat16(float f) { return Bfloat16FromFloatBits(std::bit_cast<uint32_t>(f)); }
float Bfloat16ToFloat(uint16_t b) { return std::bit_cast<float>(FloatBitsFromBfloat16(b)); }

void EncodeFloatsTo(WireFloat encoding, absl::Span<const float> in, char* out) {
  switch (encoding) {
    case WireFloat::kFp32:
      if (!in.empty()) std::memcpy(out, in.data(), in.size() * sizeof(float));
      return;
    case WireFloat::kFp16:
      EncodeNarrow<HalfFromFloatBits>(in.data(), in.size(), out);
      return;
    case WireFloat::kBf16:
      EncodeNarrow<Bfloat16FromFloatBits>(in.data(), in.size(), out);
      return;
  }
}

void EncodeFloats(WireFloat encoding, absl::Span<const float> in, std::string* out) {
  out->resize(in.size() * static_cast<size_t>(WireFloatBytes(encoding)));
  EncodeFloatsTo(encoding, in, out->data());
}

Status DecodeFloats(WireFloat encoding, absl::string_view bytes, absl::Span<float> out,
                    absl::string_view what) {
  const size_t width = static_cast<size_t>(WireFloatBytes(encoding));
  if (bytes.size() != out.size() * width) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", bytes.size(), " bytes is not ", out.size(), " values x ", width, " bytes (",
        WireFloatName(encoding), "); expected ", out.size() * width, " bytes"));
  }
  switch (encoding) {
    case WireFloat::kFp32:
      if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
      break;
    case WireFloat::kFp16:
      DecodeNarrow<FloatBitsFromHalf>(bytes.data(), out.size(), out.data());
      break;
    case WireFloat::kBf16:
      DecodeNarrow<FloatBitsFromBfloat16>(bytes.data(), out.size(), out.data());
      break;
  }
  return absl::OkStatus();
}

}  // namespace sift
