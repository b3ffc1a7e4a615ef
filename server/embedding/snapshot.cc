#include "server/embedding/snapshot.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/data/binary_file.h"
#include "common/file_util.h"
#include "common/sharding.h"
#include "nlohmann/json.hpp"

namespace sift::embedding {
namespace {

using nlohmann::json;

constexpr char kFormat[] = "sift-embedding-snapshot";
constexpr int64_t kMaxDim = 65536;

// Prefixes `s` with `path` unless its message already names it (I/O errors name the temp file).
Status NamePath(const Status& s, const std::string& path) {
  if (s.ok() || absl::StrContains(s.message(), path)) return s;
  return Annotate(s, path);
}

std::string FormatName(uint64_t shard, uint64_t num_shards) {
  return absl::StrFormat("shard-%05u-of-%05u.snap", shard, num_shards);
}

// The first field in which two table configs differ ("" when equal).
std::string ConfigDifference(const TableConfig& a, const TableConfig& b) {
  if (a.table_id != b.table_id) return "table_id";
  if (a.name != b.name) return "name";
  if (a.dim != b.dim) return "dim";
  if (a.cardinality != b.cardinality) return "cardinality";
  if (a.capacity != b.capacity) return "capacity";
  const OptimizerConfig &x = a.optimizer, &y = b.optimizer;
  if (x.kind != y.kind) return "optimizer.kind";
  if (x.learning_rate != y.learning_rate) return "optimizer.learning_rate";
  if (x.beta1 != y.beta1) return "optimizer.beta1";
  if (x.beta2 != y.beta2) return "optimizer.beta2";
  if (x.epsilon != y.epsilon) return "optimizer.epsilon";
  if (x.initial_accumulator != y.initial_accumulator) return "optimizer.initial_accumulator";
  return "";
}

json MetaToJson(const SnapshotMeta& meta) {
  json tables = json::array();
  for (const TableConfig& t : meta.tables) {
    const OptimizerConfig& o = t.optimizer;
    tables.push_back({{"table_id", t.table_id},
                      {"name", t.name},
                      {"dim", t.dim},
                      {"cardinality", t.cardinality},
                      {"capacity", t.capacity},
                      {"optimizer",
                       {{"kind", std::string(OptimizerName(o.kind))},
                        {"learning_rate", static_cast<double>(o.learning_rate)},
                        {"beta1", static_cast<double>(o.beta1)},
                        {"beta2", static_cast<double>(o.beta2)},
                        {"epsilon", static_cast<double>(o.epsilon)},
                        {"initial_accumulator", static_cast<double>(o.initial_accumulator)}}}});
  }
  return json{{"format", kFormat},          {"version", kSnapshotFormatVersion},
              {"shard", meta.shard},        {"num_shards", meta.num_shards},
              {"step", meta.step},          {"seed", meta.seed},
              {"tables", std::move(tables)}};
}

Status CheckMetaForWrite(const std::string& path, const SnapshotMeta& meta,
                         const EmbeddingStore& store) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": snapshot meta: ", what));
  };
  if (meta.num_shards == 0 || meta.shard >= meta.num_shards) {
    return bad(absl::StrCat("shard ", meta.shard, " is not below num_shards ", meta.num_shards));
  }
  if (meta.step < 0) return bad(absl::StrCat("step ", meta.step, " is negative"));
  const std::vector<TableStats> stats = store.Stats();
  if (stats.size() != meta.tables.size()) {
    return bad(absl::StrCat(meta.tables.size(), " tables, the store has ", stats.size()));
  }
  for (size_t i = 0; i < meta.tables.size(); ++i) {
    const TableConfig& t = meta.tables[i];
    if (i > 0 && t.table_id <= meta.tables[i - 1].table_id) {
      return bad(absl::StrCat("tables[", i, "]: table_id ", t.table_id,
                              " is not above the previous one (ascending, distinct)"));
    }
    const TableConfig* have = store.FindTable(t.table_id);
    if (have == nullptr) {
      return bad(absl::StrCat("tables[", i, "]: table ", t.table_id, " is not in the store"));
    }
    const std::string diff = ConfigDifference(t, *have);
    if (!diff.empty()) {
      return bad(absl::StrCat("tables[", i, "] (table ", t.table_id, "): field '", diff,
                              "' differs from the store's config"));
    }
  }
  return absl::OkStatus();
}

