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
Status CheckVocab(const Dataset& d);
Status VerifyImpressions(const Dataset& d);

// metadata.sift.<key> as an integer in [lo, 2^30], or `absent` when the key is not there.
StatusOr<int64_t> MetaCount(const YAML::Node& sift_meta, const char* key, int64_t absent,
                            int64_t lo, const std::string& spec_path) {
  constexpr int64_t kMax = int64_t{1} << 30;
  const YAML::Node n = sift_meta[key];
  if (!n) return absent;
  int64_t v = lo - 1;
  try {
    v = n.as<int64_t>();
  } catch (const YAML::Exception&) {
  }
  if (v < lo || v > kMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec_path, ": metadata.sift.", key, ": expected an integer in [", lo, ", ", kMax, "]"));
  }
  return v;
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
  // A dataset written by a newer sift may mean something this one would misread.
  if (const YAML::Node v = sift_meta["format_version"]) {
    int64_t version = -1;
    try {
      version = v.as<int64_t>();
    } catch (const YAML::Exception&) {
    }
    if (version < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec_path, ": metadata.sift.format_version: expected an integer >= 1"));
    }
    if (version > kDatasetFormatVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat(spec_path, ": dataset format version ", version,
                       " was written by a newer sift (this one reads up to ", kDatasetFormatVersion,
                       "): use that sift, or import the data again with this one"));
    }
  }
  SIFT_ASSIGN_OR_RETURN(const int64_t train_targets,
                        MetaCount(sift_meta, "train_targets_per_user", 0, 0, spec_path));
  SIFT_ASSIGN_OR_RETURN(d->test_events_, MetaCount(sift_meta, "test_events", 1, 1, spec_path));
  const int UF = d->spec_.num_user_features(), F = d->spec_.num_item_features();
  if (type == kSourceTimeline || type == kSourceImpressions) {
    const bool impressions = type == kSourceImpressions;
    SIFT_ASSIGN_OR_RETURN(d->timeline_, Timeline::Open(dir, verify, impressions ? 0 : 2));
    if (d->timeline_->num_item_features() != F || d->timeline_->num_user_features() != UF) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": feature_spec.yaml declares ", UF, " user / ", F, " item features but ",
          kEventsFile, "/", kUsersFile, " hold ", d->timeline_->num_user_features(), " / ",
          d->timeline_->num_item_features()));
    }
    TimelineSamplesOptions options;
    options.train_targets_per_user = train_targets;
    options.test_events = d->test_events_;
    if (impressions) {
      SIFT_ASSIGN_OR_RETURN(d->train_imp_,
                            ImpressionsFile::Open(JoinPath(dir, kTrainImpressionsFile), verify));
      SIFT_ASSIGN_OR_RETURN(d->test_imp_,
                            ImpressionsFile::Open(JoinPath(dir, kTestImpressionsFile), verify));
      for (const ImpressionsFile* f : {d->train_imp_.get(), d->test_imp_.get()}) {
        if (f->num_item_features() != F) {
          return absl::InvalidArgumentError(
              absl::StrCat(f->path(), " holds ", f->num_item_features(),
                           " item features; feature_spec.yaml declares ", F));
        }
      }
      options.train_impressions = d->train_imp_.get();
      options.test_impressions = d->test_imp_.get();
    } else {
      // Leave-last-K-out needs K test targets, the first with a history.
      const Timeline& t = *d->timeline_;
      for (int64_t u = 0; u < t.num_users(); ++u) {
        if (t.user_length(u) - 1 < d->test_events_) {
          return absl::InvalidArgumentError(
              absl::StrCat(JoinPath(dir, kUsersFile), ": user ", u, " has ", t.user_length(u),
                           " events; metadata.sift.test_events = ", d->test_events_,
                           " needs at least ", d->test_events_ + 1));
        }
      }
    }
    d->samples_ = std::make_unique<TimelineSamples>(d->timeline_.get(), d->negative_seed_, options);
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
                     kSourceTimeline, ", ", kSourceImpressions, " or ", kSourceSamples, ")"));
  }
  if (const YAML::Node v = sift_meta["vocab"]) {
    std::string file;
    try {
      file = v.as<std::string>();
    } catch (const YAML::Exception&) {
    }
    if (file.empty() || file.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec_path, ": metadata.sift.vocab: expected a file name in the dataset"));
    }
    SIFT_ASSIGN_OR_RETURN(d->vocab_, Vocab::Open(JoinPath(dir, file), verify));
    SIFT_RETURN_IF_ERROR(CheckVocab(*d));
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
    return d.impressions(Split::kTrain) != nullptr ? VerifyImpressions(d) : absl::OkStatus();
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

// The vocabulary names one table per user and item feature, in order, each holding exactly the
// feature's cardinality of tokens.
Status CheckVocab(const Dataset& d) {
  const Vocab& v = *d.vocab();
  std::vector<std::string> names;
  for (const char* ch : {kUserChannel, kTargetChannel}) {
    for (const auto& f : d.spec().channel_spec.at(ch)) names.push_back(f);
  }
  const std::vector<int64_t> card = d.spec().TableCardinalities();
  if (v.num_tables() != static_cast<int>(names.size())) {
    return absl::DataLossError(absl::StrCat(v.path(), ": ", v.num_tables(),
                                            " token tables; the dataset has ", names.size(),
                                            " user and item features"));
  }
  for (size_t k = 0; k < names.size(); ++k) {
    if (v.name(static_cast<int>(k)) != names[k] || v.size(static_cast<int>(k)) != card[k]) {
      return absl::DataLossError(absl::StrCat(
          v.path(), ": table ", k, " is '", v.name(static_cast<int>(k)), "' with ",
          v.size(static_cast<int>(k)), " tokens; the dataset's feature ", k, " is '", names[k],
          "' with cardinality ", card[k], ": the files belong to different datasets"));
    }
  }
  return absl::OkStatus();
}

