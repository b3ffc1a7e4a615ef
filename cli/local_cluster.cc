#include "cli/local_cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "nlohmann/json.hpp"

namespace sift::cli {
namespace {

constexpr char kLoopback[] = "127.0.0.1";

// The last `n` lines of a child's log, for an error message.
std::string LogTail(const std::string& path, size_t n) {
  StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok() || text->empty()) return "(its log is empty)";
  std::vector<std::string> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<ptrdiff_t>(n));
  return absl::StrCat("last lines of its log:\n    ", absl::StrJoin(lines, "\n    "));
}

}  // namespace

std::string LocalCluster::Child::name() const {
  return absl::StrCat(role == "embedding-server" ? "embedding server" : role, " ", index);
}

std::string LocalCluster::LogPath(const Child& c) const {
  return JoinPath(JoinPath(options_.work_dir, "logs"), absl::StrCat(c.role, "-", c.index, ".log"));
}

std::string LocalCluster::PortFile(const Child& c) const {
  return JoinPath(JoinPath(options_.work_dir, "ports"),
                  absl::StrCat(c.role, "-", c.index, ".port"));
}

std::vector<std::string> LocalCluster::Argv(const Child& c) const {
  std::vector<std::string> argv = RoleArgv(c);
  if (!options_.security_dir.empty()) {
    const std::string member = c.role == "coordinator"        ? std::string("coordinator")
                               : c.role == "embedding-server" ? absl::StrCat("server-", c.index)
                                                              : absl::StrCat("worker-", c.index);
    argv.push_back("--tls-dir");
    argv.push_back(JoinPath(options_.security_dir, member));
    if (c.role == "coordinator" && !options_.tokens_file.empty()) {
      argv.push_back("--tokens-file");
      argv.push_back(options_.tokens_file);
    }
  }
  return argv;
}

std::vector<std::string> LocalCluster::RoleArgv(const Child& c) const {
  const std::string& bin = options_.binary;
  const std::string port_file = PortFile(c);
  if (c.role == "coordinator") {
    // A restarted coordinator keeps its port (clients and members know only that address).
    return {bin, "coordinator", "--port", std::to_string(coordinator_port_), "--bind", kLoopback,
            "--state-dir", JoinPath(options_.work_dir, "state"),
            // One user's cluster on this machine: its spec may name any directory the user can
            // write (sift local resolves the spec's symbolic links before it submits).
            "--results-root", "/", "--checkpoint-root", "/", "--metrics-port", "0", "--port-file",
            port_file};
  }
  if (c.role == "embedding-server") {
    return {bin,
            "embedding-server",
            "--port",
            "0",
            "--bind",
            kLoopback,
            "--shard",
            std::to_string(c.index),
            "--num-shards",
            std::to_string(options_.servers),
            "--snapshot-dir",
            JoinPath(options_.work_dir, "snapshots"),
            "--coordinator",
            coordinator_address_,
            "--advertise-host",
            kLoopback,
            "--metrics-port",
            "0",
            "--threads",
            std::to_string(options_.server_threads),
            "--port-file",
            port_file};
  }
  return {bin,
          "worker",
          "--coordinator",
          coordinator_address_,
          "--advertise-host",
          kLoopback,
          "--metrics-port",
          "0",
          "--threads",
          std::to_string(options_.worker_threads),
          "--port-file",
          port_file};
}

Status LocalCluster::Launch(Child* c) {
  // A stale port file of the previous incarnation must not be mistaken for the new one's.
  ::unlink(PortFile(*c).c_str());
  SubprocessOptions o;
  o.argv = Argv(*c);
  o.log_path = LogPath(*c);
  {
    // A header line in the log makes restarts visible there too.
    std::FILE* log = std::fopen(o.log_path.c_str(), "a");
    if (log != nullptr) {
      std::fprintf(log, "==== sift local: %s (start %d): %s\n", c->name().c_str(), c->restarts + 1,
                   absl::StrJoin(o.argv, " ").c_str());
      std::fclose(log);
    }
  }
  SIFT_ASSIGN_OR_RETURN(c->process, Subprocess::Start(o));
  return absl::OkStatus();
}

