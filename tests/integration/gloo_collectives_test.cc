// Gloo collectives between threads of one process on loopback: each rank has its own Gloo device
// and context; rendezvous through a FileKvStore in a temp directory.
#include "worker/gloo_collectives.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::worker {
namespace {

using RankFn = std::function<void(int rank, Collectives& c)>;

GlooOptions TestOptions(double timeout_s = 20) {
  GlooOptions o;
  o.hostname = "127.0.0.1";
  o.timeout_s = timeout_s;
  return o;
}

// Runs `fn` on `world` threads, each with its own collectives joined under `prefix`.
void RunWorld(KvStore* store, const std::string& prefix, int world, const RankFn& fn,
              const GlooOptions& options = TestOptions()) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto c = CreateGlooCollectives(store, prefix, r, world, options);
      ASSERT_TRUE(c.ok()) << "rank " << r << ": " << c.status();
      ASSERT_EQ((*c)->rank(), r);
      ASSERT_EQ((*c)->world_size(), world);
      fn(r, **c);
    });
  }
  for (auto& t : threads) t.join();
}

std::unique_ptr<FileKvStore> OpenStore(const testing::TempDir& tmp) {
  auto s = FileKvStore::Open(tmp.Sub("kv"));
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

// Small integers (exact in float, so the sum does not depend on the order).
float SmallInt(int rank, size_t i) {
  return static_cast<float>((rank + 1) * (static_cast<int>(i % 1001) - 500));
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class GlooWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorldTest, AllreduceSumIsExactAndIdenticalOnEveryRank) {
  const int world = GetParam();
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  const std::vector<size_t> sizes = {0, 1, 1000003, 7};
  // results[size index][rank]
  std::vector<std::vector<std::vector<float>>> results(sizes.size(),
                                                       std::vector<std::vector<float>>(world));
  RunWorld(store.get(), "sum", world, [&](int rank, Collectives& c) {
    // Several successive collectives on one context.
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<float> data(sizes[s]);
      for (size_t i = 0; i < data.size(); ++i) data[i] = SmallInt(rank, i);
      Status st = c.AllreduceSum(absl::MakeSpan(data));
      ASSERT_TRUE(st.ok()) << st;
      results[s][rank] = std::move(data);
    }
  });
  const int multiplier = world * (world + 1) / 2;  // sum of (rank + 1)
  for (size_t s = 0; s < sizes.size(); ++s) {
    const std::vector<float>& r0 = results[s][0];
    ASSERT_EQ(r0.size(), sizes[s]);
    for (size_t i = 0; i < r0.size(); ++i) {
      ASSERT_EQ(r0[i], static_cast<float>(multiplier * (static_cast<int>(i % 1001) - 500)))
          << "size " << sizes[s] << " element " << i;
    }
    for (int r = 1; r < world; ++r) EXPECT_TRUE(SameBits(results[s][r], r0)) << "rank " << r;
  }
}

TEST_P(GlooWorldTest, AllreduceSumOfInexactFloatsIsBitIdenticalAcrossRanksAndRuns) {
  const int world = GetParam();
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  constexpr size_t kN = 100003;
  auto inputs = [&](int rank) {
    Rng rng(1234 + rank);
    std::vector<float> v(kN);
    for (float& x : v) x = static_cast<float>(rng.Uniform() * 2 - 1) * 1e3f;
    return v;
  };
  std::vector<std::vector<float>> runs[2];
  for (int run = 0; run < 2; ++run) {
    runs[run].resize(world);
    // A fresh rendezvous (new contexts, new prefix) per run.
    RunWorld(store.get(), absl::StrCat("run", run), world, [&](int rank, Collectives& c) {
      std::vector<float> data = inputs(rank);
      Status st = c.AllreduceSum(absl::MakeSpan(data));
      ASSERT_TRUE(st.ok()) << st;
      runs[run][rank] = std::move(data);
    });
  }
  // Close to the exact sum (double accumulation), identical bits everywhere.
  std::vector<std::vector<float>> in(world);
  for (int r = 0; r < world; ++r) in[r] = inputs(r);
  for (size_t i = 0; i < kN; ++i) {
    double exact = 0;
    for (int r = 0; r < world; ++r) exact += in[r][i];
    ASSERT_NEAR(runs[0][0][i], exact, 1e-3) << i;
  }
  for (int run = 0; run < 2; ++run) {
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(SameBits(runs[run][r], runs[0][0])) << "run " << run << " rank " << r;
    }
  }
}

