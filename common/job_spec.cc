#include "common/job_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/lr_schedule.h"
#include "common/text.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace sift {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
using L = JobSpecLimits;

const std::vector<std::string> kModelTypes = {"sim", "dien", "din"};
const std::vector<std::string> kGsuKinds = {"soft", "hard"};
const std::vector<std::string> kOptimizers = {"adam"};
const std::vector<std::string> kSparseOptimizers = {"adam", "adagrad", "sgd"};
const std::vector<std::string> kSparseUpdates = {"step", "per_rank"};
const std::vector<std::string> kOrders = {"shuffled", "reference"};
const std::vector<std::string> kKeepBest = {"last", "validation_auc"};
// A static list: Parser::Enum keeps a reference to it.
const std::vector<std::string>& RecipeNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Recipe& r : Recipes()) out.push_back(r.name);
    return out;
  }();
  return names;
}
const std::vector<std::string> kBackends = {"cpu", "cuda"};
const std::vector<std::string> kPrecisions = {"auto", "fp32", "tf32", "bf16", "fp16"};
const std::vector<std::string> kCollectives = {"auto", "gloo", "nccl"};

// One key/value pair of a mapping, with the dotted path of the field it sets.
struct Entry {
  YAML::Node key;
  YAML::Node value;
  std::string field;
  // 0-based line of the value, or of the key when the value is empty (yaml-cpp marks an empty
  // value on the line after it).
  int line() const {
    if (value.IsDefined() && !value.IsNull() && value.Mark().line >= 0) return value.Mark().line;
    return key.Mark().line;
  }
};

struct Field;
using FieldTable = std::vector<Field>;

// How one key's value is read, and what it is for the generated reference (DescribeJobSpec).
struct Handler {
  std::function<Status(const Entry&)> parse;
  std::string kind;                    // "integer in [1, 100000]", "one of sim, dien, din", ...
  std::function<std::string()> value;  // the target's current value as YAML; empty for sections
  std::shared_ptr<const FieldTable> children;  // a section's keys
};

// One key of a mapping: its name, how it is read, and what it means.
struct Field {
  std::string name;
  Handler handler;
  std::string doc;
};

// Edit distance, for "did you mean" hints on unknown keys.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// What a node holds, for "got ..." in messages.
std::string Describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "an empty value";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return absl::StrCat("'", n.Scalar(), "'");
}

class Parser {
 public:
  explicit Parser(const std::string& source) : source_(source) {}

