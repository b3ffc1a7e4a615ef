// Security on (TLS, member certificates, users' tokens) over real gRPC on loopback:
// - the attacks of issue 17 on a running job — Configure(replace), Snapshot and Restore on the
//   embedding servers; CancelJob and ReportFailure(fatal) on another user's job; forged
//   ReportProgress; CheckpointCommit of an attacker's directory; Register as a live server shard
//   or at a dead address — are refused with their codes, and the job completes with the AUC of
//   the same job run undisturbed on the same cluster;
// - a certificate of another CA, an expired one, none, and a plaintext client are refused;
// - roles and owners (reader, operator, admin), wrong and missing tokens, and a rotation of the
//   tokens file (a change on disk, and SIGHUP) taking effect without a restart.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <utime.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/grpc_security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/embedding.grpc.pb.h"
#include "server/coordinator/client.h"
#include "server/coordinator/service.h"
#include "tests/util/test_cluster.h"
#include "tests/util/test_pki.h"
#include "tests/util/test_util.h"
#include "tests/util/tiny_dataset_suite.h"

namespace sift {
namespace {

namespace cpb = ::sift::coordinator::v1;
namespace epb = ::sift::embedding::v1;
using sift::testing::HttpGet;
using sift::testing::TempDir;
using sift::testing::TestCluster;
using sift::testing::TestClusterOptions;
using sift::testing::TestJob;
using sift::testing::TestPki;
using ::testing::HasSubstr;

constexpr char kSpec[] = R"(name: tiny
dataset: /data/tiny
model: {type: din}
training: {epochs: 1, batch_size: 8}
cluster: {workers: 1, servers: 1}
)";

std::unique_ptr<coordinator::CoordinatorClient> Client(const std::string& address,
                                                       const SecurityOptions& security) {
  coordinator::CoordinatorClientOptions o;
  o.address = address;
  o.connect_timeout = absl::ZeroDuration();
  o.rpc_timeout = absl::Seconds(10);
  o.security = security;
  auto client = coordinator::CoordinatorClient::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

std::unique_ptr<epb::EmbeddingService::Stub> EmbeddingStub(const std::string& address,
                                                           const SecurityOptions& security) {
  // Each stub on a connection of its own (a local subchannel pool), so one caller's handshake and
  // credentials never serve another's calls.
  auto creds = MakeChannelCredentials(security);
  if (!creds.ok()) {
    ADD_FAILURE() << creds.status();
    return nullptr;
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return epb::EmbeddingService::NewStub(grpc::CreateCustomChannel(address, *creds, args));
}

// Replaces `path` with `text` at mode 0600 in one rename, as an operator's `install -m 600` does
// (a write then a chmod would show the coordinator a 0644 file in between, refused until the
// chmod: TokenStore retries on the chmod too).
void ReplacePrivate(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new";
  ASSERT_TRUE(WriteFileAtomic(tmp, text).ok());
  ASSERT_EQ(::chmod(tmp.c_str(), 0600), 0);
  ASSERT_EQ(::rename(tmp.c_str(), path.c_str()), 0);
}

template <typename Fn>
grpc::Status Call(Fn fn) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return fn(&ctx);
}

cpb::RegisterRequest ServerRegistration(uint32_t shard, uint32_t num_shards,
                                        const std::string& address) {
  cpb::RegisterRequest r;
  r.set_role(cpb::EMBEDDING_SERVER);
  r.set_address(address);
  r.set_shard(shard);
  r.set_num_shards(num_shards);
  return r;
}

// ---------------------------------------------------------------------------------------------
// One in-process coordinator with TLS and the test tokens.

class SecureCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = TestPki::Make(dir_.Sub("pki"), 1, 2);
    coordinator::CoordinatorServerOptions o;
    o.bind_address = "127.0.0.1";
    o.port = 0;
    o.metrics_port = 0;
    o.coordinator.state_dir = dir_.Sub("state");
    o.tick = absl::Milliseconds(20);
    o.security.tls_dir = pki_.root + "/coordinator";
    o.security.tokens_file = pki_.TokensFile();
    auto server = coordinator::CoordinatorServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = absl::StrCat("127.0.0.1:", server_->port());
  }
  std::unique_ptr<coordinator::CoordinatorClient> As(const std::string& dir,
                                                     const std::string& user = "") {
    return Client(address_, pki_.As(dir, user));
  }
  // sift_auth_refusals_total{grpc_method=method, grpc_code=code} on /metrics (0 when absent).
  double Refusals(const std::string& method, const std::string& code) {
    auto page = HttpGet("127.0.0.1", server_->metrics_port(), "/metrics");
    EXPECT_TRUE(page.ok()) << page.status();
    const std::string series = absl::StrCat("sift_auth_refusals_total{grpc_code=\"", code,
                                            "\",grpc_method=\"", method, "\"} ");
    for (absl::string_view line : absl::StrSplit(page.ok() ? *page : "", '\n')) {
      if (absl::ConsumePrefix(&line, series)) return std::stod(std::string(line));
    }
    return 0;
  }

