// sift submit / status / jobs / cancel / logs as a user meets them: bad specs and bad use give
// clear errors and the documented exit codes (0 ok, 1 job failed/cancelled, 2 usage error, bad
// spec, unknown job, unreachable coordinator); against a real `sift coordinator` the commands
// round-trip, --output json parses with the documented schema, and `submit --wait` mirrors the
// job's end (a cancelled job, and a completed one on a 1-server 1-worker cluster).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_cluster.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunSift;

// A loopback port nothing listens on (bound, read, closed).
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

nlohmann::json ParseJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << text;
  return j;
}

// A `sift coordinator` on a free loopback port, without members (jobs stay PENDING).
class CoordinatorProcess {
 public:
  explicit CoordinatorProcess(const testing::TempDir& dir)
      : process_({"coordinator", "--port", "0", "--bind", "127.0.0.1", "--state-dir",
                  dir.Sub("state"), "--metrics-port", "-1", "--port-file", dir.Sub("coord.port"),
                  // Specs may name any directory: these tests are about the CLI's paths.
                  "--results-root", "/", "--checkpoint-root", "/"},
                 dir.Sub("coordinator")) {
    const std::string ports = testing::WaitForFile(dir.Sub("coord.port"));
    EXPECT_FALSE(ports.empty()) << process_.Err();
    address_ = absl::StrCat("127.0.0.1:", ports.substr(0, ports.find(' ')));
  }
  const std::string& address() const { return address_; }

 private:
  testing::SiftProcess process_;
  std::string address_;
};