  // "<source>:<line>: <field>: <what>"; `line` is 0-based (< 0: unknown), `field` may be empty.
  Status Error(int line, absl::string_view field, absl::string_view what) const {
    std::string where = line >= 0 ? absl::StrCat(source_, ":", line + 1) : source_;
    if (field.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, ": ", what));
  }
  Status Error(const Entry& e, absl::string_view what) const {
    return Error(e.line(), e.field, what);
  }

  // Dispatches every key of `node` (a mapping, or empty for all defaults) to its handler.
  // Rejects non-scalar, duplicate and unknown keys.
  Status ParseMap(const YAML::Node& node, const std::string& prefix, int fallback_line,
                  const FieldTable& table) const {
    if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
    if (!node.IsMap()) {
      const int line = node.Mark().line >= 0 ? node.Mark().line : fallback_line;
      return Error(line, prefix,
                   absl::StrCat("expected a mapping with keys ", KnownKeys(table), ", got ",
                                Describe(node)));
    }
    std::map<std::string, int> seen;  // key -> 0-based line of its first occurrence
    for (const auto& kv : node) {
      const YAML::Node& key = kv.first;
      if (!key.IsScalar()) {
        return Error(key.Mark().line, prefix,
                     absl::StrCat("keys must be names, got ", Describe(key)));
      }
      const std::string name = key.Scalar();
      Entry entry{key, kv.second, prefix.empty() ? name : absl::StrCat(prefix, ".", name)};
      auto [it, inserted] = seen.emplace(name, key.Mark().line);
      if (!inserted) {
        return Error(key.Mark().line, entry.field,
                     absl::StrCat("duplicate key (first given on line ", it->second + 1, ")"));
      }
      const std::function<Status(const Entry&)>* handler = nullptr;
      for (const Field& f : table) {
        if (f.name == name) handler = &f.handler.parse;
      }
      if (handler == nullptr) {
        return Error(key.Mark().line, entry.field,
                     absl::StrCat("unknown key", Suggestion(name, table),
                                  "; known keys: ", KnownKeys(table)));
      }
      SIFT_RETURN_IF_ERROR((*handler)(entry));
    }
    return absl::OkStatus();
  }

  // Handlers for the value kinds.
  Handler Int(int64_t* out, int64_t min, int64_t max) const {
    return {IntParse(out, min, max), absl::StrCat("integer ", Range(min, max)),
            [out] { return absl::StrCat(*out); }, nullptr};
  }
  std::function<Status(const Entry&)> IntParse(int64_t* out, int64_t min, int64_t max) const {
    return [this, out, min, max](const Entry& e) -> Status {
      int64_t v = 0;
      if (!e.value.IsScalar() || !absl::SimpleAtoi(e.value.Scalar(), &v) || v < min || v > max) {
        return Error(
            e, absl::StrCat("must be an integer ", Range(min, max), ", got ", Describe(e.value)));
      }
      *out = v;
      lines_[e.field] = e.line();
      return absl::OkStatus();
    };
  }
  Handler Int(int* out, int64_t min, int64_t max) const {
    max = std::min(max, kIntMax);
    return {[this, out, min, max](const Entry& e) -> Status {
              int64_t v = 0;
              SIFT_RETURN_IF_ERROR(IntParse(&v, min, max)(e));
              *out = static_cast<int>(v);
              return absl::OkStatus();
            },
            absl::StrCat("integer ", Range(min, max)), [out] { return absl::StrCat(*out); },
            nullptr};
  }
  Handler Uint(uint64_t* out) const {
    return {UintParse(out), "integer >= 0", [out] { return absl::StrCat(*out); }, nullptr};
  }
  std::function<Status(const Entry&)> UintParse(uint64_t* out) const {
    return [this, out](const Entry& e) -> Status {
      uint64_t v = 0;
      if (!e.value.IsScalar() || !absl::SimpleAtoi(e.value.Scalar(), &v)) {
        return Error(
            e, absl::StrCat("must be an integer in [0, ", std::numeric_limits<uint64_t>::max(),
                            "], got ", Describe(e.value)));
      }
      *out = v;
      return absl::OkStatus();
    };
  }
  Handler Float(double* out, double min, double max) const {
    return {FloatParse(out, min, max), absl::StrCat("number in [", min, ", ", max, "]"),
            [out] { return absl::StrCat(*out); }, nullptr};
  }
  std::function<Status(const Entry&)> FloatParse(double* out, double min, double max) const {
    return [this, out, min, max](const Entry& e) -> Status {
      double v = 0;
      // Decimal notation only (strtod would also take hex floats such as 0x10).
      const bool decimal = e.value.IsScalar() && e.value.Scalar().find_first_not_of(
                                                     "0123456789+-.eE") == std::string::npos;
      if (!decimal || !absl::SimpleAtod(e.value.Scalar(), &v) || !std::isfinite(v) || v < min ||
          v > max) {
        return Error(
            e, absl::StrCat("must be a number in [", min, ", ", max, "], got ", Describe(e.value)));
      }
      *out = v;
      lines_[e.field] = e.line();
      return absl::OkStatus();
    };
  }
  Handler Bool(bool* out) const {
    return {BoolParse(out), "true or false", [out] { return std::string(*out ? "true" : "false"); },
            nullptr};
  }
  std::function<Status(const Entry&)> BoolParse(bool* out) const {
    return [this, out](const Entry& e) -> Status {
      const std::string s = e.value.IsScalar() ? absl::AsciiStrToLower(e.value.Scalar()) : "";
      if (s != "true" && s != "false") {
        return Error(e, absl::StrCat("must be true or false, got ", Describe(e.value)));
      }
      *out = s == "true";
      lines_[e.field] = e.line();
      return absl::OkStatus();
    };
  }
  // A string of at most `max_bytes` bytes of UTF-8 without control characters.
  Handler String(std::string* out, size_t max_bytes) const {
    return {StringParse(out, max_bytes), absl::StrCat("string of at most ", max_bytes, " bytes"),
            [out] { return out->empty() ? std::string("\"\"") : *out; }, nullptr};
  }
  std::function<Status(const Entry&)> StringParse(std::string* out, size_t max_bytes) const {
    return [this, out, max_bytes](const Entry& e) -> Status {
      if (!e.value.IsScalar()) {
        return Error(e, absl::StrCat("must be a string (\"\" for none), got ", Describe(e.value)));
      }
      const std::string& v = e.value.Scalar();
      if (v.size() > max_bytes) {
        return Error(e, absl::StrCat("must be at most ", max_bytes, " bytes, got ", v.size()));
      }
      if (const size_t bad = FindUnprintable(v); bad != absl::string_view::npos) {
        return Error(e, absl::StrCat("must be UTF-8 text without control characters; byte ", bad,
                                     " is not"));
      }
      *out = v;
      return absl::OkStatus();
    };
  }
  Handler Enum(std::string* out, const std::vector<std::string>& accepted) const {
    return {EnumParse(out, accepted), absl::StrCat("one of ", absl::StrJoin(accepted, ", ")),
            [out] { return *out; }, nullptr};
  }
  std::function<Status(const Entry&)> EnumParse(std::string* out,
                                                const std::vector<std::string>& accepted) const {
    return [this, out, &accepted](const Entry& e) -> Status {
      const bool ok = e.value.IsScalar() && std::find(accepted.begin(), accepted.end(),
                                                      e.value.Scalar()) != accepted.end();
      if (!ok) {
        return Error(e, absl::StrCat("must be one of ", absl::StrJoin(accepted, ", "), "; got ",
                                     Describe(e.value)));
      }
      *out = e.value.Scalar();
      lines_[e.field] = e.line();
      return absl::OkStatus();
    };
  }
  // A non-empty list of widths >= 1 (MLP hidden layers).
  Handler Dims(std::vector<int>* out) const {
    return {DimsParse(out),
            absl::StrCat("non-empty list of at most ", L::kMaxMlpLayers, " integers in [1, ",
                         L::kMaxWidth, "]"),
            [out] { return absl::StrCat("[", absl::StrJoin(*out, ", "), "]"); }, nullptr};
  }
  std::function<Status(const Entry&)> DimsParse(std::vector<int>* out) const {
    return [this, out](const Entry& e) -> Status {
      const std::string what = "must be a non-empty list of integers >= 1, e.g. [200, 80]";
      if (!e.value.IsSequence() || e.value.size() == 0) {
        return Error(e, absl::StrCat(what, "; got ", Describe(e.value)));
      }
      if (e.value.size() > L::kMaxMlpLayers) {
        return Error(e,
                     absl::StrCat("at most ", L::kMaxMlpLayers, " layers, got ", e.value.size()));
      }
      std::vector<int> dims;
      for (size_t i = 0; i < e.value.size(); ++i) {
        const YAML::Node item = e.value[i];
        int64_t v = 0;
        if (!item.IsScalar() || !absl::SimpleAtoi(item.Scalar(), &v) || v < 1 || v > L::kMaxWidth) {
          const int line = item.Mark().line >= 0 ? item.Mark().line : e.line();
          return Error(line, absl::StrCat(e.field, "[", i, "]"),
                       absl::StrCat("must be an integer ", Range(1, L::kMaxWidth), ", got ",
                                    Describe(item)));
        }
        dims.push_back(static_cast<int>(v));
      }
      *out = std::move(dims);
      return absl::OkStatus();
    };
  }
  Handler Section(FieldTable table) const {
    auto children = std::make_shared<const FieldTable>(std::move(table));
    return {[this, children](const Entry& e) -> Status {
              return ParseMap(e.value, e.field, e.line(), *children);
            },
            "mapping", nullptr, children};
  }

  // 0-based line where `field` was set, or -1.
  int LineOf(const std::string& field) const {
    auto it = lines_.find(field);
    return it == lines_.end() ? -1 : it->second;
  }

 private:
  static std::string Range(int64_t min, int64_t max) {
    if (max == kInt64Max) return absl::StrCat(">= ", min);
    return absl::StrCat("in [", min, ", ", max, "]");
  }
  static std::string KnownKeys(const FieldTable& table) {
    std::vector<std::string> names;
    for (const Field& f : table) names.push_back(f.name);
    return absl::StrJoin(names, ", ");
  }
  static std::string Suggestion(const std::string& name, const FieldTable& table) {
    std::string best;
    size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
    for (const Field& f : table) {
      const size_t d = EditDistance(absl::AsciiStrToLower(name), f.name);
      if (d < best_distance) {
        best_distance = d;
        best = f.name;
      }
    }
    return best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)");
  }

  const std::string& source_;
  mutable std::map<std::string, int> lines_;
};

