// sift train, sift bench train, sift bench inference: one set of flags (the reference's, where it
// has them) parsed into worker::TrainerOptions, then worker::RunTrainer. Prints a summary; the
// DLLL records go to stdout and <results-dir>/log.json as the trainer writes them.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "common/file_util.h"
#include "common/lr_schedule.h"
#include "common/perf_stats.h"
#include "common/recipe.h"
#include "common/sysinfo.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "worker/trainer.h"
#ifndef SIFT_MINIMAL  // SIFT_MINIMAL: in-process tables only, no --embedding-servers
#include "worker/embedding_client.h"
#endif

namespace sift::cli {
namespace {

struct TrainFlags {
  worker::TrainerOptions opt;
  std::string model = "sim";
  std::string gsu = "soft";
  std::string order = "shuffled";
  std::string keep_best = "last";
  std::string lr_schedule = "constant";
  std::string recipe = kDefaultRecipe;
  CLI::App* cmd = nullptr;  // the command the flags were added to (which were given)
  std::string progress = "auto";
  std::string json;
  std::string embedding_servers;
  std::vector<std::string> table_capacity;  // NAME=ROWS
};

void AddTrainerFlags(CLI::App* cmd, TrainFlags* f, bool bench) {
  f->cmd = cmd;
  worker::TrainerOptions& o = f->opt;
  worker::ModelConfig& m = o.model;
  cmd->add_option("--dataset", o.dataset, "Dataset directory (sift data gen / convert)")
      ->required();
  cmd->add_option("--model", f->model, "Model: sim, dien or din")
      ->check(CLI::IsMember({"sim", "dien", "din"}))
      ->capture_default_str();
  // Every backend by name, whatever this build has (the help and docs/reference/cli.md are the
  // same for every build); one this build lacks is refused when the run starts, naming it.
  cmd->add_option("--backend", o.backend,
                  "Kernel backend: reference, cpu or cuda (cuda: builds with CUDA only, `sift "
                  "device` says; device 0 of CUDA_VISIBLE_DEVICES)")
      ->check(CLI::IsMember({"reference", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--precision", o.precision,
                  "GEMM arithmetic: auto (bf16 on cuda, and on a cpu with AVX512-BF16 or AMX; "
                  "else fp32), fp32, tf32, bf16, or fp16 (dynamic loss scaling); tf32/fp16 need "
                  "--backend cuda; bf16 on a cpu without native bf16 is emulated (slower)")
      ->check(CLI::IsMember({"auto", "fp32", "tf32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--cpu-isa", o.cpu_isa,
                  "cpu backend: the kernels' vector ISA variant, auto (the widest this CPU "
                  "supports), generic, avx2 or avx512 (GEMMs are oneDNN's: ONEDNN_MAX_CPU_ISA "
                  "caps them)")
      ->envname("SIFT_CPU_ISA")
      ->check(CLI::IsMember({"auto", "generic", "avx2", "avx512"}))
      ->capture_default_str();
  cmd->add_option("--deterministic", o.deterministic,
                  "true: every sum in a fixed order (bit-reproducible runs); false: cuda sums the "
                  "embedding gradients with float atomics (no sort; last bits vary; no-op on cpu)")
      ->default_str("true");
  cmd->add_option("--threads", o.threads, "Backend and loader threads (0 = every CPU)")
      ->capture_default_str();
  cmd->add_option("--epochs", o.epochs, "Passes over the training split")->capture_default_str();
  cmd->add_option("--batch-size", o.batch_size, "Samples per training step")->capture_default_str();
  cmd->add_option("--eval-batch-size", o.eval_batch_size,
                  "Samples per evaluation batch (0 = --batch-size)")
      ->capture_default_str();
  cmd->add_option("--lr", o.lr, "Learning rate of dense Adam and the sparse optimizer")
      ->capture_default_str();
  cmd->add_option("--lr-schedule", f->lr_schedule,
                  "Learning-rate schedule of both optimizers over the run's epochs x steps: "
                  "constant, linear or cosine decay to --lr-final-fraction x lr, after "
                  "--lr-warmup-steps of linear warm-up (docs/training.md, Training recipes)")
      ->check(CLI::IsMember(LrScheduleNames()))
      ->capture_default_str();
  cmd->add_option("--lr-warmup-steps", o.lr_schedule.warmup_steps,
                  "Steps of linear learning-rate warm-up, (s + 1) / N x lr (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--lr-final-fraction", o.lr_schedule.final_fraction,
                  "The fraction of lr a linear or cosine schedule decays to at the run's end")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--weight-decay", o.weight_decay,
                  "Decoupled weight decay of the dense parameters (AdamW): each step scales them "
                  "by 1 - lr x weight_decay before Adam; 0 = plain Adam")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1000.0f));
  cmd->add_option("--sparse-l2", o.sparse_l2,
                  "Mini-batch-aware L2 on the embedding rows a step touches (DIN paper): "
                  "grad += lambda x row / (the id's occurrences in the training split); 0 = none")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1e6f));
  cmd->add_option("--sparse-optimizer", o.sparse_optimizer,
                  "Embedding-row optimizer: adam (lazy), adagrad or sgd")
      ->check(CLI::IsMember({"adam", "adagrad", "sgd"}))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the dense and embedding init and the shuffling")
      ->capture_default_str();
  cmd->add_option("--order", f->order,
                  "Sample order: shuffled (per-epoch permutation) or reference (model-spec 6.5)")
      ->check(CLI::IsMember({"shuffled", "reference"}))
      ->capture_default_str();
  cmd->add_option("--staleness", o.staleness,
                  "0: synchronous and deterministic; >= 1: the next step is loaded, pulled and "
                  "(cuda) uploaded on a prefetch thread while this one computes (its rows may "
                  "miss this step's push)")
      ->capture_default_str();
  cmd->add_option("--max-steps-per-epoch", o.max_steps_per_epoch,
                  "Stop each epoch after this many steps (0 = the whole split)")
      ->capture_default_str();
  cmd->add_option("--results-dir", o.results_dir, "Directory of the DLLL log (log.json)");
  cmd->add_option("--log-filename", o.log_filename, "Log file name in --results-dir")
      ->capture_default_str();
  cmd->add_option("--log-every", o.log_every,
                  "Also print every N-th per-step record on stdout (0 = none)")
      ->capture_default_str();
  cmd->add_option("--progress", f->progress, "Progress bar on stderr: auto (a terminal), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--load-checkpoint", o.load_checkpoint, "Resume from this checkpoint directory");
  cmd->add_option("--table-capacity", f->table_capacity,
                  "NAME=ROWS: the rows embedding table NAME (user_feat_<i>, item_feat_<i>) may "
                  "hold, over all servers; a pull of a new id beyond it fails (repeatable)");
#ifndef SIFT_MINIMAL
  cmd->add_option("--embedding-servers", f->embedding_servers,
                  "Embedding tables on these servers (host:port,... in shard order; "
                  "sift embedding-server) instead of in-process; their tables are replaced");
  cmd->add_option("--wire-encoding", o.wire_encoding,
                  "Rows and gradients on the wire to the embedding servers")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--tls-dir", o.embedding_security.tls_dir,
                  "TLS to --embedding-servers with this member directory (a worker's: ca.crt, "
                  "tls.crt, tls.key; docs/security.md)")
      ->envname("SIFT_TLS_DIR");
#endif
  if (!bench) {
    cmd->add_option("--save-checkpoint", o.save_checkpoint,
                    "Save a checkpoint into this directory after every epoch");
    cmd->add_option("--train-eval-samples", o.train_eval_samples,
                    "Train AUC on a fixed sample of this many training samples (0 = all)")
        ->capture_default_str();
    cmd->add_option(
           "--recipe", f->recipe,
           "Training recipe: reference (the TF2 reference's) or sift (mini-batch-aware "
           "L2, dropout, a validation split keeping the best epoch, early stopping, cosine "
           "lr decay from 0.02); "
           "flags given explicitly override it (docs/training.md, Training recipes)")
        ->check(CLI::IsMember({"reference", "sift"}))
        ->capture_default_str();
    cmd->add_option("--validation-fraction", o.validation_fraction,
                    "Hold out the last training pair of this fraction of the users as a "
                    "validation split, evaluated after every epoch (0 = none; at most 0.5)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 0.5));
    cmd->add_option("--keep-best", f->keep_best,
                    "The kept model: last (epoch) or validation_auc (the best epoch's: its test "
                    "AUC is the run's; the checkpoint is saved only when it improves)")
        ->check(CLI::IsMember({"last", "validation_auc"}))
        ->capture_default_str();
    cmd->add_option("--patience", o.patience,
                    "Stop after this many epochs without a better validation AUC (0 = never)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
  } else {
    cmd->add_option("--benchmark-steps", o.benchmark_steps,
                    "Measured steps after the warm-up (0 = every step of every epoch)")
        ->capture_default_str();
    cmd->add_option("--warmup-steps", o.warmup_steps, "Warm-up steps excluded from the numbers")
        ->capture_default_str();
    cmd->add_option("--json", f->json, "Also write the results as one JSON object to this file");
  }
  // Model dimensions (defaults: the reference's).
  cmd->add_option("--embedding-dim", m.embedding_dim, "Embedding width D")->capture_default_str();
  cmd->add_option("--long-seq-length", m.long_len,
                  "Long history slots: SIM soft search up to 65536 (streamed beyond 4096), SIM "
                  "hard search the window searched, DIN up to 4096")
      ->capture_default_str();
  cmd->add_option("--short-seq-length", m.short_len, "Short history slots (DIEN part)")
      ->capture_default_str();
  cmd->add_option("--top-k", m.top_k, "SIM: long-history items retrieved for the ESU")
      ->capture_default_str();
  cmd->add_option("--gsu", f->gsu,
                  "SIM search unit: soft (the reference) or hard (the newest --top-k events of the "
                  "target's category among --long-seq-length; docs/training.md)")
      ->check(CLI::IsMember({"soft", "hard"}))
      ->capture_default_str();
  cmd->add_flag("--time-embedding", m.time_embedding,
                "SIM: embed each long slot's time gap to the sample (log2 buckets) in the ESU; "
                "needs event timestamps");
  cmd->add_flag("--gsu-time", m.gsu_time,
                "SIM soft search with --time-embedding: a learned per-bucket recency term in the "
                "GSU's scores too, so its top-k can prefer recent events (docs/training.md, "
                "Lifelong sequences)");
  cmd->add_option("--gru-hidden", m.gru_hidden, "GRU/AUGRU units (0 = 6 x embedding dim)")
      ->capture_default_str();
  cmd->add_option("--stage-one-mlp-dims", m.stage_one_mlp, "SIM GSU head hidden widths")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--stage-two-mlp-dims", m.stage_two_mlp, "Final classifier hidden widths")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--aux-mlp-dims", m.aux_mlp, "DIEN aux net hidden widths")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--attention-mlp-dims", m.attention_mlp, "DIEN attention unit hidden widths")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--dropout", m.dropout,
                  "Inverted dropout rate on the hidden outputs of the MLP heads (the classifier "
                  "and SIM's GSU head) in training; 0 = none")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 0.9f));
}

