// The trainer's table seam on real `sift embedding-server` processes (worker/remote_tables.cc):
// the remote tables give the in-process tables' rows, bit for bit, through pulls, lookups and
// pushes across two shards; a snapshot restores the rows it cut, a manifest that disagrees with
// the restored shards is DATA_LOSS, and a resumed run's clients join without wiping the tables.
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/embedding_servers.h"
#include "tests/util/test_util.h"
#include "tests/util/trainer_tables_fixture.h"
#include "worker/collectives.h"
#include "worker/trainer_tables.h"

namespace sift::worker {
namespace {

using sift::testing::KeysOf;
using sift::testing::TwoTables;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 11;

std::vector<std::vector<float>> Rows(TrainerTables* t, bool train, BatchKeys k) {
  EXPECT_TRUE(t->Fetch(train, &k, [](int) { return absl::OkStatus(); }).ok());
  std::vector<std::vector<float>> rows;
  for (const TableKeys& tk : k.tables) rows.push_back(tk.rows);
  return rows;
}

TEST(RemoteTablesTest, ServersGiveTheInProcessRowsAndSnapshotsRestoreThem) {
  sift::testing::TempDir dir;
  sift::testing::EmbeddingServers servers(dir, "s", 2, dir.Sub("snapshots"));
  std::unique_ptr<Collectives> one = CreateLocalCollectives();
  RemoteTablesOptions o;
  o.servers = servers.addresses();
  o.seed = kSeed;
  o.collectives = one.get();
  auto remote = ConnectRemoteTables(o, TwoTables());
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto local = CreateInProcessTables(TwoTables(), embedding::StoreOptions{kSeed, 8, 1});
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*remote)->in_process(), nullptr);

  // Keys on both shards of both tables.
  const BatchKeys k = KeysOf({{1, 2, 3, 1000, 77777}, {5, 6, 8, 13, 21, 34, 55}});
  EXPECT_EQ(Rows(remote->get(), false, k), Rows(local->get(), false, k));
  EXPECT_EQ(Rows(remote->get(), true, k), Rows(local->get(), true, k));
  std::vector<int> arrived;
  BatchKeys fetched = k;
  ASSERT_TRUE((*remote)
                  ->Fetch(true, &fetched,
                          [&](int t) {
                            arrived.push_back(t);
                            return absl::OkStatus();
                          })
                  .ok());
  EXPECT_EQ(arrived, (std::vector<int>{0, 1}));
  // The third push carries a schedule factor: on the wire (PushRequest.lr_multiplier) as in
  // process.
  const float multipliers[3] = {1.0f, 1.0f, 0.375f};
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE((*remote)->Push(k, step, multipliers[step]).ok());
    ASSERT_TRUE((*local)->Push(k, step, multipliers[step]).ok());
  }
  const std::vector<std::vector<float>> after = Rows(local->get(), false, k);
  EXPECT_EQ(Rows(remote->get(), false, k), after);

  CheckpointState st;
  st.global_step = 3;
  ASSERT_TRUE((*remote)->Snapshot("seam-test-step-3", 3, nullptr, &st.remote).ok());
  EXPECT_EQ(st.remote.name, "seam-test-step-3");
  ASSERT_EQ(st.remote.num_shards, 2u);
  ASSERT_EQ(st.remote.files.size(), 2u);
  EXPECT_EQ(st.remote.files[0].rows + st.remote.files[1].rows, 12);  // every key pushed
  ASSERT_TRUE((*remote)->Push(k, 3, 1.0f).ok());  // the servers move on past the snapshot
  const std::vector<std::vector<float>> moved = Rows(remote->get(), false, k);
  EXPECT_NE(moved, after);

  // A resumed run: fresh = false leaves the tables as they are; Restore brings back the cut.
  o.fresh = false;
  o.prefetch = true;  // a second client for the pushes, which must join too
  auto resumed = ConnectRemoteTables(o, TwoTables());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(Rows(resumed->get(), false, k), moved);  // not wiped (nor restored) by connecting
  CheckpointState wrong = st;
  wrong.remote.files[0].rows += 1;
  const Status bad = (*resumed)->Restore("ckpt", wrong);
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("ckpt: restoring snapshot 'seam-test-step-3'"));
  EXPECT_THAT(bad.message(), HasSubstr("the manifest says 13"));
  wrong = st;
  wrong.global_step = 2;
  EXPECT_THAT((*resumed)->Restore("ckpt", wrong).message(), HasSubstr("the manifest says step 2"));
  ASSERT_TRUE((*resumed)->Restore("ckpt", st).ok());
  ASSERT_TRUE((*resumed)->Join().ok());
  EXPECT_EQ(Rows(resumed->get(), false, k), after);
  ASSERT_TRUE((*resumed)->Push(k, 3, 1.0f).ok());
  ASSERT_TRUE((*local)->Push(k, 3, 1.0f).ok());
  EXPECT_EQ(Rows(resumed->get(), false, k), Rows(local->get(), false, k));
}

}  // namespace
}  // namespace sift::worker