// Checks that involve more than one field, after every field is read.
Status CrossCheck(const Parser& p, const JobSpec& spec) {
  if (spec.model.type != "din" && spec.model.short_seq_length < 2) {
    return p.Error(p.LineOf("model.short_seq_length"), "model.short_seq_length",
                   absl::StrCat("must be >= 2 for model type ", spec.model.type, ", got ",
                                spec.model.short_seq_length));
  }
  if (spec.model.time_embedding && spec.model.type != "sim") {
    return p.Error(
        p.LineOf("model.time_embedding"), "model.time_embedding",
        absl::StrCat("is in SIM's search unit; model type ", spec.model.type, " has none"));
  }
  if (spec.model.gsu_time &&
      (spec.model.type != "sim" || spec.model.gsu != "soft" || !spec.model.time_embedding)) {
    return p.Error(p.LineOf("model.gsu_time"), "model.gsu_time",
                   absl::StrCat("is the soft search's time term: it needs model.type sim, "
                                "model.gsu soft and model.time_embedding true (got ",
                                spec.model.type, ", ", spec.model.gsu, ", ",
                                spec.model.time_embedding ? "true" : "false", ")"));
  }
  if (spec.model.gsu == "hard") {
    if (spec.model.type != "sim") {
      return p.Error(
          p.LineOf("model.gsu"), "model.gsu",
          absl::StrCat("hard is SIM's search unit; model type ", spec.model.type, " has none"));
    }
    if (spec.model.top_k > spec.model.long_seq_length) {
      return p.Error(
          p.LineOf("model.top_k"), "model.top_k",
          absl::StrCat("hard search retrieves at most the long_seq_length = ",
                       spec.model.long_seq_length, " events searched, got ", spec.model.top_k));
    }
  }
  return absl::OkStatus();
}

