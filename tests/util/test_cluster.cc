#include "tests/util/test_cluster.h"

#include <signal.h>
#include <string.h>

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace sift::testing {
namespace {

std::vector<int> Ports(const std::string& port_file_content) {
  std::vector<int> out;
  for (absl::string_view p :
       absl::StrSplit(port_file_content, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(p, &v)) out.push_back(v);
  }
  return out;
}

}  // namespace

TestCluster::TestCluster(const TempDir& dir, const std::string& name,
                         const TestClusterOptions& options)
    : dir_(dir), name_(name), options_(options) {
  servers_.resize(options.servers);
  workers_.resize(options.workers);
  StartCoordinator();
  coordinator::CoordinatorClientOptions co;
  co.address = coordinator_address_;
  co.security = ClientSecurity();
  auto client = coordinator::CoordinatorClient::Connect(co);
  EXPECT_TRUE(client.ok()) << client.status() << "\n" << AllErrors();
  if (client.ok()) client_ = std::move(*client);
  for (int i = 0; i < options.servers; ++i) StartServer(i);
  for (int i = 0; i < options.workers; ++i) StartWorker(i);
}

SecurityOptions TestCluster::ClientSecurity() const {
  SecurityOptions s;
  if (options_.tls_root.empty()) return s;
  s.tls_dir = options_.tls_root + "/client";
  s.token_file = options_.client_token_file;
  return s;
}

TestCluster::~TestCluster() {
  // Workers first (they would report the servers' deaths), then servers, then the coordinator.
  for (Member& m : workers_) m.process.reset();
  for (Member& m : servers_) m.process.reset();
  coordinator_.process.reset();
}

std::string TestCluster::Launch(Member* m, const std::string& label,
                                std::vector<std::string> args) {
  const std::string stem = absl::StrCat(name_, "-", label, "-", m->starts++);
  const std::string port_file = dir_.Sub(stem + ".port");
  args.push_back("--port-file");
  args.push_back(port_file);
  if (!options_.tls_root.empty()) {
    // Member directories are named as their certificates: coordinator, server-<i>, worker-<i>.
    absl::string_view index = label;
    std::string member = label;
    if (absl::ConsumePrefix(&index, "server")) member = absl::StrCat("server-", index);
    if (absl::ConsumePrefix(&index, "worker")) member = absl::StrCat("worker-", index);
    args.push_back("--tls-dir");
    args.push_back(options_.tls_root + "/" + member);
    if (label == "coordinator" && !options_.tokens_file.empty()) {
      args.push_back("--tokens-file");
      args.push_back(options_.tokens_file);
    }
  }
  m->process = std::make_unique<SiftProcess>(args, dir_.Sub(stem));
  const std::string ports = WaitForFile(port_file);
  EXPECT_FALSE(ports.empty()) << label << " wrote no port file\n" << m->process->Err();
  return ports;
}

void TestCluster::StartCoordinator() {
  std::vector<std::string> args = {
      "coordinator",
      "--port",
      std::to_string(coordinator_port_),  // 0 the first time
      "--bind",
      "127.0.0.1",
      "--state-dir",
      dir_.Sub(name_ + "-state"),
      "--lease-ms",
      std::to_string(options_.lease_ms),
      "--heartbeat-ms",
      std::to_string(options_.heartbeat_ms),
      "--metrics-port",
      options_.metrics ? "0" : "-1",
      "--results-root",
      options_.results_root.empty() ? dir_.path() : options_.results_root,
      "--checkpoint-root",
      options_.checkpoint_root.empty() ? dir_.path() : options_.checkpoint_root};
  const std::vector<int> ports = Ports(Launch(&coordinator_, "coordinator", args));
  if (ports.empty()) return;
  coordinator_port_ = ports[0];
  coordinator_address_ = absl::StrCat("127.0.0.1:", coordinator_port_);
  coordinator_.metrics =
      ports.size() > 1 && ports[1] > 0 ? absl::StrCat("127.0.0.1:", ports[1]) : "";
}

void TestCluster::StartServer(int shard) {
  std::vector<std::string> args = {"embedding-server",
                                   "--port",
                                   "0",
                                   "--bind",
                                   "127.0.0.1",
                                   "--shard",
                                   std::to_string(shard),
                                   "--num-shards",
                                   std::to_string(options_.servers),
                                   "--snapshot-dir",
                                   dir_.Sub(name_ + "-snapshots"),
                                   "--threads",
                                   std::to_string(options_.server_threads),
                                   "--coordinator",
                                   coordinator_address_,
                                   "--advertise-host",
                                   "127.0.0.1",
                                   "--metrics-port",
                                   options_.metrics ? "0" : "-1"};
  const std::vector<int> ports =
      Ports(Launch(&servers_[shard], absl::StrCat("server", shard), args));
  servers_[shard].metrics =
      ports.size() > 1 && ports[1] > 0 ? absl::StrCat("127.0.0.1:", ports[1]) : "";
}

void TestCluster::StartWorker(int index, const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {"worker",
                                   "--coordinator",
                                   coordinator_address_,
                                   "--advertise-host",
                                   "127.0.0.1",
                                   "--threads",
                                   std::to_string(options_.worker_threads),
                                   "--metrics-port",
                                   options_.metrics ? "0" : "-1",
                                   "--exit-after-jobs",
                                   std::to_string(options_.worker_exit_after_jobs)};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const std::vector<int> ports =
      Ports(Launch(&workers_[index], absl::StrCat("worker", index), args));
  workers_[index].metrics =
      !ports.empty() && ports[0] > 0 ? absl::StrCat("127.0.0.1:", ports[0]) : "";
}

int TestCluster::StopCoordinator(int sig) { return coordinator_.process->Stop(sig); }
int TestCluster::StopServer(int shard, int sig) { return servers_[shard].process->Stop(sig); }
int TestCluster::StopWorker(int index, int sig) { return workers_[index].process->Stop(sig); }
int TestCluster::ServerPid(int shard) const { return servers_[shard].process->pid(); }
int TestCluster::WaitWorkerExit(int index, double timeout_s) {
  return workers_[index].process->WaitExit(timeout_s);
}
std::string TestCluster::WorkerOutput(int index) const { return workers_[index].process->Out(); }

std::vector<std::string> TestCluster::MetricsTargets() const {
  std::vector<std::string> out;
  if (!coordinator_.metrics.empty()) out.push_back(coordinator_.metrics);
  for (const Member& m : servers_) {
    if (!m.metrics.empty()) out.push_back(m.metrics);
  }
  for (const Member& m : workers_) {
    if (!m.metrics.empty()) out.push_back(m.metrics);
  }
  return out;
}

std::string TestCluster::Submit(const std::string& spec_yaml) {
  if (client_ == nullptr) return "";
  auto id = client_->SubmitJob(spec_yaml, "test-job.yaml");
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : "";
}

coordinator::pb::JobInfo TestCluster::WaitForJob(
    const std::string& job_id, const std::function<bool(const coordinator::pb::JobInfo&)>& done,
    double timeout_s) {
  coordinator::pb::JobInfo last;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string died = UnexpectedExit();
    if (client_ != nullptr) {
      auto job = client_->GetJob(job_id);
      if (job.ok()) {
        last = *job;
        if (done(last)) return last;
      }
    }
    // Checked before the poll above: the member exited before that last look at the job, and
    // nothing restarts it, so the job cannot get where the test waits for it to.
    if (!died.empty()) {
      ADD_FAILURE() << died << " while waiting for " << job_id << ": state "
                    << coordinator::JobStateName(last.state()) << " (" << last.message() << ")\n"
                    << "job log:\n"
                    << Logs(job_id) << "\nprocess errors:\n"
                    << AllErrors();
      return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "timed out after " << timeout_s << " s waiting for " << job_id << ": state "
                << coordinator::JobStateName(last.state()) << " (" << last.message() << ")\n"
                << "job log:\n"
                << Logs(job_id) << "\nprocess errors:\n"
                << AllErrors();
  return last;
}

coordinator::pb::JobInfo TestCluster::WaitForFinish(const std::string& job_id, double timeout_s) {
  return WaitForJob(
      job_id, [](const coordinator::pb::JobInfo& j) { return coordinator::IsFinished(j.state()); },
      timeout_s);
}

std::string TestCluster::Logs(const std::string& job_id) {
  if (client_ == nullptr) return "";
  auto logs = client_->GetLogs(job_id, 0);
  if (!logs.ok()) return logs.status().ToString();
  return absl::StrJoin(logs->lines(), "\n");
}

std::string TestCluster::UnexpectedExit() const {
  auto exited = [](const Member& m, const std::string& label) -> std::string {
    const int code = m.process == nullptr ? -1 : m.process->PeekExit();
    if (code < 0) return "";
    std::string what = absl::StrCat(label, " exited by itself with code ", code);
    const char* sig = code > 128 ? sigabbrev_np(code - 128) : nullptr;
    if (sig != nullptr) absl::StrAppend(&what, " (killed by SIG", sig, ")");
    return what;
  };
  std::string out = exited(coordinator_, "coordinator");
  for (size_t i = 0; i < servers_.size() && out.empty(); ++i) {
    out = exited(servers_[i], absl::StrCat("server ", i));
  }
  // --exit-after-jobs: workers end with their jobs.
  for (size_t i = 0; i < workers_.size() && out.empty() && options_.worker_exit_after_jobs == 0;
       ++i) {
    out = exited(workers_[i], absl::StrCat("worker ", i));
  }
  return out;
}

std::string TestCluster::AllErrors() const {
  std::string out;
  auto add = [&](const Member& m, const std::string& label) {
    if (m.process == nullptr) return;
    const int exit_code = m.process->PeekExit();
    if (exit_code >= 0) absl::StrAppend(&out, "--- ", label, " exited with code ", exit_code, "\n");
    const std::string err = m.process->Err();
    if (!err.empty()) absl::StrAppend(&out, "--- ", label, " stderr:\n", err, "\n");
    // A worker's stdout is its lifecycle log (assignments started, abandoned, failed).
    if (label.rfind("worker", 0) == 0) {
      const std::string log = m.process->Out();
      if (!log.empty()) absl::StrAppend(&out, "--- ", label, " stdout:\n", log, "\n");
    }
  };
  add(coordinator_, "coordinator");
  for (size_t i = 0; i < servers_.size(); ++i) add(servers_[i], absl::StrCat("server ", i));
  for (size_t i = 0; i < workers_.size(); ++i) add(workers_[i], absl::StrCat("worker ", i));
  return out;
}

std::string TestJob::Yaml() const {
  std::string y = absl::StrCat("dataset: \"", dataset, "\"\nmodel:\n  type: sim\n", model_yaml);
  absl::StrAppend(&y, "training:\n  epochs: ", epochs, "\n  batch_size: ", batch_size,
                  "\n  staleness: ", staleness, "\n  seed: ", seed,
                  "\n  train_eval_samples: ", train_eval_samples,
                  "\n  max_steps_per_epoch: ", max_steps_per_epoch, "\n");
  absl::StrAppend(&y, "cluster:\n  servers: ", servers, "\n  workers: ", workers,
                  "\n  threads_per_worker: ", threads_per_worker, "\n");
  if (!checkpoint_dir.empty()) {
    absl::StrAppend(&y, "checkpoint:\n  dir: \"", checkpoint_dir,
                    "\"\n  every_steps: ", checkpoint_every_steps,
                    "\n  every_epoch: ", checkpoint_every_epoch ? "true" : "false",
                    "\n  keep: ", checkpoint_keep, "\n");
  }
  if (!results_dir.empty()) absl::StrAppend(&y, "results_dir: \"", results_dir, "\"\n");
  absl::StrAppend(&y, extra_yaml);
  return y;
}

}  // namespace sift::testing
