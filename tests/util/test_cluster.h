// TestCluster: a whole sift cluster of real processes on loopback for integration tests — one
// `sift coordinator`, S `sift embedding-server --coordinator` and W `sift worker`, each started
// with --port 0 and a port file, logs under the test's directory. Members can be killed and
// restarted one by one (fault tests); the coordinator restarts on its port with its state dir.
// Every process is killed and reaped on destruction (SiftProcess), so a failing test leaves none.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/coordinator/client.h"
#include "tests/util/test_util.h"

namespace sift::testing {

struct TestClusterOptions {
  int servers = 2;
  int workers = 2;
  int server_threads = 1;
  int worker_threads = 1;
  int lease_ms = 1500;  // short leases: a killed member is noticed quickly
  int heartbeat_ms = 200;
  bool metrics = false;            // --metrics-port 0 on every process
  int worker_exit_after_jobs = 0;  // sift worker --exit-after-jobs
  // Security on: a `sift certs init` directory (coordinator/, server-<i>/, worker-<i>/, client/);
  // each process gets --tls-dir of its own member directory. The coordinator reads
  // `tokens_file`; client() connects with client/ and `client_token_file` ("" = no token).
  std::string tls_root;
  std::string tokens_file;
  std::string client_token_file;
  // The coordinator's --results-root / --checkpoint-root ("" = the test's directory).
  std::string results_root;
  std::string checkpoint_root;
};

class TestCluster {
 public:
  // Starts everything and waits until every process wrote its port file (ADD_FAILURE otherwise).
  TestCluster(const TempDir& dir, const std::string& name, const TestClusterOptions& options);
  ~TestCluster();

  const std::string& coordinator_address() const { return coordinator_address_; }
  // The security of client() (plaintext when options.tls_root is "").
  SecurityOptions ClientSecurity() const;
  coordinator::CoordinatorClient& client() { return *client_; }

  // (Re)starts one member; a restart gets fresh log files (<name>-<role><i>-<n>.out/.err).
  void StartCoordinator();
  void StartServer(int shard);
  // extra_args: more `sift worker` flags (e.g. a fault-injection flag).
  void StartWorker(int index, const std::vector<std::string>& extra_args = {});
  // Sends `sig` to the member and reaps it; returns its exit code (128 + signal when killed).
  int StopCoordinator(int sig);
  int StopServer(int shard, int sig);
  int StopWorker(int index, int sig);
  // The process id of server `shard` (a test that kills it behind the cluster's back).
  int ServerPid(int shard) const;
  // Waits for worker `index` to exit by itself (--exit-after-jobs): its exit code, -1 on timeout.
  int WaitWorkerExit(int index, double timeout_s);
  std::string WorkerOutput(int index) const;

  // host:port of every running process's /metrics (with options.metrics).
  std::vector<std::string> MetricsTargets() const;

  // Submits `spec_yaml` (ADD_FAILURE and "" on error).
  std::string Submit(const std::string& spec_yaml);
  // Polls GetJob every 50 ms until `done(job)` or `timeout_s`; returns the last JobInfo seen
  // (ADD_FAILURE on timeout, with the job's state and message). Gives up at once, with an
  // ADD_FAILURE naming it, when a member exits by itself (a crash: nothing would restart it;
  // members the test stopped are reaped and do not count, nor workers with --exit-after-jobs).
  coordinator::pb::JobInfo WaitForJob(
      const std::string& job_id, const std::function<bool(const coordinator::pb::JobInfo&)>& done,
      double timeout_s);
  // WaitForJob until the job is finished (COMPLETED / FAILED / CANCELLED).
  coordinator::pb::JobInfo WaitForFinish(const std::string& job_id, double timeout_s);
  // The job's log lines, joined with '\n'.
  std::string Logs(const std::string& job_id);
  // "<member> exited by itself with code N (killed by ...)" for the first member that exited
  // without the test stopping it (see WaitForJob), else "".
  std::string UnexpectedExit() const;
  // Every process's stderr (and each worker's stdout, its lifecycle log), for failure messages.
  std::string AllErrors() const;

 private:
  struct Member {
    std::unique_ptr<SiftProcess> process;
    std::string metrics;  // host:port or ""
    int starts = 0;
  };
  // Starts `args` as member `m` named `label`; waits for its port file; returns its content.
  std::string Launch(Member* m, const std::string& label, std::vector<std::string> args);

  const TempDir& dir_;
  const std::string name_;
  const TestClusterOptions options_;
  int coordinator_port_ = 0;
  std::string coordinator_address_;
  Member coordinator_;
  std::vector<Member> servers_, workers_;
  std::unique_ptr<coordinator::CoordinatorClient> client_;
};

// A job spec for the tests (YAML text): model sim with the default dims on `dataset`, seed 7,
// order shuffled; the other fields as given ("" checkpoint_dir / results_dir = none).
struct TestJob {
  std::string dataset;
  int epochs = 2;
  int batch_size = 512;
  int max_steps_per_epoch = 0;
  int train_eval_samples = 2048;
  int staleness = 0;
  int servers = 2;
  int workers = 2;
  int threads_per_worker = 1;
  std::string checkpoint_dir;
  int checkpoint_every_steps = 0;
  bool checkpoint_every_epoch = true;
  int checkpoint_keep = 3;
  std::string results_dir;
  uint64_t seed = 7;
  std::string extra_yaml;  // appended as is (top-level keys, e.g. "tables: {...}\n")
  std::string model_yaml;  // appended under `model:` (indented keys, e.g. "  gsu: hard\n")
  std::string Yaml() const;
};

}  // namespace sift::testing