// Every key of a job spec, read into `spec` (`*has_dataset` set when dataset is given), with its
// meaning: the one schema both ParseJobSpec and DescribeJobSpec use.
FieldTable SpecFields(const Parser& p, JobSpec* spec_ptr, bool* has_dataset) {
  JobSpec& spec = *spec_ptr;
  JobSpec::Model& m = spec.model;
  JobSpec::Training& t = spec.training;
  JobSpec::Cluster& c = spec.cluster;
  JobSpec::Checkpoint& k = spec.checkpoint;
  Handler dataset = p.String(&spec.dataset, L::kMaxPathBytes);
  dataset.parse = [&p, &spec, has_dataset](const Entry& e) -> Status {
    SIFT_RETURN_IF_ERROR(p.String(&spec.dataset, L::kMaxPathBytes).parse(e));
    if (spec.dataset.empty()) return p.Error(e, "must not be empty (a sift dataset path)");
    *has_dataset = true;
    return absl::OkStatus();
  };
  dataset.kind = "path (required)";
  Handler tables;
  tables.kind = "mapping of table names to {capacity: ROWS}";
  tables.parse = [&p, &spec](const Entry& e) -> Status {
    if (!e.value.IsDefined() || e.value.IsNull()) return absl::OkStatus();
    if (!e.value.IsMap()) {
      return p.Error(e, absl::StrCat("expected a mapping of table names to {capacity: ROWS}, "
                                     "got ",
                                     Describe(e.value)));
    }
    if (e.value.size() > L::kMaxTables) {
      return p.Error(e, absl::StrCat("at most ", L::kMaxTables, " tables, got ", e.value.size()));
    }
    // One section per name given; ParseMap then rejects duplicates and bad values.
    FieldTable names;
    for (const auto& kv : e.value) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      const bool valid = !name.empty() && name.size() <= L::kMaxTableNameBytes &&
                         name.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "0123456789_") == std::string::npos;
      if (!valid) {
        return p.Error(kv.first.Mark().line, e.field,
                       absl::StrCat("table names are [A-Za-z0-9_]{1,", L::kMaxTableNameBytes,
                                    "} (user_feat_0, item_feat_1, ...), got ", Describe(kv.first)));
      }
      JobSpec::Table* entry = &spec.tables[name];
      names.push_back(Field{
          name, p.Section({{"capacity", p.Int(&entry->capacity, 0, L::kMaxCapacity), ""}}), ""});
    }
    return p.ParseMap(e.value, e.field, e.line(), names);
  };
  // The tables' one key, for the reference (the parser builds a section per name given).
  static JobSpec::Table example_table;
  tables.children = std::make_shared<const FieldTable>(FieldTable{
      {"<name>",
       p.Section({{"capacity", p.Int(&example_table.capacity, 0, L::kMaxCapacity),
                   "Rows the table may hold over all embedding servers; 0 = no row "
                   "limit (each server's --table-memory-budget still bounds all its "
                   "tables together). Each of S servers holds at most ceil(capacity / "
                   "S) rows; a pull of a new id beyond that fails the job with "
                   "RESOURCE_EXHAUSTED naming the table."}}),
       "A table by name: user_feat_<i> or item_feat_<i> as the dataset's features are numbered "
       "([A-Za-z0-9_]{1,64}); a name the dataset has no table of fails the job."}});
  return {
      {"name", p.String(&spec.name, L::kMaxNameBytes),
       "A name for people (`sift jobs` shows it); UTF-8 without control characters."},
      {"dataset", dataset,
       "The sift dataset to train on (`sift data gen`, `sift data amazon`, `sift data convert`): "
       "a directory every worker can read at this path."},
      {"model",
       p.Section({
           {"type", p.Enum(&m.type, kModelTypes),
            "The model: sim (search-based interest model: a general search unit over the long "
            "sequence and an exact search unit over its top_k), dien (interest evolution over the "
            "short sequence), din (attention over the short sequence)."},
           {"embedding_dim", p.Int(&m.embedding_dim, 1, L::kMaxWidth),
            "Width of every embedding row."},
           {"long_seq_length", p.Int(&m.long_seq_length, 1, L::kMaxSeqLength),
            "Events of the long behaviour sequence the model reads (T_L; sim and din)."},
           {"short_seq_length", p.Int(&m.short_seq_length, 1, L::kMaxSeqLength),
            "Events of the short (most recent) sequence (T_S); at least 2 for sim and dien."},
           {"top_k", p.Int(&m.top_k, 1, L::kMaxSeqLength),
            "Events the search unit keeps from the long sequence (sim)."},
           {"gsu", p.Enum(&m.gsu, kGsuKinds),
            "SIM's general search unit: soft (learned relevance, the reference) or hard (the "
            "newest top_k events of the target's category; no search head or loss)."},
           {"time_embedding", p.Bool(&m.time_embedding),
            "SIM: embed each searched event's time interval to the target in the exact search "
            "unit."},
           {"gsu_time", p.Bool(&m.gsu_time),
            "SIM soft search with time_embedding: the search's relevance includes the time "
            "term."},
           {"gru_hidden", p.Int(&m.gru_hidden, 0, L::kMaxWidth),
            "DIEN's GRU width; 0 = 6 x embedding_dim."},
           {"stage_one_mlp_dims", p.Dims(&m.stage_one_mlp_dims),
            "Hidden layers of SIM's search-stage (auxiliary) MLP head."},
           {"stage_two_mlp_dims", p.Dims(&m.stage_two_mlp_dims),
            "Hidden layers of the main MLP head."},
           {"aux_mlp_dims", p.Dims(&m.aux_mlp_dims), "Hidden layers of DIEN's auxiliary-loss MLP."},
           {"attention_mlp_dims", p.Dims(&m.attention_mlp_dims),
            "Hidden layers of the attention MLPs."},
           {"dropout", p.Float(&m.dropout, 0, 0.9),
            "Inverted dropout on the hidden outputs of the MLP heads in training; 0 = none."},
       }),
       "The model and its dimensions (the reference's by default)."},
      {"training",
       p.Section({
           {"epochs", p.Int(&t.epochs, 1, L::kMaxEpochs), "Passes over the training split."},
           {"batch_size", p.Int(&t.batch_size, 1, L::kMaxBatchSize),
            "Samples per step over all workers together; a multiple of cluster.workers."},
           {"eval_batch_size", p.Int(&t.eval_batch_size, 0, L::kMaxBatchSize),
            "Samples per evaluation step; 0 = batch_size."},
           {"lr", p.Float(&t.lr, L::kMinLr, L::kMaxLr),
            "Learning rate of both optimizers (the schedule's peak)."},
           {"lr_schedule", p.Enum(&t.lr_schedule, LrScheduleNames()),
            "constant, linear or cosine decay to lr_final_fraction x lr at the run's end, after "
            "lr_warmup_steps of linear warm-up."},
           {"lr_warmup_steps", p.Int(&t.lr_warmup_steps, 0, L::kMaxSamples),
            "Steps of linear warm-up from 0 to lr."},
           {"lr_final_fraction", p.Float(&t.lr_final_fraction, 0, 1),
            "Where linear and cosine schedules end, as a fraction of lr."},
           {"weight_decay", p.Float(&t.weight_decay, 0, L::kMaxWeightDecay),
            "Decoupled weight decay of the dense parameters (AdamW); lr x weight_decay < 1; 0 = "
            "plain Adam."},
           {"sparse_l2", p.Float(&t.sparse_l2, 0, L::kMaxSparseL2),
            "Mini-batch-aware L2 (the DIN paper) on the embedding rows each step touches; 0 = "
            "none."},
           {"optimizer", p.Enum(&t.optimizer, kOptimizers), "Dense optimizer."},
           {"sparse_optimizer", p.Enum(&t.sparse_optimizer, kSparseOptimizers),
            "The embedding servers' optimizer of the embedding rows."},
           {"staleness", p.Int(&t.staleness, 0, L::kMaxStaleness),
            "Steps a worker's embedding pulls may run ahead of its pushes; 0 = synchronous."},
           {"sparse_update", p.Enum(&t.sparse_update, kSparseUpdates),
            "step: the workers' sparse gradients of a step are summed on the servers, one "
            "optimizer update per row per step (what one process computes); per_rank: each "
            "worker's push is its own update (asynchronous parameter-server semantics)."},
           {"seed", p.Uint(&t.seed), "Seed of the initialisation and the shuffling."},
           {"order", p.Enum(&t.order, kOrders),
            "shuffled: samples in a seeded random order each epoch; reference: the reference's "
            "order."},
           {"train_eval_samples", p.Int(&t.train_eval_samples, 0, L::kMaxSamples),
            "Training samples the train AUC is computed on after each epoch; 0 = the whole "
            "split."},
           {"max_steps_per_epoch", p.Int(&t.max_steps_per_epoch, 0, L::kMaxSamples),
            "Cap on the steps of an epoch; 0 = the whole split."},
           {"recipe", p.Enum(&t.recipe, RecipeNames()),
            "Named defaults for the fields whose default below names a recipe (model.dropout, "
            "training.lr, ...): reference (the TF2 reference's recipe) or sift (regularised, "
            "with a validation split keeping the best epoch). A field given in the spec wins "
            "over its recipe's value."},
           {"validation_fraction", p.Float(&t.validation_fraction, 0, 0.5),
            "Fraction of users whose last training pair is held out and evaluated after every "
            "epoch; 0 = no validation split."},
           {"keep_best", p.Enum(&t.keep_best, kKeepBest),
            "The model the job keeps and reports: last, or the epoch with the best validation AUC "
            "(needs validation_fraction > 0)."},
           {"patience", p.Int(&t.patience, 0, L::kMaxEpochs),
            "Stop after this many epochs without a better validation AUC; 0 = never."},
       }),
       "How the model is trained."},
      {"cluster",
       p.Section({
           {"servers", p.Int(&c.servers, 1, L::kMaxClusterSize),
            "Embedding servers (shards of the tables) the job needs."},
           {"workers", p.Int(&c.workers, 1, L::kMaxClusterSize),
            "Workers (data-parallel ranks) the job needs."},
           {"backend", p.Enum(&c.backend, kBackends), "Where workers compute: cpu or cuda."},
           {"precision", p.Enum(&c.precision, kPrecisions),
            "GEMM arithmetic. auto: bf16 on cuda; on cpu bf16 where the CPU has native bf16 dot "
            "products (AVX512-BF16 or AMX), else fp32. tf32 and fp16 need cuda."},
           {"deterministic", p.Bool(&c.deterministic),
            "Fixed summation orders, bit-reproducible runs; false lets cuda sum embedding "
            "gradients with atomics. No effect on cpu."},
           {"collectives", p.Enum(&c.collectives, kCollectives),
            "Dense allreduce between workers: auto (nccl for cuda where built, else gloo), gloo, "
            "or nccl (cuda only)."},
           {"threads_per_worker", p.Int(&c.threads_per_worker, 0, L::kMaxThreads),
            "Compute threads of each worker; 0 = every CPU available to it."},
       }),
       "The cluster a job needs and how its workers compute (`sift submit --workers/--servers` "
       "override the sizes)."},
      {"checkpoint",
       p.Section({
           {"dir", p.String(&k.dir, L::kMaxPathBytes),
            "Where checkpoints go (a cluster job writes <dir>/<job id>/step-<N>/); \"\" = only "
            "the final model, under the coordinator's <state-dir>/checkpoints (or its "
            "--checkpoint-root). Must lie under the coordinator's --checkpoint-root."},
           {"every_steps", p.Int(&k.every_steps, 0, L::kMaxSamples),
            "Also checkpoint every N steps; 0 = not by steps."},
           {"every_epoch", p.Bool(&k.every_epoch), "Checkpoint at the end of every epoch."},
           {"keep", p.Int(&k.keep, 1, L::kMaxKeep),
            "Newest checkpoints kept; an older one is deleted only after a newer one is "
            "committed."},
           {"resume_from", p.String(&k.resume_from, L::kMaxPathBytes),
            "A checkpoint directory (of another job) this job starts from; \"\" = a fresh start "
            "(`sift submit --resume-from`)."},
       }),
       "Checkpoints: where, how often, how many, and what to resume from."},
      {"security",
       p.Section({
           {"tls_dir", p.String(&spec.security.tls_dir, L::kMaxPathBytes),
            "The submitter's --tls-dir (a directory with the cluster's ca.crt)."},
           {"token_file", p.String(&spec.security.token_file, L::kMaxPathBytes),
            "The submitter's --token-file (a file whose first line is the user's token)."},
       }),
       "The submitter's own settings, used by `sift submit` where neither flags nor "
       "environment variables give them; never sent to the coordinator."},
      {"tables", tables, "Per-table row limits."},
      {"results_dir", p.String(&spec.results_dir, L::kMaxPathBytes),
       "Where the job's DLLL log goes: <results_dir>/<job id>/log.json; \"\" = no log file "
       "(`sift status` and `sift logs` still show the job's metrics). Must lie under the "
       "coordinator's --results-root."},
  };
}

