// sift bench ps: Pull/Push sweep against running embedding servers (or an in-process loopback
// server), beside the same operations on an in-process table (docs/benchmarks.md). Parses flags,
// runs worker::RunPsBenchmark, prints the table with the machine, build and command, and
// optionally writes JSON.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "cli/run_security.h"
#include "common/file_util.h"
#include "common/sysinfo.h"
#include "nlohmann/json.hpp"
#include "worker/embedding_client.h"
#include "worker/ps_benchmark.h"

namespace sift::cli {
namespace {

struct BenchPsFlags {
  worker::PsBenchOptions options;
  std::string servers;
  std::string encoding = "fp32";
  std::string json;
  std::string tls = "off";  // the in-process server: off | on | both (plaintext, then TLS)
};

// One sweep's result and its transport.
struct Pass {
  std::string transport;  // "plaintext" | "tls"
  worker::PsBenchResult result;
};

// The sweeps --tls asks for: plaintext and/or TLS (mutual, certificates of a CA made for this
// run in a temporary directory) against the in-process server; against --servers, one sweep with
// the client's --tls-dir.
StatusOr<std::vector<Pass>> RunPasses(const BenchPsFlags& flags) {
  std::vector<Pass> passes;
  worker::PsBenchOptions o = flags.options;
  if (!o.servers.empty() || flags.tls == "off") {
    SIFT_ASSIGN_OR_RETURN(worker::PsBenchResult r, worker::RunPsBenchmark(o));
    passes.push_back({o.client_security.tls() ? "tls" : "plaintext", std::move(r)});
    return passes;
  }
  if (flags.tls == "both") {
    SIFT_ASSIGN_OR_RETURN(worker::PsBenchResult r, worker::RunPsBenchmark(o));
    passes.push_back({"plaintext", std::move(r)});
  }
  char tmpl[] = "/tmp/sift-bench-ps-tls-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = tmpl;
  StatusOr<RunSecurity> sec = MakeRunSecurity(dir, 1, 1);
  if (sec.ok()) {
    o.server_security.tls_dir = dir + "/server-0";
    o.client_security.tls_dir = dir + "/worker-0";
    StatusOr<worker::PsBenchResult> r = worker::RunPsBenchmark(o);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (!r.ok()) return r.status();
    passes.push_back({"tls", *std::move(r)});
    return passes;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return sec.status();
}

Status RunBenchPs(BenchPsFlags flags) {
  worker::PsBenchOptions& o = flags.options;
  if (!flags.servers.empty()) {
    SIFT_ASSIGN_OR_RETURN(o.servers, worker::ParseServerList(flags.servers));
    if (flags.tls != "off") {
      return absl::InvalidArgumentError(
          "--tls on|both starts the in-process server with TLS; for --servers pass the "
          "client's --tls-dir (a worker's directory)");
    }
  } else if (o.client_security.tls()) {
    return absl::InvalidArgumentError(
        "--tls-dir is for --servers; the in-process server takes --tls on|both");
  }
  SIFT_ASSIGN_OR_RETURN(o.encoding, ParseWireFloat(flags.encoding));
  const MachineInfo machine = GetMachineInfo();
  std::printf("sift bench ps\n");
  std::printf("  command:  %s\n", CommandLine().c_str());
  std::printf("  machine:  %s, %d CPUs, host %s\n", machine.cpu_model.c_str(), machine.cpus,
              machine.hostname.c_str());
  std::printf("  build:    %s\n", SIFT_BUILD_TYPE);
  std::fflush(stdout);
  SIFT_ASSIGN_OR_RETURN(std::vector<Pass> passes, RunPasses(flags));
  const worker::PsBenchResult& r = passes.back().result;
  std::printf("  servers:  %s (%d shard%s)\n", r.servers_label.c_str(), r.num_shards,
              r.num_shards == 1 ? "" : "s");
  std::printf(
      "  table:    dim %d, %s on the wire, sgd; %d client thread%s, %d warm-up + %d timed "
      "calls per size%s\n",
      o.dim, flags.encoding.c_str(), o.clients, o.clients == 1 ? "" : "s", o.warmup, o.iters,
      o.check ? ", checked against the in-process table" : "");
  std::printf("\n  %-10s %-9s %-4s %9s %9s %9s %13s %8s %7s\n", "target", "transport", "op", "keys",
              "p50_ms", "p99_ms", "keys/s", "GB/s", "#wrong");
  for (const Pass& pass : passes) {
    for (const worker::PsBenchRow& row : pass.result.rows) {
      const std::string wrong = row.wrong < 0 ? "-" : std::to_string(row.wrong);
      std::printf("  %-10s %-9s %-4s %9lld %9.3f %9.3f %13.0f %8.3f %7s\n", row.target.c_str(),
                  row.target == "remote" ? pass.transport.c_str() : "-", row.op.c_str(),
                  static_cast<long long>(row.keys), row.p50_ms, row.p99_ms, row.keys_per_s,
                  row.gb_per_s, wrong.c_str());
    }
  }
  if (passes.size() == 2) {
    // --tls both: the remote rows of the two sweeps side by side (same sizes, same order).
    std::printf("\n  TLS vs plaintext (remote keys/s, this run):\n  %-4s %9s %13s %13s %7s\n", "op",
                "keys", "plaintext", "tls", "ratio");
    const auto& plain = passes[0].result.rows;
    const auto& tls = passes[1].result.rows;
    for (size_t i = 0; i < plain.size() && i < tls.size(); ++i) {
      if (plain[i].target != "remote") continue;
      std::printf("  %-4s %9lld %13.0f %13.0f %7.3f\n", plain[i].op.c_str(),
                  static_cast<long long>(plain[i].keys), plain[i].keys_per_s, tls[i].keys_per_s,
                  plain[i].keys_per_s > 0 ? tls[i].keys_per_s / plain[i].keys_per_s : 0.0);
    }
  }
  if (!flags.json.empty()) {
    nlohmann::json j;
    j["command"] = CommandLine();
    j["machine"] = {{"cpu", machine.cpu_model}, {"cpus", machine.cpus}};
    j["build_type"] = SIFT_BUILD_TYPE;
    j["servers"] = r.servers_label;
    j["num_shards"] = r.num_shards;
    j["dim"] = o.dim;
    j["encoding"] = flags.encoding;
    j["clients"] = o.clients;
    j["iters"] = o.iters;
    j["rows"] = nlohmann::json::array();
    for (const Pass& pass : passes) {
      for (const worker::PsBenchRow& row : pass.result.rows) {
        nlohmann::json jr = {{"target", row.target},    {"op", row.op},
                             {"keys", row.keys},        {"p50_ms", row.p50_ms},
                             {"p99_ms", row.p99_ms},    {"keys_per_s", row.keys_per_s},
                             {"gb_per_s", row.gb_per_s}};
        if (row.target == "remote") jr["transport"] = pass.transport;
        if (row.wrong >= 0) jr["wrong"] = row.wrong;
        j["rows"].push_back(jr);
      }
    }
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(flags.json, j.dump(2) + "\n"));
    std::printf("\n  json:     %s\n", flags.json.c_str());
  }
  int64_t wrong = 0;
  for (const Pass& pass : passes) {
    for (const worker::PsBenchRow& row : pass.result.rows) wrong += row.wrong > 0 ? row.wrong : 0;
  }
  if (wrong > 0) {
    return absl::DataLossError(absl::StrCat("bench ps: ", wrong, " keys came back wrong"));
  }
  return absl::OkStatus();
}

}  // namespace

void AddBenchPs(CLI::App* bench, Action* action) {
  auto flags = std::make_shared<BenchPsFlags>();
  worker::PsBenchOptions& o = flags->options;
  CLI::App* cmd = bench->add_subcommand(
      "ps", "Pull/Push latency and throughput of embedding servers vs an in-process table");
  cmd->add_option("--servers", flags->servers,
                  "host:port,... in shard order (default: start one in-process loopback server)");
  cmd->add_option("--min-keys", o.min_keys, "Smallest request (keys)")->capture_default_str();
  cmd->add_option("--max-keys", o.max_keys, "Largest request (keys)")->capture_default_str();
  cmd->add_option("--factor", o.factor, "Size step")->capture_default_str();
  cmd->add_option("--iters", o.iters, "Timed calls per size, op and client")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed calls per size, op and client")
      ->capture_default_str();
  cmd->add_option("--clients", o.clients, "Concurrent client threads")->capture_default_str();
  cmd->add_option("--dim", o.dim, "Floats per row")->capture_default_str();
  cmd->add_option("--encoding", flags->encoding, "Wire encoding of rows and gradients")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--threads", o.server_threads,
                  "Threads of the in-process server and table (0: all CPUs)");
  cmd->add_flag("--check", o.check, "Compare every pulled row with the in-process table");
  cmd->add_flag("--replace", o.replace,
                "Replace the servers' tables with the benchmark table (drops their rows)");
  cmd->add_option("--seed", o.seed, "Seed of the rows' init")->capture_default_str();
  cmd->add_option("--json", flags->json, "Also write the results as JSON to this file");
  cmd->add_option("--tls", flags->tls,
                  "The in-process server's transport: off (plaintext), on (mutual TLS with "
                  "certificates of a CA made for this run), both (a plaintext sweep, then a TLS "
                  "one, and their ratio)")
      ->check(CLI::IsMember({"off", "on", "both"}))
      ->capture_default_str();
  cmd->add_option("--tls-dir", o.client_security.tls_dir,
                  "With --servers: TLS to them with this member directory (a worker's: ca.crt, "
                  "tls.crt, tls.key)")
      ->envname("SIFT_TLS_DIR");
  cmd->callback([flags, action] { *action = [flags] { return RunBenchPs(*flags); }; });
}

}  // namespace sift::cli
