// JobSpec: the YAML job description users submit to the coordinator (issue 5): the dataset, the
// model, training, cluster and checkpoint settings. A plain value struct of strings and numbers
// (common/ does not depend on worker/ or server/): enumerations are validated by name here and
// mapped onto worker::ModelType, data::SampleOrder, OptimizerKind by the code that runs the job.
// Parsing is strict: unknown keys (typos), duplicate keys, wrong types, out-of-range values and
// unknown enumeration values are INVALID_ARGUMENT errors of the form
//   "<source>:<line>: <dotted.field>: <what is wrong>"
// and no exception escapes. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/recipe.h"
#include "common/status.h"

namespace sift {

struct JobSpec {
  // Defaults are the reference's dims (worker/models/model.h ModelConfig).
  struct Model {
    std::string type = "sim";  // sim | dien | din
    int embedding_dim = 16;
    int long_seq_length = 90;   // T_L (SIM, DIN)
    int short_seq_length = 10;  // T_S (SIM, DIEN, DIN); >= 2 for sim and dien
    int top_k = 50;             // SIM
    // SIM's General Search Unit: "soft" (the reference) or "hard" (docs/training.md "Lifelong
    // sequences": the newest top_k events of the target's category among the long_seq_length
    // before the short part, from the dataset's category index; no GSU head or loss).
    std::string gsu = "soft";
    // SIM: the time-interval embedding in the ESU (worker/models/model.h
    // ModelConfig::time_embedding).
    bool time_embedding = false;
    // SIM soft search with time_embedding: the GSU's time term (ModelConfig::gsu_time).
    bool gsu_time = false;
    int gru_hidden = 0;  // 0 = 6 * embedding_dim
    std::vector<int> stage_one_mlp_dims = {200};
    std::vector<int> stage_two_mlp_dims = {200, 80};
    std::vector<int> aux_mlp_dims = {100, 50};
    std::vector<int> attention_mlp_dims = {80, 40};
    // Inverted dropout on the hidden outputs of the MLP heads (stage one and two) in training;
    // 0 = none (the reference).
    double dropout = 0;  // in [0, 0.9]
    bool operator==(const Model&) const = default;
  };
  struct Training {
    int epochs = 3;               // >= 1
    int64_t batch_size = 131072;  // >= 1, global (all workers together)
    int64_t eval_batch_size = 0;  // 0 = batch_size
    double lr = 0.01;             // finite, > 0
    // The learning-rate schedule of both optimizers (common/lr_schedule.h): constant | linear |
    // cosine, after lr_warmup_steps of linear warm-up, decaying to lr_final_fraction x lr at the
    // end of epochs x steps per epoch. constant with no warm-up = the reference's fixed rate.
    std::string lr_schedule = "constant";
    int64_t lr_warmup_steps = 0;   // >= 0
    double lr_final_fraction = 0;  // in [0, 1]
    // Decoupled weight decay of the dense parameters (AdamW): each step first scales every dense
    // parameter by (1 - lr * weight_decay), then applies Adam. 0 = plain Adam (the reference).
    double weight_decay = 0;  // in [0, kMaxWeightDecay]
    // Mini-batch-aware L2 on the embedding rows each step touches (the DIN paper): every touched
    // row j gets λ·w_j / n_j added to its gradient, n_j = id j's occurrences in the training
    // split. 0 = none (the reference).
    double sparse_l2 = 0;                   // λ in [0, kMaxSparseL2]
    std::string optimizer = "adam";         // dense: adam
    std::string sparse_optimizer = "adam";  // adam | adagrad | sgd
    int64_t staleness = 1;                  // k >= 0; 0 = synchronous
    // How the workers' sparse gradients of a global step reach the tables: step = summed over the
    // ranks on the servers, one optimizer update per row per global step (what one process
    // computes); per_rank = each rank's push is its own update (asynchronous-PS semantics).
    std::string sparse_update = "step";  // step | per_rank
    uint64_t seed = 1;
    std::string order = "shuffled";       // shuffled | reference
    int64_t train_eval_samples = 262144;  // >= 0; 0 = the full training split
    int64_t max_steps_per_epoch = 0;      // >= 0; 0 = the whole split
    // Model selection (docs/training.md "Model selection"): the fraction of users whose last
    // training pair is held out as a validation split, evaluated after every epoch (0 = none: the
    // reference); keep_best: last | validation_auc (the kept model, and the test AUC the job
    // reports); patience: stop after this many epochs without a better validation AUC (0 = never).
    // The recipe (common/recipe.h) whose values fill the fields above and below that the spec
    // leaves out: reference | sift.
    std::string recipe = kDefaultRecipe;
    double validation_fraction = 0;  // in [0, 0.5]
    std::string keep_best = "last";
    int patience = 0;  // in [0, kMaxEpochs]
    bool operator==(const Training&) const = default;
  };
  struct Cluster {
    int servers = 2;              // embedding servers, >= 1
    int workers = 2;              // >= 1
    std::string backend = "cpu";  // cpu | cuda
    // The GEMM arithmetic: auto (bf16 on cuda; on cpu bf16 where the CPU has native bf16 dot
    // products — AVX512-BF16 or AMX — else fp32) | fp32 | tf32 | bf16 | fp16 (with dynamic loss
    // scaling); tf32 and fp16 need backend cuda (cpu: bf16 without native support is emulated).
    std::string precision = "auto";
    // Fixed summation orders, bit-reproducible runs (true); false lets backend cuda sum the
    // embedding gradients with float atomics (no sort; last bits vary). Accepted on cpu, where it
    // changes nothing (the host backends are always deterministic).
    bool deterministic = true;
    // Dense collectives between workers: auto (nccl for backend cuda in builds with NCCL, gloo
    // otherwise) | gloo | nccl (backend cuda only).
    std::string collectives = "auto";
    int threads_per_worker = 0;  // >= 0; 0 = every available CPU
    bool operator==(const Cluster&) const = default;
  };
  struct Checkpoint {
    // "" = no checkpoints during the run (a cluster job still leaves its final model under the
    // coordinator's <state-dir>/checkpoints); a cluster job writes <dir>/<job-id>/
    std::string dir;
    // "" = a fresh start; else the directory of an existing checkpoint (another job's) this
    // job starts from (sift submit --resume-from).
    std::string resume_from;
    int64_t every_steps = 0;  // >= 0; 0 = not by steps
    // Checkpoints a cluster job keeps: <dir>/<job-id>/step-<N>/, the newest `keep` that have a
    // manifest; an older one is deleted only after a newer one is committed, and the embedding
    // servers' snapshots of deleted checkpoints go with them. In [1, kMaxKeep].
    int keep = 3;
    bool every_epoch = true;
    bool operator==(const Checkpoint&) const = default;
  };

