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
#include "common/cipher_speed.h"
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
  std::string tls = "off";  // the in-process servers: off | on | both (plaintext and TLS)
};

// A directory removed when this goes out of scope (the run's certificates).
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// The transports --tls asks for against the in-process servers: plaintext and/or TLS (mutual,
// certificates of a CA made for this run in `certs`); against --servers, the client's --tls-dir.
Status SetTransports(const std::string& tls, TempDir* certs, worker::PsBenchOptions* o) {
  const SecurityOptions client =
      o->transports.empty() ? SecurityOptions{} : o->transports[0].client_security;
  o->transports.clear();
  if (!o->servers.empty()) {
    worker::PsBenchTransport t;
    t.client_security = client;
    t.name = t.client_security.tls() ? "tls" : "plaintext";
    o->transports.push_back(t);
    return absl::OkStatus();
  }
  if (tls != "on") o->transports.push_back(worker::PsBenchTransport{});
  if (tls == "off") return absl::OkStatus();
  char tmpl[] = "/tmp/sift-bench-ps-tls-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  certs->path = tmpl;
  SIFT_RETURN_IF_ERROR(MakeRunSecurity(certs->path, 1, 1).status());
  worker::PsBenchTransport t;
  t.name = "tls";
  t.server_security.tls_dir = certs->path + "/server-0";
  t.client_security.tls_dir = certs->path + "/worker-0";
  o->transports.push_back(t);
  return absl::OkStatus();
}

