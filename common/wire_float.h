// Float encodings of embedding rows and gradients on the wire (proto/embedding.proto RowEncoding):
// fp32 (exact), IEEE binary16 and bfloat16 (round-to-nearest-even), little-endian packed bytes.
//
// Pure functions, no state: thread-safe. Conversions: overflow to fp16 gives +-inf, NaN stays a
// (quiet) NaN, subnormals are rounded correctly; widening back to float is exact. The array loops
// are branch-free per element so the compiler can vectorise them (they run on 1M floats per RPC).
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status.h"

namespace sift {

// Same numeric values as the proto enum RowEncoding (ROW_ENCODING_FP32 = 0, ...).
enum class WireFloat { kFp32 = 0, kFp16 = 1, kBf16 = 2 };

// Bytes per value: 4, 2, 2. REQUIRES (here and below): `encoding` is one of the three values.
int WireFloatBytes(WireFloat encoding);
// "fp32", "fp16", "bf16".
absl::string_view WireFloatName(WireFloat encoding);
// Inverse of WireFloatName; anything else is INVALID_ARGUMENT naming the accepted values.
StatusOr<WireFloat> ParseWireFloat(absl::string_view name);
// From the proto's RowEncoding number; an unknown value is INVALID_ARGUMENT.
StatusOr<WireFloat> WireFloatFromInt(int value);

// Scalar conversions (bit patterns of the 16-bit formats).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBfloat16(float f);
float Bfloat16ToFloat(uint16_t b);

// Writes in.size() values to `out`, which must hold in.size() * WireFloatBytes(encoding) bytes.
// REQUIRES: `out` does not overlap `in`.
void EncodeFloatsTo(WireFloat encoding, absl::Span<const float> in, char* out);
// Resizes *out to in.size() * WireFloatBytes(encoding) and encodes `in` into it.
void EncodeFloats(WireFloat encoding, absl::Span<const float> in, std::string* out);

// Decodes `bytes` into `out`. INVALID_ARGUMENT naming `what` (e.g. "table 3 rows") when
// bytes.size() != out.size() * WireFloatBytes(encoding); `out` is untouched then.
Status DecodeFloats(WireFloat encoding, absl::string_view bytes, absl::Span<float> out,
                    absl::string_view what);

}  // namespace sift
