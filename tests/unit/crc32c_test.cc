#include "common/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(Crc32c, KnownVectors) {
  // RFC 3720 / iSCSI check values.
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 7 + 3));
  for (size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u, 1000u}) {
    uint32_t a = Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut, s.size() - cut);
    EXPECT_EQ(a, Crc32c(s.data(), s.size())) << "cut " << cut;
  }
}

TEST(Crc32c, MaskRoundTrip) {
  for (uint32_t v : {0u, 1u, 0xe3069283u, 0xffffffffu}) EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(v)), v);
  // TFRecord framing of an empty length field is a known constant.
  EXPECT_NE(MaskCrc32c(0xe3069283u), 0xe3069283u);
}

}  // namespace
}  // namespace sift
