// The coordinator over real gRPC on 127.0.0.1 (ephemeral ports): a job's life through
// CoordinatorClient (submit, members, assignment, progress, evaluation, logs), error codes of bad
// requests, KvGet blocking until another thread's KvSet, health, /metrics linted by promtool,
// a restart of the server on the same state directory, and `sift coordinator` as a process
// (port file, SIGTERM → exit 0, required flags).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/job_credential.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/coordinator/client.h"
#include "server/coordinator/service.h"
#include "tests/integration/flood_util.h"
#include "tests/util/test_util.h"

namespace sift::coordinator {
namespace {

using ::sift::testing::HttpGet;
using ::sift::testing::RunSift;
using ::sift::testing::SiftProcess;
using ::sift::testing::TempDir;
using ::sift::testing::WaitForFile;
using ::testing::HasSubstr;

constexpr char kSpec[] = R"(name: tiny
dataset: /data/tiny
model: {type: din}
training: {epochs: 1, batch_size: 8}
cluster: {workers: 1, servers: 1}
)";

std::unique_ptr<CoordinatorServer> StartServer(
    const std::string& state_dir,
    const GrpcServerLimits& limits = CoordinatorServerOptions::DefaultLimits()) {
  CoordinatorServerOptions o;
  o.limits = limits;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  o.metrics_port = 0;
  o.version = "9.9.9";
  o.coordinator.state_dir = state_dir;
  o.tick = absl::Milliseconds(20);
  auto server = CoordinatorServer::Start(o);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<CoordinatorClient> Connect(int port) {
  CoordinatorClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  auto client = CoordinatorClient::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// Submits kSpec to `c` (in process) and makes one server and one worker its cluster, the server
// serving it: the worker's assignment, with the generation's job credential.
pb::Assignment RunningRank(Coordinator& c) {
  pb::SubmitJobRequest submit;
  submit.set_spec_yaml(kSpec);
  EXPECT_TRUE(c.SubmitJob(submit).ok());
  pb::RegisterRequest q;
  q.set_role(pb::EMBEDDING_SERVER);
  q.set_address("127.0.0.1:1");
  q.set_num_shards(1);
  const std::string server = c.Register(q)->member_id();
  q.set_role(pb::WORKER);
  q.set_num_shards(0);
  const std::string worker = c.Register(q)->member_id();
  pb::HeartbeatRequest beat;
  beat.set_member_id(server);
  const pb::Assignment served = c.Heartbeat(beat)->assignment();
  beat.set_running_job_id(served.job_id());
  beat.set_running_generation(served.generation());
  EXPECT_TRUE(c.Heartbeat(beat).ok());
  beat = pb::HeartbeatRequest();
  beat.set_member_id(worker);
  auto a = c.Heartbeat(beat);
  EXPECT_TRUE(a.ok() && a->has_assignment());
  return a.ok() ? a->assignment() : pb::Assignment();
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer(dir_.Sub("state"));
    ASSERT_NE(server_, nullptr);
    client_ = Connect(server_->port());
    ASSERT_NE(client_, nullptr);
  }

  std::string RegisterMember(pb::Role role, const std::string& address) {
    pb::RegisterRequest q;
    q.set_role(role);
    q.set_address(address);
    q.set_num_shards(role == pb::EMBEDDING_SERVER ? 1 : 0);
    auto r = client_->Register(q);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->member_id() : "";
  }

  TempDir dir_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(CoordinatorServiceTest, AJobRunsToCompletionOverGrpc) {
  auto bad = client_->SubmitJob("dataset: d\nmodel: {type: lstm}\n", "mine.yaml");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("SubmitJob: INVALID_ARGUMENT: mine.yaml:2: model.type"));
  auto job = client_->SubmitJob(kSpec, "tiny.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(*job, "job-1");
  auto info = client_->GetJob("");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), pb::PENDING);
  EXPECT_EQ(info->message(),
            "waiting for embedding server shard 0 of 1; waiting for 1 more worker");

  const std::string server = RegisterMember(pb::EMBEDDING_SERVER, "127.0.0.1:1");
  const std::string worker = RegisterMember(pb::WORKER, "127.0.0.1");
  pb::HeartbeatRequest beat;
  beat.set_member_id(worker);
  EXPECT_FALSE(client_->Heartbeat(beat)->has_assignment()) << "the server does not serve it yet";
  // The server learns its job, then reports serving it: the worker gets its assignment.
  pb::HeartbeatRequest server_beat;
  server_beat.set_member_id(server);
  auto served = client_->Heartbeat(server_beat);
  ASSERT_TRUE(served.ok() && served->has_assignment());
  server_beat.set_running_job_id(served->assignment().job_id());
  server_beat.set_running_generation(served->assignment().generation());
  ASSERT_TRUE(client_->Heartbeat(server_beat).ok());
  auto hb = client_->Heartbeat(beat);
  ASSERT_TRUE(hb.ok()) << hb.status();
  const pb::Assignment a = hb->assignment();
  EXPECT_EQ(a.job_id(), "job-1");
  EXPECT_EQ(a.generation(), 1);
  EXPECT_EQ(a.world_size(), 1);
  beat.set_member_id("no-such-member");
  EXPECT_EQ(client_->Heartbeat(beat).status().code(), absl::StatusCode::kNotFound);

  EXPECT_EQ(a.job_credential(), served->assignment().job_credential());
  pb::ReportProgressRequest p;
  p.set_job_id(a.job_id());
  p.set_generation(a.generation());
  const Status anonymous = client_->ReportProgress(p);
  EXPECT_EQ(anonymous.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(anonymous.message()), HasSubstr("no job credential"));
  client_->SetJobCredential(a.job_credential());
  for (int s = 0; s < 3; ++s) {
    pb::StepRecord* r = p.add_steps();
    r->set_step(s);
    r->set_global_step(s);
    r->set_samples(8);
    r->set_total_loss(0.5);
  }
  ASSERT_TRUE(client_->ReportProgress(p).ok());
  p.set_generation(7);
  Status other = client_->ReportProgress(p);
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      std::string(other.message()),
      HasSubstr("names job-1 generation 7 but presents the credential of job-1 generation 1"));