// --- Reading ------------------------------------------------------------------------------------

// Typed access to the JSON metadata of `path`; every failure is DATA_LOSS naming the field.
class JsonFields {
 public:
  explicit JsonFields(const std::string& path) : path_(path) {}

  Status Bad(absl::string_view field, absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(path_, ": field '", field, "': ", what));
  }

  StatusOr<const json*> Get(const json& obj, const std::string& prefix, const char* key) const {
    if (!obj.is_object()) return Bad(prefix.empty() ? "(root)" : prefix, "not a JSON object");
    auto it = obj.find(key);
    if (it == obj.end()) return Bad(Name(prefix, key), "missing");
    return &*it;
  }

  StatusOr<uint64_t> Unsigned(const json& obj, const std::string& prefix, const char* key,
                              uint64_t min, uint64_t max) const {
    SIFT_ASSIGN_OR_RETURN(const json* v, Get(obj, prefix, key));
    uint64_t x = 0;
    if (v->is_number_unsigned()) {
      x = v->get<uint64_t>();
    } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
      x = static_cast<uint64_t>(v->get<int64_t>());
    } else {
      return Bad(Name(prefix, key), absl::StrCat("not a non-negative integer: ", v->dump()));
    }
    if (x < min || x > max) {
      return Bad(Name(prefix, key), absl::StrCat(x, " is outside [", min, ", ", max, "]"));
    }
    return x;
  }

  StatusOr<int64_t> NonNegativeInt64(const json& obj, const std::string& prefix,
                                     const char* key) const {
    SIFT_ASSIGN_OR_RETURN(uint64_t x,
                          Unsigned(obj, prefix, key, 0, std::numeric_limits<int64_t>::max()));
    return static_cast<int64_t>(x);
  }

  // A float written as a double: it must convert back exactly.
  StatusOr<float> Float(const json& obj, const std::string& prefix, const char* key) const {
    SIFT_ASSIGN_OR_RETURN(const json* v, Get(obj, prefix, key));
    if (!v->is_number()) return Bad(Name(prefix, key), absl::StrCat("not a number: ", v->dump()));
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max() ||
        static_cast<double>(static_cast<float>(d)) != d) {
      return Bad(Name(prefix, key), absl::StrCat(v->dump(), " is not a finite float value"));
    }
    return static_cast<float>(d);
  }

  StatusOr<std::string> String(const json& obj, const std::string& prefix, const char* key) const {
    SIFT_ASSIGN_OR_RETURN(const json* v, Get(obj, prefix, key));
    if (!v->is_string()) return Bad(Name(prefix, key), absl::StrCat("not a string: ", v->dump()));
    return v->get<std::string>();
  }

 private:
  static std::string Name(const std::string& prefix, const char* key) {
    return prefix.empty() ? std::string(key) : absl::StrCat(prefix, ".", key);
  }
  const std::string& path_;
};

