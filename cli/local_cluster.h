// LocalCluster: the processes of `sift local` — one coordinator, S embedding servers and W workers
// as child processes of this one on loopback, each started as the same sift binary with port 0
// and a --port-file that is waited for. Children die with this process (PR_SET_PDEATHSIG), run in
// their own process groups (a terminal's Ctrl-C reaches only the launcher, which stops them in
// order), and write their output to <work_dir>/logs/<role>-<index>.log. Supervise() restarts a
// child that exited (same role and index; a server keeps its shard, the coordinator its port and
// state dir) within a restart budget. The cluster file and the Prometheus file_sd targets are
// rewritten atomically after every (re)start. Not thread-safe: one thread (the one that lives
// longest, for the death signal — main) starts, supervises and stops the cluster.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/status.h"
#include "common/subprocess.h"

namespace sift::cli {

struct LocalClusterOptions {
  std::string binary;    // the sift binary the children run
  std::string work_dir;  // REQUIRES: exists; state/, snapshots/, logs/, ports/ are made in it
  int servers = 2;
  int workers = 1;
  int server_threads = 1;          // embedding-server --threads
  int worker_threads = -1;         // worker --threads (-1: the job's cluster.threads_per_worker)
  int max_restarts = 3;            // per child
  std::string cluster_file;        // "" = none; JSON: the coordinator and every child
  std::string prometheus_targets;  // "" = none; Prometheus file_sd JSON of every /metrics
  absl::Duration start_timeout = absl::Seconds(120);  // per child, until its port file appears
  // Security on (common/security.h): a `sift certs init` directory; each child gets --tls-dir of
  // its own member directory (coordinator, server-<i>, worker-<i>), the coordinator also
  // --tokens-file `tokens_file`. "" = plaintext.
  std::string security_dir;
  std::string tokens_file;
  // Polled while waiting for children; true aborts the wait (CANCELLED).
  std::function<bool()> interrupted = [] { return false; };
};

class LocalCluster {
 public:
  // Starts the coordinator, waits for its port, then the servers and workers, and waits for all
  // of their port files. On an error every child started so far is stopped.
  static StatusOr<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();  // Stop(5 s) when still running
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // "127.0.0.1:<port>" of the coordinator (the same across its restarts).
  const std::string& coordinator_address() const { return coordinator_address_; }

  // Reaps children that exited and restarts each one, appending a line per event to *events
  // ("worker 0 exited (killed by signal 9); restarting (1 of 3)"). FAILED_PRECONDITION once a
  // child exited more than max_restarts times, or when a restart fails.
  Status Supervise(std::vector<std::string>* events);

  // SIGTERM to every child, up to `grace` for them to exit, then SIGKILL; reaps all.
  void Stop(absl::Duration grace);

  // Pids of the running children.
  std::vector<pid_t> pids() const;

 private:
  struct Child {
    std::string role;  // "coordinator", "embedding-server", "worker"
    int index = 0;
    Subprocess process;
    int port = -1;          // gRPC port (coordinator, server), -1 = none
    int metrics_port = -1;  // /metrics port, -1 = none
    int restarts = 0;
    std::string name() const;  // "worker 0"
  };

  explicit LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}
  std::string LogPath(const Child& c) const;
  std::string PortFile(const Child& c) const;
  std::vector<std::string> Argv(const Child& c) const;      // RoleArgv + the security flags
  std::vector<std::string> RoleArgv(const Child& c) const;  // the role's own flags
  Status Launch(Child* c);                                  // starts the process
  Status AwaitPorts(Child* c);  // waits for its port file, reads the ports
  Status WriteDescriptionFiles() const;

  LocalClusterOptions options_;
  std::string coordinator_address_;
  int coordinator_port_ = 0;     // 0 until the first start bound it
  std::vector<Child> children_;  // coordinator first, then servers, then workers
};

}  // namespace sift::cli
