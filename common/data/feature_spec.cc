#include "common/data/feature_spec.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_join.h"
#include "common/file_util.h"

namespace sift::data {
namespace {

const char* const kChannels[] = {kLabelChannel, kUserChannel, kTargetChannel, kPositiveChannel,
                                 kNegativeChannel};

Status YamlError(const std::string& path, const YAML::Mark& mark, absl::string_view what) {
  if (mark.line >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", mark.line + 1, ":", mark.column + 1, ": ", what));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

StatusOr<std::vector<std::string>> StringList(const YAML::Node& n, const std::string& path,
                                              absl::string_view field) {
  if (!n.IsSequence()) return YamlError(path, n.Mark(), absl::StrCat(field, ": expected a list"));
  std::vector<std::string> out;
  for (const auto& e : n) {
    if (!e.IsScalar()) {
      return YamlError(path, e.Mark(), absl::StrCat(field, ": expected a list of names"));
    }
    out.push_back(e.as<std::string>());
  }
  return out;
}

}  // namespace

StatusOr<FeatureSpec> FeatureSpec::Load(const std::string& path) {
  SIFT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return Parse(text, path);
}

StatusOr<FeatureSpec> FeatureSpec::Parse(const std::string& yaml_text, const std::string& path) {
  FeatureSpec spec;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return YamlError(path, e.mark, absl::StrCat("YAML syntax error: ", e.msg));
  }
  if (!root.IsMap()) return YamlError(path, root.Mark(), "expected a mapping at the top level");
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "channel_spec") {
        if (!v.IsMap()) return YamlError(path, v.Mark(), "channel_spec: expected a mapping");
        for (const auto& ch : v) {
          std::string name = ch.first.as<std::string>();
          SIFT_ASSIGN_OR_RETURN(spec.channel_spec[name],
                                StringList(ch.second, path, "channel_spec." + name));
        }
      } else if (key == "feature_spec") {
        if (!v.IsMap()) return YamlError(path, v.Mark(), "feature_spec: expected a mapping");
        for (const auto& f : v) {
          std::string name = f.first.as<std::string>();
          const YAML::Node& fv = f.second;
          std::string field = "feature_spec." + name;
          if (!fv.IsMap()) return YamlError(path, fv.Mark(), field + ": expected a mapping");
          FeatureInfo info;
          for (const auto& a : fv) {
            std::string attr = a.first.as<std::string>();
            if (attr == "dtype") {
              info.dtype = a.second.as<std::string>();
            } else if (attr == "cardinality") {
              try {
                info.cardinality = a.second.as<int64_t>();
              } catch (const YAML::Exception&) {
                return YamlError(path, a.second.Mark(),
                                 field + ".cardinality: expected an integer");
              }
            } else if (attr == "dimensions") {
              if (!a.second.IsSequence()) {
                return YamlError(path, a.second.Mark(), field + ".dimensions: expected a list");
              }
              for (const auto& d : a.second) {
                try {
                  info.dimensions.push_back(d.as<int64_t>());
                } catch (const YAML::Exception&) {
                  return YamlError(path, d.Mark(),
                                   field + ".dimensions: expected a list of integers");
                }
              }
            } else {
              return YamlError(path, a.first.Mark(),
                               absl::StrCat(field, ": unknown attribute '", attr, "'"));
            }
          }
          spec.feature_spec[name] = std::move(info);
        }
      } else if (key == "source_spec") {
        if (!v.IsMap()) return YamlError(path, v.Mark(), "source_spec: expected a mapping");
        for (const auto& s : v) {
          std::string split = s.first.as<std::string>();
          std::string field = "source_spec." + split;
          if (!s.second.IsSequence()) {
            return YamlError(path, s.second.Mark(), field + ": expected a list of chunks");
          }
          for (const auto& c : s.second) {
            if (!c.IsMap()) return YamlError(path, c.Mark(), field + ": expected a mapping");
            SourceChunk chunk;
            for (const auto& a : c) {
              std::string attr = a.first.as<std::string>();
              if (attr == "type") {
                chunk.type = a.second.as<std::string>();
              } else if (attr == "features") {
                SIFT_ASSIGN_OR_RETURN(chunk.features,
                                      StringList(a.second, path, field + ".features"));
              } else if (attr == "files") {
                SIFT_ASSIGN_OR_RETURN(chunk.files, StringList(a.second, path, field + ".files"));
              } else {
                return YamlError(path, a.first.Mark(),
                                 absl::StrCat(field, ": unknown attribute '", attr, "'"));
              }
            }
            spec.source_spec[split].push_back(std::move(chunk));
          }
        }
      } else if (key == "metadata") {
        if (!v.IsNull() && !v.IsMap()) {
          return YamlError(path, v.Mark(), "metadata: expected a mapping");
        }
        spec.metadata = v.IsNull() ? YAML::Node(YAML::NodeType::Map) : YAML::Clone(v);
      } else {
        return YamlError(path, kv.first.Mark(), absl::StrCat("unknown top-level key '", key, "'"));
      }
    }
  } catch (const YAML::Exception& e) {
    return YamlError(path, e.mark, e.msg);
  }
  SIFT_RETURN_IF_ERROR(spec.Validate(path));
  return spec;
}