StatusOr<TableConfig> ParseTableConfig(const JsonFields& f, const json& t,
                                       const std::string& prefix) {
  TableConfig c;
  SIFT_ASSIGN_OR_RETURN(uint64_t table_id,
                        f.Unsigned(t, prefix, "table_id", 0, std::numeric_limits<uint32_t>::max()));
  c.table_id = static_cast<uint32_t>(table_id);
  SIFT_ASSIGN_OR_RETURN(c.name, f.String(t, prefix, "name"));
  if (c.name.empty()) return f.Bad(prefix + ".name", "empty");
  SIFT_ASSIGN_OR_RETURN(uint64_t dim, f.Unsigned(t, prefix, "dim", 1, kMaxDim));
  c.dim = static_cast<int>(dim);
  SIFT_ASSIGN_OR_RETURN(
      c.cardinality, f.Unsigned(t, prefix, "cardinality", 0, std::numeric_limits<uint64_t>::max()));
  // Snapshots written before tables had a capacity have none (0: no row limit).
  if (t.contains("capacity")) {
    SIFT_ASSIGN_OR_RETURN(
        c.capacity, f.Unsigned(t, prefix, "capacity", 0, std::numeric_limits<uint64_t>::max()));
  }
  const std::string op = prefix + ".optimizer";
  SIFT_ASSIGN_OR_RETURN(const json* o, f.Get(t, prefix, "optimizer"));
  SIFT_ASSIGN_OR_RETURN(std::string kind, f.String(*o, op, "kind"));
  StatusOr<OptimizerKind> k = ParseOptimizerKind(kind);
  if (!k.ok()) return f.Bad(op + ".kind", k.status().message());
  c.optimizer.kind = *k;
  SIFT_ASSIGN_OR_RETURN(c.optimizer.learning_rate, f.Float(*o, op, "learning_rate"));
  SIFT_ASSIGN_OR_RETURN(c.optimizer.beta1, f.Float(*o, op, "beta1"));
  SIFT_ASSIGN_OR_RETURN(c.optimizer.beta2, f.Float(*o, op, "beta2"));
  SIFT_ASSIGN_OR_RETURN(c.optimizer.epsilon, f.Float(*o, op, "epsilon"));
  SIFT_ASSIGN_OR_RETURN(c.optimizer.initial_accumulator, f.Float(*o, op, "initial_accumulator"));
  Status valid = ValidateOptimizerConfig(c.optimizer);
  if (!valid.ok()) return f.Bad(op, valid.message());
  return c;
}

