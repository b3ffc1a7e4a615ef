#include "common/data/dataset.h"

#include "common/file_util.h"

namespace sift::data {
namespace {

std::vector<std::string> MaterialisedFeatures(const FeatureSpec& s) {
  std::vector<std::string> out;
  for (const char* ch :
       {kLabelChannel, kUserChannel, kTargetChannel, kPositiveChannel, kNegativeChannel}) {
    for (const auto& f : s.channel_spec.at(ch)) out.push_back(f);
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::string& dir, bool verify) {
  const std::string spec_path = JoinPath(dir, kFeatureSpecFile);
  if (!PathExists(spec_path)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": not a dataset directory (no ", kFeatureSpecFile, ")"));
  }
  std::unique_ptr<Dataset> d(new Dataset());
  d->dir_ = dir;
  SIFT_ASSIGN_OR_RETURN(d->spec_, FeatureSpec::Load(spec_path));
  const std::string type = d->spec_.SourceType("train");
  if (d->spec_.SourceType("test") != type) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_path, ": source_spec: train and test have different source types"));
  }
  d->source_type_ = type;
  if (type == kSourceTfrecord) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": this is a reference TFRecord directory; import it first with `sift data convert ",
        dir, " --from tfrecord --out DIR`"));
  }
  const YAML::Node sift_meta = d->spec_.metadata["sift"];
  if (!sift_meta || !sift_meta["negative_seed"]) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_path, ": metadata.sift.negative_seed is missing"));
  }
  try {
    d->negative_seed_ = sift_meta["negative_seed"].as<uint64_t>();
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_path, ": metadata.sift.negative_seed: expected an unsigned integer"));
  }
  const int UF = d->spec_.num_user_features(), F = d->spec_.num_item_features();
  if (type == kSourceTimeline) {
    SIFT_ASSIGN_OR_RETURN(d->timeline_, Timeline::Open(dir, verify));
    if (d->timeline_->num_item_features() != F || d->timeline_->num_user_features() != UF) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": feature_spec.yaml declares ", UF, " user / ", F, " item features but ",
          kEventsFile, "/", kUsersFile, " hold ", d->timeline_->num_user_features(), " / ",
          d->timeline_->num_item_features()));
    }
    d->samples_ = std::make_unique<TimelineSamples>(d->timeline_.get(), d->negative_seed_);
  } else if (type == kSourceSamples) {
    SIFT_ASSIGN_OR_RETURN(d->train_file_,
                          SamplesFile::Open(JoinPath(dir, kTrainSamplesFile), verify));
    SIFT_ASSIGN_OR_RETURN(d->test_file_,
                          SamplesFile::Open(JoinPath(dir, kTestSamplesFile), verify));
    for (const SamplesFile* f : {d->train_file_.get(), d->test_file_.get()}) {
      if (f->shape().item_features != F || f->shape().user_features != UF) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": feature_spec.yaml declares ", UF, " user / ", F,
                         " item features but a samples file holds ", f->shape().user_features,
                         " / ", f->shape().item_features));
      }
    }
    d->samples_ = std::make_unique<ExplicitSamples>(d->train_file_.get(), d->test_file_.get());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_path, ": source_spec: unknown source type '", type, "' (expected ",
                     kSourceTimeline, " or ", kSourceSamples, ")"));
  }
  return d;
}

Status Dataset::Verify() const {
  if (timeline_) return timeline_->Verify();
  SIFT_RETURN_IF_ERROR(train_file_->Verify());
  return test_file_->Verify();
}

Status WriteTimelineDataset(const std::string& dir, const TimelineData& timeline,
                            const std::vector<int64_t>& user_cardinalities,
                            const std::vector<int64_t>& item_cardinalities, uint64_t negative_seed,
                            const YAML::Node& metadata, int64_t history) {
  if (static_cast<int>(user_cardinalities.size()) != timeline.num_user_features ||
      static_cast<int>(item_cardinalities.size()) != timeline.num_item_features) {
    return absl::InvalidArgumentError("timeline dataset: cardinalities do not match features");
  }
  SIFT_RETURN_IF_ERROR(WriteTimeline(dir, timeline));
  FeatureSpec spec = FeatureSpec::Reference(user_cardinalities, item_cardinalities, history);
  spec.metadata = YAML::Clone(metadata);
  if (!spec.metadata.IsMap()) spec.metadata = YAML::Node(YAML::NodeType::Map);
  spec.metadata["sift"]["format_version"] = kDatasetFormatVersion;
  spec.metadata["sift"]["negative_seed"] = negative_seed;
  for (const char* split : {"train", "test"}) {
    spec.source_spec[split] = {
        SourceChunk{kSourceTimeline, MaterialisedFeatures(spec), {kUsersFile, kEventsFile}}};
  }
  return spec.Save(JoinPath(dir, kFeatureSpecFile));
}

Status WriteSamplesDatasetSpec(const std::string& dir, const FeatureSpec& reference_spec,
                               const YAML::Node& metadata) {
  FeatureSpec spec = reference_spec;
  spec.metadata = YAML::Clone(metadata);
  if (!spec.metadata.IsMap()) spec.metadata = YAML::Node(YAML::NodeType::Map);
  spec.metadata["sift"]["format_version"] = kDatasetFormatVersion;
  if (!spec.metadata["sift"]["negative_seed"]) spec.metadata["sift"]["negative_seed"] = 0;
  spec.source_spec.clear();
  spec.source_spec["train"] = {
      SourceChunk{kSourceSamples, MaterialisedFeatures(spec), {kTrainSamplesFile}}};
  spec.source_spec["test"] = {
      SourceChunk{kSourceSamples, MaterialisedFeatures(spec), {kTestSamplesFile}}};
  return spec.Save(JoinPath(dir, kFeatureSpecFile));
}

}  // namespace sift::data
