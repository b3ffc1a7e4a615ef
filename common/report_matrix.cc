#include "common/report_matrix.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/data/synthetic.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "yaml-cpp/yaml.h"

namespace sift {
namespace {

constexpr char kPresetPrefix[] = "preset:";
// Stands in for the dataset while the base job is parsed (the dataset may come from the matrix).
constexpr char kNoDataset[] = "/sift-report: no dataset in the job";

// A mapping key as text; a non-scalar key (`[a]: 1`) reads as "?", which no key matches, so it is
// reported as an unknown key at its line.
std::string KeyOf(const YAML::Node& key) { return key.IsScalar() ? key.Scalar() : "?"; }

class MatrixParser {
 public:
  MatrixParser(std::string source, std::string base_dir)
      : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  Status Error(const YAML::Node& at, const std::string& key, const std::string& what) const {
    return LineError(at.IsDefined() ? at.Mark().line : -1, key, what);
  }
  Status LineError(int zero_based_line, const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ":", std::max(0, zero_based_line) + 1,
                                                   ": ", key, key.empty() ? "" : ": ", what));
  }

  StatusOr<ReportMatrix> Parse(absl::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      return LineError(e.mark.line, "", absl::StrCat("YAML syntax error: ", e.msg));
    }
    if (!root.IsMap()) {
      return LineError(0, "",
                       "a report matrix is a mapping with at least 'job' or 'dataset' and "
                       "'matrix'");
    }
    ReportMatrix m;
    m.source = source_;
    YAML::Node job, matrix, runs, benchmarks;
    bool has_matrix = false;
    std::string dataset;
    std::vector<int> key_lines;
    for (const auto& kv : root) key_lines.push_back(kv.first.Mark().line);
    for (const auto& kv : root) {
      const std::string key = KeyOf(kv.first);
      const YAML::Node& v = kv.second;
      if (key == "name") {
        SIFT_ASSIGN_OR_RETURN(m.name, Scalar(v, "name"));
      } else if (key == "dataset") {
        SIFT_ASSIGN_OR_RETURN(dataset, Scalar(v, "dataset"));
        SIFT_ASSIGN_OR_RETURN(dataset, Dataset(v, "dataset", dataset));
      } else if (key == "job") {
        job = v;
        job_key_ = kv.first;
      } else if (key == "matrix") {
        matrix = v;
        has_matrix = true;
      } else if (key == "runs") {
        runs = v;
      } else if (key == "benchmarks") {
        benchmarks = v;
      } else {
        return Error(kv.first, key,
                     "unknown key (expected name, dataset, job, matrix, runs, benchmarks)");
      }
    }
    JobSpec base;
    SIFT_ASSIGN_OR_RETURN(base, BaseJob(text, job, key_lines));
    if (!dataset.empty()) {
      if (!base.dataset.empty()) {
        return Error(job, "job.dataset", "the dataset is given twice (here and in 'dataset')");
      }
      base.dataset = dataset;
    }
    SIFT_RETURN_IF_ERROR(ParseRuns(runs, &m));
    SIFT_RETURN_IF_ERROR(ParseBenchmarks(benchmarks, &m));
    if (!has_matrix) {
      return LineError(0, "matrix",
                       "missing: give at least one axis, e.g. 'matrix: {model: [sim]}'");
    }
    SIFT_RETURN_IF_ERROR(ParseAxes(matrix, base, &m));
    if (m.name.empty()) m.name = "sift report";
    return m;
  }

 private:
  StatusOr<std::string> Scalar(const YAML::Node& v, const std::string& key) const {
    if (!v.IsScalar()) return Error(v, key, "expected a single value");
    return v.Scalar();
  }

  StatusOr<std::string> Dataset(const YAML::Node& at, const std::string& key,
                                const std::string& value) const {
    if (value.empty()) return Error(at, key, "empty dataset");
    if (absl::StartsWith(value, kPresetPrefix)) {
      const std::string preset = value.substr(sizeof(kPresetPrefix) - 1);
      if (!data::PresetOptions(preset).ok()) {
        return Error(at, key,
                     absl::StrCat("unknown preset \"", preset, "\" (expected tiny, small, books)"));
      }
      return value;
    }
    if (value[0] == '/') return value;
    return JoinPath(base_dir_, value);
  }

  // The base job: a file (`job: base.yaml`) or the mapping under `job:`, parsed by ParseJobSpec
  // from the report's own text (other lines blanked) so that its errors name report lines.
  StatusOr<JobSpec> BaseJob(absl::string_view text, const YAML::Node& job,
                            const std::vector<int>& key_lines) {
    if (!job.IsDefined() || job.IsNull()) {
      JobSpec spec;
      spec.dataset = "";
      return spec;
    }
    std::string job_text;
    std::string job_source = source_;
    bool has_dataset = false;
    if (job.IsScalar()) {
      const std::string path =
          job.Scalar()[0] == '/' ? job.Scalar() : JoinPath(base_dir_, job.Scalar());
      StatusOr<std::string> read = ReadFileToString(path);
      if (!read.ok()) return Error(job, "job", std::string(read.status().message()));
      YAML::Node file;
      try {
        file = YAML::Load(*read);
      } catch (const YAML::Exception&) {
        // ParseJobSpec reports it with the file's line.
      }
      has_dataset = file.IsMap() && file["dataset"].IsDefined();
      job_text = *std::move(read);
      if (!has_dataset && file.IsMap() && file.Style() == YAML::EmitterStyle::Flow) {
        // A flow-style file (`{training: {epochs: 4}}`): the placeholder goes into the mapping,
        // re-emitted (the file's line numbers are lost for this rare form; its keys still name the
        // fields).
        file["dataset"] = kNoDataset;
        YAML::Emitter emitted;
        emitted << file;
        job_text = emitted.c_str();
      } else if (!has_dataset) {
        absl::StrAppend(&job_text, "\ndataset: \"", kNoDataset, "\"\n");
      }
      job_source = path;
    } else if (job.IsMap()) {
      has_dataset = job["dataset"].IsDefined();
      std::vector<std::string> lines = absl::StrSplit(text, '\n');
      const int first = job_key_.Mark().line;
      int end = static_cast<int>(lines.size());
      for (int l : key_lines) {
        if (l > first) end = std::min(end, l);
      }
      std::vector<std::string> kept(lines.size());
      for (int l = first; l < end; ++l)
        kept[static_cast<size_t>(l)] = lines[static_cast<size_t>(l)];
      // "job:" becomes spaces: the mapping stays in place, at its own line numbers.
      std::string& key_line = kept[static_cast<size_t>(first)];
      const size_t col = static_cast<size_t>(job_key_.Mark().column);
      const size_t colon = key_line.find(':', col);
      if (colon == std::string::npos) return Error(job, "job", "expected 'job:' and a mapping");
      key_line.replace(col, colon + 1 - col, std::string(colon + 1 - col, ' '));
      if (!has_dataset) {
        if (job.Style() == YAML::EmitterStyle::Flow) {
          std::string& open = kept[static_cast<size_t>(job.Mark().line)];
          open.insert(static_cast<size_t>(job.Mark().column) + 1,
                      absl::StrCat("dataset: \"", kNoDataset, "\", "));
        } else {
          const int indent = job.begin()->first.Mark().column;
          kept.push_back(absl::StrCat(std::string(static_cast<size_t>(indent), ' '), "dataset: \"",
                                      kNoDataset, "\""));
        }
      }
      job_text = absl::StrJoin(kept, "\n");
    } else {
      return Error(job, "job", "expected a job spec mapping or the path of a job spec file");
    }
    StatusOr<JobSpec> spec = ParseJobSpec(job_text, job_source);
    if (!spec.ok()) return spec.status();
    // A checkpoint to start from is a path like the dataset: relative to the matrix's directory.
    if (!spec->checkpoint.resume_from.empty() && spec->checkpoint.resume_from[0] != '/') {
      spec->checkpoint.resume_from = JoinPath(base_dir_, spec->checkpoint.resume_from);
    }
    if (spec->dataset == kNoDataset) {
      spec->dataset.clear();
    } else if (job.IsScalar()) {
      SIFT_ASSIGN_OR_RETURN(spec->dataset, Dataset(job, "job.dataset", spec->dataset));
    } else {
      SIFT_ASSIGN_OR_RETURN(spec->dataset, Dataset(job["dataset"], "job.dataset", spec->dataset));
    }
    return spec;
  }

  StatusOr<uint64_t> Count(const YAML::Node& v, const std::string& key, int64_t min,
                           int64_t max) const {
    int64_t n = 0;
    if (!v.IsScalar() || !absl::SimpleAtoi(v.Scalar(), &n) || n < min || n > max) {
      return Error(v, key, absl::StrCat("expected an integer in [", min, ", ", max, "]"));
    }
    return static_cast<uint64_t>(n);
  }

  Status ParseRuns(const YAML::Node& runs, ReportMatrix* m) const {
    m->seeds = {1};
    m->repeat = 1;
    if (!runs.IsDefined() || runs.IsNull()) return absl::OkStatus();
    if (runs.IsScalar()) {
      SIFT_ASSIGN_OR_RETURN(uint64_t n, Count(runs, "runs", 1, 1000));
      m->seeds.clear();
      for (uint64_t s = 1; s <= n; ++s) m->seeds.push_back(s);
      return absl::OkStatus();
    }
    if (!runs.IsMap()) return Error(runs, "runs", "expected n, {seeds: [...]} or {seed, repeat}");
    bool seeds = false, seed = false;
    for (const auto& kv : runs) {
      const std::string key = KeyOf(kv.first);
      if (key == "seeds") {
        if (!kv.second.IsSequence() || kv.second.size() == 0) {
          return Error(kv.second, "runs.seeds", "expected a non-empty list of seeds");
        }
        m->seeds.clear();
        std::set<uint64_t> seen;
        for (const auto& s : kv.second) {
          SIFT_ASSIGN_OR_RETURN(uint64_t v, Count(s, "runs.seeds", 0, int64_t{1} << 62));
          if (!seen.insert(v).second) {
            return Error(s, "runs.seeds", absl::StrCat("seed ", v, " is listed twice"));
          }
          m->seeds.push_back(v);
        }
        seeds = true;
      } else if (key == "seed") {
        SIFT_ASSIGN_OR_RETURN(uint64_t v, Count(kv.second, "runs.seed", 0, int64_t{1} << 62));
        m->seeds = {v};
        seed = true;
      } else if (key == "repeat") {
        SIFT_ASSIGN_OR_RETURN(uint64_t r, Count(kv.second, "runs.repeat", 1, 1000));
        m->repeat = static_cast<int>(r);
      } else {
        return Error(kv.first, absl::StrCat("runs.", key),
                     "unknown key (expected seeds, or seed and repeat)");
      }
    }
    if (seeds && seed) return Error(runs, "runs", "give seeds or seed, not both");
    return absl::OkStatus();
  }

  Status ParseBenchmarks(const YAML::Node& benchmarks, ReportMatrix* m) const {
    if (!benchmarks.IsDefined() || benchmarks.IsNull()) return absl::OkStatus();
    if (!benchmarks.IsMap()) {
      return Error(benchmarks, "benchmarks",
                   "expected {train: {steps: N}, inference: {batch_sizes: [...], steps: N}}");
    }
    for (const auto& kv : benchmarks) {
      const std::string key = KeyOf(kv.first);
      if (key == "train") {
        SIFT_RETURN_IF_ERROR(ParseTrainBenchmark(kv.second, m));
      } else if (key == "inference") {
        SIFT_RETURN_IF_ERROR(ParseInference(kv.second, m));
      } else {
        return Error(kv.first, absl::StrCat("benchmarks.", key),
                     "unknown key (expected train, inference)");
      }
    }
    return absl::OkStatus();
  }

  Status ParseTrainBenchmark(const YAML::Node& train, ReportMatrix* m) const {
    m->train_benchmark_steps = 100;
    if (train.IsNull()) return absl::OkStatus();
    if (!train.IsMap()) return Error(train, "benchmarks.train", "expected {steps: N}");
    for (const auto& kv : train) {
      const std::string key = KeyOf(kv.first);
      if (key != "steps") {
        return Error(kv.first, absl::StrCat("benchmarks.train.", key),
                     "unknown key (expected steps)");
      }
      SIFT_ASSIGN_OR_RETURN(uint64_t v, Count(kv.second, "benchmarks.train.steps", 1, 1000000));
      m->train_benchmark_steps = static_cast<int64_t>(v);
    }
    return absl::OkStatus();
  }

  Status ParseInference(const YAML::Node& inference, ReportMatrix* m) const {
    const std::string where = "benchmarks.inference";
    if (!inference.IsMap()) {
      return Error(inference, where, "expected {batch_sizes: [...], steps: N}");
    }
    for (const auto& kv : inference) {
      const std::string key = KeyOf(kv.first);
      if (key == "batch_sizes") {
        if (!kv.second.IsSequence() || kv.second.size() == 0) {
          return Error(kv.second, where + ".batch_sizes", "expected a non-empty list");
        }
        for (const auto& b : kv.second) {
          SIFT_ASSIGN_OR_RETURN(uint64_t v,
                                Count(b, where + ".batch_sizes", 1, JobSpecLimits::kMaxBatchSize));
          m->inference_batch_sizes.push_back(static_cast<int64_t>(v));
        }
      } else if (key == "steps") {
        SIFT_ASSIGN_OR_RETURN(uint64_t v, Count(kv.second, where + ".steps", 1, 1000000));
        m->inference_steps = static_cast<int64_t>(v);
      } else {
        return Error(kv.first, absl::StrCat(where, ".", key),
                     "unknown key (expected batch_sizes, steps)");
      }
    }
    if (m->inference_batch_sizes.empty()) {
      return Error(inference, where + ".batch_sizes", "missing");
    }
    return absl::OkStatus();
  }

  // Sets `axis` of `spec` to `value` (the job spec checks the value afterwards).
  Status Apply(const YAML::Node& at, const std::string& axis, const std::string& value,
               JobSpec* spec) const {
    const std::string key = absl::StrCat("matrix.", axis);
    auto integer = [&](int64_t min, int64_t max) -> StatusOr<int64_t> {
      int64_t n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < min || n > max) {
        return Error(at, key,
                     absl::StrCat("\"", value, "\" is not an integer in [", min, ", ", max, "]"));
      }
      return n;
    };
    if (axis == "model") {
      spec->model.type = value;
    } else if (axis == "backend") {
      spec->cluster.backend = value;
    } else if (axis == "precision") {
      spec->cluster.precision = value;
    } else if (axis == "workers") {
      SIFT_ASSIGN_OR_RETURN(int64_t n, integer(1, JobSpecLimits::kMaxClusterSize));
      spec->cluster.workers = static_cast<int>(n);
    } else if (axis == "servers") {
      SIFT_ASSIGN_OR_RETURN(int64_t n, integer(1, JobSpecLimits::kMaxClusterSize));
      spec->cluster.servers = static_cast<int>(n);
    } else if (axis == "staleness") {
      SIFT_ASSIGN_OR_RETURN(spec->training.staleness, integer(0, JobSpecLimits::kMaxStaleness));
    } else if (axis == "deterministic") {
      if (value != "true" && value != "false") {
        return Error(at, key, absl::StrCat("\"", value, "\" is not true or false"));
      }
      spec->cluster.deterministic = value == "true";
    } else if (axis == "batch_size") {
      SIFT_ASSIGN_OR_RETURN(spec->training.batch_size, integer(1, JobSpecLimits::kMaxBatchSize));
    } else if (axis == "recipe") {
      // Every field the recipe controls takes its value (later axes override them).
      StatusOr<Recipe> recipe = FindRecipe(value);
      if (!recipe.ok()) return Error(at, key, std::string(recipe.status().message()));
      ApplyRecipe(*recipe, spec);
    } else if (axis == "lr" || axis == "sparse_l2" || axis == "weight_decay" || axis == "dropout") {
      double v = 0;
      if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) {
        return Error(at, key, absl::StrCat("\"", value, "\" is not a number"));
      }
      (axis == "lr"          ? spec->training.lr
       : axis == "sparse_l2" ? spec->training.sparse_l2
       : axis == "dropout"   ? spec->model.dropout
                             : spec->training.weight_decay) = v;
    } else if (axis == "dataset") {
      SIFT_ASSIGN_OR_RETURN(spec->dataset, Dataset(at, key, value));
    }
    return absl::OkStatus();
  }

  Status ParseAxes(const YAML::Node& matrix, const JobSpec& base, ReportMatrix* m) const {
    if (!matrix.IsMap() || matrix.size() == 0) {
      return Error(
          matrix, "matrix",
          absl::StrCat("empty: give at least one axis of ",
                       absl::StrJoin(std::begin(kReportAxes), std::end(kReportAxes), ", ")));
    }
    struct Axis {
      std::string name;
      std::vector<std::string> values;
      std::vector<YAML::Node> nodes;
    };
    std::vector<Axis> axes;
    for (const char* name : kReportAxes) {
      const YAML::Node v = matrix[name];
      if (!v.IsDefined()) continue;
      Axis a;
      a.name = name;
      const std::string key = absl::StrCat("matrix.", name);
      if (v.IsScalar()) {
        a.values = {v.Scalar()};
        a.nodes = {v};
      } else if (v.IsSequence() && v.size() > 0) {
        std::set<std::string> seen;
        for (const auto& item : v) {
          if (!item.IsScalar()) return Error(item, key, "expected a list of values");
          if (!seen.insert(item.Scalar()).second) {
            return Error(item, key, absl::StrCat("\"", item.Scalar(), "\" is listed twice"));
          }
          a.values.push_back(item.Scalar());
          a.nodes.push_back(item);
        }
      } else {
        return Error(v, key, "expected a non-empty list of values");
      }
      axes.push_back(std::move(a));
    }
    for (const auto& kv : matrix) {
      const std::string key = KeyOf(kv.first);
      if (std::find(std::begin(kReportAxes), std::end(kReportAxes), key) == std::end(kReportAxes)) {
        return Error(
            kv.first, absl::StrCat("matrix.", key),
            absl::StrCat("unknown axis (expected one of ",
                         absl::StrJoin(std::begin(kReportAxes), std::end(kReportAxes), ", "), ")"));
      }
    }
    for (const Axis& a : axes) m->axes.push_back(a.name);
    // The cross product, first axis slowest.
    std::vector<size_t> at(axes.size(), 0);
    for (int index = 0;; ++index) {
      ReportConfig c;
      c.index = index;
      c.spec = base;
      std::vector<std::string> parts;
      for (size_t i = 0; i < axes.size(); ++i) {
        const Axis& a = axes[i];
        SIFT_RETURN_IF_ERROR(Apply(a.nodes[at[i]], a.name, a.values[at[i]], &c.spec));
        c.axes.emplace_back(a.name, a.values[at[i]]);
        parts.push_back(absl::StrCat(a.name, "=", a.values[at[i]]));
      }
      c.label = absl::StrJoin(parts, " ");
      SIFT_RETURN_IF_ERROR(CheckConfig(matrix, c));
      m->configs.push_back(std::move(c));
      size_t i = axes.size();
      while (i > 0) {
        --i;
        if (++at[i] < axes[i].values.size()) break;
        at[i] = 0;
        if (i == 0) return absl::OkStatus();
      }
    }
  }

  // The configuration as the job spec and the cluster check it: errors name the row.
  Status CheckConfig(const YAML::Node& matrix, const ReportConfig& c) const {
    const std::string row = absl::StrCat("configuration ", c.index + 1, " (", c.label, ")");
    if (c.spec.dataset.empty()) {
      return Error(matrix, row, "no dataset: give 'dataset:' or a 'dataset' axis");
    }
    constexpr char kCanonical[] = "(canonical)";
    StatusOr<JobSpec> reparsed = ParseJobSpec(JobSpecToYaml(c.spec), kCanonical);
    if (!reparsed.ok()) {
      // "<source>:<line>: field: what" of the canonical text: keep "field: what".
      std::string what(reparsed.status().message());
      const size_t field = what.find(": ");
      if (absl::StartsWith(what, kCanonical) && field != std::string::npos) {
        what = what.substr(field + 2);
      }
      return Error(matrix, row, what);
    }
    Status cluster = CheckClusterJob(c.spec, row);
    if (!cluster.ok()) return Error(matrix, "", std::string(cluster.message()));
    return absl::OkStatus();
  }

  std::string source_;
  std::string base_dir_;
  YAML::Node job_key_;
};

}  // namespace