StatusOr<JobSpec> ParseRoot(const YAML::Node& root, const std::string& source) {
  Parser p(source);
  JobSpec spec;
  JobSpec::Model& m = spec.model;
  JobSpec::Training& t = spec.training;
  JobSpec::Cluster& c = spec.cluster;
  JobSpec::Checkpoint& k = spec.checkpoint;
  bool has_dataset = false;
  const FieldTable table = SpecFields(p, &spec, &has_dataset);
  if (!root.IsMap()) {
    return p.Error(
        std::max(0, root.Mark().line), "",
        absl::StrCat("a job spec must be a mapping (dataset: ..., model: ..., ...), got ",
                     Describe(root)));
  }
  SIFT_RETURN_IF_ERROR(p.ParseMap(root, "", 0, table));
  // The recipe's values for the fields the spec leaves out (common/recipe.h).
  SIFT_ASSIGN_OR_RETURN(const Recipe recipe, FindRecipe(t.recipe));
  const auto unset = [&p](const char* field) { return p.LineOf(field) < 0; };
  if (unset("training.sparse_l2")) t.sparse_l2 = recipe.sparse_l2;
  if (unset("training.lr")) t.lr = recipe.lr;
  if (unset("training.lr_schedule")) t.lr_schedule = recipe.lr_schedule;
  if (unset("model.dropout")) m.dropout = recipe.dropout;
  if (unset("training.validation_fraction")) t.validation_fraction = recipe.validation_fraction;
  if (t.validation_fraction > 0) {  // a spec that turns the validation split off chooses nothing
    if (unset("training.keep_best")) t.keep_best = recipe.keep_best;
    if (unset("training.patience")) t.patience = recipe.patience;
  }
  if (!has_dataset) {
    return p.Error(std::max(0, root.Mark().line), "dataset",
                   "required key missing (the path of a sift dataset)");
  }
  if (c.backend == "cpu" && (c.precision == "tf32" || c.precision == "fp16")) {
    return p.Error(
        p.LineOf("cluster.precision"), "cluster.precision",
        absl::StrCat("'", c.precision,
                     "' needs cluster.backend: cuda (the cpu backend computes in fp32 or bf16)"));
  }
  if (t.lr * t.weight_decay >= 1) {
    return p.Error(p.LineOf("training.weight_decay"), "training.weight_decay",
                   absl::StrCat("lr x weight_decay must be < 1 (each step scales the dense "
                                "parameters by 1 - lr x weight_decay), got ",
                                t.lr * t.weight_decay));
  }
  for (const auto& [field, set] :
       {std::pair<const char*, bool>{"training.keep_best", t.keep_best != "last"},
        {"training.patience", t.patience > 0}}) {
    if (set && !(t.validation_fraction > 0)) {
      return p.Error(p.LineOf(field), field,
                     "chooses by the validation AUC: it needs training.validation_fraction > 0");
    }
  }
  if (c.backend == "cpu" && c.collectives == "nccl") {
    return p.Error(p.LineOf("cluster.collectives"), "cluster.collectives",
                   "nccl needs cluster.backend: cuda (NCCL reduces GPU buffers)");
  }
  if (k.every_steps > 0 && k.dir.empty()) {
    return p.Error(p.LineOf("checkpoint.every_steps"), "checkpoint.every_steps",
                   "checkpoints every N steps need checkpoint.dir");
  }
  SIFT_RETURN_IF_ERROR(CrossCheck(p, spec));
  return spec;
}

