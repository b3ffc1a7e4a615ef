// FeatureSpec: the dataset description file `feature_spec.yaml`, in the reference's schema
// (docs/model-spec.md 6.4): channel_spec, feature_spec, metadata, source_spec.
//
// sift datasets use the same file with source type `sift_timeline` (users.bin + events.bin) or
// `sift_samples` (explicit samples, e.g. imported from TFRecord); reference TFRecord directories
// have type `tfrecord`. `metadata` is free-form: the generator puts its parameters, seeds and the
// oracle/heuristic AUCs there.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace sift::data {

// Channel names (reference names, model-spec 1.1).
inline constexpr char kLabelChannel[] = "label";
inline constexpr char kUserChannel[] = "user_features";
inline constexpr char kTargetChannel[] = "target_item_features";
inline constexpr char kPositiveChannel[] = "positive_history";
inline constexpr char kNegativeChannel[] = "negative_history";

// Source types.
inline constexpr char kSourceTfrecord[] = "tfrecord";
inline constexpr char kSourceTimeline[] = "sift_timeline";
inline constexpr char kSourceSamples[] = "sift_samples";

// Longest history a feature_spec may declare (slots per sample).
inline constexpr int64_t kMaxHistoryLength = int64_t{1} << 20;

struct FeatureInfo {
  std::string dtype;                // "int64", "int32", "bool", ...
  int64_t cardinality = -1;         // -1: not categorical / absent
  std::vector<int64_t> dimensions;  // [100] for histories, empty for scalars
};

struct SourceChunk {
  std::string type;
  std::vector<std::string> features;
  std::vector<std::string> files;  // relative to the dataset directory
};

struct FeatureSpec {
  std::map<std::string, std::vector<std::string>> channel_spec;
  std::map<std::string, FeatureInfo> feature_spec;
  std::map<std::string, std::vector<SourceChunk>> source_spec;  // "train", "test"
  YAML::Node metadata = YAML::Node(YAML::NodeType::Map);

  // Parses and validates `path`. Errors name the file, the line and the field.
  static StatusOr<FeatureSpec> Load(const std::string& path);
  static StatusOr<FeatureSpec> Parse(const std::string& yaml_text, const std::string& path);
  // Writes the spec atomically (keys sorted, like the reference's yaml.dump).
  Status Save(const std::string& path) const;
  std::string ToYaml() const;
  // Structural checks: the five channels, matching target/positive/negative feature counts,
  // every channel feature described, cardinalities of categorical features, history dims.
  Status Validate(const std::string& path) const;

  // The reference's layout for `num_user_features` user features and `num_item_features` item
  // features (Amazon: 1 and 2) with history length `history`, feature names
  // user_feat_<i>, item_feat_<i>_{trgt,pos,neg}. `cardinalities` = users..., items... in
  // table order. Source chunks are left empty.
  static FeatureSpec Reference(const std::vector<int64_t>& user_cardinalities,
                               const std::vector<int64_t>& item_cardinalities, int64_t history);

  int num_user_features() const;
  int num_item_features() const;
  // Cardinality of every embedding table: user features first, then item features.
  std::vector<int64_t> TableCardinalities() const;
  // History length declared by the first positive-history feature (dimensions[0]).
  int64_t HistoryLength() const;
  // The source type of a split ("train"/"test"), or "" when absent.
  std::string SourceType(const std::string& split) const;
};

}  // namespace sift::data
