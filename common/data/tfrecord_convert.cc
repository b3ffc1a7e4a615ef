#include "common/data/tfrecord_convert.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>

#include "common/data/batch.h"
#include "common/data/samples_file.h"
#include "common/data/tfrecord.h"
#include "common/file_util.h"
#include "common/thread_pool.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/example.pb.h"

namespace sift::data {
namespace {

using Int64Values = google::protobuf::RepeatedField<int64_t>;

// Samples materialised per export task, and records / payload bytes gathered per import window:
// large enough to amortise the thread hand-off, small enough to bound memory.
constexpr int64_t kExportTaskSamples = 2048;
constexpr int64_t kExportWindowSamples = 131072;
constexpr size_t kImportWindowRecords = 4096;
constexpr size_t kImportWindowBytes = size_t{64} << 20;
// Longest history either direction accepts (the samples file's own limit).
constexpr int64_t kMaxHistory = int64_t{1} << 20;

// ---- The column layout shared by export and import --------------------------------------------

enum class Kind { kLabel, kUser, kTarget, kPositive, kNegative };

struct Column {
  std::string name;
  Kind kind;
  int index = 0;             // feature index within its channel
  int64_t cardinality = -1;  // largest valid id (-1 for the label)
  bool history() const { return kind == Kind::kPositive || kind == Kind::kNegative; }
};

// The features of a dataset in the reference's column order: label, user features, target
// features, positive histories, negative histories.
struct Layout {
  std::vector<Column> columns;
  int user_features = 0;
  int item_features = 0;
  int64_t history = 0;  // T
  SampleRecordShape shape() const {
    SampleRecordShape s;
    s.history = history;
    s.item_features = item_features;
    s.user_features = user_features;
    return s;
  }
};

StatusOr<Layout> MakeLayout(const FeatureSpec& spec, const std::string& spec_path) {
  Layout l;
  l.user_features = spec.num_user_features();
  l.item_features = spec.num_item_features();
  l.history = spec.HistoryLength();
  if (l.history <= 0 || l.history > kMaxHistory) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_path, ": history length ", l.history, " outside [1, ", kMaxHistory, "]"));
  }
  const std::pair<const char*, Kind> channels[] = {{kLabelChannel, Kind::kLabel},
                                                   {kUserChannel, Kind::kUser},
                                                   {kTargetChannel, Kind::kTarget},
                                                   {kPositiveChannel, Kind::kPositive},
                                                   {kNegativeChannel, Kind::kNegative}};
  for (const auto& [channel, kind] : channels) {
    const auto& names = spec.channel_spec.at(channel);
    for (size_t i = 0; i < names.size(); ++i) {
      const FeatureInfo& info = spec.feature_spec.at(names[i]);
      Column c{names[i], kind, static_cast<int>(i), kind == Kind::kLabel ? -1 : info.cardinality};
      if (c.history() && info.dimensions != std::vector<int64_t>{l.history}) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec_path, ": feature_spec.", c.name, ".dimensions: expected [", l.history,
                         "] like the first positive-history feature"));
      }
      l.columns.push_back(std::move(c));
    }
  }
  return l;
}

std::vector<std::string> ColumnNames(const Layout& l) {
  std::vector<std::string> out;
  for (const auto& c : l.columns) out.push_back(c.name);
  return out;
}

bool SameDirectory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec) &&
         std::filesystem::equivalent(a, b, ec);
}

HistoryOptions ExportHistory(int64_t history) {
  HistoryOptions h;
  h.max_history = static_cast<int>(history);
  h.short_history = static_cast<int>(std::min<int64_t>(10, history));
  h.long_negatives = true;
  return h;
}

// ---- Export ------------------------------------------------------------------------------------

// Turns rows of a Batch into serialized Examples (deterministic: map entries sorted by key).
// Reuses one Example, so its lists are allocated once. Not thread-safe: one per task.
class ExampleEncoder {
 public:
  explicit ExampleEncoder(const Layout& layout) : layout_(layout) {
    auto* map = example_.mutable_features()->mutable_feature();
    for (const auto& c : layout.columns) (*map)[c.name].mutable_int64_list();
    for (const auto& c : layout.columns) {
      values_.push_back((*map)[c.name].mutable_int64_list()->mutable_value());
    }
  }

