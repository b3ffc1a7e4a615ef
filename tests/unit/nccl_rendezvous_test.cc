// The paths of CreateNcclCollectives that fail before touching a GPU (argument checks, the id
// rendezvous through the store): they run in CI wherever the NCCL collectives are built
// (SIFT_HAVE_NCCL_COLLECTIVES), no device needed. The device paths are in
// tests/gpu/nccl_collectives_test.cc.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "worker/nccl_support.h"

#if SIFT_HAVE_NCCL_COLLECTIVES
#include "worker/nccl_collectives.h"
#endif

namespace sift::worker {
namespace {

using ::testing::HasSubstr;

#if SIFT_HAVE_NCCL_COLLECTIVES

class NcclRendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = FileKvStore::Open(dir_.Sub("kv"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  static NcclOptions Options(double timeout_s) {
    NcclOptions o;
    o.timeout_s = timeout_s;
    return o;
  }

  ::sift::testing::TempDir dir_;
  std::unique_ptr<FileKvStore> store_;
};

TEST_F(NcclRendezvousTest, RankWhoseIdNeverArrivesTimesOut) {
  // World 2, only rank 1: rank 0 never publishes the id.
  auto c = CreateNcclCollectives(store_.get(), "lonely/0", 1, 2, Options(0.2));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("nccl init (rank 1 of 2, prefix 'lonely/0'"));
}

TEST_F(NcclRendezvousTest, MalformedPublishedIdNamesTheKey) {
  ASSERT_TRUE(store_->Set("garbled/nccl_id", "not hex").ok());
  auto c = CreateNcclCollectives(store_.get(), "garbled", 1, 2, Options(5));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("garbled/nccl_id"));
  EXPECT_THAT(c.status().message(), HasSubstr("rank 1 of 2"));

  std::string text = EncodeNcclUniqueId(std::vector<uint8_t>(kNcclUniqueIdBytes, 0x5a));
  text[10] = 'z';
  ASSERT_TRUE(store_->Set("garbled2/nccl_id", text).ok());
  c = CreateNcclCollectives(store_.get(), "garbled2", 1, 3, Options(5));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("character 10"));
}

TEST_F(NcclRendezvousTest, BadArgumentsAreRejectedFirst) {
  struct Case {
    KvStore* store;
    std::string prefix;
    int rank, world;
    double timeout_s;
    int device;
    std::string expect;
  };
  const Case cases[] = {
      {store_.get(), "p", 2, 2, 1, 0, "rank 2 is outside [0, 2)"},
      {store_.get(), "p", 0, 0, 1, 0, "world size must be >= 1"},
      {store_.get(), "p", 0, 1, 0, 0, "timeout_s must be a positive number"},
      {store_.get(), "p", 0, 1, -1, 0, "timeout_s must be a positive number"},
      {store_.get(), "p", 0, 1, 1, -1, "device must be >= 0"},
      {store_.get(), "", 0, 1, 1, 0, "empty rendezvous prefix"},
      {nullptr, "p", 0, 1, 1, 0, "no rendezvous store"},
  };
  for (const Case& c : cases) {
    NcclOptions o = Options(c.timeout_s);
    o.device = c.device;
    auto r = CreateNcclCollectives(c.store, c.prefix, c.rank, c.world, o);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.expect));
  }
}

#else  // !SIFT_HAVE_NCCL_COLLECTIVES

TEST(NcclRendezvousTest, NotBuilt) { GTEST_SKIP() << "built without CUDA + NCCL"; }

#endif

}  // namespace
}  // namespace sift::worker