  // Per embedding table (by name: user_feat_<i>, item_feat_<i>, as the worker names them).
  struct Table {
    // Rows the table may hold over all embedding servers; 0 = no row limit (each server's
    // --table-memory-budget, by default 80% of its memory, still bounds all tables together).
    // Each of S servers holds at most ceil(capacity / S) rows; a pull of a new id beyond that
    // fails the job with RESOURCE_EXHAUSTED naming the table. In [0, kMaxCapacity].
    int64_t capacity = 0;
    bool operator==(const Table&) const = default;
  };

  std::string name;     // optional job name
  std::string dataset;  // required: a sift dataset (import TFRecords with sift data convert)
  Model model;
  Training training;
  Cluster cluster;
  Checkpoint checkpoint;
  // The submitter's own security settings (common/security.h), the names of the flags without
  // their dashes: `sift submit` uses them where neither --tls-dir / --token-file nor
  // $SIFT_TLS_DIR / $SIFT_TOKEN_FILE is given. Client-side only: JobSpecToYaml leaves them out,
  // so they never reach the coordinator or the job's record.
  struct Security {
    std::string tls_dir;
    std::string token_file;
    bool operator==(const Security&) const = default;
  };
  Security security;
  // `tables: {item_feat_0: {capacity: 1000000}}`; names [A-Za-z0-9_]{1,64}. A name the dataset
  // has no table of fails the job naming tables.<name>.
  std::map<std::string, Table> tables;
  std::string results_dir;  // optional: the job's DLLL log.json goes here