  // Appends one framed record holding rows [row0, row0 + n) of `b` to `*out`. False when
  // protobuf refuses to serialize it (beyond its 2 GiB limit; ExportTfrecord bounds P to avoid it).
  bool Append(const Batch& b, int64_t row0, int64_t n, std::string* out) {
    const int TL = b.long_len, TS = b.short_len;
    const int64_t T = TL + TS;
    for (size_t i = 0; i < layout_.columns.size(); ++i) {
      const Column& c = layout_.columns[i];
      Int64Values* v = values_[i];
      v->Resize(static_cast<int>(n * (c.history() ? T : 1)), 0);
      int64_t* d = v->mutable_data();
      for (int64_t k = 0; k < n; ++k) {
        const int64_t row = row0 + k;
        switch (c.kind) {
          case Kind::kLabel:
            d[k] = b.label[row] != 0.0f ? 1 : 0;
            break;
          case Kind::kUser:
            d[k] = b.User(c.index)[row];
            break;
          case Kind::kTarget:
            d[k] = b.Target(c.index)[row];
            break;
          case Kind::kPositive:
          case Kind::kNegative: {
            const bool pos = c.kind == Kind::kPositive;
            const int32_t* lo = pos ? b.LongHist(c.index, row) : b.LongNeg(c.index, row);
            const int32_t* hi = pos ? b.ShortHist(c.index, row) : b.ShortNeg(c.index, row);
            int64_t* dst = d + k * T;
            for (int j = 0; j < TL; ++j) dst[j] = lo[j];
            for (int j = 0; j < TS; ++j) dst[TL + j] = hi[j];
            break;
          }
        }
      }
    }
    payload_.clear();
    bool ok;
    {
      google::protobuf::io::StringOutputStream stream(&payload_);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      ok = example_.SerializeToCodedStream(&coded) && !coded.HadError();
    }
    if (ok) AppendTfRecord(payload_, out);
    return ok;
  }

 private:
  const Layout& layout_;
  tf::Example example_;
  std::vector<Int64Values*> values_;
  std::string payload_;
};

// Records of one split: record r holds samples [r * per, min(N, (r + 1) * per)).
struct SplitPlan {
  Split split = Split::kTrain;
  int64_t samples = 0;  // N
  int64_t per = 1;      // samples per record (P, or 1 without prebatching)
  int64_t full = 0;     // records with exactly `per` samples
  bool remainder = false;
  int64_t begin(int64_t r) const { return r * per; }
  int64_t end(int64_t r) const { return std::min(samples, (r + 1) * per); }
};

class Exporter {
 public:
  Exporter(const Dataset& dataset, const Layout& layout, ThreadPool* pool)
      : source_(dataset.samples()),
        layout_(layout),
        pool_(pool),
        history_(ExportHistory(layout.history)) {}