TEST_P(GlooWorldTest, AllreduceAverageDividesTheSumByTheWorldSize) {
  const int world = GetParam();
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  RunWorld(store.get(), "avg", world, [&](int rank, Collectives& c) {
    std::vector<float> data = {static_cast<float>(rank), 1.0f, static_cast<float>(3 * rank + 1)};
    Status st = c.AllreduceAverage(absl::MakeSpan(data));
    ASSERT_TRUE(st.ok()) << st;
    const float w = static_cast<float>(world);
    const float sum_rank = static_cast<float>(world * (world - 1) / 2);
    EXPECT_EQ(data[0], sum_rank / w);
    EXPECT_EQ(data[1], 1.0f);
    EXPECT_EQ(data[2], (3 * sum_rank + w) / w);
  });
}

TEST_P(GlooWorldTest, BroadcastFromEveryRoot) {
  const int world = GetParam();
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  RunWorld(store.get(), "bcast", world, [&](int rank, Collectives& c) {
    for (int root = 0; root < world; ++root) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{100003}}) {
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(rank * 1000003 + i) * 0.5f;
        Status st = c.Broadcast(absl::MakeSpan(data), root);
        ASSERT_TRUE(st.ok()) << st;
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(data[i], static_cast<float>(root * 1000003 + i) * 0.5f)
              << "root " << root << " rank " << rank << " element " << i;
        }
      }
    }
  });
}