  for (const char* split : {"train", "test"}) {
    pb::ReportEvalRequest e;
    e.set_job_id(a.job_id());
    e.set_generation(a.generation());
    e.set_split(split);
    for (int i = 0; i < 4; ++i) {
      e.add_scores(static_cast<float>(i));
      e.add_labels(i >= 2 ? 1.0f : 0.0f);
    }
    e.set_loss_sum(2.0);
    e.set_last(true);
    ASSERT_TRUE(client_->ReportEval(e).ok());
  }
  info = client_->GetJob("job-1");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), pb::COMPLETED);
  ASSERT_EQ(info->epochs_done_size(), 1);
  EXPECT_EQ(info->epochs_done(0).test_auc(), 1.0);
  EXPECT_EQ(info->epochs_done(0).test_loss(), 0.5);
  EXPECT_EQ(info->samples_total(), 24);
  auto cancel = client_->CancelJob("job-1");
  EXPECT_EQ(cancel.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->GetJob("job-2").status().code(), absl::StatusCode::kNotFound);

  auto logs = client_->GetLogs("job-1", 0);
  ASSERT_TRUE(logs.ok());
  EXPECT_TRUE(logs->finished());
  EXPECT_EQ(logs->state(), pb::COMPLETED);
  ASSERT_GE(logs->lines_size(), 4);
  EXPECT_THAT(logs->lines(logs->lines_size() - 1), HasSubstr("COMPLETED"));
  EXPECT_EQ(logs->next_offset(), logs->lines_size());

  // The job-level series and the gRPC ones, linted.
  auto text = HttpGet("127.0.0.1", server_->metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("sift_job_samples_total{job_id=\"job-1\"} 24"));
  EXPECT_THAT(*text, HasSubstr("sift_job_steps_total{job_id=\"job-1\"} 3"));
  EXPECT_THAT(*text, HasSubstr("sift_job_state{job_id=\"job-1\",state=\"COMPLETED\"} 1"));
  EXPECT_THAT(*text, HasSubstr("sift_job_state{job_id=\"job-1\",state=\"RUNNING\"} 0"));
  EXPECT_THAT(*text, HasSubstr("sift_job_test_auc{job_id=\"job-1\"} 1"));
  EXPECT_THAT(*text, HasSubstr("sift_coordinator_members{member_role=\"worker\"} 1"));
  EXPECT_THAT(*text, HasSubstr("sift_build_info{version=\"9.9.9\"} 1"));
  EXPECT_THAT(*text, HasSubstr("grpc_method=\"ReportEval\""));
  if (!testing::PromtoolAvailable()) GTEST_SKIP() << "promtool not on PATH";
  auto lint = testing::PromtoolCheckMetrics(*text);
  EXPECT_TRUE(lint.ok()) << lint.status() << "\n" << *text;
}