  // Writes records [r0, r1) of `plan` to `path`.
  StatusOr<TfrecordFileStats> WriteFile(const SplitPlan& plan, int64_t r0, int64_t r1,
                                        const std::string& path) {
    TfRecordWriter writer;
    SIFT_RETURN_IF_ERROR(writer.Open(path));
    const int64_t per_task = std::max<int64_t>(1, kExportTaskSamples / plan.per);
    // Tasks per window: enough to keep every thread busy, few enough to bound the memory of
    // huge prebatched records.
    const int64_t threads = pool_->num_threads();
    const int64_t window_tasks =
        std::max(threads, std::min(4 * threads, kExportWindowSamples / (per_task * plan.per)));
    for (int64_t r = r0; r < r1;) {
      const int64_t tasks = std::min(window_tasks, (r1 - r + per_task - 1) / per_task);
      std::vector<std::string> framed(static_cast<size_t>(tasks));
      std::vector<Status> status(static_cast<size_t>(tasks));
      pool_->ParallelFor(tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t rb = r + t * per_task;
          status[static_cast<size_t>(t)] =
              Encode(plan, rb, std::min(r1, rb + per_task), &framed[static_cast<size_t>(t)]);
        }
      });
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t rb = r + t * per_task;
        SIFT_RETURN_IF_ERROR(status[static_cast<size_t>(t)]);
        SIFT_RETURN_IF_ERROR(
            writer.WriteFramed(framed[static_cast<size_t>(t)], std::min(r1, rb + per_task) - rb));
      }
      r = std::min(r1, r + tasks * per_task);
    }
    const int64_t samples = r1 > r0 ? plan.end(r1 - 1) - plan.begin(r0) : 0;
    TfrecordFileStats stats{path, writer.records(), samples, writer.bytes()};
    SIFT_RETURN_IF_ERROR(writer.Commit());
    return stats;
  }

 private:
  // Frames records [rb, re) of `plan` into `*out`.
  Status Encode(const SplitPlan& plan, int64_t rb, int64_t re, std::string* out) const {
    const int64_t s0 = plan.begin(rb), s1 = plan.end(re - 1);
    Batch batch;
    batch.Allocate(s1 - s0, layout_.user_features, layout_.item_features, history_);
    for (int64_t s = s0; s < s1; ++s) source_.Materialize(plan.split, s, s - s0, &batch);
    batch.size = s1 - s0;
    ExampleEncoder encoder(layout_);
    for (int64_t r = rb; r < re; ++r) {
      if (!encoder.Append(batch, plan.begin(r) - s0, plan.end(r) - plan.begin(r), out)) {
        return absl::InternalError(absl::StrCat(SplitName(plan.split), " record ", r,
                                                ": protobuf could not serialize the Example"));
      }
    }
    return absl::OkStatus();
  }

  const SampleSource& source_;
  const Layout& layout_;
  ThreadPool* pool_;
  const HistoryOptions history_;
};

// ---- Import ------------------------------------------------------------------------------------

const char* KindName(const tf::Feature& f) {
  switch (f.kind_case()) {
    case tf::Feature::kBytesList:
      return "bytes_list";
    case tf::Feature::kFloatList:
      return "float_list";
    case tf::Feature::kInt64List:
      return "int64_list";
    case tf::Feature::KIND_NOT_SET:
      break;
  }
  return "no value";
}

struct ImportContext {
  Layout layout;
  std::set<std::string> declared;  // every feature of feature_spec
};

StatusOr<ImportContext> MakeImportContext(const FeatureSpec& spec, const std::string& spec_path) {
  ImportContext ctx;
  SIFT_ASSIGN_OR_RETURN(ctx.layout, MakeLayout(spec, spec_path));
  for (const auto& [name, info] : spec.feature_spec) ctx.declared.insert(name);
  return ctx;
}

// Where a record came from, for error messages.
struct RecordRef {
  const std::string* file = nullptr;
  int64_t index = 0;
  uint64_t offset = 0;
};

Status RecordError(const RecordRef& ref, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(*ref.file, ": record ", ref.index, " (byte offset ", ref.offset, "): ", what));
}

// Checks that every id in v[0..n) lies in [0, c.cardinality].
Status CheckIds(const Column& c, const int64_t* v, int64_t n, int64_t sample, int64_t width,
                const RecordRef& ref) {
  const uint64_t limit = static_cast<uint64_t>(c.cardinality);
  bool bad = false;
  for (int64_t j = 0; j < n; ++j) bad |= static_cast<uint64_t>(v[j]) > limit;
  if (!bad) return absl::OkStatus();
  for (int64_t j = 0; j < n; ++j) {
    if (static_cast<uint64_t>(v[j]) <= limit) continue;
    std::string at = absl::StrCat("feature '", c.name, "', sample ", sample);
    if (width > 1) absl::StrAppend(&at, ", slot ", j);
    if (v[j] < 0) return RecordError(ref, absl::StrCat(at, ": negative id ", v[j]));
    return RecordError(ref, absl::StrCat(at, ": id ", v[j], " beyond cardinality ", c.cardinality));
  }
  return absl::OkStatus();
}