// Flags that need parsing beyond CLI11's; usage errors.
Status ResolveFlags(TrainFlags* f) {
  SIFT_ASSIGN_OR_RETURN(f->opt.model.type, worker::ParseModelType(f->model));
  SIFT_ASSIGN_OR_RETURN(f->opt.model.gsu, worker::ParseGsu(f->gsu));
  SIFT_ASSIGN_OR_RETURN(f->opt.order, data::ParseSampleOrder(f->order));
  if (f->cmd != nullptr && f->cmd->get_option_no_throw("--recipe") != nullptr) {
    // The recipe's values for the flags not given (common/recipe.h).
    SIFT_ASSIGN_OR_RETURN(const Recipe recipe, FindRecipe(f->recipe));
    const auto unset = [f](const char* flag) { return f->cmd->count(flag) == 0; };
    if (unset("--sparse-l2")) f->opt.sparse_l2 = static_cast<float>(recipe.sparse_l2);
    if (unset("--lr")) f->opt.lr = static_cast<float>(recipe.lr);
    if (unset("--lr-schedule")) f->lr_schedule = recipe.lr_schedule;
    if (unset("--dropout")) f->opt.model.dropout = static_cast<float>(recipe.dropout);
    if (unset("--validation-fraction")) f->opt.validation_fraction = recipe.validation_fraction;
    if (f->opt.validation_fraction > 0) {
      if (unset("--keep-best")) f->keep_best = recipe.keep_best;
      if (unset("--patience")) f->opt.patience = recipe.patience;
    }
  }
  SIFT_ASSIGN_OR_RETURN(f->opt.lr_schedule.kind, ParseLrScheduleKind(f->lr_schedule));
  f->opt.keep_best = f->keep_best == "validation_auc";
#ifndef SIFT_MINIMAL
  if (!f->embedding_servers.empty()) {
    SIFT_ASSIGN_OR_RETURN(f->opt.embedding_servers, worker::ParseServerList(f->embedding_servers));
  }
#endif
  for (const std::string& entry : f->table_capacity) {
    const size_t eq = entry.find('=');
    uint64_t rows = 0;
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtoi(entry.substr(eq + 1), &rows)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--table-capacity ", entry, ": expected NAME=ROWS, e.g. item_feat_0=1000000"));
    }
    f->opt.table_capacity[entry.substr(0, eq)] = rows;
  }
  if (f->progress == "auto") {
    f->opt.progress = ::isatty(STDERR_FILENO) != 0;
  } else if (f->progress == "on" || f->progress == "off") {
    f->opt.progress = f->progress == "on";
  } else {
    return absl::InvalidArgumentError("--progress must be auto, on or off");
  }
  return absl::OkStatus();
}

