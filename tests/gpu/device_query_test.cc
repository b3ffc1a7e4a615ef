// The CUDA target's device query. Skips itself where no GPU is visible (CI, the dev machines);
// on the GPU machine it checks that the device is one our build has native code for.
#include "kernels/cuda/device_query.h"

#include "gtest/gtest.h"

namespace sift::cuda {
namespace {

TEST(DeviceQuery, ListsUsableDevices) {
  auto devices = QueryDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty()) GTEST_SKIP() << "no CUDA device visible";
  for (const DeviceInfo& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.sm_major, 8) << d.name << ": built for sm_80/sm_90 only";
    EXPECT_GT(d.multiprocessors, 0);
    EXPECT_GT(d.total_memory_bytes, size_t{1} << 30);
  }
}

TEST(DeviceQuery, RuntimeVersionIsReported) { EXPECT_FALSE(RuntimeVersion().empty()); }

}  // namespace
}  // namespace sift::cuda