Status FeatureSpec::Validate(const std::string& path) const {
  for (const char* ch : kChannels) {
    if (!channel_spec.count(ch)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": channel_spec: missing channel '", ch, "'"));
    }
  }
  for (const auto& [ch, feats] : channel_spec) {
    if (std::find(std::begin(kChannels), std::end(kChannels), ch) == std::end(kChannels)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": channel_spec: unknown channel '", ch, "'"));
    }
    for (const auto& f : feats) {
      auto it = feature_spec.find(f);
      if (it == feature_spec.end()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": channel_spec.", ch, ": feature '",
                                                       f, "' is not described in feature_spec"));
      }
      const FeatureInfo& info = it->second;
      static const std::set<std::string> kDtypes = {"int64", "int32", "bool", "int8", "float32"};
      if (!kDtypes.count(info.dtype)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": feature_spec.", f, ".dtype: unsupported dtype '", info.dtype, "'"));
      }
      bool categorical = absl::string_view(ch) != kLabelChannel;
      if (categorical && info.cardinality <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": feature_spec.", f, ".cardinality: a positive cardinality is required"));
      }
      if (categorical && info.cardinality > INT32_MAX - 1) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": feature_spec.", f,
                                                       ".cardinality: ", info.cardinality,
                                                       " exceeds the int32 id range"));
      }
      bool history =
          absl::string_view(ch) == kPositiveChannel || absl::string_view(ch) == kNegativeChannel;
      if (history && (info.dimensions.size() != 1 || info.dimensions[0] <= 0 ||
                      info.dimensions[0] > kMaxHistoryLength)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": feature_spec.", f, ".dimensions: a history feature needs ",
                         "[length] with 1 <= length <= ", kMaxHistoryLength));
      }
      if (history && HistoryLength() > 0 && info.dimensions[0] != HistoryLength()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": feature_spec.", f, ".dimensions: [", info.dimensions[0],
            "] differs from the first positive-history feature's [", HistoryLength(), "]"));
      }
    }
  }
  if (channel_spec.at(kLabelChannel).size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": channel_spec.label: expected exactly one feature"));
  }
  size_t n = channel_spec.at(kTargetChannel).size();
  if (n == 0 || channel_spec.at(kPositiveChannel).size() != n ||
      channel_spec.at(kNegativeChannel).size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": channel_spec: target_item_features, positive_history and negative_history must ",
        "list the same number (> 0) of features"));
  }
  for (const char* split : {"train", "test"}) {
    auto it = source_spec.find(split);
    if (it == source_spec.end() || it->second.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": source_spec: missing split '", split, "'"));
    }
    for (const auto& chunk : it->second) {
      if (chunk.type.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": source_spec.", split, ": chunk without a type"));
      }
    }
  }
  return absl::OkStatus();
}