Status LocalCluster::AwaitPorts(Child* c) {
  const std::string path = PortFile(*c);
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  while (true) {
    if (PathExists(path)) {
      SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
      std::vector<std::string> fields =
          absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
      std::vector<int> ports;
      for (const std::string& f : fields) {
        int p = 0;
        if (!absl::SimpleAtoi(f, &p)) {
          return absl::InternalError(absl::StrCat(path, ": not a port: '", f, "'"));
        }
        ports.push_back(p);
      }
      // The worker writes "<metrics-port>", the others "<port> <metrics-port>".
      const size_t want = c->role == "worker" ? 1 : 2;
      if (ports.size() != want) {
        return absl::InternalError(
            absl::StrCat(path, ": expected ", want, " port(s), got '", text, "'"));
      }
      c->port = want == 2 ? ports[0] : -1;
      c->metrics_port = ports.back();
      return absl::OkStatus();
    }
    ExitInfo exit;
    if (c->process.Poll(&exit)) {
      return absl::FailedPreconditionError(absl::StrCat(
          c->name(), " ", exit.Describe(), " while starting; ", LogTail(LogPath(*c), 15)));
    }
    if (options_.interrupted()) {
      return absl::CancelledError(absl::StrCat("interrupted while starting ", c->name()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          c->name(), " did not write ", path, " within ",
          absl::FormatDuration(options_.start_timeout), "; ", LogTail(LogPath(*c), 15)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions options) {
  if (options.servers < 1 || options.workers < 1) {
    return absl::InvalidArgumentError("a local cluster needs at least 1 server and 1 worker");
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  const LocalClusterOptions& o = cluster->options_;
  for (const char* sub : {"state", "snapshots", "logs", "ports"}) {
    SIFT_RETURN_IF_ERROR(MakeDirs(JoinPath(o.work_dir, sub)));
  }
  std::vector<Child>& children = cluster->children_;
  children.resize(1 + o.servers + o.workers);
  children[0].role = "coordinator";
  for (int i = 0; i < o.servers; ++i) {
    children[1 + i].role = "embedding-server";
    children[1 + i].index = i;
  }
  for (int i = 0; i < o.workers; ++i) {
    children[1 + o.servers + i].role = "worker";
    children[1 + o.servers + i].index = i;
  }
  // On any error below, the destructor stops what was started.
  SIFT_RETURN_IF_ERROR(cluster->Launch(&children[0]));
  SIFT_RETURN_IF_ERROR(cluster->AwaitPorts(&children[0]));
  cluster->coordinator_port_ = children[0].port;
  cluster->coordinator_address_ = absl::StrCat(kLoopback, ":", children[0].port);
  for (size_t i = 1; i < children.size(); ++i) {
    SIFT_RETURN_IF_ERROR(cluster->Launch(&children[i]));
  }
  for (size_t i = 1; i < children.size(); ++i) {
    SIFT_RETURN_IF_ERROR(cluster->AwaitPorts(&children[i]));
  }
  SIFT_RETURN_IF_ERROR(cluster->WriteDescriptionFiles());
  return cluster;
}

LocalCluster::~LocalCluster() { Stop(absl::Seconds(5)); }

Status LocalCluster::Supervise(std::vector<std::string>* events) {
  bool restarted = false;
  for (Child& c : children_) {
    ExitInfo exit;
    if (!c.process.running() || !c.process.Poll(&exit)) continue;
    if (c.restarts >= options_.max_restarts) {
      return absl::FailedPreconditionError(absl::StrCat(
          c.name(), " exited (", exit.Describe(), ") after ", c.restarts,
          " restart(s) (--max-restarts ", options_.max_restarts, "); ", LogTail(LogPath(c), 10)));
    }
    ++c.restarts;
    events->push_back(absl::StrCat(c.name(), " exited (", exit.Describe(), "); restarting (",
                                   c.restarts, " of ", options_.max_restarts, ")"));
    SIFT_RETURN_IF_ERROR(Launch(&c));
    Status s = AwaitPorts(&c);
    if (!s.ok()) return Annotate(s, absl::StrCat("restart of ", c.name()));
    restarted = true;
  }
  if (restarted) SIFT_RETURN_IF_ERROR(WriteDescriptionFiles());
  return absl::OkStatus();
}

void LocalCluster::Stop(absl::Duration grace) {
  std::vector<Subprocess*> all;
  for (Child& c : children_) all.push_back(&c.process);
  StopAll(all, grace);
}

std::vector<pid_t> LocalCluster::pids() const {
  std::vector<pid_t> out;
  for (const Child& c : children_) {
    if (c.process.running()) out.push_back(c.process.pid());
  }
  return out;
}

Status LocalCluster::WriteDescriptionFiles() const {
  nlohmann::json children = nlohmann::json::array();
  nlohmann::json targets = nlohmann::json::array();
  for (const Child& c : children_) {
    const std::string metrics =
        c.metrics_port > 0 ? absl::StrCat(kLoopback, ":", c.metrics_port) : "";
    children.push_back({{"role", c.role},
                        {"index", c.index},
                        {"pid", c.process.pid()},
                        {"port", c.port},
                        {"address", c.port > 0 ? absl::StrCat(kLoopback, ":", c.port) : ""},
                        {"metrics_port", c.metrics_port},
                        {"metrics_address", metrics},
                        {"restarts", c.restarts},
                        {"log", LogPath(c)}});
    if (!metrics.empty()) {
      targets.push_back({{"targets", {metrics}},
                         {"labels", {{"role", c.role}, {"index", std::to_string(c.index)}}}});
    }
  }
  // Both files may go to directories that do not exist yet (deploy/prometheus/targets/).
  const auto write = [](const std::string& path, const std::string& text) -> Status {
    const std::string dir = std::filesystem::path(path).parent_path().string();
    if (!dir.empty()) SIFT_RETURN_IF_ERROR(MakeDirs(dir));
    return WriteFileAtomic(path, text);
  };
  if (!options_.cluster_file.empty()) {
    const nlohmann::json doc = {{"coordinator", coordinator_address_},
                                {"launcher_pid", static_cast<int64_t>(::getpid())},
                                {"work_dir", options_.work_dir},
                                {"children", children}};
    SIFT_RETURN_IF_ERROR(write(options_.cluster_file, doc.dump(2) + "\n"));
  }
  if (!options_.prometheus_targets.empty()) {
    SIFT_RETURN_IF_ERROR(write(options_.prometheus_targets, targets.dump(2) + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace sift::cli