// Parses and checks one Example; appends its samples as sample-file records to `*out`.
Status DecodeExample(const ImportContext& ctx, absl::string_view payload, const RecordRef& ref,
                     google::protobuf::Arena* arena, std::vector<int32_t>* out) {
  const Layout& l = ctx.layout;
  if (payload.size() > static_cast<size_t>(INT32_MAX)) {
    return RecordError(ref, absl::StrCat("payload of ", payload.size(),
                                         " bytes exceeds protobuf's 2 GiB message limit"));
  }
  auto* example = google::protobuf::Arena::CreateMessage<tf::Example>(arena);
  if (!example->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return RecordError(ref, absl::StrCat("cannot parse a tf.train.Example from the ",
                                         payload.size(), "-byte payload"));
  }
  const auto& features = example->features().feature();
  std::string unknown;
  for (const auto& [name, value] : features) {
    if (!ctx.declared.count(name) && (unknown.empty() || name < unknown)) unknown = name;
  }
  if (!unknown.empty()) {
    return RecordError(
        ref, absl::StrCat("unknown feature '", unknown, "' (not declared in feature_spec.yaml)"));
  }
  std::vector<const int64_t*> cols;
  int64_t P = 0;
  const int64_t T = l.history;
  for (const Column& c : l.columns) {
    auto it = features.find(c.name);
    if (it == features.end()) {
      return RecordError(ref, absl::StrCat("missing feature '", c.name, "'"));
    }
    if (it->second.kind_case() != tf::Feature::kInt64List) {
      return RecordError(ref, absl::StrCat("feature '", c.name, "': wrong dtype: expected ",
                                           "int64_list, found ", KindName(it->second)));
    }
    const Int64Values& v = it->second.int64_list().value();
    if (c.kind == Kind::kLabel) {
      P = v.size();
      if (P == 0) return RecordError(ref, absl::StrCat("feature '", c.name, "' is empty"));
    }
    const int64_t width = c.history() ? T : 1;
    if (v.size() != P * width) {
      return RecordError(
          ref,
          absl::StrCat("feature '", c.name, "': inconsistent list length ", v.size(), ", expected ",
                       P * width, " (", P, " sample(s), the length of '", l.columns[0].name, "'",
                       c.history() ? absl::StrCat(", x ", T, " history slots") : "", ")"));
    }
    cols.push_back(v.data());
  }

  const int UF = l.user_features, F = l.item_features;
  const int64_t R = l.shape().record_ints();
  const size_t base = out->size();
  out->resize(base + static_cast<size_t>(P * R), 0);
  // The positive item-id history (first positive column) defines the valid suffix.
  const size_t first_pos = 1 + static_cast<size_t>(UF) + static_cast<size_t>(F);
  for (int64_t s = 0; s < P; ++s) {
    int32_t* rec = out->data() + base + static_cast<size_t>(s * R);
    const int64_t label = cols[0][s];
    if (label != 0 && label != 1) {
      return RecordError(ref, absl::StrCat("feature '", l.columns[0].name, "', sample ", s,
                                           ": label ", label, " is not 0 or 1"));
    }
    rec[0] = static_cast<int32_t>(label);
    const int64_t* ids0 = cols[first_pos] + s * T;
    int64_t L = 0;
    while (L < T && ids0[T - 1 - L] != 0) ++L;
    rec[1] = static_cast<int32_t>(L);
    for (size_t i = 1; i < l.columns.size(); ++i) {
      const Column& c = l.columns[i];
      const int64_t width = c.history() ? T : 1;
      const int64_t* v = cols[i] + s * width;
      SIFT_RETURN_IF_ERROR(CheckIds(c, v, width, s, width, ref));
      int32_t* dst = nullptr;
      switch (c.kind) {
        case Kind::kLabel:
          break;
        case Kind::kUser:
          dst = rec + 2 + c.index;
          break;
        case Kind::kTarget:
          dst = rec + 2 + UF + c.index;
          break;
        case Kind::kPositive:
          dst = rec + 2 + UF + F + c.index * T;
          break;
        case Kind::kNegative:
          dst = rec + 2 + UF + F + (F + c.index) * T;
          break;
      }
      if (c.history()) {
        // Valid ids are the last L slots of every history feature: padding everywhere else.
        for (int64_t j = 0; j < T - L; ++j) {
          if (v[j] == 0) continue;
          if (i == first_pos) {
            return RecordError(ref, absl::StrCat("feature '", c.name, "', sample ", s,
                                                 ": history has a hole: padding id 0 at slot ",
                                                 T - L - 1, " but id ", v[j], " at slot ", j,
                                                 " (valid ids must be a contiguous suffix)"));
          }
          return RecordError(
              ref, absl::StrCat("feature '", c.name, "', sample ", s, ": id ", v[j], " at slot ", j,
                                ", which is padding in '", l.columns[first_pos].name, "'"));
        }
      }
      for (int64_t j = 0; j < width; ++j) dst[j] = static_cast<int32_t>(v[j]);
    }
  }
  return absl::OkStatus();
}