// --tls both: each size's remote rows of the two transports side by side, with their CPU per
// call and the ratio AES-GCM's own cost allows: the plaintext's CPU per call plus the sealing
// and opening of every byte on the wire (request and reply), at `aes_bytes_per_s` per core.
void PrintTlsComparison(const std::vector<worker::PsBenchRow>& rows, double aes_bytes_per_s) {
  std::printf(
      "\n  TLS vs plaintext (remote; calls alternating between the two in one run):\n"
      "  %-4s %9s %13s %13s %7s %10s %10s %7s %7s\n",
      "op", "keys", "plain_keys/s", "tls_keys/s", "ratio", "plain_cpu", "tls_cpu", "cpu", "bound");
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    const worker::PsBenchRow& p = rows[i];
    const worker::PsBenchRow& t = rows[i + 1];
    if (p.target != "remote" || p.transport != "plaintext" || t.transport != "tls") continue;
    const double crypto_ms = aes_bytes_per_s > 0 ? 2 * p.wire_bytes / aes_bytes_per_s * 1e3 : 0;
    std::printf("  %-4s %9lld %13.0f %13.0f %7.3f %8.3fms %8.3fms %7.3f %7.3f\n", p.op.c_str(),
                static_cast<long long>(p.keys), p.keys_per_s, t.keys_per_s,
                p.keys_per_s > 0 ? t.keys_per_s / p.keys_per_s : 0.0, p.cpu_ms, t.cpu_ms,
                t.cpu_ms > 0 ? p.cpu_ms / t.cpu_ms : 0.0,
                p.cpu_ms > 0 ? p.cpu_ms / (p.cpu_ms + crypto_ms) : 0.0);
  }
  std::printf(
      "  (plain_cpu, tls_cpu: this process's CPU time per call, every thread: the client and the\n"
      "   server; cpu: their ratio. bound: plain_cpu / (plain_cpu + the AES-GCM time of sealing\n"
      "   and opening the call's bytes once each) -- the best ratio any TLS could reach while\n"
      "   the cores are busy, since client and server here share them)\n");
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
  } else if (o.transports[0].client_security.tls()) {
    return absl::InvalidArgumentError(
        "--tls-dir is for --servers; the in-process server takes --tls on|both");
  }
  SIFT_ASSIGN_OR_RETURN(o.encoding, ParseWireFloat(flags.encoding));
  TempDir certs;
  SIFT_RETURN_IF_ERROR(SetTransports(flags.tls, &certs, &o));
  const MachineInfo machine = GetMachineInfo();
  std::printf("sift bench ps\n");
  std::printf("  command:  %s\n", CommandLine().c_str());
  std::printf("  machine:  %s, %d CPUs, host %s\n", machine.cpu_model.c_str(), machine.cpus,
              machine.hostname.c_str());
  std::printf("  build:    %s\n", SIFT_BUILD_TYPE);
  std::fflush(stdout);
  double aes_bytes_per_s = 0;
  if (o.transports.size() == 2) {
    // gRPC 1.51 offers TLS_AES_128_GCM_SHA256 first; 16 KiB is a full TLS record.
    SIFT_ASSIGN_OR_RETURN(aes_bytes_per_s, MeasureAesGcmBytesPerSecond(128, 16384, 0.3));
    std::printf("  cipher:   AES-128-GCM %.2f GB/s on one core (16 KiB records, this process)\n",
                aes_bytes_per_s / 1e9);
  }
  SIFT_ASSIGN_OR_RETURN(const worker::PsBenchResult r, worker::RunPsBenchmark(o));
  std::printf("  servers:  %s (%d shard%s)\n", r.servers_label.c_str(), r.num_shards,
              r.num_shards == 1 ? "" : "s");
  std::printf(
      "  table:    dim %d, %s on the wire, sgd; %d client thread%s, %d warm-up + %d timed "
      "calls per size%s\n",
      o.dim, flags.encoding.c_str(), o.clients, o.clients == 1 ? "" : "s", o.warmup, o.iters,
      o.check ? ", checked against the in-process table" : "");
  std::printf("\n  %-10s %-9s %-4s %9s %9s %9s %13s %8s %9s %7s\n", "target", "transport", "op",
              "keys", "p50_ms", "p99_ms", "keys/s", "GB/s", "cpu_ms", "#wrong");
  for (const worker::PsBenchRow& row : r.rows) {
    const std::string wrong = row.wrong < 0 ? "-" : std::to_string(row.wrong);
    std::printf("  %-10s %-9s %-4s %9lld %9.3f %9.3f %13.0f %8.3f %9.3f %7s\n", row.target.c_str(),
                row.transport.c_str(), row.op.c_str(), static_cast<long long>(row.keys), row.p50_ms,
                row.p99_ms, row.keys_per_s, row.gb_per_s, row.cpu_ms, wrong.c_str());
  }
  if (o.transports.size() == 2) PrintTlsComparison(r.rows, aes_bytes_per_s);
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
    if (aes_bytes_per_s > 0) j["aes_128_gcm_bytes_per_s"] = aes_bytes_per_s;
    j["rows"] = nlohmann::json::array();
    for (const worker::PsBenchRow& row : r.rows) {
      nlohmann::json jr = {{"target", row.target},     {"op", row.op},
                           {"keys", row.keys},         {"p50_ms", row.p50_ms},
                           {"p99_ms", row.p99_ms},     {"keys_per_s", row.keys_per_s},
                           {"gb_per_s", row.gb_per_s}, {"cpu_ms", row.cpu_ms}};
      if (row.target == "remote") {
        jr["transport"] = row.transport;
        jr["wire_bytes"] = row.wire_bytes;
      }
      if (row.wrong >= 0) jr["wrong"] = row.wrong;
      j["rows"].push_back(jr);
    }
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(flags.json, j.dump(2) + "\n"));
    std::printf("\n  json:     %s\n", flags.json.c_str());
  }
  int64_t wrong = 0;
  for (const worker::PsBenchRow& row : r.rows) wrong += row.wrong > 0 ? row.wrong : 0;
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
                  "certificates of a CA made for this run), both (a plaintext and a TLS server, "
                  "their calls alternating, and their ratio)")
      ->check(CLI::IsMember({"off", "on", "both"}))
      ->capture_default_str();
  cmd->add_option("--tls-dir", o.transports[0].client_security.tls_dir,
                  "With --servers: TLS to them with this member directory (a worker's: ca.crt, "
                  "tls.crt, tls.key)")
      ->envname("SIFT_TLS_DIR");
  cmd->callback([flags, action] { *action = [flags] { return RunBenchPs(*flags); }; });
}

}  // namespace sift::cli
