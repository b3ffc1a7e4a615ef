#include "common/shard_index.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

TEST(ShardIndex, NumberIsTaken) {
  EXPECT_EQ(*ResolveShardIndex("0", "anything", 1), 0u);
  EXPECT_EQ(*ResolveShardIndex("3", "", 4), 3u);
}

TEST(ShardIndex, OrdinalIsTheHostNamesTrailingNumber) {
  EXPECT_EQ(*ResolveShardIndex("ordinal", "sift-ps-0", 2), 0u);
  EXPECT_EQ(*ResolveShardIndex("ordinal", "sift-ps-11", 12), 11u);
  EXPECT_EQ(*ResolveShardIndex("ordinal", "a-b-c-7", 8), 7u);
  // A fully qualified name (setHostnameAsFQDN, or a dashed namespace): the first label counts.
  EXPECT_EQ(*ResolveShardIndex("ordinal", "sift-ps-3.sift-ps.ml-team.svc.cluster.local", 4), 3u);
}

TEST(ShardIndex, OutOfRangeNamesTheLimit) {
  auto r = ResolveShardIndex("2", "h", 2);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("--num-shards is 2"));
  r = ResolveShardIndex("ordinal", "sift-ps-5", 4);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("ordinal of host 'sift-ps-5'"));
}

TEST(ShardIndex, BadValuesAreRejected) {
  for (const char* v : {"", "-1", "x", "1x", " 1", "ordinals", "99999999999"}) {
    auto r = ResolveShardIndex(v, "sift-ps-0", 4);
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_THAT(r.status().message(), HasSubstr("expected a shard index")) << v;
  }
  for (const char* host :
       {"", "sift-ps", "sift-ps-", "sift-ps-x", "node3", "ps-1a", "sift-ps.ns-1.svc"}) {
    auto r = ResolveShardIndex("ordinal", host, 4);
    ASSERT_FALSE(r.ok()) << host;
    EXPECT_THAT(r.status().message(), HasSubstr("does not end in -<number>")) << host;
  }
}

TEST(ShardIndex, LocalHostNameIsReadable) { EXPECT_FALSE(LocalHostName().empty()); }

}  // namespace
}  // namespace sift
