// Issue 16 row 2, end to end: a real cluster on loopback (`sift coordinator`, one
// `sift embedding-server`, one `sift worker`, default limits) is flooded — raw TCP connections
// that never speak HTTP/2, idle HTTP/2 connections, and long-polling KvGets from outside any job
// (refused at once: only a running generation's ranks may wait on the rendezvous store, whose
// held calls coordinator_service_test bounds) — and runs a real job to completion during the
// flood and another one after it is released.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/integration/flood_util.h"
#include "tests/util/test_cluster.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using sift::testing::RunSift;
using sift::testing::TempDir;
using sift::testing::TestCluster;
using sift::testing::TestClusterOptions;
using sift::testing::TestJob;

std::shared_ptr<grpc::Channel> OwnConnection(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

// The flood held against one server: raw connections, idle HTTP/2 connections.
struct Flood {
  std::vector<int> raw;
  std::vector<std::shared_ptr<grpc::Channel>> idle;
  Flood(int port, int n_raw, int n_idle) {
    raw = sift::testing::OpenRawConnections(port, n_raw);
    for (int i = 0; i < n_idle; ++i) {
      idle.push_back(OwnConnection(port));
      EXPECT_TRUE(idle.back()->WaitForConnected(std::chrono::system_clock::now() +
                                                std::chrono::seconds(10)));
    }
  }
  ~Flood() { sift::testing::CloseAll(&raw); }
};

TEST(ServerFloodTest, AClusterRunsAJobDuringAConnectionFloodAndAnotherAfter) {
  TempDir dir;
  auto gen = RunSift({"data", "gen", "--preset", "tiny", "--seed", "1", "--users", "200", "--items",
                      "2000", "--categories", "40", "--out", dir.Sub("data")});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  TestClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  TestCluster cluster(dir, "flood", co);
  int coordinator_port = 0, server_port = 0;
  const std::vector<std::string> address = absl::StrSplit(cluster.coordinator_address(), ':');
  ASSERT_EQ(address.size(), 2u);
  ASSERT_TRUE(absl::SimpleAtoi(address[1], &coordinator_port));
  const std::vector<std::string> server_ports =
      absl::StrSplit(sift::testing::WaitForFile(dir.Sub("flood-server0-0.port")), ' ');
  ASSERT_FALSE(server_ports.empty());
  ASSERT_TRUE(absl::SimpleAtoi(server_ports[0], &server_port));

  TestJob tj;
  tj.dataset = dir.Sub("data");
  tj.epochs = 1;
  tj.batch_size = 256;
  tj.max_steps_per_epoch = 4;
  tj.train_eval_samples = 512;
  tj.servers = 1;
  tj.workers = 1;

  {
    Flood on_coordinator(coordinator_port, 300, 32);
    Flood on_server(server_port, 300, 32);
    ASSERT_EQ(on_coordinator.raw.size(), 300u);
    ASSERT_EQ(on_server.raw.size(), 300u);
    // 32 long-polls from outside any job, 8 connections: none is held.
    std::vector<std::unique_ptr<coordinator::pb::CoordinatorService::Stub>> stubs;
    for (int i = 0; i < 8; ++i) {
      stubs.push_back(
          coordinator::pb::CoordinatorService::NewStub(OwnConnection(coordinator_port)));
    }
    std::vector<std::future<grpc::Status>> waits;
    for (int i = 0; i < 32; ++i) {
      waits.push_back(std::async(std::launch::async, [s = stubs[i % 8].get()] {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        coordinator::pb::KvGetRequest q;
        q.add_keys("flood/held");
        q.set_timeout_ms(10000);
        coordinator::pb::KvGetResponse r;
        return s->KvGet(&ctx, q, &r);
      }));
    }

    for (auto& w : waits) {
      const grpc::Status s = w.get();
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    }
    const std::string during = cluster.Submit(tj.Yaml());
    const coordinator::pb::JobInfo job = cluster.WaitForFinish(during, 60);
    EXPECT_EQ(job.state(), coordinator::pb::COMPLETED) << job.message() << "\n"
                                                       << cluster.AllErrors();
  }  // the flood is released

  const std::string after = cluster.Submit(tj.Yaml());
  const coordinator::pb::JobInfo job = cluster.WaitForFinish(after, 60);
  EXPECT_EQ(job.state(), coordinator::pb::COMPLETED) << job.message() << "\n"
                                                     << cluster.AllErrors();
  EXPECT_EQ(job.epochs_done_size(), 1);
}

}  // namespace
}  // namespace sift