// True when yaml-cpp's document stream of `text` ends: at most text.size() + 1 documents (a real
// text has fewer documents than bytes). yaml-cpp 0.7's LoadAll never returns on some inputs (",",
// found by tests/fuzz: an endless stream of empty documents, memory growing until the process
// dies), so ParseJobSpec counts the documents with a no-op handler before loading them. Throws
// YAML::Exception on a syntax error, as LoadAll would.
bool DocumentStreamEnds(absl::string_view text) {
  struct Ignore final : YAML::EventHandler {
    void OnDocumentStart(const YAML::Mark&) override {}
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  };
  std::stringstream in{std::string(text)};
  YAML::Parser parser(in);
  Ignore ignore;
  for (size_t docs = 0; parser.HandleNextDocument(ignore); ++docs) {
    if (docs > text.size() + 1) return false;
  }
  return true;
}

// Shortest decimal that reads back as the same double.
std::string ShortestDouble(double v) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

void EmitDims(YAML::Emitter& out, const char* key, const std::vector<int>& dims) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int d : dims) out << d;
  out << YAML::EndSeq;
}

}  // namespace

StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml_text, const std::string& source_name) {
  if (yaml_text.size() > L::kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": the job spec is ",
                                                   yaml_text.size(), " bytes; at most ",
                                                   L::kMaxSpecBytes, " are accepted"));
  }
  std::vector<YAML::Node> docs;
  try {
    if (!DocumentStreamEnds(yaml_text)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name,
                       ":1: not YAML the parser can read (its documents never end); a job spec is "
                       "one mapping, e.g. 'dataset: /data/tiny'"));
    }
    docs = YAML::LoadAll(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    Parser p(source_name);
    return p.Error(e.mark.line, "", absl::StrCat("YAML syntax error: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": YAML error: ", e.what()));
  }
  if (docs.empty() || (docs.size() == 1 && docs[0].IsNull())) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ":1: the job spec is empty; expected a mapping with at least 'dataset'"));
  }
  if (docs.size() > 1) {
    return Parser(source_name)
        .Error(std::max(0, docs[1].Mark().line), "",
               "more than one YAML document ('---'); a job spec is one mapping");
  }
  try {
    return ParseRoot(docs[0], source_name);
  } catch (const YAML::Exception& e) {
    return Parser(source_name).Error(e.mark.line, "", e.msg);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": ", e.what()));
  }
}