// Issue 16 row 13: bytes that are not the method's message get INTERNAL with a message saying
// so (gRPC's own answer has none), and a client whose server does not serve the method (`sift
// submit` to an embedding server's port) says what that means.
TEST_F(CoordinatorServiceTest, UndecodableRequestsAndWrongServersGetAMessage) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  const auto call = [&](const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status st) { done.set_value(st); });
    return done.get_future().get();
  };
  const grpc::Status garbage = call("/sift.coordinator.v1.CoordinatorService/SubmitJob",
                                    std::string("\xff\xff\xff\x07junk", 8));
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(
      garbage.error_message(),
      HasSubstr("/sift.coordinator.v1.CoordinatorService/SubmitJob: the request could not be "
                "decoded"));
  // A string field holding invalid UTF-8 (field 2, source_name): not decodable either.
  const grpc::Status utf8 =
      call("/sift.coordinator.v1.CoordinatorService/SubmitJob", std::string("\x12\x02\xc3\x28", 4));
  EXPECT_EQ(utf8.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_FALSE(utf8.error_message().empty());

  // A server of another kind: only the health service.
  grpc::ServerBuilder builder;
  int port = 0;
  grpc::health::v1::Health::Service health;  // every method UNIMPLEMENTED; the sync service
  builder.RegisterService(&health);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> other = builder.BuildAndStart();
  ASSERT_NE(other, nullptr);
  std::unique_ptr<CoordinatorClient> wrong = Connect(port);
  ASSERT_NE(wrong, nullptr);
  StatusOr<std::string> submitted = wrong->SubmitJob(kSpec, "job.yaml");
  ASSERT_EQ(submitted.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(submitted.status().message(),
              HasSubstr("SubmitJob: UNIMPLEMENTED: the server does not serve this method (is "
                        "the address the right kind of sift server"));
  other->Shutdown();
}

// Row 7: one coordinator per --state-dir; a second is refused naming the first.
TEST_F(CoordinatorServiceTest, ASecondCoordinatorOnTheStateDirIsRefused) {
  CoordinatorServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  o.metrics_port = -1;
  o.coordinator.state_dir = dir_.Sub("state");
  auto second = CoordinatorServer::Start(o);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(dir_.Sub("state") + " is in use by a coordinator (pid "));
}

