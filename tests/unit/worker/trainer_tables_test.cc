// The trainer's table seam, in-process side (worker/trainer_tables.h): Fetch pulls (training) or
// looks up (evaluation, creating nothing) every table in order and reports each table's arrival;
// Push is the store's own optimizer step; the checkpoint hooks leave the rows to the checkpoint;
// a batch of another table count is an error; this build says whether it has remote tables.
#include "worker/trainer_tables.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/trainer_tables_fixture.h"

namespace sift::worker {
namespace {

using sift::testing::KeysOf;
using sift::testing::kTablesDim;
using sift::testing::TwoTables;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 11;

std::unique_ptr<TrainerTables> InProcess() {
  auto t = CreateInProcessTables(TwoTables(), embedding::StoreOptions{kSeed, 8, 1});
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<float> StoreRows(const embedding::EmbeddingStore& store, uint32_t table,
                             const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * kTablesDim);
  EXPECT_TRUE(store.Lookup(table, keys, absl::MakeSpan(out)).ok());
  return out;
}

TEST(InProcessTablesTest, FetchFillsEveryTableInOrderAndOnlyTrainingCreatesRows) {
  std::unique_ptr<TrainerTables> tables = InProcess();
  ASSERT_NE(tables, nullptr);
  embedding::EmbeddingStore* store = tables->in_process();
  ASSERT_NE(store, nullptr);
  BatchKeys k = KeysOf({{3, 9}, {1, 4, 7}});
  std::vector<int> arrived;
  auto record = [&](int t) {
    arrived.push_back(t);
    return absl::OkStatus();
  };
  ASSERT_TRUE(tables->Fetch(/*train=*/false, &k, record).ok());
  EXPECT_THAT(arrived, ElementsAre(0, 1));
  EXPECT_EQ(store->Stats()[0].rows + store->Stats()[1].rows, 0);  // evaluation creates nothing
  EXPECT_EQ(k.tables[0].rows, StoreRows(*store, 0, {3, 9}));      // the initial values
  arrived.clear();
  ASSERT_TRUE(tables->Fetch(/*train=*/true, &k, record).ok());
  EXPECT_THAT(arrived, ElementsAre(0, 1));
  EXPECT_EQ(store->Stats()[0].rows, 2);
  EXPECT_EQ(store->Stats()[1].rows, 3);
  EXPECT_EQ(k.tables[1].rows, StoreRows(*store, 1, {1, 4, 7}));
}

TEST(InProcessTablesTest, PushIsTheStoresOptimizerStepAndAnArrivalErrorStopsTheFetch) {
  std::unique_ptr<TrainerTables> tables = InProcess();
  ASSERT_NE(tables, nullptr);
  auto direct =
      embedding::EmbeddingStore::Create(TwoTables(), embedding::StoreOptions{kSeed, 8, 1});
  ASSERT_TRUE(direct.ok());
  BatchKeys k = KeysOf({{3, 9}, {1, 4, 7}});
  // Pulled first, as a trainer does: a push names only rows it pulled.
  ASSERT_TRUE(tables->Fetch(/*train=*/true, &k, [](int) { return absl::OkStatus(); }).ok());
  for (uint32_t t = 0; t < 2; ++t) {
    std::vector<float> pulled(k.tables[t].keys.size() * kTablesDim);
    ASSERT_TRUE((*direct)->Pull(t, k.tables[t].keys, absl::MakeSpan(pulled)).ok());
  }
  // A scheduled step (multiplier 0.25) after a plain one: the store's own step at that rate.
  for (const auto& [step, multiplier] : {std::pair<int64_t, float>{5, 1.0f}, {6, 0.25f}}) {
    ASSERT_TRUE(tables->Push(k, step, multiplier).ok());
    for (uint32_t t = 0; t < 2; ++t) {
      ASSERT_TRUE((*direct)->Push(t, k.tables[t].keys, k.tables[t].grads, step, multiplier).ok());
      EXPECT_EQ(StoreRows(*tables->in_process(), t, k.tables[t].keys),
                StoreRows(**direct, t, k.tables[t].keys));
    }
  }
  EXPECT_EQ(tables->Push(k, 7, 1.5f).code(), absl::StatusCode::kInvalidArgument);
  int calls = 0;
  const Status s = tables->Fetch(true, &k, [&](int) {
    ++calls;
    return absl::InternalError("upload failed");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(calls, 1);  // the second table is not pulled after the first one's error
}

TEST(InProcessTablesTest, CheckpointHooksLeaveTheRowsToTheCheckpointFile) {
  std::unique_ptr<TrainerTables> tables = InProcess();
  ASSERT_NE(tables, nullptr);
  CheckpointState st;
  ASSERT_TRUE(tables->Snapshot("name", 3, nullptr, &st.remote).ok());
  EXPECT_EQ(st.remote.name, "");  // the checkpoint holds table files, not a snapshot
  EXPECT_TRUE(st.remote.files.empty());
  EXPECT_TRUE(tables->Restore("dir", st).ok());
  EXPECT_TRUE(tables->Join().ok());
}

TEST(InProcessTablesTest, ABatchOfAnotherTableCountIsAnError) {
  std::unique_ptr<TrainerTables> tables = InProcess();
  ASSERT_NE(tables, nullptr);
  BatchKeys k = KeysOf({{3}, {1}, {2}});
  const Status fetch = tables->Fetch(true, &k, [](int) { return absl::OkStatus(); });
  EXPECT_EQ(fetch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fetch.message(), HasSubstr("keys of 3 tables, the store holds 2"));
  EXPECT_EQ(tables->Push(k, 0, 1.0f).code(), absl::StatusCode::kInvalidArgument);
  std::vector<embedding::TableConfig> gap = TwoTables();
  gap[1].table_id = 4;
  const auto made = CreateInProcessTables(gap, embedding::StoreOptions{});
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(made.status().message(), HasSubstr("has id 4, expected 1"));
}

TEST(RemoteTablesTest, ThisBuildSaysWhetherItReachesEmbeddingServers) {
#ifdef SIFT_MINIMAL
  EXPECT_THAT(RemoteTablesSupported().message(), HasSubstr("SIFT_MINIMAL build"));
  RemoteTablesOptions o;
  o.servers = {"127.0.0.1:1"};
  EXPECT_EQ(ConnectRemoteTables(o, TwoTables()).status().code(),
            absl::StatusCode::kInvalidArgument);
#else
  EXPECT_TRUE(RemoteTablesSupported().ok());
  RemoteTablesOptions o;  // no collectives
  o.servers = {"127.0.0.1:1"};
  EXPECT_THAT(ConnectRemoteTables(o, TwoTables()).status().message(), HasSubstr("collectives"));
#endif
}

}  // namespace
}  // namespace sift::worker