// The dedup's hit rate over the run's steps (docs/training.md "Lifelong sequences").
void PrintKeyCounts(const worker::RunResult& r) {
  if (r.steps <= 0 || r.key_counts.slot_ids <= 0) return;
  const double steps = static_cast<double>(r.steps);
  std::printf("  dedup:      %.0f id slots -> %.0f unique keys per step (hit rate %.2f%%)\n",
              static_cast<double>(r.key_counts.slot_ids) / steps,
              static_cast<double>(r.key_counts.unique) / steps,
              100.0 * (1.0 - static_cast<double>(r.key_counts.unique) /
                                 static_cast<double>(r.key_counts.slot_ids)));
  if (r.long_slots_searched < r.long_slots) {
    std::printf(
        "  long slots: %.0f per step, %.0f searched (%.1f%%; the rest is padding)\n",
        static_cast<double>(r.long_slots) / steps,
        static_cast<double>(r.long_slots_searched) / steps,
        100.0 * static_cast<double>(r.long_slots_searched) / static_cast<double>(r.long_slots));
  }
}

void PrintPhases(const worker::PhaseTimes& p) {
  const double total = p.Total();
  if (total <= 0) return;
  auto pct = [&](double x) { return 100.0 * x / total; };
  std::printf(
      "  time split: load %.1f%%, dedup %.1f%%, pull %.1f%%, forward %.1f%%, backward %.1f%%, "
      "dense adam %.1f%%, push %.1f%% (of %.2f s)\n",
      pct(p.load), pct(p.dedup), pct(p.pull), pct(p.forward), pct(p.backward), pct(p.dense_opt),
      pct(p.push), total);
}