TEST_F(CoordinatorServiceTest, KvGetBlocksUntilAnotherThreadSets) {
  const pb::Assignment a = RunningRank(server_->coordinator());
  ASSERT_EQ(a.kv_prefix(), "job-1/g1");
  // Without the generation's credential the store is closed.
  EXPECT_EQ(client_->KvSet("job-1/g1/a", "1").code(), absl::StatusCode::kPermissionDenied);
  client_->SetJobCredential(a.job_credential());
  auto waiter = std::async(std::launch::async, [this] {
    return client_->KvGet({"job-1/g1/a", "job-1/g1/b"}, absl::Seconds(30));
  });
  ASSERT_TRUE(client_->KvSet("job-1/g1/a", "1").ok());
  // The waiter cannot have finished: "b" is not set yet.
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  ASSERT_TRUE(client_->KvSet("job-1/g1/b", std::string("\0two", 4)).ok());
  auto values = waiter.get();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"1", std::string("\0two", 4)}));

  auto missing = client_->KvGet({"job-1/g1/a", "job-1/g1/nope"}, absl::Milliseconds(50));
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope"));
  EXPECT_EQ(client_->KvSet("", "x").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorServiceTest, ShutdownReleasesKvWaitersAndHealthServes) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest hq;
  hq.set_service("sift.coordinator.v1.CoordinatorService");
  grpc::health::v1::HealthCheckResponse hr;
  grpc::ClientContext ctx;
  ASSERT_TRUE(health->Check(&ctx, hq, &hr).ok());
  EXPECT_EQ(hr.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  client_->SetJobCredential(RunningRank(server_->coordinator()).job_credential());
  auto waiter = std::async(
      std::launch::async, [this] { return client_->KvGet({"job-1/g1/never"}, absl::Seconds(60)); });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  server_->Shutdown();
  auto r = waiter.get();  // at once, not after the 10 s server cap
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
}

TEST_F(CoordinatorServiceTest, ARestartedServerKeepsItsJobs) {
  ASSERT_TRUE(client_->SubmitJob(kSpec, "tiny.yaml").ok());
  RegisterMember(pb::EMBEDDING_SERVER, "127.0.0.1:1");
  const std::string worker = RegisterMember(pb::WORKER, "127.0.0.1");
  ASSERT_EQ(client_->GetJob("job-1")->state(), pb::RUNNING);
  client_.reset();
  server_.reset();

  server_ = StartServer(dir_.Sub("state"));
  ASSERT_NE(server_, nullptr);
  client_ = Connect(server_->port());
  ASSERT_NE(client_, nullptr);
  auto info = client_->GetJob("job-1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), pb::RECOVERING);
  EXPECT_THAT(info->message(), HasSubstr("coordinator restarted"));
  pb::HeartbeatRequest beat;
  beat.set_member_id(worker);
  EXPECT_EQ(client_->Heartbeat(beat).status().code(), absl::StatusCode::kNotFound);
  auto next = client_->SubmitJob(kSpec, "tiny.yaml");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, "job-2");
}

// A stub on a connection of its own (a local subchannel pool), or on the shared one.
std::unique_ptr<pb::CoordinatorService::Stub> Stub(int port, bool own_connection) {
  grpc::ChannelArguments args;
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return pb::CoordinatorService::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
}

// Issue 16 row 2: gRPC 1.51 stops accepting for good once accept4 fails with EMFILE
// (grpc/grpc#20418). The listener watchdog (common/grpc_listener_watchdog.h) rebuilds the server
// on its port; the jobs live on in the coordinator.
TEST_F(CoordinatorServiceTest, AServerRecoversAfterItsFileDescriptorsRunOut) {
  auto id = client_->SubmitJob(kSpec, "tiny.yaml");
  ASSERT_TRUE(id.ok()) << id.status();
  // This process holds both ends: capped a little above what it uses now, it connects until the
  // cap is reached (the server's accepts then fail with EMFILE).
  ASSERT_GT(sift::testing::ExhaustDescriptors(server_->port()), 100u);
  // A new client (a new connection: not the subchannel client_ shares) is served again within
  // the bound.
  grpc::Status served(grpc::StatusCode::UNAVAILABLE, "not tried");
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (!served.ok() && absl::Now() < deadline) {
    auto fresh = Stub(server_->port(), /*own_connection=*/true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::GetJobRequest q;
    q.set_job_id(*id);
    pb::JobInfo job;
    served = fresh->GetJob(&ctx, q, &job);
    if (served.ok()) {
      EXPECT_EQ(job.job_id(), *id);
    } else {
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  EXPECT_TRUE(served.ok()) << served.error_code() << " " << served.error_message();
}

// The started KvGet handlers, from /metrics (grpc_server_started_total{grpc_method="KvGet"}).
int64_t StartedKvGets(int metrics_port) {
  auto text = HttpGet("127.0.0.1", metrics_port, "/metrics");
  if (!text.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StartsWith(line, "grpc_server_started_total{") &&
        absl::StrContains(line, "grpc_method=\"KvGet\"")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) return static_cast<int64_t>(v);
    }
  }
  return 0;
}

// Polls `fn` every 20 ms until it is true or `timeout` passes.
bool PollUntil(const std::function<bool()>& fn, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!fn()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

grpc::Status KvGetCall(pb::CoordinatorService::Stub* stub, const std::string& key,
                       const std::string& credential) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kJobCredentialHeader, credential);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  pb::KvGetRequest q;
  q.add_keys(key);
  q.set_timeout_ms(10000);
  pb::KvGetResponse r;
  return stub->KvGet(&ctx, q, &r);
}