StatusOr<SnapshotMeta> ParseMeta(const std::string& path, const uint8_t* text, uint64_t size) {
  const JsonFields f(path);
  json j = json::parse(text, text + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return f.Bad("(root)", "the metadata section is not valid JSON");
  SnapshotMeta meta;
  SIFT_ASSIGN_OR_RETURN(std::string format, f.String(j, "", "format"));
  if (format != kFormat) {
    return f.Bad("format", absl::StrCat("\"", format, "\", expected \"", kFormat, "\""));
  }
  SIFT_ASSIGN_OR_RETURN(uint64_t version, f.Unsigned(j, "", "version", 0, 1u << 30));
  if (version != kSnapshotFormatVersion) {
    return f.Bad("version",
                 absl::StrCat(version, ": this sift reads version ", kSnapshotFormatVersion));
  }
  const uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
  SIFT_ASSIGN_OR_RETURN(uint64_t num_shards, f.Unsigned(j, "", "num_shards", 1, kMaxU32));
  SIFT_ASSIGN_OR_RETURN(uint64_t shard, f.Unsigned(j, "", "shard", 0, num_shards - 1));
  meta.shard = static_cast<uint32_t>(shard);
  meta.num_shards = static_cast<uint32_t>(num_shards);
  SIFT_ASSIGN_OR_RETURN(meta.step, f.NonNegativeInt64(j, "", "step"));
  SIFT_ASSIGN_OR_RETURN(meta.seed,
                        f.Unsigned(j, "", "seed", 0, std::numeric_limits<uint64_t>::max()));
  SIFT_ASSIGN_OR_RETURN(const json* tables, f.Get(j, "", "tables"));
  if (!tables->is_array()) return f.Bad("tables", "not a JSON array");
  for (size_t i = 0; i < tables->size(); ++i) {
    const std::string prefix = absl::StrCat("tables[", i, "]");
    SIFT_ASSIGN_OR_RETURN(TableConfig c, ParseTableConfig(f, (*tables)[i], prefix));
    if (i > 0 && c.table_id <= meta.tables.back().table_id) {
      return f.Bad(prefix + ".table_id",
                   absl::StrCat(c.table_id, " is not above the previous table's ",
                                meta.tables.back().table_id, " (ascending, distinct)"));
    }
    meta.tables.push_back(std::move(c));
  }
  return meta;
}

// One table of an opened file: pointers into its memory mapping.
struct TableView {
  uint32_t table_id = 0;
  int row_floats = 0;
  uint64_t rows = 0;
  const uint64_t* ids = nullptr;
  const float* data = nullptr;
};

// A verified, memory-mapped snapshot file. The views stay valid while `file` lives.
struct OpenedSnapshot {
  data::BinaryFile file;
  SnapshotMeta meta;
  std::vector<TableView> tables;
};

StatusOr<OpenedSnapshot> OpenSnapshot(const std::string& path) {
  StatusOr<data::BinaryFile> file = data::BinaryFile::Open(path, kSnapshotMagic, /*verify=*/true);
  if (!file.ok()) {
    // A wrong magic or version is a file that is not a readable snapshot: DATA_LOSS.
    if (absl::IsInvalidArgument(file.status())) {
      return absl::DataLossError(NamePath(file.status(), path).message());
    }
    return NamePath(file.status(), path);
  }
  OpenedSnapshot s{std::move(*file), {}, {}};
  const data::BinaryFile& f = s.file;
  const JsonFields fields(path);
  auto header_bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": header ", what));
  };
  data::SectionReader r(f);
  SIFT_ASSIGN_OR_RETURN(const uint8_t* len_p, r.NextArray(1, sizeof(uint64_t)));
  uint64_t json_bytes = 0;
  std::memcpy(&json_bytes, len_p, sizeof(json_bytes));
  SIFT_ASSIGN_OR_RETURN(const uint8_t* text, r.NextArray(json_bytes, 1));
  SIFT_ASSIGN_OR_RETURN(s.meta, ParseMeta(path, text, json_bytes));
  const auto& counts = f.header().counts;
  if (counts[0] != s.meta.shard || counts[1] != s.meta.num_shards) {
    return header_bad(absl::StrCat("counts 'shard'/'num_shards' are ", counts[0], "/", counts[1],
                                   ", the metadata says ", s.meta.shard, "/", s.meta.num_shards));
  }
  if (counts[2] != s.meta.tables.size()) {
    return header_bad(absl::StrCat("count 'tables' is ", counts[2], ", the metadata lists ",
                                   s.meta.tables.size()));
  }
  const uint8_t* end = text + json_bytes;
  for (size_t i = 0; i < s.meta.tables.size(); ++i) {
    const TableConfig& c = s.meta.tables[i];
    const std::string where = absl::StrCat("table ", c.table_id, " (tables[", i, "])");
    SIFT_ASSIGN_OR_RETURN(const uint8_t* desc_p, r.NextArray(3, sizeof(uint64_t)));
    uint64_t desc[3];
    std::memcpy(desc, desc_p, sizeof(desc));
    const uint64_t want_floats =
        static_cast<uint64_t>(c.dim) + static_cast<uint64_t>(StateFloats(c.optimizer, c.dim));
    if (desc[0] != c.table_id) {
      return fields.Bad(where + ": table_id", absl::StrCat("the section holds table ", desc[0],
                                                           ", expected ", c.table_id));
    }
    if (desc[1] != want_floats) {
      return fields.Bad(where + ": row_floats",
                        absl::StrCat(desc[1], ", expected dim + optimizer state = ", want_floats));
    }
    TableView v;
    v.table_id = c.table_id;
    v.row_floats = static_cast<int>(want_floats);
    v.rows = desc[2];
    SIFT_ASSIGN_OR_RETURN(const uint8_t* ids, r.NextArray(v.rows, sizeof(uint64_t)));
    SIFT_ASSIGN_OR_RETURN(const uint8_t* rows, r.NextArray(v.rows, sizeof(float), want_floats));
    v.ids = reinterpret_cast<const uint64_t*>(ids);  // 64-byte aligned sections
    v.data = reinterpret_cast<const float*>(rows);
    for (uint64_t k = 1; k < v.rows; ++k) {
      if (v.ids[k] <= v.ids[k - 1]) {
        return fields.Bad(where + ": ids", absl::StrCat("not strictly ascending at row ", k, " (",
                                                        v.ids[k - 1], " then ", v.ids[k], ")"));
      }
    }
    end = rows + v.rows * want_floats * sizeof(float);
    s.tables.push_back(v);
  }
  const uint64_t used = static_cast<uint64_t>(end - f.payload());
  if (used != f.header().payload_size) {
    return absl::DataLossError(absl::StrCat(path, ": payload has ", f.header().payload_size,
                                            " bytes, its sections end at ", used,
                                            " (trailing data)"));
  }
  return s;
}