// The backend's warnings (a generic fallback, emulated bf16, a slow GEMM kernel), on stderr.
void PrintWarnings(const worker::RunResult& r) {
  for (const std::string& w : r.warnings) std::fprintf(stderr, "sift: warning: %s\n", w.c_str());
}

// Appended to the precision in the summaries: only a run that gave up the fixed orders says so.
const char* NondeterministicNote(const worker::RunResult& r) {
  return r.deterministic ? "" : ", atomic embedding-gradient sums";
}

Status RunTrain(TrainFlags* f) {
  SIFT_RETURN_IF_ERROR(ResolveFlags(f));
  SIFT_ASSIGN_OR_RETURN(worker::RunResult r, worker::RunTrainer(f->opt, worker::RunMode::kTrain));
  std::printf(
      "\nsift train: %s on %s, %lld steps of %lld, backend %s (%d threads, precision %s%s)\n",
      f->model.c_str(), f->opt.dataset.c_str(), static_cast<long long>(r.steps),
      static_cast<long long>(r.samples_per_step), r.backend.c_str(), r.threads, r.precision.c_str(),
      NondeterministicNote(r));
  std::printf("  compute:    %s\n", r.compute.c_str());
  PrintWarnings(r);
  if (r.skipped_steps > 0) {
    std::printf("  fp16 loss scaling skipped %lld step(s) whose gradients overflowed\n",
                static_cast<long long>(r.skipped_steps));
  }
  const bool validation = !r.epochs.empty() && r.epochs.front().has_validation;
  std::printf("  %-6s %-10s %-10s %s%-10s %-10s %-12s %-10s\n", "epoch", "train_auc", "train_loss",
              validation ? "valid_auc  " : "", "test_auc", "test_loss", "samples/s", "to_oracle");
  for (const worker::EpochMetrics& e : r.epochs) {
    std::string ratio = r.oracle_test_auc > 0
                            ? absl::StrFormat("%.4f", e.test_auc / r.oracle_test_auc)
                            : std::string("-");
    const std::string valid = validation ? absl::StrFormat("%-10.4f ", e.validation_auc) : "";
    std::printf("  %-6lld %-10.4f %-10.4f %s%-10.4f %-10.4f %-12.0f %-10s\n",
                static_cast<long long>(e.epoch + 1), e.train_auc, e.train_loss, valid.c_str(),
                e.test_auc, e.test_loss, e.perf.throughput, ratio.c_str());
  }
  if (validation) {
    const ModelSelection& sel = r.selection;
    const bool best = f->opt.keep_best && sel.best_epoch >= 0;
    std::printf("  kept model: epoch %lld (%s), test AUC %.4f%s\n",
                static_cast<long long>(r.kept_epoch + 1),
                best ? absl::StrFormat("best validation AUC %.4f", sel.best_validation_auc).c_str()
                     : "the last",
                best ? sel.best_test_auc : r.epochs.back().test_auc,
                r.stopped_early ? absl::StrFormat("; stopped early: no better validation AUC "
                                                  "for %d epoch(s)",
                                                  f->opt.patience)
                                      .c_str()
                                : "");
  }
  if (r.oracle_test_auc > 0) std::printf("  oracle_test_auc %.4f\n", r.oracle_test_auc);
  std::printf("  time_to_train %.1f s\n", r.time_to_train_s);
  PrintKeyCounts(r);
  PrintPhases(r.phases);
  return absl::OkStatus();
}