// Every stored sample's user row, cutoff and label within the timeline, and its target within the
// cardinalities.
Status VerifyImpressions(const Dataset& d) {
  const Timeline& t = *d.timeline();
  const std::vector<int64_t> card = d.spec().TableCardinalities();
  const int UF = d.spec().num_user_features(), F = d.spec().num_item_features();
  const auto& items = d.spec().channel_spec.at(kTargetChannel);
  for (Split split : {Split::kTrain, Split::kTest}) {
    const ImpressionsFile* f = d.impressions(split);
    for (int64_t i = 0; i < f->size(); ++i) {
      const int64_t u = f->user(i);
      if (u < 0 || u >= t.num_users()) {
        return absl::DataLossError(absl::StrCat(f->path(), ": sample ", i, ": user row ", u,
                                                " outside [0, ", t.num_users(), ")"));
      }
      if (f->cutoff(i) < 0 || f->cutoff(i) > t.user_length(u)) {
        return absl::DataLossError(absl::StrCat(f->path(), ": sample ", i, ": cutoff ",
                                                f->cutoff(i), " outside the user's ",
                                                t.user_length(u), " events"));
      }
      if (f->label(i) != 0 && f->label(i) != 1) {
        return absl::DataLossError(
            absl::StrCat(f->path(), ": sample ", i, ": label ", f->label(i), " is not 0 or 1"));
      }
      for (int g = 0; g < F; ++g) {
        const int32_t id = f->target(i)[g];
        if (id < 1 || id > card[UF + g]) {
          return IdError(f->path(), "sample", i, items[g].c_str(), id, 1, card[UF + g]);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status Dataset::Verify() const {
  if (vocab_) SIFT_RETURN_IF_ERROR(vocab_->Verify());
  if (train_imp_) {
    SIFT_RETURN_IF_ERROR(train_imp_->Verify());
    SIFT_RETURN_IF_ERROR(test_imp_->Verify());
  }
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
                            const YAML::Node& metadata, int64_t history,
                            const TimelineDatasetExtras& extras) {
  if (static_cast<int>(user_cardinalities.size()) != timeline.num_user_features ||
      static_cast<int>(item_cardinalities.size()) != timeline.num_item_features) {
    return absl::InvalidArgumentError("timeline dataset: cardinalities do not match features");
  }
  const bool impressions = extras.train_impressions != nullptr;
  if (impressions != (extras.test_impressions != nullptr) || extras.test_events < 1) {
    return absl::InvalidArgumentError(
        "timeline dataset: impressions need both splits, and test_events must be >= 1");
  }
  SIFT_RETURN_IF_ERROR(BeginDatasetWrite(dir));
  SIFT_RETURN_IF_ERROR(WriteTimeline(dir, timeline, impressions ? 0 : extras.test_events + 1));
  FeatureSpec spec = FeatureSpec::Reference(user_cardinalities, item_cardinalities, history);
  spec.metadata = YAML::Clone(metadata);
  if (!spec.metadata.IsMap()) spec.metadata = YAML::Node(YAML::NodeType::Map);
  spec.metadata["sift"]["format_version"] = kDatasetFormatVersion;
  spec.metadata["sift"]["negative_seed"] = negative_seed;
  if (extras.test_events != 1) spec.metadata["sift"]["test_events"] = extras.test_events;
  if (extras.vocab != nullptr) {
    SIFT_RETURN_IF_ERROR(WriteVocab(JoinPath(dir, kVocabFile), *extras.vocab));
    spec.metadata["sift"]["vocab"] = kVocabFile;
  }
  std::vector<std::string> files{kUsersFile, kEventsFile};
  if (impressions) {
    SIFT_RETURN_IF_ERROR(
        WriteImpressions(JoinPath(dir, kTrainImpressionsFile), *extras.train_impressions));
    SIFT_RETURN_IF_ERROR(
        WriteImpressions(JoinPath(dir, kTestImpressionsFile), *extras.test_impressions));
  }
  for (const char* split : {"train", "test"}) {
    std::vector<std::string> split_files = files;
    if (impressions) {
      split_files.push_back(std::string(split) == "train" ? kTrainImpressionsFile
                                                          : kTestImpressionsFile);
    }
    spec.source_spec[split] = {SourceChunk{impressions ? kSourceImpressions : kSourceTimeline,
                                           MaterialisedFeatures(spec), split_files}};
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
  spec.metadata["sift"].remove("vocab");  // no token file travels with stored samples
  spec.source_spec.clear();
  spec.source_spec["train"] = {
      SourceChunk{kSourceSamples, MaterialisedFeatures(spec), {kTrainSamplesFile}}};
  spec.source_spec["test"] = {
      SourceChunk{kSourceSamples, MaterialisedFeatures(spec), {kTestSamplesFile}}};
  return spec.Save(JoinPath(dir, kFeatureSpecFile));
}

}  // namespace sift::data