struct PendingRecord {
  absl::string_view payload;
  RecordRef ref;
  std::vector<int32_t> records;
  Status status;
};

// Reads every record of `path` into `writer`, decoding windows of records in parallel.
StatusOr<TfrecordFileStats> ImportFile(const ImportContext& ctx, const std::string& path,
                                       ThreadPool* pool, SamplesFileWriter* writer) {
  SIFT_ASSIGN_OR_RETURN(TfRecordReader reader, TfRecordReader::Open(path));
  TfrecordFileStats stats{path, 0, 0, reader.file_size()};
  const int64_t R = ctx.layout.shape().record_ints();
  for (bool done = false; !done;) {
    std::vector<PendingRecord> window;
    Status framing;
    size_t bytes = 0;
    while (window.size() < kImportWindowRecords && bytes < kImportWindowBytes) {
      PendingRecord p;
      p.ref = RecordRef{&path, reader.record_index(), reader.offset()};
      StatusOr<bool> more = reader.Next(&p.payload);
      if (!more.ok()) {
        framing = more.status();
        done = true;
        break;
      }
      if (!*more) {
        done = true;
        break;
      }
      bytes += p.payload.size();
      window.push_back(std::move(p));
    }
    const int64_t n = static_cast<int64_t>(window.size());
    const int64_t tasks = std::min<int64_t>(n, 4 * static_cast<int64_t>(pool->num_threads()));
    pool->ParallelFor(tasks, 1, [&](int64_t t0, int64_t t1) {
      google::protobuf::Arena arena;
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t i = t * n / tasks; i < (t + 1) * n / tasks; ++i) {
          PendingRecord& p = window[static_cast<size_t>(i)];
          p.status = DecodeExample(ctx, p.payload, p.ref, &arena, &p.records);
          arena.Reset();
          if (!p.status.ok()) return;  // later records of this task are never looked at
        }
      }
    });
    for (const PendingRecord& p : window) {
      SIFT_RETURN_IF_ERROR(p.status);
      const int64_t samples = static_cast<int64_t>(p.records.size()) / R;
      for (int64_t s = 0; s < samples; ++s) SIFT_RETURN_IF_ERROR(writer->Add(&p.records[s * R]));
      ++stats.records;
      stats.samples += samples;
    }
    SIFT_RETURN_IF_ERROR(framing);
  }
  return stats;
}

}  // namespace

struct TfExampleDecoder::Context {
  ImportContext import;
};

StatusOr<TfExampleDecoder> TfExampleDecoder::Create(const FeatureSpec& spec,
                                                    const std::string& spec_path) {
  SIFT_ASSIGN_OR_RETURN(ImportContext ctx, MakeImportContext(spec, spec_path));
  return TfExampleDecoder(std::make_shared<const Context>(Context{std::move(ctx)}));
}

Status TfExampleDecoder::Decode(absl::string_view payload, const std::string& file, int64_t record,
                                uint64_t offset, std::vector<int32_t>* records) const {
  google::protobuf::Arena arena;
  return DecodeExample(ctx_->import, payload, RecordRef{&file, record, offset}, &arena, records);
}

SampleRecordShape TfExampleDecoder::shape() const { return ctx_->import.layout.shape(); }