EmbeddingStore::TableDump CopyTable(const TableView& v) {
  EmbeddingStore::TableDump d;
  d.table_id = v.table_id;
  d.row_floats = v.row_floats;
  d.ids.assign(v.ids, v.ids + v.rows);
  d.data.assign(v.data, v.data + v.rows * static_cast<uint64_t>(v.row_floats));
  return d;
}

// Shard files of `dir` by S, then by shard.
using ShardFiles = std::map<uint32_t, std::map<uint32_t, std::string>>;

// Parses a canonical shard file name; false for any other name (temp files included).
bool ParseShardFileName(const std::string& name, uint64_t* shard, uint64_t* num_shards) {
  constexpr absl::string_view kPrefix = "shard-", kMid = "-of-", kSuffix = ".snap";
  if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) return false;
  const std::string body =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const size_t mid = body.find(kMid.data(), 0, kMid.size());
  if (mid == std::string::npos) return false;
  const std::string a = body.substr(0, mid), b = body.substr(mid + kMid.size());
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 10 &&
           std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  if (!digits(a) || !digits(b)) return false;
  if (!absl::SimpleAtoi(a, shard) || !absl::SimpleAtoi(b, num_shards)) return false;
  return FormatName(*shard, *num_shards) == name;  // canonical zero padding only
}

StatusOr<ShardFiles> ScanShardFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int e = errno;
    const std::string msg =
        absl::StrCat(dir, ": cannot open snapshot directory: ", std::strerror(e));
    if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(msg);
    if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
    return absl::InternalError(msg);
  }
  ShardFiles files;
  Status bad;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    uint64_t shard = 0, num_shards = 0;
    if (!ParseShardFileName(name, &shard, &num_shards)) continue;
    if (num_shards == 0 || num_shards > std::numeric_limits<uint32_t>::max() ||
        shard >= num_shards) {
      bad = absl::FailedPreconditionError(
          absl::StrCat(JoinPath(dir, name), ": bad snapshot file name: shard ", shard,
                       " is not below the shard count ", num_shards));
      break;
    }
    files[static_cast<uint32_t>(num_shards)][static_cast<uint32_t>(shard)] = JoinPath(dir, name);
  }
  ::closedir(d);
  SIFT_RETURN_IF_ERROR(bad);
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no snapshot shard files (shard-NNNNN-of-SSSSS.snap)"));
  }
  if (files.size() > 1) {
    std::vector<std::string> kinds;
    for (const auto& [s, shards] : files) {
      kinds.push_back(absl::StrCat(shards.size(), " file(s) of ", s, " shards (e.g. ",
                                   FormatName(shards.begin()->first, s), ")"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": mixed snapshot shard counts: ", absl::StrJoin(kinds, ", and ")));
  }
  return files;
}