StatusOr<JobSpec> ReadJobSpec(const std::string& path) {
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseJobSpec(text, path);
}

Status CheckClusterJob(const JobSpec& spec, const std::string& source_name) {
  if (spec.training.batch_size % spec.cluster.workers != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": training.batch_size: ", spec.training.batch_size,
                     " is not a multiple of cluster.workers (", spec.cluster.workers,
                     "): every worker takes an equal share of each batch"));
  }
  return absl::OkStatus();
}

void ApplyRecipe(const Recipe& recipe, JobSpec* spec) {
  JobSpec::Training& t = spec->training;
  t.recipe = recipe.name;
  t.sparse_l2 = recipe.sparse_l2;
  t.lr = recipe.lr;
  t.lr_schedule = recipe.lr_schedule;
  spec->model.dropout = recipe.dropout;
  t.validation_fraction = recipe.validation_fraction;
  t.keep_best = recipe.keep_best;
  t.patience = recipe.patience;
}

namespace {

// Appends the docs of `table`'s keys under `prefix`; `others` are the same table built on specs
// with the other recipes applied (name, table), to show the defaults a recipe sets.
void AppendFieldDocs(const FieldTable& table,
                     const std::vector<std::pair<std::string, const FieldTable*>>& others,
                     const std::string& prefix, std::vector<JobSpecFieldDoc>* out) {
  for (size_t i = 0; i < table.size(); ++i) {
    const Field& f = table[i];
    JobSpecFieldDoc d;
    d.field = prefix.empty() ? f.name : absl::StrCat(prefix, ".", f.name);
    d.kind = f.handler.kind;
    d.doc = f.doc;
    std::vector<std::pair<std::string, const FieldTable*>> children;
    std::vector<std::string> variants;
    for (const auto& [recipe, other] : others) {
      const Field& g = (*other)[i];
      if (f.handler.value && d.field != "training.recipe" &&
          g.handler.value() != f.handler.value()) {
        variants.push_back(absl::StrCat(recipe, ": ", g.handler.value()));
      }
      if (g.handler.children != nullptr) children.emplace_back(recipe, g.handler.children.get());
    }
    if (f.handler.value) {
      d.default_value = f.handler.value();
      if (!variants.empty()) {
        d.from_recipe = true;
        d.default_value = absl::StrCat(d.default_value, " (recipe ", kDefaultRecipe, "; ",
                                       absl::StrJoin(variants, "; "), ")");
      }
    }
    out->push_back(d);
    if (f.handler.children != nullptr) {
      AppendFieldDocs(*f.handler.children, children, d.field, out);
    }
  }
}

}  // namespace

std::vector<JobSpecFieldDoc> DescribeJobSpec() {
  static const std::string kSource = "job spec";
  const Parser p(kSource);
  bool unused = false;
  // One spec per recipe (the default first); std::list-like stability: reserve up front.
  std::vector<JobSpec> specs(Recipes().size());
  std::vector<FieldTable> tables;
  tables.reserve(Recipes().size());
  size_t default_index = 0;
  for (size_t i = 0; i < Recipes().size(); ++i) {
    ApplyRecipe(Recipes()[i], &specs[i]);
    if (Recipes()[i].name == kDefaultRecipe) default_index = i;
    tables.push_back(SpecFields(p, &specs[i], &unused));
  }
  std::vector<std::pair<std::string, const FieldTable*>> others;
  for (size_t i = 0; i < Recipes().size(); ++i) {
    if (i != default_index) others.emplace_back(Recipes()[i].name, &tables[i]);
  }
  std::vector<JobSpecFieldDoc> out;
  AppendFieldDocs(tables[default_index], others, "", &out);
  return out;
}