TEST_P(GlooWorldTest, BarrierWaitsForEveryRank) {
  const int world = GetParam();
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  std::atomic<int> arrived[3] = {0, 0, 0};
  RunWorld(store.get(), "barrier", world, [&](int /*rank*/, Collectives& c) {
    for (int round = 0; round < 3; ++round) {
      ++arrived[round];
      Status st = c.Barrier();
      ASSERT_TRUE(st.ok()) << st;
      // Nobody leaves a barrier before everybody has entered it.
      EXPECT_EQ(arrived[round].load(), world) << "round " << round;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooWorldTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return absl::StrCat("world", param.param);
                         });

TEST(GlooCollectivesTest, MixedCollectivesInSequenceOnOneContext) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  RunWorld(store.get(), "mixed", 3, [&](int rank, Collectives& c) {
    std::vector<float> params = {static_cast<float>(rank), 2.0f};
    ASSERT_TRUE(c.Broadcast(absl::MakeSpan(params), 2).ok());
    EXPECT_EQ(params, (std::vector<float>{2.0f, 2.0f}));
    ASSERT_TRUE(c.AllreduceSum(absl::MakeSpan(params)).ok());
    EXPECT_EQ(params, (std::vector<float>{6.0f, 6.0f}));
    ASSERT_TRUE(c.Barrier().ok());
    std::vector<float> grad = {static_cast<float>(rank + 1)};
    ASSERT_TRUE(c.AllreduceAverage(absl::MakeSpan(grad)).ok());
    EXPECT_EQ(grad[0], 2.0f);
  });
}

TEST(GlooCollectivesTest, BadArgumentsAreInvalidArgument) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  const GlooOptions o = TestOptions();
  EXPECT_EQ(CreateGlooCollectives(store.get(), "p", 2, 2, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCollectives(store.get(), "p", -1, 2, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCollectives(store.get(), "p", 0, 0, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCollectives(nullptr, "p", 0, 2, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  GlooOptions bad_timeout = o;
  bad_timeout.timeout_s = 0;
  EXPECT_EQ(CreateGlooCollectives(store.get(), "p", 0, 2, bad_timeout).status().code(),
            absl::StatusCode::kInvalidArgument);

  // World 1 needs no store and no peers; roots other than 0 are rejected.
  auto local = CreateGlooCollectives(nullptr, "", 0, 1, o);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<float> v = {1.5f};
  EXPECT_EQ((*local)->Broadcast(absl::MakeSpan(v), 1).code(), absl::StatusCode::kInvalidArgument);

  RunWorld(store.get(), "args", 2, [&](int rank, Collectives& c) {
    std::vector<float> data(rank == 0 ? 3 : 4, 1.0f);
    Status st = c.AllreduceSum(absl::MakeSpan(data));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("differ"), absl::string_view::npos) << st;
    st = c.Broadcast(absl::MakeSpan(data), 0);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(c.Broadcast(absl::MakeSpan(data), 2).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(c.Broadcast(absl::MakeSpan(data), -1).code(), absl::StatusCode::kInvalidArgument);
    // The context is still usable after argument errors.
    std::vector<float> same = {static_cast<float>(rank)};
    st = c.AllreduceSum(absl::MakeSpan(same));
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(same[0], 1.0f);
  });
}

TEST(GlooCollectivesTest, RendezvousWithAMissingPeerFailsWithinTheTimeout) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  // Rank 1 of 2 never joins.
  auto c = CreateGlooCollectives(store.get(), "lonely", 0, 2, TestOptions(0.5));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_NE(c.status().message().find("rank 0 of 2"), absl::string_view::npos) << c.status();
}

// A rank whose context is destroyed (its process exited) makes the others' next collective fail
// with an error Status (no hang, no crash); later calls on the dead context fail at once.
void PeerExitTest(int world, int leaver, bool check_sizes) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp);
  std::latch left(1);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      // The leaver always releases the others, even when one of its assertions fails first.
      struct Release {
        std::latch* latch;
        ~Release() {
          if (latch != nullptr) latch->count_down();
        }
      } release{r == leaver ? &left : nullptr};
      GlooOptions options = TestOptions(2);
      options.check_sizes = check_sizes;
      auto c = CreateGlooCollectives(store.get(), "exit", r, world, options);
      ASSERT_TRUE(c.ok()) << c.status();
      std::vector<float> data(1000, 1.0f);
      Status st = (*c)->AllreduceSum(absl::MakeSpan(data));
      ASSERT_TRUE(st.ok()) << st;
      if (r == leaver) {
        c->reset();  // closes its connections, as an exiting process does
        return;
      }
      left.wait();
      st = (*c)->AllreduceSum(absl::MakeSpan(data));
      ASSERT_FALSE(st.ok()) << "rank " << r << " allreduce succeeded without rank " << leaver;
      EXPECT_TRUE(st.code() == absl::StatusCode::kUnavailable ||
                  st.code() == absl::StatusCode::kDeadlineExceeded)
          << st;
      EXPECT_NE(st.message().find(absl::StrCat("allreduce (rank ", r, " of ", world)),
                absl::string_view::npos)
          << st;
      Status again = (*c)->Barrier();
      EXPECT_FALSE(again.ok());
      EXPECT_NE(again.message().find("must be recreated"), absl::string_view::npos) << again;
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCollectivesTest, PeerExitFailsTheOthersInWorldOf2) { PeerExitTest(2, 1, true); }
TEST(GlooCollectivesTest, PeerExitFailsTheOthersInWorldOf3) { PeerExitTest(3, 1, true); }
// Without the size check the failure surfaces from the data allreduce itself.
TEST(GlooCollectivesTest, PeerExitFailsTheOthersWithoutSizeCheck) { PeerExitTest(3, 0, false); }

}  // namespace
}  // namespace sift::worker