  TempDir dir_;
  TestPki pki_;
  std::unique_ptr<coordinator::CoordinatorServer> server_;
  std::string address_;
};

TEST_F(SecureCoordinatorTest, RolesAndOwnersDecideWhoMayDoWhat) {
  auto alice = As("client", "alice"), bob = As("client", "bob"), rita = As("client", "rita"),
       admin = As("client", "admin");
  // A reader cannot submit.
  auto denied = rita->SubmitJob(kSpec, "job.yaml");
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  EXPECT_THAT(denied.status().message(), HasSubstr("user rita has role reader"));
  // An operator submits; the job records its owner.
  auto id = alice->SubmitJob(kSpec, "job.yaml");
  ASSERT_TRUE(id.ok()) << id.status();
  auto job = alice->GetJob(*id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->owner(), "alice");
  // Another operator can neither read nor cancel it, nor see it listed.
  EXPECT_EQ(bob->GetJob(*id).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(bob->GetLogs(*id, 0).status().code(), absl::StatusCode::kPermissionDenied);
  auto cancel = bob->CancelJob(*id);
  EXPECT_EQ(cancel.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(cancel.status().message(), HasSubstr("is owned by alice"));
  auto listed = bob->ListJobs();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty());
  EXPECT_EQ(bob->GetJob("").status().code(), absl::StatusCode::kNotFound);
  // A reader reads every job but cannot cancel.
  EXPECT_TRUE(rita->GetJob(*id).ok());
  EXPECT_TRUE(rita->GetLogs(*id, 0).ok());
  auto all = rita->ListJobs();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
  EXPECT_EQ(rita->CancelJob(*id).status().code(), absl::StatusCode::kPermissionDenied);
  // The admin can cancel anyone's job.
  auto cancelled = admin->CancelJob(*id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), cpb::CANCELLED);
  // The owner reads its own job, also as "the latest".
  auto latest = alice->GetJob("");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->job_id(), *id);
  // Refusals are counted.
  EXPECT_GE(Refusals("CancelJob", "PERMISSION_DENIED"), 2);
  EXPECT_GE(Refusals("SubmitJob", "PERMISSION_DENIED"), 1);
}