std::string JobSpecToYaml(const JobSpec& spec) {
  const auto& m = spec.model;
  const auto& t = spec.training;
  const auto& c = spec.cluster;
  const auto& k = spec.checkpoint;
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << spec.name;
  out << YAML::Key << "dataset" << YAML::Value << YAML::DoubleQuoted << spec.dataset;

  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "type" << YAML::Value << m.type;
  out << YAML::Key << "embedding_dim" << YAML::Value << m.embedding_dim;
  out << YAML::Key << "long_seq_length" << YAML::Value << m.long_seq_length;
  out << YAML::Key << "short_seq_length" << YAML::Value << m.short_seq_length;
  out << YAML::Key << "top_k" << YAML::Value << m.top_k;
  // Only when not the reference's, so existing specs keep their canonical text (report keys).
  if (m.gsu != "soft") out << YAML::Key << "gsu" << YAML::Value << m.gsu;
  if (m.time_embedding) out << YAML::Key << "time_embedding" << YAML::Value << true;
  if (m.gsu_time) out << YAML::Key << "gsu_time" << YAML::Value << true;
  out << YAML::Key << "gru_hidden" << YAML::Value << m.gru_hidden;
  EmitDims(out, "stage_one_mlp_dims", m.stage_one_mlp_dims);
  EmitDims(out, "stage_two_mlp_dims", m.stage_two_mlp_dims);
  EmitDims(out, "aux_mlp_dims", m.aux_mlp_dims);
  EmitDims(out, "attention_mlp_dims", m.attention_mlp_dims);
  // The recipe-controlled fields: every one under a recipe other than the default (so the text
  // parses back to the same values), else only those that differ from the default recipe's (a
  // spec that does not use them keeps the canonical text it had before they existed: sift
  // report's run keys).
  const Recipe base = *FindRecipe(kDefaultRecipe);
  const bool all_recipe_fields = spec.training.recipe != kDefaultRecipe;
  if (all_recipe_fields || m.dropout != base.dropout) {
    out << YAML::Key << "dropout" << YAML::Value << ShortestDouble(m.dropout);
  }
  out << YAML::EndMap;

  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "epochs" << YAML::Value << t.epochs;
  out << YAML::Key << "batch_size" << YAML::Value << t.batch_size;
  out << YAML::Key << "eval_batch_size" << YAML::Value << t.eval_batch_size;
  out << YAML::Key << "lr" << YAML::Value << ShortestDouble(t.lr);
  // The schedule only when used (the canonical text of a spec without one stays as it was).
  if (const JobSpec::Training plain; all_recipe_fields || t.lr_schedule != plain.lr_schedule ||
                                     t.lr_warmup_steps != plain.lr_warmup_steps ||
                                     t.lr_final_fraction != plain.lr_final_fraction) {
    out << YAML::Key << "lr_schedule" << YAML::Value << t.lr_schedule;
    out << YAML::Key << "lr_warmup_steps" << YAML::Value << t.lr_warmup_steps;
    out << YAML::Key << "lr_final_fraction" << YAML::Value << ShortestDouble(t.lr_final_fraction);
  }
  out << YAML::Key << "weight_decay" << YAML::Value << ShortestDouble(t.weight_decay);
  out << YAML::Key << "sparse_l2" << YAML::Value << ShortestDouble(t.sparse_l2);
  out << YAML::Key << "optimizer" << YAML::Value << t.optimizer;
  out << YAML::Key << "sparse_optimizer" << YAML::Value << t.sparse_optimizer;
  out << YAML::Key << "staleness" << YAML::Value << t.staleness;
  // Only when not the default: the canonical text of a spec without it stays what it was.
  if (t.sparse_update != JobSpec::Training().sparse_update) {
    out << YAML::Key << "sparse_update" << YAML::Value << t.sparse_update;
  }
  out << YAML::Key << "seed" << YAML::Value << t.seed;
  out << YAML::Key << "order" << YAML::Value << t.order;
  // Model selection only when used: the canonical text of a spec without it (sift report's run
  // keys) stays what it was before these fields existed.
  if (all_recipe_fields) out << YAML::Key << "recipe" << YAML::Value << t.recipe;
  if (all_recipe_fields || t.validation_fraction != base.validation_fraction) {
    out << YAML::Key << "validation_fraction" << YAML::Value
        << ShortestDouble(t.validation_fraction);
  }
  if (all_recipe_fields || t.keep_best != base.keep_best) {
    out << YAML::Key << "keep_best" << YAML::Value << t.keep_best;
  }
  if (all_recipe_fields || t.patience != base.patience) {
    out << YAML::Key << "patience" << YAML::Value << t.patience;
  }
  out << YAML::Key << "train_eval_samples" << YAML::Value << t.train_eval_samples;
  out << YAML::Key << "max_steps_per_epoch" << YAML::Value << t.max_steps_per_epoch;
  out << YAML::EndMap;

  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "servers" << YAML::Value << c.servers;
  out << YAML::Key << "workers" << YAML::Value << c.workers;
  out << YAML::Key << "backend" << YAML::Value << c.backend;
  out << YAML::Key << "precision" << YAML::Value << c.precision;
  out << YAML::Key << "deterministic" << YAML::Value << c.deterministic;
  out << YAML::Key << "collectives" << YAML::Value << c.collectives;
  out << YAML::Key << "threads_per_worker" << YAML::Value << c.threads_per_worker;
  out << YAML::EndMap;

  out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dir" << YAML::Value << YAML::DoubleQuoted << k.dir;
  out << YAML::Key << "every_steps" << YAML::Value << k.every_steps;
  out << YAML::Key << "every_epoch" << YAML::Value << k.every_epoch;
  out << YAML::Key << "keep" << YAML::Value << k.keep;
  out << YAML::Key << "resume_from" << YAML::Value << YAML::DoubleQuoted << k.resume_from;
  out << YAML::EndMap;

  out << YAML::Key << "tables" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, table] : spec.tables) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "capacity" << YAML::Value << table.capacity;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  out << YAML::Key << "results_dir" << YAML::Value << YAML::DoubleQuoted << spec.results_dir;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace sift