  bool operator==(const JobSpec&) const = default;
};

// The ranges ParseJobSpec enforces beyond the field comments above, so that a spec that parses
// is one the cluster can run (and a message names the spec's field, never a worker's flag). The
// coordinator may lower the cluster sizes (`sift coordinator --max-servers/--max-workers`).
struct JobSpecLimits {
  static constexpr int64_t kMaxEpochs = 100000;
  static constexpr int64_t kMaxBatchSize = int64_t{1} << 24;  // batch_size, eval_batch_size
  static constexpr double kMinLr = 1e-30;                     // lr is a float on the workers
  static constexpr double kMaxLr = 1000;
  static constexpr double kMaxWeightDecay = 1000;  // lr * weight_decay must stay below 1
  static constexpr double kMaxSparseL2 = 1e6;
  static constexpr int64_t kMaxStaleness = 1024;
  static constexpr int64_t kMaxSamples = int64_t{1} << 40;  // train_eval_samples, max_steps
  static constexpr int64_t kMaxClusterSize = 4096;          // servers, workers
  static constexpr int64_t kMaxThreads = 4096;              // threads_per_worker
  static constexpr int64_t kMaxWidth = 65536;  // embedding_dim, gru_hidden, every MLP width
  static constexpr int64_t kMaxSeqLength = int64_t{1} << 20;  // long/short_seq_length, top_k
  static constexpr size_t kMaxMlpLayers = 64;
  static constexpr size_t kMaxNameBytes = 256;               // name: UTF-8, no control characters
  static constexpr size_t kMaxPathBytes = 4096;              // dataset, checkpoint.dir, results_dir
  static constexpr size_t kMaxSpecBytes = 1 << 20;           // the whole YAML text
  static constexpr int64_t kMaxKeep = 1000;                  // checkpoint.keep
  static constexpr int64_t kMaxCapacity = int64_t{1} << 48;  // tables.<name>.capacity
  static constexpr size_t kMaxTables = 4096;                 // entries of tables
  static constexpr size_t kMaxTableNameBytes = 64;
};

// Parses and validates a job spec; `source_name` (e.g. "job.yaml") prefixes every error message.
// Absent keys keep their defaults; `dataset` is required. An empty section (`cluster:`) means all
// defaults.
StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml_text, const std::string& source_name);

// Reads `path` and parses it (errors name the path). NOT_FOUND when the file does not exist.
StatusOr<JobSpec> ReadJobSpec(const std::string& path);

// The checks of a spec as a cluster job, after any command-line overrides of cluster.*:
// training.batch_size must be a multiple of cluster.workers (each worker takes an equal share).
// INVALID_ARGUMENT naming `source_name` and the fields.
Status CheckClusterJob(const JobSpec& spec, const std::string& source_name);

// The canonical YAML of `spec`: every field, fixed order, strings double-quoted, lr in the
// shortest form that reads back exactly. ParseJobSpec(JobSpecToYaml(x)) == x for a valid x.
std::string JobSpecToYaml(const JobSpec& spec);

// One key of the job spec, for the generated reference (docs/reference/job-spec.md, `sift
// help-markdown --job-spec`): from the very table ParseJobSpec reads with, so it cannot drift.
struct JobSpecFieldDoc {
  std::string field;          // dotted: "training.epochs"; "tables.<name>.capacity"
  std::string kind;           // "integer in [1, 100000]", "one of sim, dien, din", "mapping"
  std::string default_value;  // as YAML; empty for mappings
  bool from_recipe = false;   // the default comes from training.recipe
  std::string doc;            // what it means
};
// Every key in the order of the parser's table, parents before their keys.
std::vector<JobSpecFieldDoc> DescribeJobSpec();

// A spec built in code (sift local's embedded default): sets training.recipe to `recipe` and
// every field it controls to the recipe's value (ParseJobSpec does this for the fields a spec
// text leaves out).
void ApplyRecipe(const Recipe& recipe, JobSpec* spec);

}  // namespace sift
