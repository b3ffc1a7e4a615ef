#include "common/wire_float.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

bool HalfIsNan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool Bf16IsNan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

// The value of a binary16 bit pattern from its definition (for finite and infinite values).
double HalfValueByDefinition(uint16_t h) {
  const int sign = (h & 0x8000u) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// Naive round-to-nearest-even of `x` to a format with `mant_bits` stored mantissa bits, minimum
// normal exponent `min_exp` and largest finite value `max_finite`, computed in double.
double RoundNaive(double x, int mant_bits, int min_exp, double max_finite) {
  if (x == 0 || std::isinf(x)) return x;
  const double ax = std::fabs(x);
  const int e = std::max(static_cast<int>(std::floor(std::log2(ax))), min_exp);
  const double ulp = std::ldexp(1.0, e - mant_bits);
  const double r = std::nearbyint(ax / ulp) * ulp;  // default rounding mode: to nearest even
  const double result = r > max_finite ? std::numeric_limits<double>::infinity() : r;
  return std::copysign(result, x);
}
double RoundHalfNaive(double x) { return RoundNaive(x, 10, -14, 65504.0); }
double RoundBf16Naive(double x) {
  return RoundNaive(x, 7, -126, std::ldexp(255.0, 127 - 7));  // (2 - 2^-7) * 2^127
}

float NextUp(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float NextDown(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

TEST(WireFloatTest, NamesWidthsAndParsing) {
  EXPECT_EQ(WireFloatBytes(WireFloat::kFp32), 4);
  EXPECT_EQ(WireFloatBytes(WireFloat::kFp16), 2);
  EXPECT_EQ(WireFloatBytes(WireFloat::kBf16), 2);
  for (WireFloat e : {WireFloat::kFp32, WireFloat::kFp16, WireFloat::kBf16}) {
    auto parsed = ParseWireFloat(WireFloatName(e));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, e);
    auto from_int = WireFloatFromInt(static_cast<int>(e));
    ASSERT_TRUE(from_int.ok()) << from_int.status();
    EXPECT_EQ(*from_int, e);
  }
  EXPECT_EQ(WireFloatName(WireFloat::kFp16), "fp16");
  auto bad = ParseWireFloat("float16");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("float16"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("fp32, fp16, bf16"));
  EXPECT_EQ(WireFloatFromInt(3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WireFloatFromInt(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireFloatTest, EveryHalfWidensExactlyAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    if (HalfIsNan(h)) {
      EXPECT_TRUE(std::isnan(f)) << "half 0x" << std::hex << i;
      const uint16_t back = FloatToHalf(f);
      EXPECT_TRUE(HalfIsNan(back)) << "half 0x" << std::hex << i;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << "sign of NaN 0x" << std::hex << i;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), HalfValueByDefinition(h)) << "half 0x" << std::hex << i;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << "half 0x" << std::hex << i;
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << i;
  }
}

TEST(WireFloatTest, EveryBfloat16WidensExactlyAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = Bfloat16ToFloat(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), i << 16) << "bf16 0x" << std::hex << i;
    const uint16_t back = FloatToBfloat16(f);
    if (Bf16IsNan(b)) {
      EXPECT_TRUE(Bf16IsNan(back)) << "bf16 0x" << std::hex << i;
      EXPECT_EQ(back & 0x8000u, b & 0x8000u);
      continue;
    }
    ASSERT_EQ(back, b) << "bf16 0x" << std::hex << i;
  }
}

// For every pair of adjacent finite halves: the exact midpoint (a tie, representable in float)
// and the floats just below and above it round as the naive double-precision reference says.
TEST(WireFloatTest, HalfRoundingMatchesNaiveReferenceAtEveryTie) {
  int ties_checked = 0;
  for (uint32_t i = 0; i < 0x7c00u; ++i) {  // positive finite halves; next is i + 1 (0x7c00 = inf)
    const double lo = HalfValueByDefinition(static_cast<uint16_t>(i));
    const double hi =
        i + 1 == 0x7c00u ? 65536.0 : HalfValueByDefinition(static_cast<uint16_t>(i + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2)
        << "midpoint not exact for 0x" << std::hex << i;
    for (float x : {mid, NextDown(mid), NextUp(mid)}) {
      for (float s : {x, -x}) {
        const double want = RoundHalfNaive(s);
        const double got = HalfToFloat(FloatToHalf(s));
        ASSERT_EQ(got, want) << "x=" << s << " (half pair 0x" << std::hex << i << ")";
      }
    }
    // The tie itself goes to the even neighbour.
    const uint16_t even = (i & 1u) ? static_cast<uint16_t>(i + 1) : static_cast<uint16_t>(i);
    ASSERT_EQ(FloatToHalf(mid), even) << "tie above 0x" << std::hex << i;
    ++ties_checked;
  }
  EXPECT_EQ(ties_checked, 0x7c00);
}

TEST(WireFloatTest, Bfloat16RoundingMatchesNaiveReferenceAtEveryTie) {
  for (uint32_t i = 0; i < 0x7f80u; ++i) {
    const float mid = std::bit_cast<float>((i << 16) | 0x8000u);  // halfway to the next bf16
    for (float x : {mid, NextDown(mid), NextUp(mid)}) {
      for (float s : {x, -x}) {
        const double want = RoundBf16Naive(s);
        const double got = Bfloat16ToFloat(FloatToBfloat16(s));
        ASSERT_EQ(got, want) << "x=" << s << " (bf16 pair 0x" << std::hex << i << ")";
      }
    }
    const uint16_t even = (i & 1u) ? static_cast<uint16_t>(i + 1) : static_cast<uint16_t>(i);
    ASSERT_EQ(FloatToBfloat16(mid), even) << "tie above 0x" << std::hex << i;
  }
}

TEST(WireFloatTest, RandomFloatsMatchNaiveReference) {
  Rng rng(20261129);
  for (int n = 0; n < 200000; ++n) {
    // Random bit patterns cover every exponent; scaled normals cover the half range densely.
    const float bits = std::bit_cast<float>(static_cast<uint32_t>(rng.Next()));
    const float scaled =
        static_cast<float>(rng.Normal() * std::ldexp(1.0, static_cast<int>(rng.Below(40)) - 26));
    for (float x : {bits, scaled}) {
      if (std::isnan(x)) continue;
      ASSERT_EQ(static_cast<double>(HalfToFloat(FloatToHalf(x))), RoundHalfNaive(x)) << "x=" << x;
      ASSERT_EQ(static_cast<double>(Bfloat16ToFloat(FloatToBfloat16(x))), RoundBf16Naive(x))
          << "x=" << x;
    }
  }
}

TEST(WireFloatTest, HalfOverflowUnderflowAndSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bffu);            // largest finite half
  EXPECT_EQ(FloatToHalf(NextDown(65520.0f)), 0x7bffu);  // just below the tie
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00u);            // tie to even: inf
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xfc00u);
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00u);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(FloatToHalf(inf), 0x7c00u);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00u);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400u);   // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001u);   // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000u);   // half of it: tie to even 0
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -25)), 0x8000u);  // negative zero
  EXPECT_EQ(FloatToHalf(NextUp(std::ldexp(1.0f, -25))), 0x0001u);
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002u);  // 1.5 units: tie to even 2
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000u);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00u);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000u);
  EXPECT_EQ(HalfToFloat(0x7c00u), inf);
  EXPECT_EQ(HalfToFloat(0x0001u), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7bffu), 65504.0f);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(HalfIsNan(FloatToHalf(qnan)));
  EXPECT_EQ(FloatToHalf(qnan) & 0x0200u, 0x0200u);  // quiet bit set
  EXPECT_EQ(FloatToHalf(-qnan) & 0x8000u, 0x8000u);
  // A NaN whose payload lives only in the low mantissa bits must not become inf.
  EXPECT_TRUE(HalfIsNan(FloatToHalf(std::bit_cast<float>(0x7f800001u))));
}

