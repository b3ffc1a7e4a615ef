#include "common/data/dataset.h"

#include <cstdio>

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

Status VerifyIds(const Dataset& d);

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
  // metadata and metadata.sift must be mappings: operator[] on a scalar throws (found by
  // tests/fuzz dataset: `metadata: {sift: 1}` ended the process).
  const YAML::Node& metadata = d->spec_.metadata;
  const YAML::Node sift_meta = metadata.IsMap() ? metadata["sift"] : YAML::Node();
  if (!sift_meta || !sift_meta.IsMap() || !sift_meta["negative_seed"]) {
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
    int64_t train_targets = 0;
    if (const YAML::Node m = sift_meta["train_targets_per_user"]) {
      try {
        train_targets = m.as<int64_t>();
      } catch (const YAML::Exception&) {
        train_targets = -1;
      }
      if (train_targets < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            spec_path, ": metadata.sift.train_targets_per_user: expected an integer >= 0"));
      }
    }
    d->samples_ =
        std::make_unique<TimelineSamples>(d->timeline_.get(), d->negative_seed_, train_targets);
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
  // Every id within its table's cardinality, always (not only under `verify`): an id beyond it
  // (a corrupted file, a spec whose cardinality is below the data's) would otherwise train to
  // COMPLETED with a worse AUC. One pass over the id arrays at memory speed (the small preset's
  // 18 MB of events: docs/results.md), which also warms the page cache that
  // training reads next.
  SIFT_RETURN_IF_ERROR(VerifyIds(*d));
  return d;
}

namespace {

Status IdError(const std::string& path, absl::string_view what, int64_t where, const char* feature,
               int64_t id, int64_t lo, int64_t hi) {
  return absl::DataLossError(absl::StrCat(path, ": ", what, " ", where, ": ", feature, " id ", id,
                                          " outside [", lo, ", ", hi, "] (the cardinality)"));
}

// Every stored id within its table: [1, cardinality] for events, users and targets; histories
// may also hold 0 (padding).
Status VerifyIds(const Dataset& d) {
  const std::vector<int64_t> card = d.spec().TableCardinalities();
  const int UF = d.spec().num_user_features(), F = d.spec().num_item_features();
  const auto& users = d.spec().channel_spec.at(kUserChannel);
  const auto& items = d.spec().channel_spec.at(kTargetChannel);
  if (const Timeline* t = d.timeline()) {
    const std::string ev_path = JoinPath(d.dir(), kEventsFile);
    for (int64_t e = 0; e < t->num_events(); ++e) {
      const int32_t* ev = t->event(e);
      for (int f = 0; f < F; ++f) {
        if (ev[f] < 1 || ev[f] > card[UF + f]) {
          return IdError(ev_path, "event", e, items[f].c_str(), ev[f], 1, card[UF + f]);
        }
      }
    }
    const std::string us_path = JoinPath(d.dir(), kUsersFile);
    for (int64_t u = 0; u < t->num_users(); ++u) {
      for (int k = 0; k < UF; ++k) {
        const int32_t id = t->user_features(u)[k];
        if (id < 1 || id > card[k])
          return IdError(us_path, "user", u, users[k].c_str(), id, 1, card[k]);
      }
    }
    return absl::OkStatus();
  }
  for (Split split : {Split::kTrain, Split::kTest}) {
    const SamplesFile* f = d.samples_file(split);
    const std::string path =
        JoinPath(d.dir(), split == Split::kTrain ? kTrainSamplesFile : kTestSamplesFile);
    const int64_t T = f->shape().history;
    for (int64_t i = 0; i < f->size(); ++i) {
      const int32_t* r = f->record(i);
      const int32_t* user = r + 2;
      for (int k = 0; k < UF; ++k) {
        if (user[k] < 1 || user[k] > card[k]) {
          return IdError(path, "record", i, users[k].c_str(), user[k], 1, card[k]);
        }
      }
      const int32_t* target = user + UF;
      for (int g = 0; g < F; ++g) {
        const int64_t c = card[UF + g];
        if (target[g] < 1 || target[g] > c) {
          return IdError(path, "record", i, items[g].c_str(), target[g], 1, c);
        }
        for (const int32_t* hist : {target + F + g * T, target + F + (F + g) * T}) {
          for (int64_t j = 0; j < T; ++j) {
            if (hist[j] < 0 || hist[j] > c) {
              return IdError(path, "record", i, items[g].c_str(), hist[j], 0, c);
            }
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status Dataset::Verify() const {
  if (timeline_) {
    SIFT_RETURN_IF_ERROR(timeline_->Verify());
  } else {
    SIFT_RETURN_IF_ERROR(train_file_->Verify());
    SIFT_RETURN_IF_ERROR(test_file_->Verify());
  }
  return absl::OkStatus();  // the ids were checked by Open
}

Status BeginDatasetWrite(const std::string& dir) {
  SIFT_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string spec = JoinPath(dir, kFeatureSpecFile);
  if (PathExists(spec) && std::remove(spec.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(spec, ": cannot remove the previous dataset's spec"));
  }
  return absl::OkStatus();
}

Status WriteTimelineDataset(const std::string& dir, const TimelineData& timeline,
                            const std::vector<int64_t>& user_cardinalities,
                            const std::vector<int64_t>& item_cardinalities, uint64_t negative_seed,
                            const YAML::Node& metadata, int64_t history) {
  if (static_cast<int>(user_cardinalities.size()) != timeline.num_user_features ||
      static_cast<int>(item_cardinalities.size()) != timeline.num_item_features) {
    return absl::InvalidArgumentError("timeline dataset: cardinalities do not match features");
  }
  SIFT_RETURN_IF_ERROR(BeginDatasetWrite(dir));
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