Status RunBench(TrainFlags* f, worker::RunMode mode) {
  SIFT_RETURN_IF_ERROR(ResolveFlags(f));
  const bool train = mode == worker::RunMode::kBenchTrain;
  const MachineInfo machine = GetMachineInfo();
  const FmaPeakEstimate peak = EstimateFp32FmaPeak(f->opt.threads > 0 ? f->opt.threads : 0);
  std::printf("sift bench %s\n", train ? "train" : "inference");
  std::printf("  command:    %s\n", CommandLine().c_str());
  std::printf("  machine:    %s, %d CPUs, host %s\n", machine.cpu_model.c_str(), machine.cpus,
              machine.hostname.c_str());
  std::printf("  build:      %s\n", SIFT_BUILD_TYPE);
  std::fflush(stdout);
  SIFT_ASSIGN_OR_RETURN(worker::RunResult r, worker::RunTrainer(f->opt, mode));
  const double mflop = train ? kTrainMflopPerSample : kInferenceMflopPerSample;
  const double gflops = GflopsPerSecond(r.perf.throughput, mflop);
  std::printf(
      "  model:      %s, batch %lld, backend %s (%d threads, precision %s%s), %lld dense "
      "parameters\n",
      f->model.c_str(), static_cast<long long>(r.samples_per_step), r.backend.c_str(), r.threads,
      r.precision.c_str(), NondeterministicNote(r), static_cast<long long>(r.dense_params));
  std::printf("  backend:    %s\n", r.compute.c_str());
  PrintWarnings(r);
  std::printf(
      "  steps:      %lld run (warm-up %lld excluded when steps remain), staleness %lld%s\n",
      static_cast<long long>(r.steps), static_cast<long long>(f->opt.warmup_steps),
      static_cast<long long>(f->opt.staleness),
      f->opt.staleness > 0 ? " (prefetched)" : " (synchronous)");
  std::printf("  throughput: %.0f samples/s\n", r.perf.throughput);
  std::printf("  latency:    mean %.1f ms, p90 %.1f ms, p95 %.1f ms, p99 %.1f ms\n",
              r.perf.latency_mean_ms, r.perf.latency_p90_ms, r.perf.latency_p95_ms,
              r.perf.latency_p99_ms);
  if (r.backend == "cuda") {
    // The peak below is the host CPU's: no ratio against it for a GPU run.
    std::printf(
        "  compute:    %.1f GFLOP/s at %.1f MFLOP/sample (SIM at the default dims, model-spec "
        "10) on the GPU\n",
        gflops, mflop);
  } else {
    std::printf(
        "  compute:    %.1f GFLOP/s at %.1f MFLOP/sample (SIM at the default dims, model-spec "
        "10) = %.1f%% of the FP32 FMA peak\n",
        gflops, mflop, peak.gflops > 0 ? 100.0 * gflops / peak.gflops : 0.0);
    std::printf("  peak:       %s\n", peak.Describe().c_str());
  }
  PrintKeyCounts(r);
  PrintPhases(r.phases);
  if (!f->json.empty()) {
    nlohmann::json j;
    j["benchmark"] = train ? "train" : "inference";
    j["command"] = CommandLine();
    j["machine"] = {
        {"cpu_model", machine.cpu_model}, {"cpus", machine.cpus}, {"hostname", machine.hostname}};
    j["build_type"] = SIFT_BUILD_TYPE;
    j["model"] = f->model;
    j["backend"] = r.backend;
    j["precision"] = r.precision;
    j["compute"] = r.compute;
    j["warnings"] = r.warnings;
    j["deterministic"] = r.deterministic;
    j["skipped_steps"] = r.skipped_steps;
    j["threads"] = r.threads;
    j["staleness"] = f->opt.staleness;
    j["batch_size"] = r.samples_per_step;
    j["steps"] = r.steps;
    j["throughput"] = r.perf.throughput;
    j["latency_mean_ms"] = r.perf.latency_mean_ms;
    j["latency_p90_ms"] = r.perf.latency_p90_ms;
    j["latency_p95_ms"] = r.perf.latency_p95_ms;
    j["latency_p99_ms"] = r.perf.latency_p99_ms;
    j["gflops"] = gflops;
    j["mflop_per_sample"] = mflop;
    j["peak_gflops_estimate"] = peak.gflops;
    if (r.steps > 0) {
      j["dedup_per_step"] = {
          {"slot_ids", static_cast<double>(r.key_counts.slot_ids) / static_cast<double>(r.steps)},
          {"unique_keys", static_cast<double>(r.key_counts.unique) / static_cast<double>(r.steps)}};
      j["long_slots_per_step"] = {
          {"slots", static_cast<double>(r.long_slots) / static_cast<double>(r.steps)},
          {"searched", static_cast<double>(r.long_slots_searched) / static_cast<double>(r.steps)}};
    }
    j["phases_s"] = {{"load", r.phases.load},         {"dedup", r.phases.dedup},
                     {"pull", r.phases.pull},         {"forward", r.phases.forward},
                     {"backward", r.phases.backward}, {"dense_adam", r.phases.dense_opt},
                     {"push", r.phases.push}};
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(f->json, j.dump(2) + "\n"));
    std::printf("  json:       %s\n", f->json.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void AddTrain(CLI::App* app, Action* action) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* cmd = app->add_subcommand("train",
                                      "Train SIM, DIEN or DIN on a dataset in this process "
#ifndef SIFT_MINIMAL
                                      "(in-process tables or --embedding-servers)"
#else
                                      "(in-process tables)"
#endif
  );
  AddTrainerFlags(cmd, f.get(), /*bench=*/false);
  cmd->callback([f, action] { *action = [f] { return RunTrain(f.get()); }; });
}

void AddBenchTrain(CLI::App* bench, Action* action) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "train", "Training throughput (samples/s, latency percentiles, GFLOP/s vs FP32 peak)");
  AddTrainerFlags(cmd, f.get(), /*bench=*/true);
  cmd->callback(
      [f, action] { *action = [f] { return RunBench(f.get(), worker::RunMode::kBenchTrain); }; });
}

void AddBenchInference(CLI::App* bench, Action* action) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "inference", "Inference throughput (forward only, no aux branch, on the training split)");
  f->opt.epochs = 1;
  AddTrainerFlags(cmd, f.get(), /*bench=*/true);
  cmd->callback([f, action] {
    *action = [f] { return RunBench(f.get(), worker::RunMode::kBenchInference); };
  });
}

}  // namespace sift::cli