TEST(WireFloatTest, Bfloat16OverflowAndSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::max()), 0x7f80u);  // rounds up to inf
  EXPECT_EQ(FloatToBfloat16(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7fu);  // just below the tie
  EXPECT_EQ(FloatToBfloat16(inf), 0x7f80u);
  EXPECT_EQ(FloatToBfloat16(-inf), 0xff80u);
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80u);
  EXPECT_EQ(FloatToBfloat16(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::denorm_min()), 0x0000u);  // tie: even
  EXPECT_TRUE(Bf16IsNan(FloatToBfloat16(std::bit_cast<float>(0x7f800001u))));     // not inf
  EXPECT_TRUE(Bf16IsNan(FloatToBfloat16(std::bit_cast<float>(0xffffffffu))));
  EXPECT_TRUE(Bf16IsNan(FloatToBfloat16(std::numeric_limits<float>::quiet_NaN())));
}

std::vector<float> MixedValues(size_t n, uint64_t seed) {
  Rng rng(seed);
  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       65504.0f,
                                       65520.0f,
                                       -1e9f,
                                       std::ldexp(1.0f, -25),
                                       std::ldexp(3.0f, -25),
                                       std::numeric_limits<float>::infinity(),
                                       std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::denorm_min()};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = rng.Below(8) == 0 ? specials[rng.Below(specials.size())]
                             : static_cast<float>(rng.Normal() * 0.1);
  }
  return v;
}

