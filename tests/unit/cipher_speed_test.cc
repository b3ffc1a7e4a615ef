// MeasureAesGcmBytesPerSecond: both key sizes measure a positive rate; every bad argument is an
// INVALID_ARGUMENT naming what it got. The rate itself is not asserted (a measurement).
#include "common/cipher_speed.h"

#include <cstddef>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(CipherSpeedTest, BothKeySizesMeasureAPositiveRate) {
  for (const int bits : {128, 256}) {
    const StatusOr<double> rate = MeasureAesGcmBytesPerSecond(bits, 16384, 0.01);
    ASSERT_TRUE(rate.ok()) << rate.status();
    EXPECT_GT(*rate, 0) << bits;
  }
  const StatusOr<double> odd = MeasureAesGcmBytesPerSecond(128, 1, 0.001);  // any record size
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_GT(*odd, 0);
}

TEST(CipherSpeedTest, BadArgumentsAreInvalid) {
  for (const auto& [bits, bytes, seconds] :
       {std::tuple{192, size_t{16384}, 0.01}, std::tuple{128, size_t{0}, 0.01},
        std::tuple{128, size_t{16384}, 0.0}, std::tuple{256, size_t{16384}, -1.0}}) {
    const StatusOr<double> rate = MeasureAesGcmBytesPerSecond(bits, bytes, seconds);
    EXPECT_EQ(rate.status().code(), absl::StatusCode::kInvalidArgument) << bits;
    EXPECT_THAT(rate.status().message(), ::testing::HasSubstr("(got "));
  }
}

}  // namespace
}  // namespace sift