std::vector<ReportRun> ReportMatrix::Runs() const {
  std::vector<ReportRun> runs;
  for (const ReportConfig& c : configs) {
    for (uint64_t seed : seeds) {
      for (int r = 0; r < repeat; ++r) {
        ReportRun run;
        run.config = c.index;
        run.seed = seed;
        run.repeat = r;
        run.spec = c.spec;
        run.spec.training.seed = seed;
        runs.push_back(std::move(run));
      }
    }
  }
  return runs;
}

StatusOr<ReportMatrix> ParseReportMatrix(absl::string_view yaml_text, const std::string& source,
                                         const std::string& base_dir) {
  try {
    return MatrixParser(source, base_dir).Parse(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": YAML error: ", e.msg));
  }
}

StatusOr<ReportMatrix> ReadReportMatrix(const std::string& path) {
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return ParseReportMatrix(text, path, dir.empty() ? "/" : dir);
}

std::string DatasetPreset(const std::string& dataset) {
  return absl::StartsWith(dataset, kPresetPrefix) ? dataset.substr(sizeof(kPresetPrefix) - 1) : "";
}

std::string RunCanonicalText(const ReportRun& run, const std::string& launcher) {
  JobSpec spec = run.spec;
  spec.results_dir.clear();
  spec.checkpoint.dir.clear();
  spec.name.clear();
  return absl::StrCat(JobSpecToYaml(spec), "report_repeat: ", run.repeat, "\nreport_launcher: \"",
                      launcher, "\"\n");
}

std::string ShortHash(absl::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return absl::StrFormat("%016x", Mix64(h));
}

}  // namespace sift