// Arrays (sizes around the internal chunking) encode value by value like the scalar functions,
// little-endian, and decode back to the scalar round trip.
TEST(WireFloatTest, ArraysMatchScalarConversions) {
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 33u, 1000u}) {
    const std::vector<float> in = MixedValues(n, 7 + n);
    for (WireFloat e : {WireFloat::kFp32, WireFloat::kFp16, WireFloat::kBf16}) {
      SCOPED_TRACE(::testing::Message() << WireFloatName(e) << " n=" << n);
      std::string bytes(5, 'x');  // EncodeFloats must resize, not append
      EncodeFloats(e, in, &bytes);
      ASSERT_EQ(bytes.size(), n * WireFloatBytes(e));
      for (size_t i = 0; i < n; ++i) {
        const auto* p =
            reinterpret_cast<const unsigned char*>(bytes.data()) + i * WireFloatBytes(e);
        if (e == WireFloat::kFp32) {
          const uint32_t want = std::bit_cast<uint32_t>(in[i]);
          const uint32_t got =
              p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
          ASSERT_EQ(got, want) << i;
        } else {
          const uint16_t want = e == WireFloat::kFp16 ? FloatToHalf(in[i]) : FloatToBfloat16(in[i]);
          ASSERT_EQ(static_cast<uint16_t>(p[0] | (p[1] << 8)), want) << i;
        }
      }
      std::vector<float> out(n, 123.0f);
      ASSERT_TRUE(DecodeFloats(e, bytes, absl::MakeSpan(out), "rows").ok());
      for (size_t i = 0; i < n; ++i) {
        const float want = e == WireFloat::kFp32   ? in[i]
                           : e == WireFloat::kFp16 ? HalfToFloat(FloatToHalf(in[i]))
                                                   : Bfloat16ToFloat(FloatToBfloat16(in[i]));
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(out[i])) << i;
        } else {
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want)) << i;
        }
      }
      // EncodeFloatsTo writes exactly the same bytes into a caller-sized buffer.
      std::string direct(n * WireFloatBytes(e), '\0');
      EncodeFloatsTo(e, in, direct.data());
      EXPECT_EQ(direct, bytes);
    }
  }
}

TEST(WireFloatTest, DecodeRejectsWrongByteCountAndNamesWhat) {
  std::vector<float> out(4, 9.0f);
  for (WireFloat e : {WireFloat::kFp32, WireFloat::kFp16, WireFloat::kBf16}) {
    const size_t right = 4 * WireFloatBytes(e);
    for (size_t size : {size_t{0}, right - 1, right + 1, right * 2}) {
      const std::string bytes(size, '\x01');
      Status s = DecodeFloats(e, bytes, absl::MakeSpan(out), "table 3 rows");
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << size;
      EXPECT_THAT(std::string(s.message()), HasSubstr("table 3 rows"));
      EXPECT_THAT(std::string(s.message()), HasSubstr(std::to_string(size) + " bytes"));
      EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(WireFloatName(e))));
      for (float v : out) EXPECT_EQ(v, 9.0f);  // untouched
    }
  }
  // Empty in, empty out is fine.
  EXPECT_TRUE(DecodeFloats(WireFloat::kFp16, "", absl::Span<float>(), "rows").ok());
}

}  // namespace
}  // namespace sift