// Issue 16 row 2: what bounds a flood of the coordinator (GrpcServerLimits): calls per
// connection (--max-concurrent-streams: the rest wait in the client), request threads
// (--max-threads: a call finding none free is RESOURCE_EXHAUSTED at once), connections that never
// speak HTTP/2 (--handshake-timeout-ms: closed). After the flood it serves as before.
TEST(CoordinatorFloodTest, CallsAndConnectionsAreBoundedAndTheServerServesAfter) {
  TempDir dir;
  GrpcServerLimits limits;
  limits.max_concurrent_streams = 4;
  limits.max_threads = 8;
  limits.handshake_timeout_ms = 1000;
  auto server = StartServer(dir.Sub("state"), limits);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const int metrics_port = server->metrics_port();
  const std::string credential = RunningRank(server->coordinator()).job_credential();
  auto set_key = [&server](const std::string& key) {
    pb::KvSetRequest q;
    q.set_key(key);
    q.set_value("v");
    return server->coordinator().KvSet(q).status();  // in process: needs no request thread
  };

  // 1. Streams: 8 long-polls on one connection; 4 reach the server, 4 wait in the client.
  {
    auto stub = Stub(port, /*own_connection=*/false);
    std::vector<std::future<grpc::Status>> calls;
    for (int i = 0; i < 8; ++i) {
      calls.push_back(std::async(std::launch::async, [&stub, &credential] {
        return KvGetCall(stub.get(), "job-1/g1/streams", credential);
      }));
    }
    ASSERT_TRUE(PollUntil([&] { return StartedKvGets(metrics_port) == 4; }, absl::Seconds(20)));
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_EQ(StartedKvGets(metrics_port), 4);  // still: the other 4 wait for a stream
    ASSERT_TRUE(set_key("job-1/g1/streams").ok());
    for (auto& c : calls) {
      const grpc::Status s = c.get();
      EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    }
    EXPECT_EQ(StartedKvGets(metrics_port), 8);
  }

  // 2. Threads: 12 long-polls on 12 connections; those beyond the thread quota are refused.
  {
    std::vector<std::unique_ptr<pb::CoordinatorService::Stub>> stubs;
    for (int i = 0; i < 12; ++i) stubs.push_back(Stub(port, /*own_connection=*/true));
    std::atomic<int> refused{0};
    std::vector<std::future<grpc::Status>> calls;
    for (auto& stub : stubs) {
      calls.push_back(std::async(std::launch::async, [&refused, &credential, s = stub.get()] {
        grpc::Status st = KvGetCall(s, "job-1/g1/threads", credential);
        if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) refused.fetch_add(1);
        return st;
      }));
    }
    // Settled: every call is either in a handler or refused.
    ASSERT_TRUE(PollUntil([&] { return StartedKvGets(metrics_port) - 8 + refused.load() == 12; },
                          absl::Seconds(20)))
        << "started " << StartedKvGets(metrics_port) - 8 << ", refused " << refused.load();
    const int64_t running = StartedKvGets(metrics_port) - 8;
    EXPECT_GE(running, 1);
    EXPECT_LT(running, limits.max_threads);  // one thread of the quota is the poller
    EXPECT_EQ(refused.load(), 12 - running);
    // A new call meanwhile finds no thread either, and says so.
    {
      auto fresh = Stub(port, /*own_connection=*/true);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      pb::ListJobsRequest q;
      pb::ListJobsResponse r;
      const grpc::Status s = fresh->ListJobs(&ctx, q, &r);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
      EXPECT_FALSE(s.error_message().empty());
      std::printf("a call beyond --max-threads: %d %s\n", static_cast<int>(s.error_code()),
                  s.error_message().c_str());
    }
    ASSERT_TRUE(set_key("job-1/g1/threads").ok());
    int ok = 0;
    for (auto& c : calls) {
      const grpc::Status s = c.get();
      if (s.ok()) {
        ++ok;
      } else {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
      }
    }
    EXPECT_EQ(ok, running);
  }

  // 3. Connections that never speak HTTP/2 are closed after the handshake timeout.
  {
    std::vector<int> raw = sift::testing::OpenRawConnections(port, 300);
    ASSERT_EQ(raw.size(), 300u);
    EXPECT_EQ(sift::testing::WaitUntilClosedByPeer(raw, absl::Now() + absl::Seconds(30)), 300u);
    sift::testing::CloseAll(&raw);
  }

  // After the flood: a new client runs a job's first steps as before.
  auto client = Connect(port);
  ASSERT_NE(client, nullptr);
  auto id = client->SubmitJob(kSpec, "tiny.yaml");
  ASSERT_TRUE(id.ok()) << id.status();
  client->SetJobCredential(credential);
  ASSERT_TRUE(client->KvSet("job-1/g1/after", "x").ok());
  auto values = client->KvGet({"job-1/g1/after"}, absl::Seconds(5));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, std::vector<std::string>{"x"});
  auto jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 2u);
}