// FAILED_PRECONDITION unless `b` (read from b_path) has the seed, step and tables of `a`.
Status CheckSameSnapshot(const SnapshotMeta& a, const std::string& a_path, const SnapshotMeta& b,
                         const std::string& b_path) {
  auto differ = [&](absl::string_view field, const std::string& bv, const std::string& av) {
    return absl::FailedPreconditionError(absl::StrCat(b_path, ": field '", field, "' is ", bv,
                                                      ", but ", a_path, " has ", av,
                                                      " (files of different snapshots)"));
  };
  if (a.seed != b.seed) return differ("seed", absl::StrCat(b.seed), absl::StrCat(a.seed));
  if (a.step != b.step) return differ("step", absl::StrCat(b.step), absl::StrCat(a.step));
  if (a.tables.size() != b.tables.size()) {
    return differ("tables", absl::StrCat(b.tables.size(), " tables"),
                  absl::StrCat(a.tables.size()));
  }
  for (size_t i = 0; i < a.tables.size(); ++i) {
    const std::string diff = ConfigDifference(a.tables[i], b.tables[i]);
    if (!diff.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(b_path, ": field 'tables[", i, "].", diff,
                                                        "' differs from ", a_path,
                                                        " (files of different snapshots)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ShardSnapshotFileName(uint32_t shard, uint32_t num_shards) {
  return FormatName(shard, num_shards);
}

Status WriteShardSnapshot(const std::string& path, const SnapshotMeta& meta,
                          const EmbeddingStore& store, SnapshotFileInfo* info) {
  SIFT_RETURN_IF_ERROR(CheckMetaForWrite(path, meta, store));
  const std::string text = MetaToJson(meta).dump();
  data::BinaryFileWriter w;
  SIFT_RETURN_IF_ERROR(NamePath(
      w.Begin(path, kSnapshotMagic, {meta.shard, meta.num_shards, meta.tables.size()}), path));
  const uint64_t json_bytes = text.size();
  SIFT_RETURN_IF_ERROR(NamePath(w.Section(&json_bytes, sizeof(json_bytes)), path));
  SIFT_RETURN_IF_ERROR(NamePath(w.Section(text.data(), text.size()), path));
  int64_t rows = 0;
  for (const TableConfig& t : meta.tables) {
    // One table in memory at a time.
    StatusOr<EmbeddingStore::TableDump> dump = store.DumpTable(t.table_id);
    if (!dump.ok()) return NamePath(dump.status(), path);
    const uint64_t n = dump->ids.size();
    const uint64_t desc[3] = {t.table_id, static_cast<uint64_t>(dump->row_floats), n};
    SIFT_RETURN_IF_ERROR(NamePath(w.Section(desc, sizeof(desc)), path));
    SIFT_RETURN_IF_ERROR(NamePath(w.Section(dump->ids.data(), n * sizeof(uint64_t)), path));
    SIFT_RETURN_IF_ERROR(
        NamePath(w.Section(dump->data.data(), dump->data.size() * sizeof(float)), path));
    rows += static_cast<int64_t>(n);
  }
  SIFT_RETURN_IF_ERROR(NamePath(w.Finish(), path));
  if (info != nullptr) {
    // The header of the file just committed: its payload size and CRC.
    SIFT_ASSIGN_OR_RETURN(data::BinaryFile f,
                          data::BinaryFile::Open(path, kSnapshotMagic, /*verify=*/false));
    info->path = path;
    info->bytes = data::kHeaderSize + f.header().payload_size;
    info->payload_crc = f.header().payload_crc;
    info->rows = rows;
  }
  return absl::OkStatus();
}

StatusOr<ShardSnapshot> ReadShardSnapshot(const std::string& path) {
  SIFT_ASSIGN_OR_RETURN(OpenedSnapshot s, OpenSnapshot(path));
  ShardSnapshot out;
  out.meta = s.meta;
  out.source_shards = s.meta.num_shards;
  out.tables.reserve(s.tables.size());
  for (const TableView& v : s.tables) out.tables.push_back(CopyTable(v));
  return out;
}

StatusOr<std::vector<std::string>> ListShardSnapshotFiles(const std::string& dir) {
  SIFT_ASSIGN_OR_RETURN(ShardFiles files, ScanShardFiles(dir));
  const auto& [num_shards, shards] = *files.begin();
  std::vector<std::string> paths;
  paths.reserve(shards.size());
  for (uint32_t i = 0; i < num_shards; ++i) {
    auto it = shards.find(i);
    if (it == shards.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, ": incomplete snapshot: missing shard ", i, " of ", num_shards, " (",
          FormatName(i, num_shards), "; ", shards.size(), " of ", num_shards, " files present)"));
    }
    paths.push_back(it->second);
  }
  return paths;
}

StatusOr<ShardSnapshot> LoadSnapshotForShard(const std::string& dir, uint32_t shard,
                                             uint32_t num_shards) {
  if (num_shards == 0 || shard >= num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": restoring shard ", shard, " is not below num_shards ", num_shards));
  }
  SIFT_ASSIGN_OR_RETURN(ShardFiles files, ScanShardFiles(dir));
  const uint32_t source_shards = files.begin()->first;
  // sources[k] = (shard index in the snapshot, path).
  std::vector<std::pair<uint32_t, std::string>> sources;
  if (source_shards == num_shards) {
    sources.emplace_back(shard, JoinPath(dir, FormatName(shard, num_shards)));
  } else {
    SIFT_ASSIGN_OR_RETURN(std::vector<std::string> paths, ListShardSnapshotFiles(dir));
    for (uint32_t i = 0; i < paths.size(); ++i) sources.emplace_back(i, paths[i]);
  }
  // Open and verify every file before selecting any row.
  std::vector<OpenedSnapshot> opened;
  opened.reserve(sources.size());
  for (const auto& [index, path] : sources) {
    SIFT_ASSIGN_OR_RETURN(OpenedSnapshot s, OpenSnapshot(path));
    if (s.meta.shard != index || s.meta.num_shards != source_shards) {
      return absl::DataLossError(absl::StrCat(path, ": fields 'shard'/'num_shards' are ",
                                              s.meta.shard, "/", s.meta.num_shards,
                                              ", the file name says ", index, "/", source_shards));
    }
    if (!opened.empty()) {
      SIFT_RETURN_IF_ERROR(
          CheckSameSnapshot(opened.front().meta, sources.front().second, s.meta, path));
    }
    opened.push_back(std::move(s));
  }

  ShardSnapshot out;
  out.meta = opened.front().meta;
  out.meta.shard = shard;
  out.meta.num_shards = num_shards;
  out.source_shards = source_shards;
  const bool same_sharding = source_shards == num_shards;
  struct Ref {
    uint64_t id;
    uint32_t file;
    uint64_t row;
  };
  std::vector<Ref> refs;
  for (size_t t = 0; t < out.meta.tables.size(); ++t) {
    const uint32_t table_id = out.meta.tables[t].table_id;
    refs.clear();
    for (size_t k = 0; k < opened.size(); ++k) {
      const TableView& v = opened[k].tables[t];
      const uint32_t home = sources[k].first;
      for (uint64_t r = 0; r < v.rows; ++r) {
        const uint64_t id = v.ids[r];
        const uint32_t old_shard = ShardOf(table_id, id, source_shards);
        if (old_shard != home) {
          ++out.misrouted_rows;
          continue;
        }
        const uint32_t new_shard = same_sharding ? old_shard : ShardOf(table_id, id, num_shards);
        if (new_shard == shard) refs.push_back({id, static_cast<uint32_t>(k), r});
      }
    }
    // Each key has one home file and ids are unique within a file: no duplicates to merge.
    std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) { return a.id < b.id; });
    EmbeddingStore::TableDump d;
    d.table_id = table_id;
    d.row_floats = opened.front().tables[t].row_floats;
    const size_t rf = static_cast<size_t>(d.row_floats);
    d.ids.resize(refs.size());
    d.data.resize(refs.size() * rf);
    for (size_t i = 0; i < refs.size(); ++i) {
      d.ids[i] = refs[i].id;
      std::copy_n(opened[refs[i].file].tables[t].data + refs[i].row * rf, rf,
                  d.data.data() + i * rf);
    }
    out.tables.push_back(std::move(d));
  }
  return out;
}

}  // namespace sift::embedding