std::string FeatureSpec::ToYaml() const {
  YAML::Emitter out;
  out.SetDoublePrecision(10);
  out << YAML::BeginMap;
  out << YAML::Key << "channel_spec" << YAML::Value << YAML::BeginMap;
  for (const auto& [ch, feats] : channel_spec) {
    out << YAML::Key << ch << YAML::Value << YAML::Flow << feats;
  }
  out << YAML::EndMap;
  out << YAML::Key << "feature_spec" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, info] : feature_spec) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    if (info.cardinality >= 0) out << YAML::Key << "cardinality" << YAML::Value << info.cardinality;
    if (!info.dimensions.empty()) {
      out << YAML::Key << "dimensions" << YAML::Value << YAML::Flow << info.dimensions;
    }
    out << YAML::Key << "dtype" << YAML::Value << info.dtype;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "metadata" << YAML::Value << metadata;
  out << YAML::Key << "source_spec" << YAML::Value << YAML::BeginMap;
  for (const auto& [split, chunks] : source_spec) {
    out << YAML::Key << split << YAML::Value << YAML::BeginSeq;
    for (const auto& c : chunks) {
      out << YAML::BeginMap;
      out << YAML::Key << "features" << YAML::Value << c.features;
      out << YAML::Key << "files" << YAML::Value << c.files;
      out << YAML::Key << "type" << YAML::Value << c.type;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Status FeatureSpec::Save(const std::string& path) const { return WriteFileAtomic(path, ToYaml()); }

FeatureSpec FeatureSpec::Reference(const std::vector<int64_t>& user_cardinalities,
                                   const std::vector<int64_t>& item_cardinalities,
                                   int64_t history) {
  FeatureSpec s;
  s.channel_spec[kLabelChannel] = {"label"};
  s.feature_spec["label"] = FeatureInfo{"bool", -1, {}};
  for (size_t i = 0; i < user_cardinalities.size(); ++i) {
    std::string name = absl::StrCat("user_feat_", i);
    s.channel_spec[kUserChannel].push_back(name);
    s.feature_spec[name] = FeatureInfo{"int64", user_cardinalities[i], {}};
  }
  for (size_t i = 0; i < item_cardinalities.size(); ++i) {
    std::string base = absl::StrCat("item_feat_", i);
    s.channel_spec[kTargetChannel].push_back(base + "_trgt");
    s.channel_spec[kPositiveChannel].push_back(base + "_pos");
    s.channel_spec[kNegativeChannel].push_back(base + "_neg");
    s.feature_spec[base + "_trgt"] = FeatureInfo{"int64", item_cardinalities[i], {}};
    s.feature_spec[base + "_pos"] = FeatureInfo{"int64", item_cardinalities[i], {history}};
    s.feature_spec[base + "_neg"] = FeatureInfo{"int64", item_cardinalities[i], {history}};
  }
  return s;
}

int FeatureSpec::num_user_features() const {
  auto it = channel_spec.find(kUserChannel);
  return it == channel_spec.end() ? 0 : static_cast<int>(it->second.size());
}

int FeatureSpec::num_item_features() const {
  auto it = channel_spec.find(kTargetChannel);
  return it == channel_spec.end() ? 0 : static_cast<int>(it->second.size());
}

std::vector<int64_t> FeatureSpec::TableCardinalities() const {
  std::vector<int64_t> out;
  for (const char* ch : {kUserChannel, kTargetChannel}) {
    auto it = channel_spec.find(ch);
    if (it == channel_spec.end()) continue;
    for (const auto& f : it->second) out.push_back(feature_spec.at(f).cardinality);
  }
  return out;
}

int64_t FeatureSpec::HistoryLength() const {
  auto it = channel_spec.find(kPositiveChannel);
  if (it == channel_spec.end() || it->second.empty()) return 0;
  auto f = feature_spec.find(it->second[0]);
  if (f == feature_spec.end() || f->second.dimensions.empty()) return 0;
  return f->second.dimensions[0];
}

std::string FeatureSpec::SourceType(const std::string& split) const {
  auto it = source_spec.find(split);
  if (it == source_spec.end() || it->second.empty()) return "";
  return it->second[0].type;
}

}  // namespace sift::data