std::vector<int64_t> PartSizes(int64_t n, int parts) {
  std::vector<int64_t> sizes(static_cast<size_t>(parts), n / parts);
  for (int64_t i = 0; i < n % parts; ++i) ++sizes[static_cast<size_t>(i)];
  return sizes;
}

StatusOr<TfrecordConvertStats> ExportTfrecord(const Dataset& dataset, const std::string& out_dir,
                                              const TfrecordExportOptions& options) {
  if (options.prebatch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prebatch must be >= 0, got ", options.prebatch));
  }
  if (options.train_parts < 1 || options.test_parts < 1) {
    return absl::InvalidArgumentError(absl::StrCat("part counts must be >= 1, got train ",
                                                   options.train_parts, ", test ",
                                                   options.test_parts));
  }
  if (SameDirectory(out_dir, dataset.dir())) {
    return absl::InvalidArgumentError(absl::StrCat(
        out_dir, ": the output directory is the source dataset itself; choose another"));
  }
  const std::string spec_path = JoinPath(dataset.dir(), kFeatureSpecFile);
  SIFT_ASSIGN_OR_RETURN(Layout layout, MakeLayout(dataset.spec(), spec_path));
  const SampleSource& source = dataset.samples();
  if (source.num_user_features() != layout.user_features ||
      source.num_item_features() != layout.item_features) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataset.dir(), ": the samples do not have the feature counts of ", spec_path));
  }

  // The output spec: the source's features, histories of length T, source type tfrecord.
  FeatureSpec spec;
  spec.channel_spec = dataset.spec().channel_spec;
  for (const Column& c : layout.columns)
    spec.feature_spec[c.name] = dataset.spec().feature_spec.at(c.name);
  spec.metadata = YAML::Clone(dataset.spec().metadata);
  // The samples are written out: the timeline's split rule and token file do not travel.
  if (spec.metadata.IsMap() && spec.metadata["sift"] && spec.metadata["sift"].IsMap()) {
    spec.metadata["sift"].remove("test_events");
    spec.metadata["sift"].remove("vocab");
  }

  // A varint takes at most 10 bytes; keep every Example within protobuf's 2 GiB limit.
  const int64_t values_per_sample =
      1 + layout.user_features + layout.item_features * (1 + 2 * layout.history);
  const int64_t max_prebatch = (INT32_MAX - 1024) / (10 * values_per_sample);
  if (options.prebatch > max_prebatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prebatch ", options.prebatch, ": one Example would exceed protobuf's 2 GiB message ",
        "limit; use at most ", max_prebatch));
  }

  SIFT_RETURN_IF_ERROR(BeginDatasetWrite(out_dir));
  ThreadPool pool(options.threads);
  Exporter exporter(dataset, layout, &pool);
  TfrecordConvertStats stats;
  for (Split split : {Split::kTrain, Split::kTest}) {
    const std::string name = SplitName(split);
    const std::string dir = JoinPath(out_dir, name);
    SIFT_RETURN_IF_ERROR(MakeDirs(dir));
    SplitPlan plan;
    plan.split = split;
    plan.samples = source.NumSamples(split);
    plan.per = options.prebatch > 0 ? options.prebatch : 1;
    plan.full = plan.samples / plan.per;
    plan.remainder = plan.samples % plan.per != 0;

    SourceChunk chunk{kSourceTfrecord, ColumnNames(layout), {}};
    const int parts = split == Split::kTrain ? options.train_parts : options.test_parts;
    int64_t r = 0;
    const std::vector<int64_t> sizes = PartSizes(plan.full, parts);
    for (int k = 0; k < parts; ++k) {
      const std::string rel = JoinPath(name, absl::StrCat("part_", k, ".tfrecord"));
      SIFT_ASSIGN_OR_RETURN(
          TfrecordFileStats f,
          exporter.WriteFile(plan, r, r + sizes[static_cast<size_t>(k)], JoinPath(out_dir, rel)));
      r += sizes[static_cast<size_t>(k)];
      stats.files.push_back(std::move(f));
      chunk.files.push_back(rel);
    }
    const std::string remainder_rel = JoinPath(name, kRemainderFile);
    const std::string remainder_path = JoinPath(out_dir, remainder_rel);
    if (plan.remainder) {
      SIFT_ASSIGN_OR_RETURN(TfrecordFileStats f,
                            exporter.WriteFile(plan, plan.full, plan.full + 1, remainder_path));
      stats.files.push_back(std::move(f));
      chunk.files.push_back(remainder_rel);
    } else if (PathExists(remainder_path)) {
      // A remainder left by an earlier export with another P would contradict the new files.
      std::error_code ec;
      if (!std::filesystem::remove(remainder_path, ec)) {
        return absl::InternalError(
            absl::StrCat(remainder_path, ": cannot remove a stale remainder: ", ec.message()));
      }
    }
    spec.source_spec[name] = {std::move(chunk)};
    (split == Split::kTrain ? stats.train_samples : stats.test_samples) = plan.samples;
    stats.records += plan.full + (plan.remainder ? 1 : 0);
  }
  SIFT_RETURN_IF_ERROR(spec.Validate(JoinPath(out_dir, kFeatureSpecFile)));
  SIFT_RETURN_IF_ERROR(spec.Save(JoinPath(out_dir, kFeatureSpecFile)));
  return stats;
}