// A port in use: one line naming it, and no dump of gRPC's nested error.
TEST(CliJobs, PortInUseIsOneLine) {
  testing::TempDir dir;
  CoordinatorProcess coordinator(dir);
  const std::string port = coordinator.address().substr(coordinator.address().rfind(':') + 1);
  auto r = RunSift(
      {"coordinator", "--port", port, "--state-dir", dir.Sub("state2"), "--metrics-port", "-1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "sift: error: sift coordinator: cannot listen on 127.0.0.1:" + port + ": port " +
                       port +
                       " is in use by another process: choose another --port, or --port 0 for "
                       "any free one\n");
}

// ---- without a coordinator -------------------------------------------------------------------

TEST(CliJobs, BadSpecsExitTwoNamingFileLineAndField) {
  testing::TempDir dir;
  // A live coordinator, to check that nothing reaches it.
  CoordinatorProcess coordinator(dir);
  const std::string& addr = coordinator.address();

  auto missing = RunSift({"submit", dir.Sub("nope.yaml"), "--coordinator", addr});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr(dir.Sub("nope.yaml")));

  const std::string bad_value = dir.Sub("job.yaml");
  testing::WriteAll(bad_value, "dataset: data\ntraining:\n  lr: -1\n");
  auto r = RunSift({"submit", bad_value, "--coordinator", addr});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(bad_value + ":3: training.lr:"));

  const std::string typo = dir.Sub("typo.yaml");
  testing::WriteAll(typo, "dataset: data\ntrainig:\n  epochs: 2\n");
  r = RunSift({"submit", typo, "--coordinator", addr});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(typo + ":2: trainig"));

  const std::string syntax = dir.Sub("syntax.yaml");
  testing::WriteAll(syntax, "dataset: data\nmodel: {type: sim\n");
  r = RunSift({"submit", syntax, "--coordinator", addr});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(syntax + ":"));

  const std::string no_dataset = dir.Sub("empty.yaml");
  testing::WriteAll(no_dataset, "model: {type: sim}\n");
  r = RunSift({"submit", no_dataset, "--coordinator", addr});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("dataset"));

  // Nothing was sent.
  auto jobs = RunSift({"jobs", "--coordinator", addr, "--output", "json"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_TRUE(ParseJson(jobs.out)["items"].empty()) << jobs.out;
}

TEST(CliJobs, DryRunValidatesWithoutACoordinator) {
  testing::TempDir dir;
  // No coordinator anywhere: --dry-run must not try to reach one.
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(spec, "dataset: data/tiny\ntraining:\n  batch_size: 1000\n  lr: 0.02\n");
  // What this machine sees is checked: a dataset whose directory is not here either is the
  // cluster's (a note); one missing from a directory that is here is a typo (an error).
  const std::filesystem::path cwd = std::filesystem::current_path();
  ASSERT_EQ(::chdir(dir.path().c_str()), 0);
  auto r = RunSift({"submit", spec, "--dry-run", "--coordinator", "127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/data/tiny is not on this machine"));
  ASSERT_TRUE(MakeDirs(dir.Sub("data")).ok());
  r = RunSift({"submit", spec, "--dry-run", "--coordinator", "127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(dir.Sub("data/tiny") + " does not exist"));
  ASSERT_TRUE(MakeDirs(dir.Sub("data/tiny")).ok());
  r = RunSift({"submit", spec, "--dry-run", "--coordinator", "127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The spec as it would be submitted: canonical, every field, relative paths made absolute.
  EXPECT_THAT(r.out, HasSubstr("lr: 0.02"));
  EXPECT_THAT(r.out, HasSubstr("workers: 2"));
  EXPECT_THAT(r.out, ::testing::MatchesRegex("(.|\n)*dataset: \"/[^\"]*/data/tiny\"(.|\n)*"));
  auto j = RunSift({"submit", spec, "--dry-run", "-o", "json"});
  ASSERT_EQ(::chdir(cwd.c_str()), 0);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(ParseJson(j.out)["kind"], "JobSpec");

  // The cluster checks run too: a batch the workers cannot share equally.
  const std::string uneven = dir.Sub("uneven.yaml");
  testing::WriteAll(uneven, "dataset: d\ntraining:\n  batch_size: 1001\ncluster:\n  workers: 2\n");
  r = RunSift({"submit", uneven, "--dry-run"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(uneven + ": training.batch_size: 1001 is not a multiple of "
                                        "cluster.workers (2)"));
  const std::string typo = dir.Sub("typo.yaml");
  testing::WriteAll(typo, "dataset: d\ncluster:\n  replicas: 2\n");
  r = RunSift({"submit", typo, "--dry-run"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(typo + ":3: cluster.replicas"));
}

// --resume-from a job's checkpoint directory means its newest complete step-<N>/; a directory
// without a checkpoint is a usage error naming it.
TEST(CliJobs, ResumeFromAJobDirectoryTakesItsNewestCheckpoint) {
  testing::TempDir dir;
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(spec, "dataset: " + dir.Sub("d") + "\n");
  ASSERT_TRUE(MakeDirs(dir.Sub("d")).ok());
  const std::string job = dir.Sub("ckpt/job-1");
  for (const char* step : {"step-000000000006", "step-000000000009", "step-000000000012"}) {
    ASSERT_TRUE(MakeDirs(JoinPath(job, step)).ok());
  }
  testing::WriteAll(JoinPath(job, "step-000000000006/manifest.json"), "{}");
  testing::WriteAll(JoinPath(job, "step-000000000009/manifest.json"), "{}");
  auto r = RunSift({"submit", spec, "--dry-run", "--resume-from", job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("resume_from: \"" + job + "/step-000000000009\""));
  r = RunSift({"submit", spec, "--dry-run", "--resume-from", JoinPath(job, "step-000000000006")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("resume_from: \"" + job + "/step-000000000006\""));
  r = RunSift({"submit", spec, "--dry-run", "--resume-from", dir.Sub("ckpt")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("checkpoint.resume_from " + dir.Sub("ckpt") + ": not a checkpoint"));
}

TEST(CliJobs, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"submit"},                             // missing JOB.yaml
           {"submit", "job.yaml", "--bogus"},      // unknown flag
           {"cancel"},                             // missing JOB
           {"logs"},                               // missing JOB
           {"jobs", "--output", "yaml"},           // bad output format
           {"status", "--connect-timeout", "-1"},  // not positive
           {"local", "--servers", "0"},            // out of range
       }) {
    auto r = RunSift(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_FALSE(r.err.empty()) << args[0];
  }
}

TEST(CliJobs, HelpDocumentsTheExitCodes) {
  for (const char* cmd : {"submit", "status", "jobs", "cancel", "logs", "local"}) {
    auto r = RunSift({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_THAT(r.out, HasSubstr("Exit codes: 0")) << cmd;
    EXPECT_THAT(r.out, HasSubstr("2 usage error")) << cmd;
  }
}

TEST(CliJobs, UnreachableCoordinatorExitsTwoNamingTheAddress) {
  testing::TempDir dir;
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(spec, "dataset: data\n");
  const std::string addr = absl::StrCat("127.0.0.1:", ClosedPort());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"submit", spec}, {"status"}, {"jobs"}, {"cancel", "job-1"}, {"logs", "job-1"}}) {
    std::vector<std::string> full = args;
    for (const char* a : {"--coordinator", addr.c_str(), "--connect-timeout", "0.5"}) {
      full.push_back(a);
    }
    auto r = RunSift(full);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(addr)) << args[0];
    EXPECT_THAT(r.err, HasSubstr("sift coordinator")) << args[0];
    EXPECT_THAT(r.err, HasSubstr("$SIFT_COORDINATOR")) << args[0];
  }
  // Without --coordinator, $SIFT_COORDINATOR names the address.
  ::setenv("SIFT_COORDINATOR", addr.c_str(), 1);
  auto r = RunSift({"jobs", "--connect-timeout", "0.5"});
  ::unsetenv("SIFT_COORDINATOR");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(addr));
}

// ---- with a coordinator ------------------------------------------------------------------------

TEST(CliJobs, RoundTripWithACoordinator) {
  testing::TempDir dir;
  CoordinatorProcess coordinator(dir);
  const std::string& addr = coordinator.address();
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(spec,
                    "dataset: rel/data\nresults_dir: out/results\ncheckpoint: {dir: /abs/ckpt}\n"
                    "cluster: {servers: 1, workers: 1}\n");

  // submit: the id alone (text), or {"job_id": ...} (json).
  auto first = RunSift({"submit", spec, "--coordinator", addr, "--name", "first"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string id1(absl::StripTrailingAsciiWhitespace(first.out));
  EXPECT_FALSE(id1.empty());
  EXPECT_EQ(id1.find('\n'), std::string::npos) << first.out;
  auto second = RunSift({"submit", spec, "--coordinator", addr, "-o", "json"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const nlohmann::json sub = ParseJson(second.out);
  EXPECT_EQ(sub["apiVersion"], "sift/v1");
  const std::string id2 = sub["job_id"];
  EXPECT_NE(id1, id2);

  // jobs: both, in submission order.
  auto jobs = RunSift({"jobs", "--coordinator", addr});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("JOB"));
  EXPECT_THAT(jobs.out, HasSubstr("TEST_AUC"));
  EXPECT_LT(jobs.out.find(id1), jobs.out.find(id2)) << jobs.out;
  EXPECT_THAT(jobs.out, HasSubstr("first"));
  const nlohmann::json list = ParseJson(RunSift({"jobs", "--coordinator", addr, "-o", "json"}).out);
  EXPECT_EQ(list["kind"], "JobList");
  ASSERT_EQ(list["items"].size(), 2u);
  EXPECT_EQ(list["items"][0]["job_id"], id1);
  EXPECT_EQ(list["items"][1]["job_id"], id2);

  // status: the latest by default; json mirrors JobInfo; relative paths were made absolute.
  auto latest = RunSift({"status", "--coordinator", addr});
  ASSERT_EQ(latest.exit_code, 0) << latest.err;
  EXPECT_THAT(latest.out, HasSubstr("job " + id2));
  EXPECT_THAT(latest.out, HasSubstr("PENDING"));
  EXPECT_THAT(latest.out, HasSubstr("last checkpoint: none"));
  auto st = RunSift({"status", id1, "--coordinator", addr, "--output", "json"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  const nlohmann::json job = ParseJson(st.out);
  EXPECT_EQ(job["apiVersion"], "sift/v1");
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["job_id"], id1);
  EXPECT_EQ(job["name"], "first");
  EXPECT_EQ(job["state"], "PENDING");
  EXPECT_EQ(job["finished"], false);
  EXPECT_EQ(job["epochs"], 3);
  EXPECT_TRUE(job["epochs_done"].is_array());
  EXPECT_TRUE(job["last_checkpoint"].is_object());
  for (const char* field : {"generation", "recoveries", "epoch", "global_step", "steps_per_epoch",
                            "samples_total", "samples_per_second", "oracle_test_auc", "submit_time",
                            "time_to_train_s", "workers", "servers"}) {
    EXPECT_TRUE(job.contains(field)) << field;
  }
  const std::string cwd = std::filesystem::current_path().string();
  const std::string yaml = job["spec_yaml"];
  EXPECT_THAT(yaml, HasSubstr("\"" + cwd + "/rel/data\"")) << yaml;
  EXPECT_THAT(yaml, HasSubstr("\"" + cwd + "/out/results\"")) << yaml;
  EXPECT_THAT(yaml, HasSubstr("\"/abs/ckpt\"")) << yaml;

  // logs: text and json.
  auto logs = RunSift({"logs", id1, "--coordinator", addr});
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("submitted"));
  const nlohmann::json lj =
      ParseJson(RunSift({"logs", id1, "--coordinator", addr, "-o", "json"}).out);
  EXPECT_EQ(lj["kind"], "JobLogs");
  EXPECT_FALSE(lj["lines"].empty());
  EXPECT_EQ(lj["finished"], false);

  // cancel: the new state; again: the operation fails (1); the cancelled job still shows (0).
  auto cancel = RunSift({"cancel", id1, "--coordinator", addr});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_THAT(cancel.out, HasSubstr(id1 + ": CANCELLED"));
  auto again = RunSift({"cancel", id1, "--coordinator", addr});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr("FAILED_PRECONDITION"));
  auto cancelled = RunSift({"status", id1, "--coordinator", addr, "-o", "json"});
  EXPECT_EQ(cancelled.exit_code, 0);
  EXPECT_EQ(ParseJson(cancelled.out)["state"], "CANCELLED");
  // logs --follow of a finished job ends at once, json lines one object per line.
  auto follow = RunSift({"logs", id1, "--follow", "--coordinator", addr, "-o", "json"});
  ASSERT_EQ(follow.exit_code, 0) << follow.err;
  size_t lines = 0;
  for (absl::string_view l : absl::StrSplit(follow.out, '\n', absl::SkipEmpty())) {
    EXPECT_EQ(ParseJson(std::string(l))["kind"], "JobLogLine");
    ++lines;
  }
  EXPECT_GE(lines, 2u);  // submitted, cancelled

  // Unknown jobs: 2.
  for (const char* cmd : {"status", "cancel", "logs"}) {
    auto r = RunSift({cmd, "no-such-job", "--coordinator", addr});
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("no-such-job")) << cmd;
  }
}

TEST(CliJobs, SubmitWaitMirrorsACancelledJob) {
  testing::TempDir dir;
  CoordinatorProcess coordinator(dir);
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(spec, "dataset: data\ncluster: {servers: 1, workers: 1}\n");
  SubprocessOptions o;
  o.argv = {SIFT_BINARY, "submit", spec, "--wait", "--coordinator", coordinator.address()};
  o.log_path = dir.Sub("wait.log");
  auto waiting = Subprocess::Start(o);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  // The job id is its first line.
  const std::string first_line = testing::WaitForFile(o.log_path, 30);
  ASSERT_FALSE(first_line.empty());
  const std::string id = first_line.substr(0, first_line.find('\n'));
  auto cancel = RunSift({"cancel", id, "--coordinator", coordinator.address()});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  const ExitInfo exit = waiting->Wait();
  EXPECT_EQ(exit.ShellCode(), 1);
  const std::string out = testing::ReadAll(o.log_path);
  EXPECT_THAT(out, HasSubstr("job " + id + " CANCELLED"));
  EXPECT_THAT(out, HasSubstr("sift: error: job " + id + " CANCELLED"));
}

// The coordinator returns a job's log in pages (10,000 lines): `sift logs` without --follow
// printed only the first page of a longer log.
TEST(CliJobs, LogsPrintsEveryLineOfALogLongerThanOnePage) {
  testing::TempDir dir;
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(spec, "dataset: data\ncluster: {servers: 1, workers: 1}\n");
  const int kExtra = 10050;
  {
    CoordinatorProcess coordinator(dir);
    auto submit = RunSift({"submit", spec, "--coordinator", coordinator.address()});
    ASSERT_EQ(submit.exit_code, 0) << submit.err;
  }
  // The log is plain appended lines under the state dir; a restarted coordinator reloads it.
  {
    std::string extra;
    for (int i = 0; i < kExtra; ++i) absl::StrAppend(&extra, "event ", i, "\n");
    const std::string log = dir.Sub("state/jobs/job-1.log");
    testing::WriteAll(log, testing::ReadAll(log) + extra);
  }
  std::filesystem::remove(dir.Sub("coord.port"));
  CoordinatorProcess coordinator(dir);
  const std::string& addr = coordinator.address();
  auto text = RunSift({"logs", "job-1", "--coordinator", addr});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const std::vector<std::string> lines = absl::StrSplit(text.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kExtra + 1));  // "submitted" + the extra events
  EXPECT_THAT(lines.front(), HasSubstr("submitted"));
  EXPECT_EQ(lines.back(), absl::StrCat("event ", kExtra - 1));
  const nlohmann::json j =
      ParseJson(RunSift({"logs", "job-1", "--coordinator", addr, "-o", "json"}).out);
  ASSERT_TRUE(j["lines"].is_array());
  EXPECT_EQ(j["lines"].size(), static_cast<size_t>(kExtra + 1));
  EXPECT_EQ(j["next_offset"], kExtra + 1);
}

TEST(CliJobs, SubmitWaitOfACompletedJobOnACluster) {
  testing::TempDir dir;
  auto gen = RunSift({"data", "gen", "--preset", "tiny", "--seed", "1", "--users", "200", "--items",
                      "2000", "--categories", "40", "--out", dir.Sub("data")});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  testing::TestClusterOptions co;
  co.servers = 1;
  co.workers = 1;
  testing::TestCluster cluster(dir, "c", co);
  testing::TestJob tj;
  tj.dataset = dir.Sub("data");
  tj.epochs = 1;
  tj.batch_size = 256;
  tj.max_steps_per_epoch = 4;
  tj.train_eval_samples = 512;
  tj.servers = 1;
  tj.workers = 1;
  tj.results_dir = dir.Sub("results");
  const std::string spec = dir.Sub("job.yaml");
  testing::WriteAll(spec, tj.Yaml());

  auto r = RunSift(
      {"submit", spec, "--wait", "--coordinator", cluster.coordinator_address(), "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << "\n" << cluster.AllErrors();
  const nlohmann::json job = ParseJson(r.out);  // the finished Job object only
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["state"], "COMPLETED");
  EXPECT_EQ(job["finished"], true);
  ASSERT_EQ(job["epochs_done"].size(), 1u);
  const double auc = job["epochs_done"][0]["test_auc"];
  EXPECT_GT(auc, 0.5);
  EXPECT_LE(auc, 1.0);

  const std::string id = job["job_id"];
  auto status = RunSift({"status", id, "--coordinator", cluster.coordinator_address()});
  ASSERT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.out, HasSubstr("COMPLETED"));
  EXPECT_THAT(status.out, HasSubstr("test_auc"));
  auto follow = RunSift({"logs", id, "-f", "--coordinator", cluster.coordinator_address()});
  ASSERT_EQ(follow.exit_code, 0) << follow.err;
  EXPECT_THAT(follow.out, HasSubstr("COMPLETED"));
  auto jobs = RunSift({"jobs", "--coordinator", cluster.coordinator_address()});
  EXPECT_THAT(jobs.out, HasSubstr("COMPLETED"));
  EXPECT_THAT(jobs.out, Not(HasSubstr("PENDING")));
}

}  // namespace
}  // namespace sift