TEST(CoordinatorProcessTest, ServesUntilSigtermAndExitsZero) {
  TempDir dir;
  const std::string port_file = dir.Sub("ports");
  SiftProcess process(
      {"coordinator", "--port", "0", "--bind", "127.0.0.1", "--metrics-port", "0", "--state-dir",
       dir.Sub("state"), "--port-file", port_file, "--lease-ms", "500"},
      dir.Sub("coordinator"));
  const std::string ports = WaitForFile(port_file, 30);
  std::vector<std::string> parts = absl::StrSplit(ports, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  ASSERT_EQ(parts.size(), 2u) << process.Err();
  int port = 0, metrics_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(parts[0], &port));
  ASSERT_TRUE(absl::SimpleAtoi(parts[1], &metrics_port));
  EXPECT_GT(metrics_port, 0);
  auto client = Connect(port);
  ASSERT_NE(client, nullptr);
  pb::RegisterRequest q;
  q.set_role(pb::WORKER);
  q.set_address("127.0.0.1");
  auto r = client->Register(q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->lease_ms(), 500);
  EXPECT_EQ(r->heartbeat_interval_ms(), 250);
  ASSERT_TRUE(client->SubmitJob(kSpec, "tiny.yaml").ok());
  // An idle client of another process does not poll its connection, so it would not see the
  // server's GOAWAY and the shutdown would wait out its grace period; close it first.
  client.reset();
  EXPECT_EQ(process.Stop(SIGTERM), 0) << process.Err();
  EXPECT_THAT(process.Out(), HasSubstr("SIGTERM, shutting down"));
  EXPECT_THAT(testing::ReadAll(dir.Sub("state/jobs/job-1.json")), HasSubstr("\"PENDING\""));
}

TEST(CoordinatorProcessTest, BadFlagsAndACorruptStateDirFail) {
  TempDir dir;
  auto r = RunSift({"coordinator", "--port", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--state-dir"));
  ASSERT_TRUE(MakeDirs(dir.Sub("state/jobs")).ok());
  testing::WriteAll(dir.Sub("state/jobs/job-1.json"), "{}");
  r = RunSift({"coordinator", "--port", "0", "--state-dir", dir.Sub("state")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("job-1.json: corrupt job record"));
}

}  // namespace
}  // namespace sift::coordinator