StatusOr<TfrecordConvertStats> ImportTfrecord(const std::string& src_dir,
                                              const std::string& out_dir,
                                              const TfrecordImportOptions& options) {
  const std::string spec_path = JoinPath(src_dir, kFeatureSpecFile);
  if (!PathExists(spec_path)) {
    return absl::NotFoundError(
        absl::StrCat(src_dir, ": not a TFRecord dataset directory (no ", kFeatureSpecFile, ")"));
  }
  SIFT_ASSIGN_OR_RETURN(FeatureSpec spec, FeatureSpec::Load(spec_path));
  SIFT_ASSIGN_OR_RETURN(const ImportContext ctx, MakeImportContext(spec, spec_path));

  // Every listed file must exist before anything is written.
  std::vector<std::vector<std::string>> files(2);
  for (Split split : {Split::kTrain, Split::kTest}) {
    const std::string name = SplitName(split);
    // Like the reference's loader, only the first chunk's file list is read (model-spec 6.4).
    const auto& chunks = spec.source_spec.at(name);
    if (chunks[0].type != kSourceTfrecord) {
      return absl::InvalidArgumentError(absl::StrCat(spec_path, ": source_spec.", name, ": type '",
                                                     chunks[0].type, "', expected ",
                                                     kSourceTfrecord));
    }
    for (const std::string& f : chunks[0].files) {
      std::string path = !f.empty() && f[0] == '/' ? f : JoinPath(src_dir, f);
      if (!PathExists(path)) {
        return absl::NotFoundError(absl::StrCat(path, ": file listed in ", spec_path,
                                                " (source_spec.", name, ".files) does not exist"));
      }
      files[static_cast<size_t>(split)].push_back(std::move(path));
    }
  }
  if (SameDirectory(out_dir, src_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        out_dir, ": the output directory is the TFRecord directory itself; choose another"));
  }
  SIFT_RETURN_IF_ERROR(BeginDatasetWrite(out_dir));

  ThreadPool pool(options.threads);
  TfrecordConvertStats stats;
  for (Split split : {Split::kTrain, Split::kTest}) {
    const std::string out_path =
        JoinPath(out_dir, split == Split::kTrain ? kTrainSamplesFile : kTestSamplesFile);
    SamplesFileWriter writer;
    SIFT_RETURN_IF_ERROR(writer.Begin(out_path, ctx.layout.shape()));
    for (const std::string& path : files[static_cast<size_t>(split)]) {
      SIFT_ASSIGN_OR_RETURN(TfrecordFileStats f, ImportFile(ctx, path, &pool, &writer));
      stats.records += f.records;
      stats.files.push_back(std::move(f));
    }
    (split == Split::kTrain ? stats.train_samples : stats.test_samples) = writer.count();
    SIFT_RETURN_IF_ERROR(writer.Finish());
  }
  SIFT_RETURN_IF_ERROR(WriteSamplesDatasetSpec(out_dir, spec, spec.metadata));
  return stats;
}

}  // namespace sift::data