// A user's spec cannot make the coordinator write outside its roots, nor start from another
// user's model; the refusals are counted.
TEST_F(SecureCoordinatorTest, SpecPathsStayUnderTheRootsAndResumingNeedsTheOwner) {
  auto alice = As("client", "alice"), bob = As("client", "bob"), admin = As("client", "admin");
  const std::string ckpt_root = dir_.Sub("state") + "/checkpoints";
  for (const std::string& field :
       {std::string("results_dir: /etc\n"), std::string("checkpoint: {dir: /etc}\n")}) {
    auto refused = alice->SubmitJob(kSpec + field, "job.yaml");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(refused.status().message(), HasSubstr("/etc is outside " + dir_.Sub("state")));
  }
  auto bobs =
      bob->SubmitJob(kSpec + std::string("checkpoint: {dir: ") + ckpt_root + "}\n", "job.yaml");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  const std::string from = ckpt_root + "/" + *bobs + "/step-000000000008";
  const std::string resume = kSpec + std::string("checkpoint: {resume_from: ") + from + "}\n";
  auto stolen = alice->SubmitJob(resume, "job.yaml");
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(stolen.status().message(), HasSubstr("owned by bob; user alice may resume only"));
  EXPECT_TRUE(bob->SubmitJob(resume, "job.yaml").ok());
  EXPECT_TRUE(admin->SubmitJob(resume, "job.yaml").ok());
  auto climbing = alice->SubmitJob(
      kSpec + std::string("checkpoint: {resume_from: ") + ckpt_root + "/../x}\n", "job.yaml");
  EXPECT_EQ(climbing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_GE(Refusals("SubmitJob", "PERMISSION_DENIED"), 1);
}

// The CLI as a user runs it: `sift submit` with the spec's security block (or the flags),
// `sift jobs` with the flags, `sift health` with only the CA; without them, exit 2 naming why.
TEST_F(SecureCoordinatorTest, TheCliTakesItsSecurityFromFlagsEnvironmentOrTheSpec) {
  const std::string spec = dir_.Sub("job.yaml");
  sift::testing::WriteAll(spec,
                          absl::StrCat(kSpec, "security: {tls_dir: ", pki_.root,
                                       "/client, token_file: ", pki_.TokenFile("alice"), "}\n"));
  auto submitted = sift::testing::RunSift({"submit", spec, "--coordinator", address_});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  auto jobs =
      sift::testing::RunSift({"jobs", "--coordinator", address_, "--tls-dir", pki_.root + "/client",
                              "--token-file", pki_.TokenFile("rita"), "-o", "json"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("\"owner\": \"alice\""));
  auto bob = sift::testing::RunSift({"cancel", "job-1", "--coordinator", address_, "--tls-dir",
                                     pki_.root + "/client", "--token-file", pki_.TokenFile("bob")});
  EXPECT_EQ(bob.exit_code, 2);
  EXPECT_THAT(bob.err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(bob.err, HasSubstr("is owned by alice"));
  auto anonymous = sift::testing::RunSift(
      {"jobs", "--coordinator", address_, "--tls-dir", pki_.root + "/client"});
  EXPECT_EQ(anonymous.exit_code, 2);
  EXPECT_THAT(anonymous.err, HasSubstr("UNAUTHENTICATED"));
  auto health = sift::testing::RunSift({"health", address_, "--tls-dir", pki_.root + "/client"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_THAT(health.out, HasSubstr("SERVING"));
  EXPECT_NE(sift::testing::RunSift({"health", address_}).exit_code, 0);  // plaintext
}

TEST_F(SecureCoordinatorTest, MissingAndWrongTokensAreUnauthenticated) {
  auto anonymous = As("client");
  auto s = anonymous->ListJobs();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnauthenticated) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("no bearer token"));
  const std::string wrong = dir_.Sub("wrong-token");
  ASSERT_TRUE(WriteFileAtomic(wrong, "not-a-token-of-anyone-at-all\n").ok());
  ::chmod(wrong.c_str(), 0600);
  SecurityOptions o = pki_.As("client");
  o.token_file = wrong;
  auto w = Client(address_, o)->SubmitJob(kSpec, "job.yaml");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(w.status().message(), HasSubstr("not in the server's tokens file"));
  // A member certificate is not a user.
  auto member = As("worker-0")->SubmitJob(kSpec, "job.yaml");
  EXPECT_EQ(member.status().code(), absl::StatusCode::kUnauthenticated);
  // A token is not a member: member calls with a user's token are PERMISSION_DENIED.
  auto reg = As("client", "admin")->Register(ServerRegistration(0, 1, "127.0.0.1:1"));
  EXPECT_EQ(reg.status().code(), absl::StatusCode::kPermissionDenied) << reg.status();
  // A token file readable by others is refused before anything is sent.
  ::chmod(wrong.c_str(), 0644);
  coordinator::CoordinatorClientOptions co;
  co.address = address_;
  co.connect_timeout = absl::ZeroDuration();
  co.security = o;
  auto open = coordinator::CoordinatorClient::Connect(co);
  EXPECT_EQ(open.status().code(), absl::StatusCode::kFailedPrecondition) << open.status();
  EXPECT_THAT(open.status().message(), HasSubstr("chmod 600"));
  EXPECT_GE(Refusals("ListJobs", "UNAUTHENTICATED"), 1);
}

TEST_F(SecureCoordinatorTest, CertificatesOfAnotherCaExpiredOrNoneAndPlaintextAreRefused) {
  cpb::RegisterRequest worker;
  worker.set_role(cpb::WORKER);
  worker.set_address("127.0.0.1");
  // The cluster's own worker certificate registers.
  auto ok = As("worker-0")->Register(worker);
  ASSERT_TRUE(ok.ok()) << ok.status();
  // Another CA's, an expired one: the handshake fails (the client sees UNAVAILABLE).
  EXPECT_EQ(As("other-ca/worker-0")->Register(worker).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(As("expired/worker-0")->Register(worker).status().code(),
            absl::StatusCode::kUnavailable);
  // No certificate: UNAUTHENTICATED.
  auto none = As("client")->Register(worker);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.status().message(), HasSubstr("no client certificate"));
  // A plaintext client cannot connect.
  auto plain = Client(address_, SecurityOptions())->Register(worker);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable);
  // A worker's certificate cannot register as a server; worker-1 is a second worker slot.
  auto as_server = As("worker-1")->Register(ServerRegistration(0, 1, "127.0.0.1:9"));
  EXPECT_EQ(as_server.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(as_server.status().message(), HasSubstr("needs server-0"));
  // A server's certificate registers only as its own shard, once while it is alive.
  EXPECT_EQ(As("server-0")->Register(ServerRegistration(1, 2, "127.0.0.1:9")).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto s0 = As("server-0");
  ASSERT_TRUE(s0->Register(ServerRegistration(0, 1, "127.0.0.1:9")).ok());
  auto again = s0->Register(ServerRegistration(0, 1, "127.0.0.1:10"));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  // worker-0's member id cannot be heartbeaten by worker-1.
  cpb::HeartbeatRequest beat;
  beat.set_member_id(ok->member_id());
  EXPECT_EQ(As("worker-1")->Heartbeat(beat).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(As("worker-0")->Heartbeat(beat).ok());
  // A member reads only the state of a job it ran (with that job's credential: a worker ending
  // with its job), and nothing else of the users'.
  auto id = As("client", "alice")->SubmitJob(kSpec, "job.yaml");
  ASSERT_TRUE(id.ok()) << id.status();
  const Status unrun = As("worker-0")->GetJob(*id).status();
  EXPECT_EQ(unrun.code(), absl::StatusCode::kPermissionDenied) << unrun;
  EXPECT_THAT(unrun.message(), HasSubstr("a member reads only the jobs it has run"));
  EXPECT_EQ(As("worker-0")->GetLogs(*id, 0).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(As("worker-0")->CancelJob(*id).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(As("coordinator")->GetJob(*id).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(SecureCoordinatorTest, ARotatedTokensFileTakesEffectWithoutARestart) {
  auto alice = As("client", "alice");
  ASSERT_TRUE(alice->ListJobs().ok());
  const std::string carol_token = "the-new-token-of-carol-0123456789";
  const std::string carol_file = dir_.Sub("token-carol");
  ASSERT_TRUE(WriteFileAtomic(carol_file, carol_token).ok());
  ::chmod(carol_file.c_str(), 0600);
  SecurityOptions carol_opts = pki_.As("client");
  carol_opts.token_file = carol_file;
  auto carol = Client(address_, carol_opts);
  EXPECT_EQ(carol->ListJobs().status().code(), absl::StatusCode::kUnauthenticated);

  // A new file on disk (alice removed, carol added) is picked up by the scheduler's tick.
  const std::string tokens =
      absl::StrCat(TestPki::Token("admin"), ",admin,admin\n", carol_token, ",carol,operator\n");
  ReplacePrivate(pki_.TokensFile(), tokens);
  auto until = [](const std::function<bool()>& done) {
    for (int i = 0; i < 1000 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  };
  EXPECT_TRUE(until([&] { return carol->ListJobs().ok(); }));
  EXPECT_EQ(alice->ListJobs().status().code(), absl::StatusCode::kUnauthenticated);

  // SIGHUP: the process survives it and the next tick re-reads the file (the signal-only path,
  // a file unchanged on disk, is TokenStoreTest's).
  const std::string swapped =
      absl::StrCat(TestPki::Token("admin"), ",admin,admin\n", carol_token, ",carol,reader\n");
  ReplacePrivate(pki_.TokensFile(), swapped);
  InstallTokenReloadSignal();
  ASSERT_EQ(::raise(SIGHUP), 0);
  EXPECT_TRUE(until([&] {
    return carol->SubmitJob(kSpec, "job.yaml").status().code() ==
           absl::StatusCode::kPermissionDenied;
  }));
  EXPECT_TRUE(carol->ListJobs().ok());  // still a user, now a reader

  // A broken file keeps the tokens in use.
  ReplacePrivate(pki_.TokensFile(), "garbage without commas\n");
  RequestTokenReload();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(carol->ListJobs().ok());
}

// ---------------------------------------------------------------------------------------------
// A secured cluster of processes under attack.

class SecureClusterTest : public sift::testing::TinyDatasetSuite<1> {};

TEST_F(SecureClusterTest, AttacksOnARunningJobAreRefusedAndItCompletesWithTheUndisturbedAuc) {
  const TestPki pki = TestPki::Make(dir_->Sub("pki"), 2, 3);  // worker-2: a member of no job
  TestClusterOptions co;
  co.servers = 2;
  co.workers = 1;
  co.metrics = true;
  co.tls_root = pki.root;
  co.tokens_file = pki.TokensFile();
  co.client_token_file = pki.TokenFile("alice");
  co.worker_exit_after_jobs = 2;  // as the Kubernetes Job runs it: the worker reads the job state
  TestCluster cluster(*dir_, "secure", co);
  TestJob job;
  job.dataset = Tiny();
  job.epochs = 2;
  job.batch_size = 512;
  job.max_steps_per_epoch = 8;
  job.servers = 2;
  job.workers = 1;
  job.checkpoint_dir = dir_->Sub("secure_ckpt");
  job.checkpoint_every_steps = 4;

  // The undisturbed run.
  job.results_dir = dir_->Sub("quiet_results");
  const std::string quiet = cluster.Submit(job.Yaml());
  ASSERT_FALSE(quiet.empty());
  const cpb::JobInfo want = cluster.WaitForFinish(quiet, 240);
  ASSERT_EQ(want.state(), cpb::COMPLETED) << want.message() << "\n" << cluster.AllErrors();
  EXPECT_EQ(want.owner(), "alice");

  // The same job, attacked while it runs.
  job.results_dir = dir_->Sub("attacked_results");
  const std::string id = cluster.Submit(job.Yaml());
  ASSERT_FALSE(id.empty());
  const cpb::JobInfo running = cluster.WaitForJob(
      id,
      [](const cpb::JobInfo& j) {
        return j.global_step() > 0 || coordinator::IsFinished(j.state());
      },
      240);
  ASSERT_EQ(running.servers_size(), 2);
  const SecurityOptions anonymous = pki.As("client");
  const SecurityOptions bob = pki.As("client", "bob");
  const SecurityOptions stolen_worker = pki.As("worker-0");

  // Embedding servers: Configure(replace), Snapshot, Restore.
  for (const std::string& address : running.servers()) {
    for (const SecurityOptions& who : {anonymous, bob}) {
      auto stub = EmbeddingStub(address, who);
      ASSERT_NE(stub, nullptr);
      epb::ConfigureRequest configure;
      configure.set_replace(true);
      epb::ConfigureResponse configured;
      grpc::Status st =
          Call([&](grpc::ClientContext* c) { return stub->Configure(c, configure, &configured); });
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr("needs a worker's certificate"));
      epb::SnapshotRequest snap;
      snap.set_name("attacker");
      epb::SnapshotResponse snapped;
      st = Call([&](grpc::ClientContext* c) { return stub->Snapshot(c, snap, &snapped); });
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      epb::RestoreRequest restore;
      restore.set_name("attacker");
      epb::RestoreResponse restored;
      st = Call([&](grpc::ClientContext* c) { return stub->Restore(c, restore, &restored); });
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
    // A server's certificate is not a worker's.
    auto peer = EmbeddingStub(address, pki.As("server-1"));
    ASSERT_NE(peer, nullptr);
    epb::ConfigureRequest configure;
    configure.set_replace(true);
    epb::ConfigureResponse configured;
    EXPECT_EQ(Call([&](grpc::ClientContext* c) {
                return peer->Configure(c, configure, &configured);
              }).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    // Plaintext cannot connect at all.
    auto plain = EmbeddingStub(address, SecurityOptions());
    ASSERT_NE(plain, nullptr);
    EXPECT_EQ(Call([&](grpc::ClientContext* c) {
                return plain->Configure(c, configure, &configured);
              }).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }

  const std::string& coord = cluster.coordinator_address();
  // A legitimate worker certificate outside the job (registered, idle, no rank): it may register
  // and read Stats, but not touch the job's tables, snapshots or rendezvous keys, nor read it.
  const SecurityOptions idle = pki.As("worker-2");
  cpb::RegisterRequest idle_worker;
  idle_worker.set_role(cpb::WORKER);
  idle_worker.set_address("127.0.0.1");
  ASSERT_TRUE(Client(coord, idle)->Register(idle_worker).ok());
  for (const std::string& address : running.servers()) {
    auto stub = EmbeddingStub(address, idle);
    ASSERT_NE(stub, nullptr);
    epb::StatsResponse stats;
    ASSERT_TRUE(Call([&](grpc::ClientContext* c) {
                  return stub->Stats(c, epb::StatsRequest(), &stats);
                }).ok());
    epb::ConfigureRequest configure;  // the server's own config, as an attacker would send it
    configure.set_replace(true);
    configure.set_seed(stats.seed());
    *configure.mutable_tables() = stats.configs();
    epb::ConfigureResponse configured;
    grpc::Status st =
        Call([&](grpc::ClientContext* c) { return stub->Configure(c, configure, &configured); });
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("Configure: no job credential; this server serves " +
                                              id + " generation"));
    epb::SnapshotRequest wipe;
    wipe.set_name("ckpt-job-1-g9-step-999999");
    wipe.set_retain_only(true);
    wipe.add_retain_steps(999999);
    epb::SnapshotResponse wiped;
    st = Call([&](grpc::ClientContext* c) { return stub->Snapshot(c, wipe, &wiped); });
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  auto idle_client = Client(coord, idle);
  for (const std::string& key : {absl::StrCat("job-", 9, "/g1/0"), std::string("zz/0"),
                                 absl::StrCat(id, "/g", running.generation() + 1, "/0")}) {
    const Status st = idle_client->KvSet(key, std::string(1000, 'x'));
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << key << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr("no job credential"));
  }
  EXPECT_EQ(idle_client->GetJob(id).status().code(), absl::StatusCode::kPermissionDenied);

  // CancelJob and ReportFailure(fatal) on alice's job.
  EXPECT_EQ(Client(coord, bob)->CancelJob(id).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Client(coord, anonymous)->CancelJob(id).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Client(coord, pki.As("client", "rita"))->CancelJob(id).status().code(),
            absl::StatusCode::kPermissionDenied);
  cpb::ReportFailureRequest failure;
  failure.set_job_id(id);
  failure.set_generation(running.generation());
  failure.set_rank(0);
  failure.set_fatal(true);
  failure.set_message("attacker says: fatal");
  for (const SecurityOptions& who : {anonymous, bob}) {
    const Status st = Client(coord, who)->ReportFailure(failure);
    EXPECT_TRUE(st.code() == absl::StatusCode::kUnauthenticated ||
                st.code() == absl::StatusCode::kPermissionDenied)
        << st;
  }
  // Forged progress.
  cpb::ReportProgressRequest progress;
  progress.set_job_id(id);
  progress.set_generation(running.generation());
  progress.set_rank(0);
  cpb::StepRecord* step = progress.add_steps();
  step->set_global_step(1);
  EXPECT_EQ(Client(coord, anonymous)->ReportProgress(progress).code(),
            absl::StatusCode::kUnauthenticated);
  // A commit of the attacker's directory.
  cpb::CheckpointCommitRequest commit;
  commit.set_job_id(id);
  commit.set_generation(running.generation());
  commit.set_dir("/tmp/attacker");
  EXPECT_EQ(Client(coord, anonymous)->CheckpointCommit(commit).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Client(coord, pki.As("client", "admin"))->CheckpointCommit(commit).code(),
            absl::StatusCode::kPermissionDenied);
  // Register as shard 0 at a dead address: anonymously, with a worker's certificate, and with
  // shard 0's own certificate while shard 0 is alive.
  const cpb::RegisterRequest dead = ServerRegistration(0, 2, "127.0.0.1:1");
  EXPECT_EQ(Client(coord, anonymous)->Register(dead).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Client(coord, stolen_worker)->Register(dead).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Client(coord, pki.As("server-0"))->Register(dead).status().code(),
            absl::StatusCode::kAlreadyExists);

  const cpb::JobInfo got = cluster.WaitForFinish(id, 240);
  ASSERT_EQ(got.state(), cpb::COMPLETED) << got.message() << "\n" << cluster.AllErrors();
  EXPECT_EQ(got.recoveries(), 0) << cluster.Logs(id);
  ASSERT_EQ(got.epochs_done_size(), want.epochs_done_size());
  for (int e = 0; e < got.epochs_done_size(); ++e) {
    EXPECT_EQ(got.epochs_done(e).test_auc(), want.epochs_done(e).test_auc()) << "epoch " << e;
    EXPECT_EQ(got.epochs_done(e).train_loss(), want.epochs_done(e).train_loss()) << "epoch " << e;
  }
  EXPECT_NE(got.last_checkpoint().dir(), "/tmp/attacker");
  // The worker saw both jobs finish (GetJob with its certificate) and exited by itself.
  EXPECT_EQ(cluster.WaitWorkerExit(0, 60), 0) << cluster.WorkerOutput(0);
  const std::string logs = cluster.Logs(id);
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("attacker")));
  // Each refusal was counted and logged (who, what, from where; never a token).
  const std::string errors = cluster.AllErrors();
  EXPECT_THAT(errors, HasSubstr("refused CancelJob from user bob (operator) from ipv4:127.0.0.1"));
  EXPECT_THAT(errors, HasSubstr("refused Configure from an anonymous caller from ipv4:127.0.0.1"));
  EXPECT_THAT(errors, HasSubstr("refused Configure from member worker-2 from ipv4:127.0.0.1"));
  EXPECT_THAT(errors, HasSubstr("refused KvSet from member worker-2 from ipv4:127.0.0.1"));
  EXPECT_THAT(errors, ::testing::Not(HasSubstr(TestPki::Token("bob"))));
  // The listener watchdog's probes get through TLS (else it would restart the listeners).
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("restarting the listener")));
}

// The job credentials change nothing of what a job computes: a 2-worker job (staleness 0,
// deterministic) on a secured cluster trains what it trains on a plaintext one, bit for bit.
TEST_F(SecureClusterTest, ATwoWorkerJobTrainsTheSameWithSecurityOnAndOff) {
  const TestPki pki = TestPki::Make(dir_->Sub("pki2"), 2, 2);
  TestJob job;
  job.dataset = Tiny();
  job.epochs = 1;
  job.batch_size = 512;
  job.max_steps_per_epoch = 6;
  job.servers = 2;
  job.workers = 2;
  std::vector<cpb::JobInfo> runs;
  for (bool secure : {false, true}) {
    TestClusterOptions co;
    co.servers = 2;
    co.workers = 2;
    if (secure) {
      co.tls_root = pki.root;
      co.tokens_file = pki.TokensFile();
      co.client_token_file = pki.TokenFile("alice");
    }
    TestCluster cluster(*dir_, secure ? "two-secure" : "two-plain", co);
    job.results_dir = dir_->Sub(secure ? "two_secure_results" : "two_plain_results");
    const std::string id = cluster.Submit(job.Yaml());
    ASSERT_FALSE(id.empty());
    runs.push_back(cluster.WaitForFinish(id, 240));
    ASSERT_EQ(runs.back().state(), cpb::COMPLETED) << runs.back().message() << "\n"
                                                   << cluster.AllErrors();
    EXPECT_EQ(runs.back().recoveries(), 0);
  }
  ASSERT_EQ(runs[0].epochs_done_size(), 1);
  ASSERT_EQ(runs[1].epochs_done_size(), 1);
  EXPECT_EQ(runs[1].epochs_done(0).test_auc(), runs[0].epochs_done(0).test_auc());
  EXPECT_EQ(runs[1].epochs_done(0).train_loss(), runs[0].epochs_done(0).train_loss());
}

}  // namespace
}  // namespace sift
